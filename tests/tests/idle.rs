//! An idle runtime writes nothing (RT-27, ENG-25, TM-5): with stimuli held in its queue (one
//! for a paused instance, one nobody waits for yet), a pending timer and its sweeps running
//! every 100 ms, the store sees no write request for seconds; yet what may release a held
//! stimulus (a resume here, an event written by another process) still has it delivered. The
//! same holds for runtimes of one process sharing one in-memory store, each through its own
//! `Storage`: each hears the others' writes through the store's change count.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{MemoryStore, SqliteStore, Storage, StoreStats};
use workflow_runtime::{Runtime, Stimulus, SubStatus, TaskContext, WorkflowStatus, workflow};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    log: Vec<String>,
}

async fn step(ctx: &mut TaskContext<Steps>) {
    ctx.data_mut().log.push("step".to_owned());
}

workflow! {
    /// A task, then an event, then the task again.
    pub workflow Waits(Steps) = sequence [
        task(step),
        paid = event("paid"),
        again = task(step),
    ];
}

workflow! {
    /// A task, an hour's delay, a task: a timer that stays pending.
    pub workflow Sleeps(Steps) = sequence [
        task(step),
        wait = after(hours(1)),
        later = task(step),
    ];
}

workflow! {
    /// A task, the event `first`, the event `late`, the task again.
    pub workflow Late(Steps) = sequence [
        task(step),
        first = event("first"),
        late = event("late"),
        again = task(step),
    ];
}

/// The application: every background sweep every 100 ms.
fn application(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register::<Waits>()
        .register::<Sleeps>()
        .register::<Late>()
        .inbox_sweep(Duration::from_millis(100))
        .recovery_sweep(Some(Duration::from_millis(100)))
        .sweep_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap()
}

async fn stats(store: &Storage) -> StoreStats {
    store.stats().await.unwrap()
}

async fn status_of(rt: &Runtime, id: &str) -> (WorkflowStatus, Option<SubStatus>) {
    let snapshot = rt.get_state(id).await.unwrap().unwrap();
    (snapshot.status(), snapshot.sub_status())
}

/// Polls until `done` holds, at most 5 s.
async fn eventually<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) -> bool {
    for _ in 0..100 {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_with_held_stimuli_writes_nothing_until_something_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let store = Storage::new(Arc::new(SqliteStore::open(&path).unwrap()));
    let app = application(&store);
    app.run_background().unwrap();

    let paused = app
        .start::<Waits>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    app.suspend(&paused).await.unwrap();
    let held = app.send(Stimulus::new("paid")).await.unwrap();
    assert_eq!(held.deferred, std::slice::from_ref(&paused), "{held:?}");
    let queued = app.send(Stimulus::new("nobody-waits")).await.unwrap();
    assert!(queued.inbox_item.is_some(), "{queued:?}");
    let sleeping = app.start::<Sleeps>(Steps::default()).await.unwrap();
    assert_eq!(sleeping.status, WorkflowStatus::Suspended);

    // The sweeps settle: each item is looked at, put back, then left alone.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = stats(&store).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = stats(&store).await;
    eprintln!(
        "idle for 5 s with two queued stimuli and a pending timer: {} write requests, {} transactions",
        after.write_requests - before.write_requests,
        after.transactions - before.transactions
    );
    assert_eq!(
        after.write_requests, before.write_requests,
        "an idle runtime sent write requests to its store"
    );

    // A change here releases the held stimulus: the resume delivers it.
    app.resume(&paused).await.unwrap();
    assert!(
        eventually(|| async { status_of(&app, &paused).await.0 == WorkflowStatus::Finished }).await,
        "the held stimulus was not delivered after the resume: {:?}",
        status_of(&app, &paused).await
    );

    // Another process's write to the file is heard: its event is delivered by the worker.
    let waiting = app
        .start::<Waits>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let other = Storage::new(Arc::new(SqliteStore::open_operator(&path).unwrap()));
        let operator = Runtime::builder()
            .store(other)
            .inbox_worker(false)
            .timer_driver(false)
            .recovery_sweep(None)
            .build()
            .unwrap();
        let sent = operator
            .send(Stimulus::new("paid").via_inbox())
            .await
            .unwrap();
        assert!(sent.inbox_item.is_some(), "{sent:?}");
        operator.shutdown(Duration::ZERO).await;
    }
    assert!(
        eventually(|| async { status_of(&app, &waiting).await.0 == WorkflowStatus::Finished })
            .await,
        "another process's event was not delivered: {:?}",
        status_of(&app, &waiting).await
    );
    app.shutdown(Duration::from_secs(1)).await;
}

/// RT-27 on one store value shared by two runtimes of one process, each through its own
/// `Storage`: the one with the queue worker holds a stimulus for a paused instance and one no
/// bookmark takes yet, and writes nothing while idle; the other, without a queue worker,
/// makes a bookmark appear that takes the second, enqueues, and resumes the paused instance:
/// each is heard (through the change count of the store value), and the stimuli are
/// delivered.
async fn runtimes_sharing_a_store_stay_idle_and_hear_each_other(
    store: Storage,
    second: Storage,
    label: &str,
) {
    let app = application(&store);
    app.run_background().unwrap();
    let other = Runtime::builder()
        .store(second)
        .register::<Late>()
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let paused = app
        .start::<Waits>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    app.suspend(&paused).await.unwrap();
    let held = app.send(Stimulus::new("paid")).await.unwrap();
    assert_eq!(held.deferred, std::slice::from_ref(&paused), "{held:?}");
    // An instance of the other runtime waits for `first`; `late` comes before its bookmark.
    let late = other
        .start::<Late>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let queued = app.send(Stimulus::new("late")).await.unwrap();
    assert!(queued.inbox_item.is_some(), "{queued:?}");

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = stats(&store).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = stats(&store).await;
    eprintln!(
        "{label}: idle for 5 s with two queued stimuli, sweeps every 100 ms: {} write requests",
        after.write_requests - before.write_requests
    );
    assert_eq!(
        after.write_requests, before.write_requests,
        "an idle runtime sent write requests to its store"
    );

    // The other runtime delivers `first` itself: the commit adding the bookmark for `late`
    // is heard, and the first runtime's worker delivers the queued `late`.
    let first = other
        .send(Stimulus::new("first").instance(late.clone()))
        .await
        .unwrap();
    assert!(
        first.resumed.iter().any(|r| r.instance_id == late),
        "{first:?}"
    );
    assert!(
        eventually(|| async { status_of(&other, &late).await.0 == WorkflowStatus::Finished }).await,
        "the stimulus waiting for another runtime's bookmark was not delivered: {:?}",
        status_of(&other, &late).await
    );
    // Events the other runtime enqueues for an instance of the first one are delivered.
    let mine = app
        .start::<Late>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    for event in ["first", "late"] {
        let sent = other
            .send(Stimulus::new(event).instance(mine.clone()).via_inbox())
            .await
            .unwrap();
        assert!(sent.inbox_item.is_some(), "{sent:?}");
    }
    assert!(
        eventually(|| async { status_of(&app, &mine).await.0 == WorkflowStatus::Finished }).await,
        "another runtime's enqueued events were not delivered: {:?}",
        status_of(&app, &mine).await
    );
    // The other runtime, which does not run `Waits`, resumes the paused instance: its
    // request is honoured, and the stimulus held for it delivered.
    other.resume(&paused).await.unwrap();
    assert!(
        eventually(|| async { status_of(&app, &paused).await.0 == WorkflowStatus::Finished }).await,
        "the held stimulus was not delivered after the other runtime's resume: {:?}",
        status_of(&app, &paused).await
    );
    other.shutdown(Duration::ZERO).await;
    app.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_sharing_an_in_memory_store_stay_idle_and_hear_each_other() {
    let shared = Arc::new(MemoryStore::new());
    runtimes_sharing_a_store_stay_idle_and_hear_each_other(
        Storage::new(shared.clone()),
        Storage::new(shared),
        "memory",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_sharing_a_sqlite_store_stay_idle_and_hear_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Arc::new(SqliteStore::open(dir.path().join("app.db")).unwrap());
    runtimes_sharing_a_store_stay_idle_and_hear_each_other(
        Storage::new(shared.clone()),
        Storage::new(shared),
        "sqlite",
    )
    .await;
}
