//! Early events and state machines (RT-30): a `#[state_machine]` transition takes, from the
//! queue, only stimuli sent since its state was entered (`since_entered`, the default), so a
//! reply sent while the machine was in a state that does not wait for it is not consumed
//! later, when the machine enters one that does. In the initial state a reply that overtakes
//! the start is still kept, and the machine-level `look_back = since_origin` restores the
//! queue-and-deliver-later behaviour. Every scenario runs on the `MemoryStore` and on a
//! `SqliteStore` in a temporary file.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{MemoryStore, SqliteStore, Storage};
use workflow_runtime::{Runtime, Stimulus, TaskContext, Workflow, state_machine};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    id: String,
}

#[state_machine(data = Ticket, initial = Open, name = "LookBackTicket")]
pub enum TicketFlow {
    #[on(assign: event("ticket.assign").key(id) => Assigned)]
    Open,
    #[on(ask: event("ticket.ask").key(id) => WaitingOnCustomer)]
    Assigned,
    #[on(reply: event("ticket.reply").key(id) => Assigned)]
    WaitingOnCustomer,
}

/// The same machine, opting out: every transition looks back to the instance's origin.
#[state_machine(data = Ticket, initial = Open, name = "LookBackTicketSinceOrigin", look_back = since_origin)]
pub enum OldTicketFlow {
    #[on(assign: event("ticket.assign").key(id) => Assigned)]
    Open,
    #[on(ask: event("ticket.ask").key(id) => WaitingOnCustomer)]
    Assigned,
    #[on(reply: event("ticket.reply").key(id) => Assigned)]
    WaitingOnCustomer,
}

/// Opens the gate of [`wait_for_gate`] once.
static GATE: tokio::sync::Notify = tokio::sync::Notify::const_new();

async fn wait_for_gate(_ctx: &mut TaskContext<Ticket>) {
    GATE.notified().await;
}

/// A machine whose initial state's wait exists only once its entry ran.
#[state_machine(data = Ticket, initial = Open, name = "LookBackSlowStart")]
pub enum SlowStart {
    #[entry(wait_for_gate)]
    #[on(reply: event("ticket.reply").key(id) => Answered)]
    Open,
    Answered,
}

fn stores() -> Vec<(&'static str, Storage, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("look_back.db")).unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()).into(), None),
        ("sqlite", Arc::new(sqlite).into(), Some(dir)),
    ]
}

fn runtime(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register::<TicketFlow>()
        .register::<OldTicketFlow>()
        .register::<SlowStart>()
        // These tests pass the queue themselves.
        .inbox_worker(false)
        .build()
        .unwrap()
}

fn ticket(id: &str) -> Ticket {
    Ticket { id: id.to_owned() }
}

/// Sends, then lets the clock move so the next send is strictly later.
async fn send(rt: &Runtime, name: &str, key: &str) -> workflow_runtime::SendReport {
    let report = rt.send(Stimulus::new(name).key(key)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    report
}

/// Assigned, then a reply while `Assigned` (queued: nothing waits for it), then asked.
async fn reply_before_the_question<W: Workflow<Data = Ticket>>(rt: &Runtime, key: &str) -> String {
    let id = rt.start::<W>(ticket(key)).await.unwrap().instance_id;
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(send(rt, "ticket.assign", key).await.resumed.len(), 1);
    let early = send(rt, "ticket.reply", key).await;
    assert!(early.inbox_item.is_some(), "{early:?}");
    // The report says nothing waits for it now.
    assert!(early.inbox_because.is_some(), "{early:?}");
    assert!(
        early.to_string().contains("no instance waits for it now"),
        "{early}"
    );
    assert_eq!(send(rt, "ticket.ask", key).await.resumed.len(), 1);
    id
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

async fn current_state(rt: &Runtime, id: &str) -> String {
    let snapshot = rt.get_state(id).await.unwrap().unwrap();
    snapshot.current_state().unwrap_or_default().to_owned()
}

#[test]
fn a_reply_sent_while_the_state_does_not_wait_for_it_is_not_consumed_later() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let id = reply_before_the_question::<TicketFlow>(&rt, "T-1").await;
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            assert_eq!(
                current_state(&rt, &id).await,
                "WaitingOnCustomer",
                "{label}: the early reply does not answer the later question"
            );
            // A reply sent now is taken.
            assert_eq!(send(&rt, "ticket.reply", "T-1").await.resumed.len(), 1);
            assert_eq!(current_state(&rt, &id).await, "Assigned", "{label}");
        });
    }
}

#[test]
fn the_machine_level_since_origin_keeps_the_early_reply() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let id = reply_before_the_question::<OldTicketFlow>(&rt, "T-2").await;
            assert_eq!(rt.deliver_inbox().await.unwrap(), 1, "{label}");
            assert_eq!(
                current_state(&rt, &id).await,
                "Assigned",
                "{label}: queued and delivered later, as before"
            );
        });
    }
}

#[test]
fn the_definition_records_since_entered_unless_the_machine_says_otherwise() {
    let json = serde_json::to_string(&TicketFlow::definition()).unwrap();
    assert!(json.contains(r#""look_back":"since_entered""#), "{json}");
    let json = serde_json::to_string(&OldTicketFlow::definition()).unwrap();
    assert!(json.contains(r#""look_back":"since_origin""#), "{json}");
    assert!(!json.contains("since_entered"), "{json}");
}

#[test]
fn a_reply_that_overtakes_the_start_is_kept_in_the_initial_state() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let starting = {
                let rt = rt.clone();
                tokio::spawn(async move { rt.start::<SlowStart>(ticket("T-3")).await })
            };
            // The instance exists, its entry runs: no wait for the reply yet.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let early = send(&rt, "ticket.reply", "T-3").await;
            assert!(early.inbox_item.is_some(), "{label}: {early:?}");
            GATE.notify_one();
            let id = starting.await.unwrap().unwrap().instance_id;
            assert_eq!(rt.deliver_inbox().await.unwrap(), 1, "{label}");
            assert_eq!(current_state(&rt, &id).await, "Answered", "{label}");
        });
    }
}
