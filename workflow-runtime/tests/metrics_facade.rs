//! With the `metrics` feature, the runtime's metrics (ENG-60) reach the recorder the
//! application installed when it built the runtime: here `metrics-util`'s debugging recorder,
//! after a known workload (3 started, 1 faulted, 1 payment sent).
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Runtime, StartOptions, Stimulus, TaskContext, TaskError, WorkflowStatus, state_machine,
    workflow,
};

/// A print job: `fail` makes its one task fail for good.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    fail: bool,
}

async fn print(ctx: &mut TaskContext<Job>) -> Result<(), TaskError> {
    if ctx.data().fail {
        return Err(TaskError::permanent("the printer is on fire"));
    }
    Ok(())
}

workflow! {
    /// One task that prints.
    pub workflow PrintJob(Job) = sequence [print = task(print)];
}

/// An order waiting for its payment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    id: String,
}

/// Paid by a `payment` keyed by the order's id.
#[state_machine(data = Order, initial = New)]
pub enum ShopOrder {
    /// Waits for its payment.
    #[on(pay: event("payment").key(id) => Paid)]
    New,
    /// Paid.
    Paid,
}

/// Every series the recorder holds, as `name{label="value",...} value` lines.
fn lines(recorder: &DebuggingRecorder) -> Vec<String> {
    let mut out: Vec<String> = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Counter(n) => n.to_string(),
                DebugValue::Gauge(g) => g.to_string(),
                DebugValue::Histogram(values) => format!("{} observations", values.len()),
            };
            format!("{}{{{}}} {value}", key.name(), labels.join(","))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_recorder_receives_the_runtimes_metrics() {
    let recorder = DebuggingRecorder::new();
    // The series are registered when the runtime is built, in the recorder installed then.
    let runtime = metrics::with_local_recorder(&recorder, || {
        Runtime::builder()
            .register::<PrintJob>()
            .register::<ShopOrder>()
            .build()
            .unwrap()
    });
    let done = runtime
        .start::<PrintJob>(Job { fail: false })
        .await
        .unwrap();
    assert_eq!(done.status, WorkflowStatus::Finished);
    let faulted = runtime.start::<PrintJob>(Job { fail: true }).await.unwrap();
    assert_eq!(faulted.status, WorkflowStatus::Faulted);
    let order = Order {
        id: "o-1".to_owned(),
    };
    let options = StartOptions {
        instance_id: Some("o-1".to_owned()),
        ..StartOptions::default()
    };
    runtime
        .start_with::<ShopOrder>(order, options)
        .await
        .unwrap();
    let paid = runtime
        .send(Stimulus::new("payment").key("o-1"))
        .await
        .unwrap();
    assert_eq!(paid.resumed.len(), 1);

    let seen = lines(&recorder);
    for line in [
        "workflow_transitions_total{definition=\"PrintJob\",outcome=\"finished\"} 1",
        "workflow_transitions_total{definition=\"PrintJob\",outcome=\"faulted\"} 1",
        "workflow_transitions_total{definition=\"ShopOrder\",outcome=\"suspended\"} 1",
        "workflow_transitions_total{definition=\"ShopOrder\",outcome=\"finished\"} 1",
        "workflow_task_attempts_total{definition=\"PrintJob\"} 2",
        "workflow_task_failures_total{definition=\"PrintJob\"} 1",
        "workflow_task_retries_total{definition=\"PrintJob\"} 0",
        "workflow_task_duration_seconds{definition=\"PrintJob\"} 2 observations",
        "workflow_store_call_seconds{call=\"commit\"} 4 observations",
        "workflow_stimuli_sent_total{} 1",
        "workflow_stimuli_delivered_total{} 1",
        "workflow_stimuli_to_inbox_total{} 0",
        "workflow_stimuli_dead_lettered_total{reason=\"expired\"} 0",
        "workflow_lease_losses_total{} 0",
    ] {
        assert!(
            seen.iter().any(|l| l == line),
            "{line} missing from:\n{}",
            seen.join("\n")
        );
    }
    // The facade and the runtime's own counters agree.
    let own = runtime.metrics();
    let print = own.definition("PrintJob").unwrap();
    assert_eq!(print.transitions_to(WorkflowStatus::Faulted), 1);
    assert_eq!(print.task_attempts, 2);
    // No series names an instance.
    assert!(!seen.iter().any(|l| l.contains("o-1")));
    // Each series carries the help text the Prometheus text format writes for it.
    let prometheus = own.to_prometheus();
    let described: Vec<(String, String)> = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, help, _)| {
            let help = help.map(|h| h.to_string()).unwrap_or_default();
            (key.key().name().to_owned(), help)
        })
        .collect();
    for (name, help) in &described {
        assert!(!help.is_empty(), "{name} has no help text in the recorder");
        let line = format!("# HELP {name} {help}");
        assert!(
            prometheus.lines().any(|l| l == line),
            "{line} missing from the text format:\n{prometheus}"
        );
    }
    runtime.shutdown(Duration::from_secs(1)).await;
}
