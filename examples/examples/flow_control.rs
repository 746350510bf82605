//! Flow-control queues on SQLite, no setup: a rate-limited task and per-customer fairness,
//! printing what ran when.
//!
//! ```text
//! cargo run -p examples --example flow_control
//! ```
//!
//! - `NOTIFY` allows 4 starts in any 1 s window: 10 notifications start 4, 4 and 2 at about
//!   0 s, 1 s and 2 s, however many processes share the store.
//! - `REPORTS` runs 2 reports at once, 1 per customer: `big` asks for 5 first, then `small`
//!   and `mid` ask for 1 each; theirs run beside `big`'s instead of after all 5.
//!
//! The queues are Rust items named by path in `workflow!`; `register` declares them. The
//! database is a fresh file under the system's temporary directory, deleted at the end.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use workflow_runtime::{Queue, Runtime, SqliteStore, TaskContext, workflow};

/// At most 4 notifications start in any 1 s window.
const NOTIFY: Queue = Queue::new("notify").rate(4, Duration::from_secs(1));

/// At most 2 reports at once, 1 per customer.
const REPORTS: Queue = Queue::new("reports").concurrency(2).per_key(1);

/// What a task works on: a customer and a label to print.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Job {
    customer: String,
    label: String,
}

/// When the example started, for the printed times.
fn started() -> Instant {
    static STARTED: OnceLock<Instant> = OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

fn print(what: &str, job: &Job) {
    println!(
        "{:>7.3} s  {what:<6} {:<8} {}",
        started().elapsed().as_secs_f64(),
        job.label,
        job.customer
    );
}

async fn notify(ctx: &mut TaskContext<Job>) {
    print("start", ctx.data());
}

async fn report(ctx: &mut TaskContext<Job>) {
    print("start", ctx.data());
    tokio::time::sleep(Duration::from_millis(300)).await;
    print("end", ctx.data());
}

workflow! {
    /// Sends one notification, at the provider's rate.
    pub workflow Notify(Job) = sequence [task(notify).queue(NOTIFY)];
}

workflow! {
    /// Builds one report, at most one at a time per customer.
    pub workflow Report(Job) = sequence [task(report).queue(REPORTS).key(customer)];
}

fn job(customer: &str, label: String) -> Job {
    Job {
        customer: customer.to_owned(),
        label,
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let path = std::env::temp_dir().join(format!("flow-control-{}.db", std::process::id()));
    let store = Arc::new(SqliteStore::open(&path)?);
    let runtime = Arc::new(
        Runtime::builder()
            .store(store)
            .register::<Notify>()
            .register::<Report>()
            .build()?,
    );
    started();

    println!("rate limit: 10 notifications through `notify` (4 per 1 s window)");
    let notes: Vec<_> = (1..=10)
        .map(|i| {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(
                async move { runtime.start::<Notify>(job("-", format!("note-{i}"))).await },
            )
        })
        .collect();
    for note in notes {
        note.await??;
    }

    println!("fairness: `big` asks for 5 reports, then `small` and `mid` for 1 each");
    let mut reports = Vec::new();
    for i in 1..=5 {
        let runtime = Arc::clone(&runtime);
        reports.push(tokio::spawn(async move {
            runtime
                .start::<Report>(job("big", format!("big-{i}")))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for customer in ["small", "mid"] {
        let runtime = Arc::clone(&runtime);
        reports.push(tokio::spawn(async move {
            runtime
                .start::<Report>(job(customer, format!("{customer}-1")))
                .await
        }));
    }
    for report in reports {
        report.await??;
    }
    if let Ok(runtime) = Arc::try_unwrap(runtime) {
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}
