//! A run of a definition-level queue waits for its slot out of its run (QU-14): a start whose
//! run finds the queue full returns with its instance `Suspended/WaitingForSlot`, its lease
//! given back and nothing run; the instance runs when a release names its run's holder or its
//! timer asks again; a cancel leaves the line; the waiting instances survive a restart of
//! their runtime. On the memory, SQLite and PostgreSQL stores.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;

use serde_json::json;
use support::{
    Reopener, hold_slot_outside, memory_storage, queue_counts, until_queue_counts, wall_now,
};
use workflow_runtime::model::Definition;
use workflow_runtime::store::Storage;
use workflow_runtime::{
    Control, InstanceQuery, Queue, Registry, Runtime, StartOptions, Started, SubStatus,
    TaskContext, WorkflowStatus,
};

/// At most 2 runs of `Import` at once.
const IMPORTS: Queue = Queue::new("imports").concurrency(2);

/// Every run of `Import` takes a slot of `imports`; its one task is in no queue.
fn definition() -> Definition {
    serde_json::from_value(json!({
        "name": "Import",
        "queue": "imports",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "import", "function": "import" }
        ] }
    }))
    .unwrap()
}

/// `Staged` runs its task, then waits for the event `go`; every run takes a slot of
/// `imports`.
fn staged() -> Definition {
    serde_json::from_value(json!({
        "name": "Staged",
        "queue": "imports",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "import", "function": "import" },
            { "kind": "event", "id": "go", "event": "go" }
        ] }
    }))
    .unwrap()
}

/// What the tasks did: how many run now and at most, which ran (each label once); each task
/// waits for a permit of `hold` first.
struct Probe {
    now: AtomicUsize,
    max: AtomicUsize,
    ran: Mutex<Vec<String>>,
    hold: tokio::sync::Semaphore,
}

impl Probe {
    fn new(permits: usize) -> Arc<Self> {
        Arc::new(Self {
            now: AtomicUsize::new(0),
            max: AtomicUsize::new(0),
            ran: Mutex::new(Vec::new()),
            hold: tokio::sync::Semaphore::new(permits),
        })
    }
}

fn registry(probe: &Arc<Probe>) -> Registry<serde_json::Value> {
    let probe = Arc::clone(probe);
    Registry::new().task("import", move |cx: &mut TaskContext<serde_json::Value>| {
        let probe = Arc::clone(&probe);
        let label = cx.data()["label"].as_str().unwrap_or_default().to_owned();
        Box::pin(async move {
            let running = probe.now.fetch_add(1, Ordering::SeqCst) + 1;
            probe.max.fetch_max(running, Ordering::SeqCst);
            probe.hold.acquire().await.unwrap().forget();
            tokio::time::sleep(Duration::from_millis(5)).await;
            probe.ran.lock().unwrap().push(label);
            probe.now.fetch_sub(1, Ordering::SeqCst);
            Ok(workflow_runtime::Outcome::done())
        })
    })
}

fn build(store: &Storage, owner: &str, probe: &Arc<Probe>) -> Arc<Runtime> {
    Arc::new(
        Runtime::builder()
            .store(store.clone())
            .owner(owner)
            .lease_ttl(Duration::from_secs(2))
            .queue(IMPORTS)
            .register_definition(definition(), registry(probe))
            .register_definition(staged(), registry(probe))
            .build()
            .unwrap(),
    )
}

/// Starts `label` (also its instance id).
async fn start(runtime: &Runtime, label: &str) -> Started {
    let options = StartOptions {
        instance_id: Some(label.to_owned()),
        ..StartOptions::default()
    };
    runtime
        .start_by_name("Import", json!({ "label": label }), options)
        .await
        .unwrap()
}

/// Waits until no slot of `imports` is held and nobody is in line: a run's slot is released
/// right after its last commit, which is what `await_completion` waits for.
async fn settled(store: &Storage) {
    until_queue_counts(store, "imports", 0, 0).await;
}

fn labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("import-{i:02}")).collect()
}

/// 20 starts at once on a queue of 2 whose first runs hold their slots (their tasks wait for
/// a permit): the 18 others return with their instances suspended waiting for a slot, listed
/// so, nothing of them run; a cancel of one leaves the line; given permits, every other
/// instance runs, never more than 2 at once, and nothing stays held or in line.
async fn twenty_on_a_queue_of_two(store: Storage) {
    let probe = Probe::new(0);
    let runtime = build(&store, "only", &probe);
    let starts: Vec<_> = labels(20)
        .into_iter()
        .map(|label| {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(async move { start(&runtime, &label).await })
        })
        .collect();
    // The 2 runs holding the slots wait in their tasks; every other start returns.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while starts.iter().filter(|s| s.is_finished()).count() < 18
        || probe.now.load(Ordering::SeqCst) < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "starts waited in their runs for a slot"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (finished, pending): (Vec<_>, Vec<_>) = starts
        .into_iter()
        .partition(tokio::task::JoinHandle::is_finished);
    let mut waiting = Vec::new();
    for start in finished {
        waiting.push(start.await.unwrap());
    }
    assert_eq!((waiting.len(), pending.len()), (18, 2));
    for started in &waiting {
        assert_eq!(
            (started.status, started.sub_status),
            (WorkflowStatus::Suspended, Some(SubStatus::WaitingForSlot)),
            "{}",
            started.instance_id
        );
    }
    assert_eq!(
        probe.now.load(Ordering::SeqCst),
        2,
        "only the 2 holders run"
    );
    assert_eq!(queue_counts(&store, "imports").await, (2, 18));
    let listed = runtime
        .list_instances(InstanceQuery {
            status: Some(WorkflowStatus::Suspended),
            ..InstanceQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 18);
    for summary in &listed {
        assert_eq!(summary.sub_status, Some(SubStatus::WaitingForSlot));
        assert_eq!(summary.waiting_for, ["wf.slot:imports"]);
    }
    let first = &waiting[0].instance_id;
    let words = store.slot_waits(first, wall_now()).await.unwrap();
    assert_eq!(words.len(), 1, "{words:?}");
    assert!(
        words[0].starts_with("waiting for `imports`: 2 of 2 running"),
        "{words:?}"
    );

    // Its lease is free: the cancel applies at once, and its place leaves the line.
    let Control::Applied(cancelled) = runtime.cancel(first, None).await.unwrap() else {
        panic!("the cancel of a waiting instance was only requested")
    };
    assert_eq!(cancelled.status, WorkflowStatus::Cancelled);
    assert_eq!(queue_counts(&store, "imports").await, (2, 17));

    probe.hold.add_permits(20);
    for start in pending {
        assert_eq!(start.await.unwrap().status, WorkflowStatus::Finished);
    }
    for started in &waiting[1..] {
        runtime
            .await_completion(&started.instance_id, Duration::from_secs(60))
            .await
            .unwrap();
    }
    let mut ran = probe.ran.lock().unwrap().clone();
    ran.sort();
    let mut expected = labels(20);
    expected.retain(|label| label != first);
    assert_eq!(
        ran, expected,
        "each instance but the cancelled one ran once"
    );
    let max = probe.max.load(Ordering::SeqCst);
    assert!(max <= 2, "{max} runs of a queue of 2 overlapped");
    settled(&store).await;
    runtime.shutdown(Duration::from_secs(5)).await;
}

support::on_each_store!(
    twenty_on_a_queue_of_two =>
    a_run_waits_for_its_slot_suspended_on_memory,
    a_run_waits_for_its_slot_suspended_on_sqlite,
    a_run_waits_for_its_slot_suspended_on_postgres,
    postgres required
);

/// An outside holder takes both slots; a runtime starts 20 instances, each returning
/// suspended waiting for its run's slot; the runtime shuts down and is dropped, and a new one
/// opens the same store. The holder gives the slots back: every instance runs exactly once,
/// never more than 2 at once, resumed by its timer and by the others' releases; nothing
/// stays held or in line.
async fn run_waiters_survive_a_restart(stores: &Reopener) {
    let first = stores.open().await;
    let probe = Probe::new(1_000);
    let mut outside = Vec::new();
    for n in 0..2 {
        outside.push(hold_slot_outside(&first, &IMPORTS, &format!("outside-{n}/run")).await);
    }
    let runtime = build(&first, "before", &probe);
    for label in labels(20) {
        let started = start(&runtime, &label).await;
        assert_eq!(
            (started.status, started.sub_status),
            (WorkflowStatus::Suspended, Some(SubStatus::WaitingForSlot)),
            "{label}"
        );
    }
    assert!(probe.ran.lock().unwrap().is_empty(), "nothing ran");
    runtime.shutdown(Duration::from_secs(5)).await;
    drop(runtime);
    drop(first);
    // Longer than a slot's lease (2 s): the places are kept for the suspension.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let store = stores.open().await;
    assert_eq!(queue_counts(&store, "imports").await, (2, 20));
    let runtime = build(&store, "after", &probe);
    runtime.run_background().unwrap();
    for lease in &outside {
        store.release_slot(lease, wall_now()).await.unwrap();
    }
    for label in labels(20) {
        runtime
            .await_completion(&label, Duration::from_secs(60))
            .await
            .unwrap();
    }
    let mut ran = probe.ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, labels(20), "each instance ran once");
    let max = probe.max.load(Ordering::SeqCst);
    assert!(max <= 2, "{max} runs of a queue of 2 overlapped");
    settled(&store).await;
    runtime.shutdown(Duration::from_secs(5)).await;
}

support::across_restarts_on_each_store!(
    run_waiters_survive_a_restart =>
    run_waiters_survive_a_restart_on_sqlite,
    run_waiters_survive_a_restart_on_postgres,
    postgres required
);

/// A run that waited for its slot goes back to what it was: granted, it runs from the start
/// (its task runs) and ends waiting for its event, `Suspended/Waiting`, its slot wait gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_granted_after_its_wait_ends_in_its_own_sub_status() {
    let store = memory_storage();
    let probe = Probe::new(1_000);
    let mut outside = Vec::new();
    for n in 0..2 {
        outside.push(hold_slot_outside(&store, &IMPORTS, &format!("outside-{n}/run")).await);
    }
    let runtime = build(&store, "only", &probe);
    runtime.run_background().unwrap();
    let options = StartOptions {
        instance_id: Some("staged".to_owned()),
        ..StartOptions::default()
    };
    let started = runtime
        .start_by_name("Staged", json!({ "label": "staged" }), options)
        .await
        .unwrap();
    assert_eq!(
        (started.status, started.sub_status),
        (WorkflowStatus::Suspended, Some(SubStatus::WaitingForSlot))
    );
    for lease in &outside {
        store.release_slot(lease, wall_now()).await.unwrap();
    }
    // Its timer asks again within a lease (2 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let summary = loop {
        let listed = runtime
            .list_instances(InstanceQuery::default())
            .await
            .unwrap();
        let summary = listed
            .into_iter()
            .find(|s| s.instance_id == "staged")
            .unwrap();
        if summary.sub_status != Some(SubStatus::WaitingForSlot) {
            break summary;
        }
        assert!(tokio::time::Instant::now() < deadline, "never granted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        (summary.status, summary.sub_status),
        (WorkflowStatus::Suspended, Some(SubStatus::Waiting))
    );
    assert_eq!(summary.waiting_for, ["go"]);
    assert_eq!(*probe.ran.lock().unwrap(), ["staged"]);
    settled(&store).await;
    runtime.shutdown(Duration::from_secs(5)).await;
}
