//! Durable state-machine transitions per second: a `Runtime` on `SqliteStore` with N
//! concurrent instances, each transition one run (lease, load, run, commit of state, bookmark
//! diff and journal), against the raw SQLite one-row-per-commit rate measured in the same run
//! on the same disk.
//!
//! Run with `cargo bench -p workflow-runtime --bench durable`. Environment:
//! `DURABLE_BENCH_SECS` (default 2) per measurement, `DURABLE_BENCH_DIR` (default: a
//! temporary directory) for the database files.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    missing_docs,
    unreachable_pub
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{SqliteStore, Storage};
use workflow_runtime::{Runtime, StartOptions, Stimulus, TaskContext, state_machine};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counter {
    id: String,
    ticks: u64,
}

async fn count(ctx: &mut TaskContext<Counter>) {
    ctx.data_mut().ticks += 1;
}

#[state_machine(data = Counter, initial = Even)]
pub enum PingPong {
    #[on(tick: event("tick").key(id) => Odd, action = count)]
    Even,
    #[on(tock: event("tick").key(id) => Even, action = count)]
    Odd,
}

/// Plain rusqlite, WAL, synchronous FULL (the store's default), one UPDATE of one ~1 KiB row
/// per transaction.
fn raw_sqlite(path: &Path, duration: Duration) -> (u64, f64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("PRAGMA synchronous = FULL").unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, version INTEGER, state TEXT);
         INSERT OR REPLACE INTO t VALUES (1, 0, '');",
    )
    .unwrap();
    let text = "x".repeat(1024);
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < duration {
        let tx = conn.unchecked_transaction().unwrap();
        tx.execute(
            "UPDATE t SET version = version + 1, state = ?1 WHERE id = 1",
            [&text],
        )
        .unwrap();
        tx.commit().unwrap();
        commits += 1;
    }
    (commits, start.elapsed().as_secs_f64())
}

/// `instances` tasks, each sending `tick` to its own instance until the deadline.
async fn transitions(path: &Path, instances: usize, duration: Duration) -> (u64, f64, u64) {
    let store: Storage = Arc::new(SqliteStore::open(path).unwrap()).into();
    let runtime = Runtime::builder()
        .store(store.clone())
        .register::<PingPong>()
        .build()
        .unwrap();
    for i in 0..instances {
        let id = format!("c-{i}");
        let data = Counter {
            id: id.clone(),
            ticks: 0,
        };
        let options = StartOptions {
            instance_id: Some(id),
            ..StartOptions::default()
        };
        runtime.start_with::<PingPong>(data, options).await.unwrap();
    }
    let before = store.stats().await.unwrap();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for i in 0..instances {
        let runtime = runtime.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("c-{i}");
            let mut sent = 0u64;
            while Instant::now() < deadline {
                runtime.send(Stimulus::new("tick").key(&key)).await.unwrap();
                sent += 1;
            }
            sent
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let after = store.stats().await.unwrap();
    // Every transition was committed: the data counted it.
    let mut counted = 0;
    for i in 0..instances {
        let snapshot = runtime.get_state(&format!("c-{i}")).await.unwrap().unwrap();
        counted += snapshot.data::<Counter>().unwrap().ticks;
    }
    assert_eq!(counted, total);
    (total, secs, after.transactions - before.transactions)
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm", "-owner"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

fn main() {
    let secs: f64 = std::env::var("DURABLE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let duration = Duration::from_secs_f64(secs);
    let temp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("DURABLE_BENCH_DIR")
        .map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "durable bench: {secs} s per row, SQLite synchronous FULL, files in {}",
        dir.display()
    );
    println!();
    println!(
        "| {:<34} | {:>9} | {:>11} | {:>13} | {:>12} | {:>7} |",
        "what", "instances", "transitions", "transitions/s", "transactions", "vs raw"
    );
    println!(
        "|{:-<36}|{:->11}|{:->13}|{:->15}|{:->14}|{:->9}|",
        "", "", "", "", "", ""
    );
    let (raw, raw_secs) = raw_sqlite(&fresh(&dir, "raw.db"), duration);
    let raw_rate = raw as f64 / raw_secs;
    println!(
        "| {:<34} | {:>9} | {:>11} | {:>13.0} | {:>12} | {:>6.2}x |",
        "raw rusqlite, 1 row/commit", 1, raw, raw_rate, raw, 1.0
    );
    for instances in [1, 4, 16, 64] {
        let path = fresh(&dir, &format!("durable-{instances}.db"));
        let (total, secs, transactions) = runtime.block_on(transitions(&path, instances, duration));
        let rate = total as f64 / secs;
        println!(
            "| {:<34} | {:>9} | {:>11} | {:>13.0} | {:>12} | {:>6.2}x |",
            "Runtime::send on SqliteStore",
            instances,
            total,
            rate,
            transactions,
            rate / raw_rate
        );
    }
}
