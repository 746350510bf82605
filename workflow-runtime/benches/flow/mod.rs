//! The flow-control workflows of the bench table's `queues` rows, which the `queuecost`
//! harness runs too (there under callgrind): a one-task workflow without a queue and through
//! an uncontended one, and a task on a queue of 1,000 starts a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use workflow_runtime::{Queue, Runtime, TaskContext, Workflow, WorkflowStatus, workflow};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Count {
    count: u64,
}

async fn incr(cx: &mut TaskContext<Count>) {
    cx.data_mut().count += 1;
}

/// A queue no task waits on: the cost of a slot without contention.
const OPEN: Queue = Queue::new("open").concurrency(1_000_000);

/// The starts [`RATED`] lets in any 1 s window.
pub const RATE: u32 = 1_000;
const RATED: Queue = Queue::new("rated").rate(RATE, Duration::from_secs(1));

workflow! {
    pub workflow Task1(Count) = sequence [task(incr)];
}

workflow! {
    pub workflow Task1Queued(Count) = sequence [task(incr).queue(OPEN)];
}

/// When each attempt of `stamp` started.
fn stamps() -> &'static std::sync::Mutex<Vec<Instant>> {
    static STAMPS: std::sync::OnceLock<std::sync::Mutex<Vec<Instant>>> = std::sync::OnceLock::new();
    STAMPS.get_or_init(Default::default)
}

async fn stamp(_cx: &mut TaskContext<Count>) {
    stamps().lock().unwrap().push(Instant::now());
}

workflow! {
    pub workflow Rated(Count) = sequence [task(stamp).queue(RATED)];
}

/// `n` starts of `W` one after the other on `runtime`, each run to its end.
pub async fn starts<W: Workflow<Data = Count>>(runtime: &Runtime, n: u32) {
    for _ in 0..n {
        let done = runtime.start::<W>(Count::default()).await.unwrap();
        assert_eq!(done.status, WorkflowStatus::Finished);
    }
}

/// What [`rated_burst`] saw.
pub struct Burst {
    /// When each task started, in order.
    pub at: Vec<Instant>,
    /// The memory store's write requests per start (`queuecost` prints them; the table
    /// shows the rate alone).
    #[allow(dead_code, reason = "read by one of the two benches")]
    pub write_requests: f64,
}

impl Burst {
    /// The steady rate: the starts after the first window (which lets [`RATE`] in at once)
    /// over the time from the `RATE`th start to the last.
    pub fn steady(&self) -> f64 {
        let first = RATE as usize;
        let span = self.at[self.at.len() - 1]
            .duration_since(self.at[first - 1])
            .as_secs_f64();
        (self.at.len() - first) as f64 / span
    }
}

/// `3 x RATE` starts of [`Rated`] at once on a fresh memory runtime, each awaited.
pub fn rated_burst(rt: &tokio::runtime::Runtime) -> Burst {
    stamps().lock().unwrap().clear();
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
                tokio::spawn(async move { rated.start::<Rated>(Count::default()).await })
            })
            .collect();
        for start in starts {
            start.await.unwrap().unwrap();
        }
    });
    let after = rt.block_on(rated.store().stats()).unwrap();
    let mut at = stamps().lock().unwrap().clone();
    at.sort();
    Burst {
        at,
        write_requests: (after.write_requests - before.write_requests) as f64 / n as f64,
    }
}
