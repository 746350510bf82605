//! Waiting for a flow-control slot is a durable suspension (QU-11, QU-13): an attempt whose
//! queue is full does not wait inside its run; its instance is committed suspended on a
//! `wf.slot` bookmark, listed as waiting for the queue, with its instance lease given back;
//! `why` words the wait; a cancel leaves the line; a release resumes the next waiter; and
//! waiting instances survive a restart of their runtime, then run in their order, each once.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;

use serde_json::json;
use support::{Reopener, hold_slot_outside, memory_storage, queue_line, wall_now, work_in_single};
use workflow_runtime::model::Definition;
use workflow_runtime::store::Storage;
use workflow_runtime::{
    Control, InstanceQuery, Queue, Registry, Runtime, StartOptions, SubStatus, TaskContext,
    WorkflowStatus,
};

const SINGLE: Queue = Queue::new("single").concurrency(1);

/// What the tasks did: the labels in the order they ran; the task labelled `blocker` says
/// it began, then waits for a permit of `hold`.
struct Probe {
    order: Mutex<Vec<String>>,
    began: tokio::sync::Notify,
    hold: tokio::sync::Semaphore,
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            order: Mutex::new(Vec::new()),
            began: tokio::sync::Notify::new(),
            hold: tokio::sync::Semaphore::new(0),
        }
    }
}

fn registry(probe: &Arc<Probe>) -> Registry<serde_json::Value> {
    let probe = Arc::clone(probe);
    Registry::new().task("work", move |cx: &mut TaskContext<serde_json::Value>| {
        let probe = Arc::clone(&probe);
        let label = cx.data()["label"].as_str().unwrap_or_default().to_owned();
        Box::pin(async move {
            if label == "blocker" {
                probe.began.notify_one();
                probe.hold.acquire().await.unwrap().forget();
            }
            probe.order.lock().unwrap().push(label);
            Ok(workflow_runtime::Outcome::done())
        })
    })
}

fn build(store: &Storage, owner: &str, probe: &Arc<Probe>) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .owner(owner)
        .lease_ttl(Duration::from_secs(2))
        .queue(SINGLE)
        .register_definition(work_in_single("Low", 0), registry(probe))
        .register_definition(work_in_single("High", 9), registry(probe))
        .build()
        .unwrap()
}

/// Starts `label` of `name` with the instance id `label`: it returns at once, even when its
/// task waits for a slot.
async fn start(runtime: &Runtime, name: &str, label: &str) -> workflow_runtime::Started {
    let options = StartOptions {
        instance_id: Some(label.to_owned()),
        ..StartOptions::default()
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        runtime.start_by_name(name, json!({ "label": label }), options),
    )
    .await
    .unwrap_or_else(|_| panic!("the start of `{label}` waited in its run for a slot"))
    .unwrap()
}

/// With the one slot held by a running task, a second instance's start returns with it
/// suspended, listed as waiting for `wf.slot:single`, and `why` words the wait; its lease is
/// free, so a cancel is applied at once, and its place leaves the line; the next waiter is
/// served when the slot comes back, and nothing stays held or in line.
async fn a_waiting_attempt_suspends_its_instance(store: Storage) {
    let probe = Arc::new(Probe::default());
    let runtime = Arc::new(build(&store, "only", &probe));
    let began = probe.began.notified();
    let blocker = {
        let runtime = Arc::clone(&runtime);
        tokio::spawn(async move { start(&runtime, "Low", "blocker").await })
    };
    began.await;

    let first = start(&runtime, "Low", "first").await;
    assert_eq!(
        (first.status, first.sub_status),
        (WorkflowStatus::Suspended, Some(SubStatus::WaitingForSlot)),
        "waiting for a slot, the instance is suspended, not running"
    );
    let second = start(&runtime, "Low", "second").await;
    assert_eq!(second.status, WorkflowStatus::Suspended);
    let listed = runtime
        .list_instances(InstanceQuery {
            status: Some(WorkflowStatus::Suspended),
            ..InstanceQuery::default()
        })
        .await
        .unwrap();
    let mut waiting: Vec<_> = listed
        .iter()
        .map(|s| (s.instance_id.as_str(), s.waiting_for.clone()))
        .collect();
    waiting.sort();
    assert_eq!(
        waiting,
        [
            ("first", vec!["wf.slot:single".to_owned()]),
            ("second", vec!["wf.slot:single".to_owned()])
        ]
    );
    assert_eq!(
        store.slot_waits("first", wall_now()).await.unwrap(),
        ["waiting for `single`: 1 of 1 running"]
    );
    assert_eq!(
        store.slot_waits("second", wall_now()).await.unwrap(),
        ["waiting for `single`: 1 of 1 running, 1 ahead of it"]
    );

    // Its lease is not held: the cancel is applied here and now, not requested.
    let cancelled = runtime.cancel("first", None).await.unwrap();
    let Control::Applied(cancelled) = cancelled else {
        panic!("the cancel of a suspended waiter was only requested: its lease is held")
    };
    assert_eq!(cancelled.status, WorkflowStatus::Cancelled);
    let (holders, running, waiting) = queue_line(&store, "single").await;
    assert_eq!((running, waiting), (1, 1), "{holders:?}");
    assert!(holders[0].starts_with("second/"), "{holders:?}");
    assert_eq!(
        store.slot_waits("second", wall_now()).await.unwrap(),
        ["waiting for `single`: 1 of 1 running"]
    );

    probe.hold.add_permits(1);
    assert_eq!(blocker.await.unwrap().status, WorkflowStatus::Finished);
    runtime
        .await_completion("second", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(*probe.order.lock().unwrap(), ["blocker", "second"]);
    assert_eq!(
        queue_line(&store, "single").await,
        (Vec::new(), 0, 0),
        "no slot or place leaks"
    );
    runtime.shutdown(Duration::from_secs(5)).await;
}

support::on_each_store!(
    a_waiting_attempt_suspends_its_instance =>
    a_waiting_attempt_suspends_its_instance_on_memory,
    a_waiting_attempt_suspends_its_instance_on_sqlite,
    a_waiting_attempt_suspends_its_instance_on_postgres
);

/// An outside holder takes the one slot; a runtime starts four instances whose tasks wait
/// (priority 0, 0, 9, 0), each suspended; the runtime shuts down and is dropped, and a new
/// one opens the same store. The holder gives the slot back: the waiters run in their order
/// (the high one first, the others in arrival order), each exactly once, resumed by their
/// timers and by each other's releases; nothing stays held or in line.
async fn waiters_survive_a_restart(stores: &Reopener) {
    let first = stores.open().await;
    let probe = Arc::new(Probe::default());
    let lease = hold_slot_outside(&first, &SINGLE, "outside/1/1").await;
    let runtime = build(&first, "before", &probe);
    for (name, label) in [
        ("Low", "low-1"),
        ("Low", "low-2"),
        ("High", "high"),
        ("Low", "low-3"),
    ] {
        let started = start(&runtime, name, label).await;
        assert_eq!(started.status, WorkflowStatus::Suspended, "{label}");
    }
    runtime.shutdown(Duration::from_secs(5)).await;
    drop(runtime);
    drop(first);
    // Longer than a slot's lease (2 s): the places are kept for the suspension.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let store = stores.open().await;
    let (holders, running, waiting) = queue_line(&store, "single").await;
    assert_eq!((running, waiting), (1, 4), "{holders:?}");
    assert!(holders[0].starts_with("high/"), "{holders:?}");
    let runtime = build(&store, "after", &probe);
    runtime.run_background().unwrap();
    store.release_slot(&lease, wall_now()).await.unwrap();
    for id in ["low-1", "low-2", "high", "low-3"] {
        runtime
            .await_completion(id, Duration::from_secs(30))
            .await
            .unwrap();
    }
    assert_eq!(
        *probe.order.lock().unwrap(),
        ["high", "low-1", "low-2", "low-3"],
        "priority, then arrival order, each once"
    );
    assert_eq!(queue_line(&store, "single").await, (Vec::new(), 0, 0));
    runtime.shutdown(Duration::from_secs(5)).await;
}

support::across_restarts_on_each_store!(
    waiters_survive_a_restart =>
    waiters_survive_a_restart_on_sqlite,
    waiters_survive_a_restart_on_postgres
);

/// A workflow `name` of one task `work` in the queue `queue`.
fn in_queue(name: &str, queue: &str) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "work", "function": "work", "queue": queue }
        ] }
    }))
    .unwrap()
}

/// A wait for the rate window stays in the run while the turn is at most a second away, and
/// suspends its instance beyond (QU-11): on a queue of 1 start per 300 ms the second start
/// waits in its run and returns finished; on one of 1 per 3 s the second and third return
/// suspended waiting for a slot, and run when their turns come, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_for_the_rate_suspends_a_short_one_stays_in_the_run() {
    const QUICK: Queue = Queue::new("quick").rate(1, Duration::from_millis(300));
    const SLOW: Queue = Queue::new("slow").rate(1, Duration::from_secs(3));
    let probe = Arc::new(Probe::default());
    let store = memory_storage();
    let runtime = Runtime::builder()
        .store(store.clone())
        .queue(QUICK)
        .queue(SLOW)
        .register_definition(in_queue("Quick", "quick"), registry(&probe))
        .register_definition(in_queue("Slow", "slow"), registry(&probe))
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    for label in ["quick-1", "quick-2"] {
        let started = start(&runtime, "Quick", label).await;
        assert_eq!(started.status, WorkflowStatus::Finished, "{label}");
    }
    assert_eq!(
        start(&runtime, "Slow", "slow-1").await.status,
        WorkflowStatus::Finished
    );
    for label in ["slow-2", "slow-3"] {
        let started = start(&runtime, "Slow", label).await;
        assert_eq!(
            (started.status, started.sub_status),
            (WorkflowStatus::Suspended, Some(SubStatus::WaitingForSlot)),
            "{label}"
        );
    }
    let words = store.slot_waits("slow-2", wall_now()).await.unwrap();
    assert!(
        words[0].starts_with("waiting for `slow`: rate limit: next slot in"),
        "{words:?}"
    );
    for id in ["slow-2", "slow-3"] {
        runtime
            .await_completion(id, Duration::from_secs(30))
            .await
            .unwrap();
    }
    assert_eq!(
        *probe.order.lock().unwrap(),
        ["quick-1", "quick-2", "slow-1", "slow-2", "slow-3"]
    );
    runtime.shutdown(Duration::from_secs(5)).await;
}
