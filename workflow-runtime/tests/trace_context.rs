//! W3C trace context across runtimes (ENG-61): one runtime starts an instance and sends it two
//! stimuli through the store's queue (one enqueued, one that nothing waits for yet), each with
//! a trace context of its own; another runtime on the same store delivers them and fires the
//! instance's timer. The runs that deliver the stimuli continue the sends' traces, the timer's
//! run the start's, and each `workflow.execution` span names its parent span. On SQLite, and
//! on PostgreSQL when `WORKFLOW_PG_URL` is set.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use workflow_runtime::store::Storage;
use workflow_runtime::{
    ManualClock, Runtime, StartOptions, Stimulus, TaskContext, TaskError, TraceParent,
    WorkflowStatus, state_machine,
};

/// A parcel's data.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Parcel {
    /// Its key.
    pub id: String,
    /// Whether it is paid.
    pub paid: bool,
}

async fn pay(ctx: &mut TaskContext<Parcel>) -> Result<(), TaskError> {
    ctx.data_mut().paid = true;
    Ok(())
}

/// Paid by an event, shipped a second after, then taken on another event.
#[state_machine(data = Parcel, initial = Placed)]
pub enum Shipping {
    /// Waits for its payment.
    #[on(pay: event::<serde_json::Value>("parcel.pay").key(id) => Paid, action = pay)]
    Placed,
    /// Waits a second.
    #[on(after(Duration::from_secs(1)) => Shipped)]
    Paid,
    /// Waits to be taken.
    #[on(take: event::<serde_json::Value>("parcel.take").key(id) => Taken)]
    Shipped,
    /// Done.
    Taken,
}

/// A `workflow.execution` span as it was recorded.
#[derive(Debug, Clone, Default, PartialEq)]
struct Execution {
    instance: String,
    trace_id: String,
    span_id: String,
    parent_id: String,
}

impl Visit for Execution {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let value = value.to_owned();
        match field.name() {
            "instance" => self.instance = value,
            "trace_id" => self.trace_id = value,
            "span_id" => self.span_id = value,
            "parent_id" => self.parent_id = value,
            _ => {}
        }
    }
}

/// Keeps every `workflow.execution` span, its fields as recorded.
#[derive(Clone, Default)]
struct Executions(Arc<Mutex<Vec<(Id, Execution)>>>);

impl Executions {
    fn take(&self) -> Vec<Execution> {
        std::mem::take(&mut *self.0.lock().unwrap())
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Executions {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "workflow.execution" {
            let mut execution = Execution::default();
            attrs.record(&mut execution);
            self.0.lock().unwrap().push((id.clone(), execution));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, execution)) = spans.iter_mut().find(|(i, _)| i == id) {
            values.record(execution);
        }
    }
}

fn runtime(store: Storage, clock: &Arc<ManualClock>) -> Runtime {
    Runtime::builder()
        .store(store)
        .clock(Arc::clone(clock) as Arc<dyn workflow_runtime::Clock>)
        .inbox_worker(false)
        .timer_driver(false)
        .register::<Shipping>()
        .build()
        .unwrap()
}

/// The scenario, over two stores on one database (as two processes would hold them).
async fn a_trace_crosses_runtimes(first: Storage, second: Storage, spans: &Executions) {
    let clock = Arc::new(ManualClock::new(1_000_000_000_000));
    let sender = runtime(first, &clock);
    let deliverer = runtime(second, &clock);

    // The start carries a trace context given explicitly; the first run continues it.
    let started_in = TraceParent::new_root();
    let options = StartOptions {
        instance_id: Some("parcel-1".to_owned()),
        traceparent: Some(started_in),
        ..StartOptions::default()
    };
    let parcel = Parcel {
        id: "p-1".to_owned(),
        paid: false,
    };
    sender
        .start_with::<Shipping>(parcel, options)
        .await
        .unwrap();
    let [first_run] = spans.take().try_into().unwrap();
    assert_eq!(first_run.instance, "parcel-1");
    assert_eq!(first_run.trace_id, started_in.trace_id());
    assert_eq!(first_run.parent_id, started_in.span_id());
    let stored = sender.get_state("parcel-1").await.unwrap().unwrap();
    assert_eq!(
        stored.state.traceparent(),
        Some(started_in.to_string().as_str())
    );

    // The send's own context, taken from the sender's task: only queued here.
    let sent_in = TraceParent::new_root();
    let report = sent_in
        .scope(sender.send(Stimulus::new("parcel.pay").key("p-1").via_inbox()))
        .await
        .unwrap();
    assert!(report.resumed.is_empty(), "{report:?}");
    assert!(spans.take().is_empty(), "nothing ran in the sender");

    // The other runtime delivers it: its run continues the send's trace. (On PostgreSQL the
    // sender's store keeps the instance's lease after its first run, ST-38: the first pass
    // finds the instance busy and queues the stimulus for it, and a later pass delivers it
    // once the sender's store has given the lease back, which it does when asked.)
    assert_eq!(deliverer.deliver_inbox().await.unwrap(), 1);
    let asked = std::time::Instant::now();
    let mut ran = spans.take();
    while ran.is_empty() {
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "the stimulus was not delivered within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        deliverer.deliver_inbox().await.unwrap();
        ran = spans.take();
    }
    let [delivery] = ran.try_into().unwrap();
    assert_eq!(delivery.instance, "parcel-1");
    assert_eq!(delivery.trace_id, sent_in.trace_id());
    assert_eq!(delivery.parent_id, sent_in.span_id());
    assert_ne!(delivery.span_id, sent_in.span_id());
    let paid = deliverer.get_state("parcel-1").await.unwrap().unwrap();
    assert_eq!(paid.current_state(), Some("Paid"));

    // A direct send nothing waits for yet: queued by the sender, with its context.
    let taken_in = TraceParent::new_root();
    let report = sender
        .send(
            Stimulus::new("parcel.take")
                .key("p-1")
                .traceparent(taken_in),
        )
        .await
        .unwrap();
    assert!(report.inbox_item.is_some(), "{report:?}");
    assert!(spans.take().is_empty(), "nothing ran in the sender");

    // The timer, fired in the other runtime, continues the trace the instance started in.
    clock.advance(Duration::from_secs(2));
    let fired = deliverer.fire_due_timers().await.unwrap();
    assert_eq!(fired.fired.len(), 1, "{fired:?}");
    let [timer_run] = spans.take().try_into().unwrap();
    assert_eq!(timer_run.trace_id, started_in.trace_id());
    assert_eq!(timer_run.parent_id, started_in.span_id());
    let shipped = deliverer.get_state("parcel-1").await.unwrap().unwrap();
    assert_eq!(shipped.current_state(), Some("Shipped"));

    // Now waited for, the queued stimulus is delivered there, continuing the send's trace.
    assert_eq!(deliverer.deliver_inbox().await.unwrap(), 1);
    let [taken] = spans.take().try_into().unwrap();
    assert_eq!(taken.trace_id, taken_in.trace_id());
    assert_eq!(taken.parent_id, taken_in.span_id());
    let done = deliverer.get_state("parcel-1").await.unwrap().unwrap();
    assert_eq!(done.status(), WorkflowStatus::Finished);

    sender.shutdown(Duration::from_secs(1)).await;
    deliverer.shutdown(Duration::from_secs(1)).await;
}

/// Runs `test` on a current-thread runtime with the span recorder as the thread's
/// subscriber (every task of both runtimes runs on this thread).
fn with_spans<F: Future<Output = ()>>(test: impl FnOnce(Executions) -> F) {
    let spans = Executions::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test(spans));
}

#[test]
fn a_send_and_a_start_carry_their_trace_to_another_runtime_on_sqlite() {
    with_spans(|spans| async move {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.db");
        // One process holds a SQLite file at a time: the two runtimes share its store.
        let store: Storage =
            Arc::new(workflow_runtime::store::SqliteStore::open(&path).unwrap()).into();
        a_trace_crosses_runtimes(store.clone(), store, &spans).await;
    });
}

#[test]
fn a_send_and_a_start_carry_their_trace_to_another_runtime_on_postgres() {
    use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_schema_name};
    use workflow_runtime::store::{PostgresOptions, PostgresStore};
    let Ok(url) = std::env::var("WORKFLOW_PG_URL") else {
        eprintln!("skipped: WORKFLOW_PG_URL is not set (no PostgreSQL server to test on)");
        return;
    };
    with_spans(|spans| async move {
        let schema = fresh_schema_name();
        let _guard = SchemaGuard::new(url.clone(), schema.clone());
        let options = PostgresOptions::default().schema(schema);
        let mut stores = Vec::new();
        for _ in 0..2 {
            let store = PostgresStore::connect_with(&url, &options)
                .await
                .unwrap_or_else(|e| panic!("WORKFLOW_PG_URL={url} is set but unusable: {e}"));
            stores.push(Storage::new(Arc::new(store)));
        }
        let second = stores.pop().unwrap();
        let first = stores.pop().unwrap();
        a_trace_crosses_runtimes(first, second, &spans).await;
    });
}

/// The application's bridge: a send or start made outside any trace context takes the
/// application's (its current OpenTelemetry span's, say), and the application is handed each
/// run's span with the context it continues (to make it the span's parent there).
#[test]
fn the_applications_bridge_gives_the_context_and_is_told_of_each_run() {
    with_spans(|spans| async move {
        let applications = TraceParent::new_root();
        let told: Arc<Mutex<Vec<TraceParent>>> = Arc::default();
        let seen = Arc::clone(&told);
        let clock = Arc::new(ManualClock::new(1_000_000_000_000));
        let runtime = Runtime::builder()
            .clock(Arc::clone(&clock) as Arc<dyn workflow_runtime::Clock>)
            .inbox_worker(false)
            .timer_driver(false)
            .register::<Shipping>()
            .trace_context_from(move || Some(applications))
            .on_execution_span(move |span, parent| {
                assert_eq!(
                    span.metadata().map(tracing::Metadata::name),
                    Some("workflow.execution")
                );
                seen.lock().unwrap().push(*parent);
            })
            .build()
            .unwrap();
        let parcel = Parcel {
            id: "p-2".to_owned(),
            paid: false,
        };
        let options = StartOptions {
            instance_id: Some("parcel-2".to_owned()),
            ..StartOptions::default()
        };
        runtime
            .start_with::<Shipping>(parcel, options)
            .await
            .unwrap();
        let stored = runtime.get_state("parcel-2").await.unwrap().unwrap();
        assert_eq!(
            stored.state.traceparent(),
            Some(applications.to_string().as_str())
        );
        // A send inside a scope of its own carries that one instead.
        let scoped = TraceParent::new_root();
        scoped
            .scope(runtime.send(Stimulus::new("parcel.pay").key("p-2")))
            .await
            .unwrap();
        assert_eq!(*told.lock().unwrap(), [applications, scoped]);
        let runs = spans.take();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[1].trace_id, scoped.trace_id());
        runtime.shutdown(Duration::from_secs(1)).await;
    });
}
