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

use workflow_runtime::Runtime;
use workflow_runtime::store::{SqliteStore, Storage};

mod flow;
use flow::{Task1, Task1Queued};

/// `3 x RATE` starts at once on the memory store, as the bench table's rate row: the steady
/// rate (the starts after the first window over their span), the store's write requests per
/// start, and the most starts in any 1 s window.
fn rate(rt: &tokio::runtime::Runtime) {
    let burst = flow::rated_burst(rt);
    let at = &burst.at;
    let window = std::time::Duration::from_secs(1);
    let most = (0..at.len())
        .map(|i| at[i..].partition_point(|t| t.duration_since(at[i]) < window))
        .max()
        .unwrap_or(0);
    println!(
        "steady {:.1}/s, write requests/start {:.2}, most starts in a 1 s window {most}",
        burst.steady(),
        burst.write_requests,
    );
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
        .register::<Task1>()
        .register::<Task1Queued>()
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
                flow::starts::<Task1Queued>(runtime, n).await;
            } else {
                flow::starts::<Task1>(runtime, n).await;
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
