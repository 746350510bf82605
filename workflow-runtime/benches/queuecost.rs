//! A fixed number of one-task starts with and without an uncontended flow-control queue, for
//! instruction counts under `valgrind --tool=callgrind` (the bench table times the same
//! workflows; this harness only runs them, so two runs differ by what a slot costs).
//!
//! ```text
//! cargo bench -p workflow-runtime --bench queuecost --no-run
//! valgrind --tool=callgrind target/release/deps/queuecost-* memory queued 2000
//! ```
//!
//! Arguments: the store (`memory` or `sqlite`), `plain` or `queued`, the number of starts
//! (after a tenth as many to warm up). It prints the store's write requests and
//! transactions per start. With `rate` alone: the bench table's rate row (3,000 starts at
//! 1,000/s on the memory store), with the write requests per start and the most starts in
//! any 1 s window.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    missing_docs,
    unreachable_pub
)]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{SqliteStore, Storage};
use workflow_runtime::{Runtime, TaskContext, Workflow, WorkflowStatus, workflow};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counter {
    count: u64,
}

async fn incr(cx: &mut TaskContext<Counter>) {
    cx.data_mut().count += 1;
}

/// A queue no task waits on: the cost of a slot without contention.
const OPEN: workflow_runtime::Queue = workflow_runtime::Queue::new("open").concurrency(1_000_000);

workflow! {
    pub workflow Plain(Counter) = sequence [task(incr)];
}

workflow! {
    pub workflow Queued(Counter) = sequence [task(incr).queue(OPEN)];
}

/// `RATE` starts in any 1 s window.
const RATE: u32 = 1_000;
const RATED: workflow_runtime::Queue =
    workflow_runtime::Queue::new("rated").rate(RATE, std::time::Duration::from_secs(1));

/// When each attempt of `stamp` started.
fn stamps() -> &'static std::sync::Mutex<Vec<std::time::Instant>> {
    static STAMPS: std::sync::OnceLock<std::sync::Mutex<Vec<std::time::Instant>>> =
        std::sync::OnceLock::new();
    STAMPS.get_or_init(Default::default)
}

async fn stamp(_cx: &mut TaskContext<Counter>) {
    stamps().lock().unwrap().push(std::time::Instant::now());
}

workflow! {
    pub workflow Rated(Counter) = sequence [task(stamp).queue(RATED)];
}

/// `3 x RATE` starts at once on the memory store, as the bench table's rate row: the steady
/// rate (the starts after the first window over their span), the store's write requests per
/// start, and the most starts in any 1 s window.
fn rate(rt: &tokio::runtime::Runtime) {
    let rated = Arc::new(
        Runtime::builder()
            .register::<Rated>()
            .sweep_interval(None)
            .timer_driver(false)
            .build()
            .unwrap(),
    );
    let n = 3 * RATE as usize;
    let before = rt.block_on(rated.store().stats()).unwrap();
    rt.block_on(async {
        let starts: Vec<_> = (0..n)
            .map(|_| {
                let rated = Arc::clone(&rated);
                tokio::spawn(async move { rated.start::<Rated>(Counter::default()).await })
            })
            .collect();
        for start in starts {
            start.await.unwrap().unwrap();
        }
    });
    let after = rt.block_on(rated.store().stats()).unwrap();
    let mut at = stamps().lock().unwrap().clone();
    at.sort();
    let first = RATE as usize;
    let span = at[n - 1].duration_since(at[first - 1]).as_secs_f64();
    let window = std::time::Duration::from_secs(1);
    let most = (0..n)
        .map(|i| at[i..].partition_point(|t| t.duration_since(at[i]) < window))
        .max()
        .unwrap_or(0);
    println!(
        "steady {:.1}/s, write requests/start {:.2}, most starts in a 1 s window {most}",
        (n - first) as f64 / span,
        (after.write_requests - before.write_requests) as f64 / n as f64,
    );
}

async fn run<W: Workflow<Data = Counter>>(runtime: &Runtime, n: u32) {
    for _ in 0..n {
        let done = runtime.start::<W>(Counter::default()).await.unwrap();
        assert_eq!(done.status, WorkflowStatus::Finished);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = args.first().map_or("memory", String::as_str);
    let queued = args.get(1).is_some_and(|a| a == "queued");
    let n: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if backend == "rate" {
        rate(&rt);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let builder = Runtime::builder()
        .register::<Plain>()
        .register::<Queued>()
        .sweep_interval(None)
        .timer_driver(false);
    let (runtime, store) = if backend == "sqlite" {
        let store: Storage = Arc::new(SqliteStore::open(dir.path().join("q.db")).unwrap()).into();
        (builder.store(store.clone()).build().unwrap(), Some(store))
    } else {
        (builder.build().unwrap(), None)
    };
    let runtime = &runtime;
    rt.block_on(async {
        let go = |n| async move {
            if queued {
                run::<Queued>(runtime, n).await;
            } else {
                run::<Plain>(runtime, n).await;
            }
        };
        go(n / 10).await;
        let before = match &store {
            Some(s) => Some(s.stats().await.unwrap()),
            None => None,
        };
        go(n).await;
        if let (Some(s), Some(before)) = (&store, before) {
            let after = s.stats().await.unwrap();
            println!(
                "write requests/start {:.2}, transactions/start {:.2}",
                (after.write_requests - before.write_requests) as f64 / f64::from(n),
                (after.transactions - before.transactions) as f64 / f64::from(n)
            );
        }
    });
}
