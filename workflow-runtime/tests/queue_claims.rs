//! Queue claims that hold (RT-29): several runtimes share one store, the lease is short, and
//! each delivery runs a task longer than it. No item may be delivered twice, none may be left
//! queued or dead-lettered once its instance consumed it, and every instance finishes, on
//! SQLite and on PostgreSQL (skipped, saying why, without a reachable server).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use workflow_runtime::store::conformance::postgres::fresh_store;
use workflow_runtime::store::{DeadLetterFilter, SqliteStore, Storage};
use workflow_runtime::{Runtime, Stimulus, TaskContext, WorkflowStatus, workflow};

/// The lease (and queue claim) TTL of every runtime here.
const LEASE: Duration = Duration::from_millis(600);
/// How long each delivery's task runs: longer than the lease.
const TASK: Duration = Duration::from_millis(1500);

/// The data of [`Slow`]: its key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    id: String,
}

/// How many times each job's task began, by job id, across every runtime of the process.
fn runs() -> &'static Mutex<HashMap<String, u32>> {
    static RUNS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    RUNS.get_or_init(Mutex::default)
}

async fn slow(ctx: &mut TaskContext<Job>) {
    *runs()
        .lock()
        .unwrap()
        .entry(ctx.data().id.clone())
        .or_default() += 1;
    tokio::time::sleep(TASK).await;
}

workflow! {
    /// Waits for `go` keyed by its id, then runs a task longer than the lease.
    pub workflow Slow(Job) = sequence [event("go").key(id), task(slow)];
}

fn process(store: &Storage, owner: &str) -> Runtime {
    let runtime = Runtime::builder()
        .store(store.clone())
        .owner(owner)
        .register::<Slow>()
        .lease_ttl(LEASE)
        .inbox_sweep(Duration::from_millis(200))
        .recovery_sweep(Some(Duration::from_millis(200)))
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    runtime
}

/// Six waiting instances, six enqueued `go` events, three runtimes delivering them.
async fn long_deliveries_are_delivered_once(store: Storage, tag: &str) {
    let starter = Runtime::builder()
        .store(store.clone())
        .register::<Slow>()
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let ids: Vec<String> = (0..6).map(|n| format!("{tag}-{n}")).collect();
    let mut instances = Vec::new();
    for id in &ids {
        let started = starter.start::<Slow>(Job { id: id.clone() }).await.unwrap();
        instances.push(started.instance_id);
    }
    for id in &ids {
        let report = starter
            .send(Stimulus::new("go").key(id).via_inbox())
            .await
            .unwrap();
        assert!(report.inbox_item.is_some(), "enqueued: {report:?}");
    }
    let began = Instant::now();
    let processes: Vec<Runtime> = (0..3)
        .map(|n| process(&store, &format!("{tag}-p{n}")))
        .collect();
    let deadline = began + Duration::from_secs(60);
    for instance in &instances {
        loop {
            let snapshot = starter.get_state(instance).await.unwrap().unwrap();
            if snapshot.status() == WorkflowStatus::Finished {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{instance} did not finish: {:?}",
                snapshot.status()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let took = began.elapsed();
    eprintln!("{tag}: six deliveries of {TASK:?} each by three processes took {took:?}");
    // Let a pass that still holds a copy of an item (there must be none) settle it.
    tokio::time::sleep(2 * LEASE).await;
    for process in &processes {
        process.shutdown(Duration::from_secs(5)).await;
    }
    let runs: Vec<u32> = {
        let runs = runs().lock().unwrap();
        ids.iter()
            .map(|id| runs.get(id).copied().unwrap_or(0))
            .collect()
    };
    assert_eq!(runs, [1; 6], "each task ran once");
    let queued = store
        .claim_queue_page("inspector", i64::MAX / 2, 1, 100)
        .await
        .unwrap();
    assert!(queued.is_empty(), "nothing left queued: {queued:?}");
    let dead = starter
        .dead_letters(DeadLetterFilter::default())
        .await
        .unwrap();
    assert!(dead.is_empty(), "nothing dead-lettered: {dead:?}");
    // The three processes shared the work: one process alone would take six tasks' time.
    assert!(
        took < 5 * TASK,
        "the other processes took the items the first one could not deliver yet: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_deliveries_on_sqlite_are_delivered_once_and_shared() {
    let dir = tempfile::tempdir().unwrap();
    let store = Storage::new(Arc::new(
        SqliteStore::open(dir.path().join("claims.db")).unwrap(),
    ));
    long_deliveries_are_delivered_once(store, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_deliveries_on_postgres_are_delivered_once_and_shared() {
    let Some((store, _guard)) = fresh_store().await else {
        eprintln!("skipped: no PostgreSQL server reachable");
        return;
    };
    long_deliveries_are_delivered_once(Storage::new(store), "postgres").await;
}
