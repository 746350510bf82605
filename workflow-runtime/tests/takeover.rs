//! Takeover after a crash on PostgreSQL (ST-36): a child process holds an instance in the
//! middle of its run, a queued stimulus it is delivering and a timer it fired, and is killed
//! with SIGKILL; the surviving process finishes all three within 3 s, although the lease TTL
//! is 30 s. Skipped, saying why, without a reachable server (`WORKFLOW_PG_URL`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout,
    clippy::panic
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::Connection;
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name,
};
use workflow_runtime::store::{PostgresOptions, PostgresStore};
use workflow_runtime::{Runtime, StartOptions, Stimulus, TaskContext, WorkflowStatus, workflow};

/// The instances the child holds: one in its first run, one resumed by a queued stimulus,
/// one woken by a timer.
const IDS: [&str; 3] = ["busy-1", "queued-1", "timed-1"];

/// Set in the child: its tasks never end.
static HANG: AtomicBool = AtomicBool::new(false);
/// The child's tasks that began.
static HANGING: AtomicUsize = AtomicUsize::new(0);

/// The data of the workflows here: a key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    id: String,
}

/// In the child, never ends; in the survivor, ends at once.
async fn hang(_ctx: &mut TaskContext<Job>) {
    if HANG.load(Ordering::SeqCst) {
        HANGING.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<()>().await;
    }
}

workflow! {
    /// Runs a task at once.
    pub workflow Busy(Job) = sequence [task(hang)];
}

workflow! {
    /// Waits for `go` keyed by its id, then runs a task.
    pub workflow Queued(Job) = sequence [event("go").key(id), task(hang)];
}

workflow! {
    /// Sleeps 200 ms, then runs a task.
    pub workflow Timed(Job) = sequence [after(millis(200)), task(hang)];
}

async fn open(schema: &str) -> PostgresStore {
    PostgresStore::connect_with(&database_url(), &PostgresOptions::default().schema(schema))
        .await
        .unwrap()
}

/// A process with the default lease TTL (30 s) and recovery sweep (10 s).
fn process(store: PostgresStore, owner: &str) -> Runtime {
    let runtime = Runtime::builder()
        .store(Arc::new(store))
        .owner(owner)
        .register::<Busy>()
        .register::<Queued>()
        .register::<Timed>()
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    runtime
}

/// The child: holds one instance of each workflow in its never-ending task, says `ready`,
/// and waits to be killed. Does nothing unless run by the test below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_child() {
    let Ok(schema) = std::env::var("TAKEOVER_SCHEMA") else {
        return;
    };
    HANG.store(true, Ordering::SeqCst);
    let runtime = process(open(&schema).await, "takeover-child");
    let with_id = |id: &str| StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    };
    // Its first run never ends: the start does not return.
    let busy = runtime.clone();
    let options = with_id(IDS[0]);
    tokio::spawn(async move { busy.start_with::<Busy>(Job::default(), options).await });
    let queued = Job {
        id: "queued".into(),
    };
    runtime
        .start_with::<Queued>(queued, with_id(IDS[1]))
        .await
        .unwrap();
    runtime
        .send(Stimulus::new("go").key("queued").via_inbox())
        .await
        .unwrap();
    runtime
        .start_with::<Timed>(Job::default(), with_id(IDS[2]))
        .await
        .unwrap();
    let began = Instant::now();
    while HANGING.load(Ordering::SeqCst) < 3 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the child's tasks did not begin: {}",
            HANGING.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("ready");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_process_instances_claims_and_timers_are_taken_over_within_3_s() {
    let url = database_url();
    if let Err(error) = sqlx::PgConnection::connect(&url).await {
        eprintln!("skipped: no PostgreSQL server reachable at {url}: {error}");
        return;
    }
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    // Migrated before the child starts, so the child's open only checks it.
    let survivor_store = open(&schema).await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "takeover_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TAKEOVER_SCHEMA", &schema)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.trim_end().ends_with("ready"))
    });
    let ready = tokio::time::timeout(Duration::from_secs(60), ready).await;
    if !matches!(ready, Ok(Ok(true))) {
        let _ = child.kill();
        panic!("the child did not get ready: {ready:?}");
    }
    let survivor = process(survivor_store, "takeover-survivor");
    // The survivor runs and sees all three held by the child.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in IDS {
        let status = survivor.get_state(id).await.unwrap().unwrap().status();
        assert_ne!(status, WorkflowStatus::Finished, "{id} waits for the child");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    for id in IDS {
        loop {
            let status = survivor.get_state(id).await.unwrap().unwrap().status();
            if status == WorkflowStatus::Finished {
                break;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(3),
                "{id} was not taken over within 3 s of the kill: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    eprintln!(
        "takeover: all three finished {:?} after the SIGKILL",
        killed.elapsed()
    );
    survivor.shutdown(Duration::from_secs(5)).await;
}
