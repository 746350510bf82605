//! What an operator sees in the logs: the lifecycle written to `tracing` with the definition,
//! the instance and the node as fields, at levels that keep `info` readable; and the event
//! stream read as a `futures::Stream`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use workflow_runtime::{
    EventKind, Runtime, Stimulus, TaskContext, TaskError, WorkflowStatus, state_machine, workflow,
};

/// One captured event: its level, message and fields.
#[derive(Debug, Clone)]
struct Captured {
    level: Level,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }

    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Captured {
                level: *event.metadata().level(),
                fields,
            });
    }
}

impl Capture {
    /// The process-wide capture, installed once: a thread-local subscriber races with the
    /// callsite interest the other tests of this binary register without one.
    fn global() -> Capture {
        static GLOBAL: OnceLock<Capture> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let capture = Capture::default();
                let subscriber = tracing_subscriber::registry().with(capture.clone());
                tracing::subscriber::set_global_default(subscriber).unwrap();
                capture
            })
            .clone()
    }

    fn find(&self, message: &str, instance: &str) -> Captured {
        let events = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        events
            .iter()
            .find(|e| e.message() == message && e.field("instance") == instance)
            .cloned()
            .unwrap_or_else(|| panic!("no `{message}` event for {instance} in {events:#?}"))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ticket {
    id: String,
}

async fn close(_ctx: &mut TaskContext<Ticket>) {}

async fn explode(_ctx: &mut TaskContext<Ticket>) -> Result<(), TaskError> {
    Err(TaskError::permanent("disk full"))
}

#[state_machine(data = Ticket, initial = Open)]
pub enum Support {
    #[on(answer: event("answered").key(id) => Closed, action = close)]
    Open,
    Closed,
}

workflow! {
    pub workflow Export(Ticket) = sequence [write = task(explode)];
}

#[test]
fn the_lifecycle_is_logged_with_its_instance_definition_and_node() {
    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let rt = Runtime::builder()
                .register::<Support>()
                .register::<Export>()
                .build()
                .unwrap();
            let ticket = Ticket { id: "t-1".into() };
            let id = rt
                .start::<Support>(ticket.clone())
                .await
                .unwrap()
                .instance_id;
            rt.send(Stimulus::new("answered").key("t-1")).await.unwrap();
            let failed = rt.start::<Export>(ticket).await.unwrap();
            assert_eq!(failed.status, WorkflowStatus::Faulted);

            let started = capture.find("workflow started", &id);
            assert_eq!(started.level, Level::INFO);
            assert_eq!(started.field("definition"), "Support");
            let suspended = capture.find("workflow suspended", &id);
            assert_eq!(suspended.level, Level::INFO);
            assert_eq!(suspended.field("waiting_for"), "answered");
            assert_eq!(capture.find("workflow resumed", &id).level, Level::INFO);
            assert_eq!(capture.find("workflow finished", &id).level, Level::INFO);
            let completed = capture.find("activity completed", &id);
            assert_eq!(completed.level, Level::DEBUG);
            assert!(!completed.field("node").is_empty(), "{completed:?}");

            let faulted = capture.find("workflow faulted", &failed.instance_id);
            assert_eq!(faulted.level, Level::WARN);
            assert_eq!(faulted.field("definition"), "Export");
            assert!(faulted.field("node").ends_with("write"), "{faulted:?}");
            assert!(faulted.field("error").contains("disk full"), "{faulted:?}");
        });
}

#[test]
fn the_event_stream_is_a_futures_stream() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let rt = Runtime::builder().register::<Support>().build().unwrap();
            let mut events = rt.subscribe();
            let id = rt
                .start::<Support>(Ticket { id: "t-2".into() })
                .await
                .unwrap()
                .instance_id;
            rt.send(Stimulus::new("answered").key("t-2")).await.unwrap();
            let mut kinds = Vec::new();
            while let Some(event) = events.next().await {
                let event = event.unwrap();
                assert_eq!(event.instance_id, id);
                let finished = matches!(event.kind, EventKind::WorkflowFinished);
                kinds.push(event.kind);
                if finished {
                    break;
                }
            }
            assert!(
                matches!(kinds.first(), Some(EventKind::WorkflowStarted)),
                "{kinds:?}"
            );
            assert!(
                kinds
                    .iter()
                    .any(|k| matches!(k, EventKind::WorkflowResumed)),
                "{kinds:?}"
            );
            // `recv` and the stream share one position: nothing is delivered twice.
            assert!(events.try_recv().unwrap().is_none());
            drop(rt);
            assert!(
                events.next().await.is_none(),
                "the stream ends with the runtime"
            );
        });
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

async fn flaky(ctx: &mut TaskContext<Ticket>) -> Result<(), TaskError> {
    if ctx.attempt() == 1 {
        return Err(TaskError::new("printer jammed"));
    }
    Ok(())
}

async fn take_payment(ctx: &mut TaskContext<Ticket>) -> Result<(), TaskError> {
    let _: Payment = ctx.payload()?;
    Ok(())
}

workflow! {
    pub workflow Reminder(Ticket) = sequence [pause = after(millis(20)), task(close)];
}

workflow! {
    pub workflow Printing(Ticket) = sequence [
        print = task(flaky).retry(attempts = 2, backoff = millis(10)..millis(20)),
    ];
}

#[state_machine(data = Ticket, initial = Unpaid)]
pub enum Till {
    #[on(pay: event::<Payment>("pay").key(id) => Paid, action = take_payment)]
    Unpaid,
    Paid,
}

/// Timers, retries and dead letters are logged with the definition, the instance and the node:
/// a timer firing at `info`, a scheduled retry and a dead letter at `warn`.
#[test]
fn timers_retries_and_dead_letters_are_logged() {
    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store: Arc<dyn workflow_runtime::store::Store> =
                Arc::new(workflow_runtime::store::MemoryStore::new());
            let rt = Runtime::builder()
                .store(Arc::clone(&store))
                .register::<Reminder>()
                .register::<Printing>()
                .register::<Till>()
                .build()
                .unwrap();

            let reminder = rt
                .start::<Reminder>(Ticket { id: "r-1".into() })
                .await
                .unwrap()
                .instance_id;
            rt.await_completion(&reminder, std::time::Duration::from_secs(5))
                .await
                .unwrap();
            let fired = capture.find("timer fired", &reminder);
            assert_eq!(fired.level, Level::INFO);
            assert_eq!(fired.field("definition"), "Reminder");
            assert!(fired.field("node").ends_with("pause"), "{fired:?}");

            let printing = rt
                .start::<Printing>(Ticket { id: "p-1".into() })
                .await
                .unwrap()
                .instance_id;
            rt.await_completion(&printing, std::time::Duration::from_secs(5))
                .await
                .unwrap();
            let retry = capture.find("attempt failed; retry scheduled", &printing);
            assert_eq!(retry.level, Level::WARN);
            assert_eq!(retry.field("definition"), "Printing");
            assert!(retry.field("node").ends_with("print"), "{retry:?}");
            assert_eq!(retry.field("next_attempt"), "2");
            assert!(retry.field("error").contains("printer jammed"), "{retry:?}");

            let till = rt
                .start::<Till>(Ticket { id: "t-9".into() })
                .await
                .unwrap()
                .instance_id;
            let report = rt
                .send(Stimulus::new("pay").key("t-9").payload("not a payment"))
                .await
                .unwrap();
            assert_eq!(report.rejected.len(), 1, "{report:?}");
            let dead = capture.find(
                "stimulus dead-lettered: its payload does not decode for the waiting activity",
                &till,
            );
            assert_eq!(dead.level, Level::WARN);
            assert_eq!(dead.field("event"), "pay");
            assert_eq!(dead.field("reason"), "rejected");
            assert!(!dead.field("node").is_empty(), "{dead:?}");

            let expiring = rt
                .send(Stimulus::new("nobody-waits").ttl(std::time::Duration::from_millis(1)))
                .await
                .unwrap();
            assert!(expiring.inbox_item.is_some());
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            rt.deliver_inbox().await.unwrap();
            let expired = capture.find(
                "stimuli dead-lettered: no instance took them within their time to live",
                "",
            );
            assert_eq!(expired.level, Level::WARN);
            assert_eq!(expired.field("reason"), "expired");
        });
}

static HANG_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

async fn hang_once(ctx: &mut TaskContext<Ticket>) {
    if HANG_ONCE.swap(false, std::sync::atomic::Ordering::SeqCst) {
        ctx.cancelled().await;
    }
}

workflow! {
    pub workflow Stuck(Ticket) = sequence [hang = task(hang_once)];
}

/// ENG-25: an instance whose run a stopping process interrupted is logged at `info` when
/// another process recovers it.
#[test]
fn a_recovered_instance_is_logged() {
    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store: Arc<dyn workflow_runtime::store::Store> =
                Arc::new(workflow_runtime::store::MemoryStore::new());
            let process = |name: &str| {
                Runtime::builder()
                    .store(Arc::clone(&store))
                    .owner(name)
                    .register::<Stuck>()
                    .recovery_sweep(None)
                    .cancel_grace(std::time::Duration::from_millis(50))
                    .build()
                    .unwrap()
            };
            let first = process("first");
            let running = {
                let first = first.clone();
                tokio::spawn(async move { first.start::<Stuck>(Ticket { id: "s-1".into() }).await })
            };
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            first.shutdown(std::time::Duration::ZERO).await;
            let id = running.await.unwrap().unwrap().instance_id;

            let second = process("second");
            let report = second.recover().await.unwrap();
            assert_eq!(report.recovered.len(), 1, "{report:?}");
            let recovered = capture.find("instance recovered", &id);
            assert_eq!(recovered.level, Level::INFO);
            assert_eq!(recovered.field("definition"), "Stuck");
            assert_eq!(recovered.field("status"), "Finished");
        });
}

/// Two versions of one definition: the second has one more step, so another fingerprint. The
/// event takes a stimulus queued before the instance began (look-back `any`, RT-30).
fn versioned(steps: usize) -> String {
    let tasks: Vec<String> = (0..steps)
        .map(|i| format!(r#"{{ "kind": "task", "id": "t{i}", "function": "close" }}"#))
        .collect();
    format!(
        r#"{{ "name": "Versioned", "root": {{ "kind": "sequence", "id": "root", "steps": [
            {{ "kind": "event", "id": "go", "event": "go", "look_back": "any" }}, {} ] }} }}"#,
        tasks.join(", ")
    )
}

fn versioned_runtime(store: &Arc<dyn workflow_runtime::store::Store>, steps: usize) -> Runtime {
    let registry = workflow_runtime::Registry::<Ticket>::new().task("close", |_cx| {
        Box::pin(async { Ok(workflow_runtime::Outcome::done()) })
    });
    Runtime::builder()
        .store(Arc::clone(store))
        .register_json(versioned(steps), registry)
        .inbox_worker(false)
        .timer_driver(false)
        .build()
        .unwrap()
}

/// RT-18: the queue worker of a process that does not run an instance's version says so in
/// a warning naming the instance and keeps the item for a process that does, which then
/// delivers it; no delivery error is dropped in silence.
#[test]
fn a_queued_item_for_an_unregistered_version_is_logged_and_kept() {
    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store: Arc<dyn workflow_runtime::store::Store> =
                Arc::new(workflow_runtime::store::MemoryStore::new());
            let old = versioned_runtime(&store, 1);
            let new = versioned_runtime(&store, 2);
            // Sent before the instance waits for it: queued for the bookmark to come (RT-21).
            let early = new.send(Stimulus::new("go")).await.unwrap();
            assert!(early.inbox_item.is_some(), "{early:?}");
            let id = old
                .start_by_name(
                    "Versioned",
                    serde_json::json!({"id": "v-1"}),
                    Default::default(),
                )
                .await
                .unwrap()
                .instance_id;
            assert_eq!(new.deliver_inbox().await.unwrap(), 0);
            let warned = capture.find(
                "queue: the instance's version is not registered here; the item waits for a process that runs it",
                &id,
            );
            assert_eq!(warned.level, Level::WARN);
            assert!(
                warned.field("error").contains("not registered"),
                "{warned:?}"
            );
            // Kept, not dead-lettered: the process running the old version delivers it.
            assert_eq!(old.deliver_inbox().await.unwrap(), 1);
            let state = old.get_state(&id).await.unwrap().unwrap();
            assert_eq!(state.status(), WorkflowStatus::Finished);
        });
}

/// Whether the `hang` task has begun: the moment its lease is taken away.
static HANGING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Waits until its run is cancelled.
async fn hang(ctx: &mut TaskContext<Ticket>) -> Result<(), TaskError> {
    HANGING.store(true, std::sync::atomic::Ordering::SeqCst);
    ctx.cancelled().await;
    Err(TaskError::new("stopped: the run was cancelled"))
}

workflow! {
    pub workflow Hang(Ticket) = sequence [wait_forever = task(hang)];
}

/// A lease lost while a task runs is logged at `warn` with the definition, the instance and
/// the node of that task: another owner took the lease over as the store sees it once
/// expired, so this runtime's next renewal is refused.
#[test]
fn a_lost_lease_is_logged_with_its_definition_and_node() {
    use std::time::Duration;
    use workflow_runtime::store::{LeaseKey, MemoryStore, Storage};

    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let memory = Arc::new(MemoryStore::new());
            let rt = Runtime::builder()
                .store(memory.clone())
                .register::<Hang>()
                .lease_ttl(Duration::from_secs(5))
                .lease_renewal(Duration::from_millis(30))
                .recovery_sweep(None)
                .build()
                .unwrap();
            let options = workflow_runtime::StartOptions {
                instance_id: Some("lease-lost-1".to_owned()),
                ..Default::default()
            };
            let intruder = async {
                while !HANGING.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                // Another process, at an instant after the lease's expiry, takes it over.
                let later = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_micros();
                let later = i64::try_from(later).unwrap() + 60_000_000;
                Storage::new(memory.clone())
                    .acquire_lease(
                        &LeaseKey::instance("lease-lost-1"),
                        "another process",
                        later,
                        30_000_000,
                    )
                    .await
                    .unwrap();
            };
            let (started, ()) = tokio::join!(
                rt.start_with::<Hang>(Ticket { id: "h-1".into() }, options),
                intruder
            );
            assert!(
                started.is_err(),
                "a run without its lease is not done: {started:?}"
            );

            let lost = capture.find(
                "instance lease lost: the run is cancelled and its commit will be fenced",
                "lease-lost-1",
            );
            assert_eq!(lost.level, Level::WARN);
            assert_eq!(lost.field("definition"), "Hang");
            assert!(lost.field("node").ends_with("wait_forever"), "{lost:?}");
            assert!(!lost.field("error").is_empty(), "{lost:?}");
        });
}

/// The data of a child that needs a field its parent does not give it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Strict {
    required: u64,
}

/// `hand_off` starts a detached `Strict` child with an input it cannot decode, then `close`.
const DETACHING: &str = r#"{
  "name": "Detaching",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "hand_off",
    "nodes": [
      { "kind": "sub_workflow", "id": "hand_off", "workflow": "Strict", "mode": "detach",
        "input": "wrong_input" },
      { "kind": "task", "id": "close", "function": "close" }
    ],
    "connections": [ { "source": "hand_off", "target": "close" } ]
  }
}"#;

const STRICT: &str = r#"{
  "name": "Strict",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "close",
    "nodes": [ { "kind": "task", "id": "close", "function": "close" } ],
    "connections": []
  }
}"#;

/// ACT-24: a detached child that cannot start has no parent waiting to learn of it; the
/// failure is a warning naming the parent, the child and the error, not silence.
#[test]
fn a_detached_child_that_cannot_start_is_logged() {
    use workflow_runtime::Registry;
    use workflow_runtime::model::Definition;
    let capture = Capture::global();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let parent: Registry<Ticket> = Registry::new()
                .task("close", |_: &mut TaskContext<Ticket>| {
                    Box::pin(async { Ok(workflow_runtime::Outcome::done()) })
                })
                .value(
                    "wrong_input",
                    |_: &Ticket| serde_json::json!({ "id": "t-9" }),
                );
            let child: Registry<Strict> =
                Registry::new().task("close", |_: &mut TaskContext<Strict>| {
                    Box::pin(async { Ok(workflow_runtime::Outcome::done()) })
                });
            let rt = Runtime::builder()
                .register_definition(Definition::from_json(DETACHING).unwrap(), parent)
                .register_definition(Definition::from_json(STRICT).unwrap(), child)
                .build()
                .unwrap();
            let started = rt
                .start_by_name(
                    "Detaching",
                    serde_json::json!({ "id": "t-9" }),
                    Default::default(),
                )
                .await
                .unwrap();
            assert_eq!(started.status, WorkflowStatus::Finished, "{started:?}");
            let warned = capture.find("a detached child could not start", &started.instance_id);
            assert_eq!(warned.level, Level::WARN);
            assert_eq!(warned.field("definition"), "Strict");
            assert!(!warned.field("child").is_empty(), "{warned:?}");
            assert!(warned.field("error").contains("required"), "{warned:?}");
        });
}
