//! `/metrics`: what the store holds, counted at scrape time and written in the Prometheus
//! text format through the `metrics` facade, followed by what the console's runtime counted
//! ([`workflow_runtime::RuntimeMetrics`]). Every series is labelled by definition at most (no
//! instance id: bounded cardinality).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use workflow_runtime::store::{Storage, StoreError};

use crate::instances::STATUSES;
use crate::{Base, Failure, State};

/// The most open incidents one scrape reads to count them.
const INCIDENT_SCAN: usize = 10_000;

/// The console's own recorder: the gauges a scrape sets, rendered as text.
pub(crate) struct Exporter {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

impl Exporter {
    pub(crate) fn new() -> Self {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        Self { recorder, handle }
    }
}

/// Sets the store's gauges through the `metrics` facade, in the recorder the application
/// installed (the console's `/metrics` does the same in a recorder of its own):
///
/// * `workflow_instances{definition, status}`: instances by definition and status (every
///   status of every definition with instances, zeros included);
/// * `workflow_incidents_open{definition}`: incidents not yet resolved;
/// * `workflow_stimuli_in_inbox`: stimuli waiting in the store's inbox (when the backend
///   counts them);
/// * `workflow_dead_letters`: dead letters.
///
/// Call it before each scrape, or on a timer: it reads one aggregate per table.
///
/// # Errors
///
/// The store's, when a count fails.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = workflow_runtime::Runtime::builder().build()?;
/// workflow_console::record_census(runtime.store()).await?;
/// # Ok(())
/// # }
/// ```
pub async fn record_census(store: &Storage) -> Result<(), StoreError> {
    let census = store.census().await?;
    let mut incidents: Vec<(String, u64)> = Vec::new();
    let mut after = None;
    let mut read = 0;
    while read < INCIDENT_SCAN {
        let page = store.list_all_incidents(true, after.take(), 500).await?;
        let Some(last) = page.last() else { break };
        after = Some((last.created_at, last.incident_id.clone()));
        read += page.len();
        for incident in &page {
            match incidents
                .iter_mut()
                .find(|(d, _)| *d == incident.definition_name)
            {
                Some((_, n)) => *n += 1,
                None => incidents.push((incident.definition_name.clone(), 1)),
            }
        }
        if page.len() < 500 {
            break;
        }
    }
    let mut definitions: Vec<&str> = census
        .instances
        .iter()
        .map(|c| c.definition_name.as_str())
        .collect();
    definitions.sort_unstable();
    definitions.dedup();
    for definition in &definitions {
        for status in STATUSES {
            let n: u64 = census
                .instances
                .iter()
                .filter(|c| c.definition_name == *definition && c.status == status)
                .map(|c| c.count)
                .sum();
            metrics::gauge!(
                "workflow_instances",
                "definition" => (*definition).to_owned(),
                "status" => status.as_str()
            )
            .set(n as f64);
        }
        let open = incidents
            .iter()
            .find(|(d, _)| d == definition)
            .map_or(0, |(_, n)| *n);
        metrics::gauge!("workflow_incidents_open", "definition" => (*definition).to_owned())
            .set(open as f64);
    }
    if let Some(queued) = census.queued {
        metrics::gauge!("workflow_stimuli_in_inbox").set(queued as f64);
    }
    metrics::gauge!("workflow_dead_letters").set(census.dead_letters as f64);
    Ok(())
}

/// `GET /metrics`.
pub(crate) async fn render(state: State, base: Base) -> Result<Response, Failure> {
    let store = state.runtime.store().clone();
    let exporter = &state.metrics;
    // The facade's macros write to the local recorder while the census is recorded; the
    // future is polled on this task, so the recorder stays in place across its awaits.
    let recorded = WithRecorder {
        recorder: &exporter.recorder,
        future: std::pin::pin!(record_census(&store)),
    }
    .await;
    recorded.map_err(|e| Failure::store(&base, &e))?;
    // The census, then what the runtime itself counted (runs, attempts, timers, leases and
    // store latency): its histograms keep their own buckets, so they are written as it
    // writes them.
    let mut text = exporter.handle.render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&state.runtime.metrics().to_prometheus());
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// A future polled with `recorder` as the thread's local recorder.
struct WithRecorder<'a, F> {
    recorder: &'a PrometheusRecorder,
    future: std::pin::Pin<&'a mut F>,
}

impl<F: Future> Future for WithRecorder<'_, F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let recorder = self.recorder;
        metrics::with_local_recorder(recorder, || self.future.as_mut().poll(cx))
    }
}
