//! Timer lateness in process (TM-4): 1,000 instances each wait on a Delay `until` an
//! instant spread over one second; the in-process driver fires each (no polling, the sweep
//! disabled) and the task after the delay records the wall-clock time. Lateness is that time
//! minus the due time. Prints p50, p99 and max.
//!
//! Run with `cargo bench -p workflow-runtime --bench timers`. `TIMER_BENCH_COUNT` sets the
//! number of timers (1000).
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    missing_docs,
    unreachable_pub
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::{Outcome, Registry, Runtime, StartOptions, TaskContext};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Wait {
    until_ms: u64,
    fired_ms: Option<u64>,
}

fn wall_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn bench(count: u64) {
    let definition: Definition = serde_json::from_value(json!({
        "name": "Lateness",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "delay", "id": "wait", "until": "until" },
            { "kind": "task", "id": "mark", "function": "mark" }
        ] }
    }))
    .unwrap();
    let registry = Registry::new().value("until", |w: &Wait| w.until_ms).task(
        "mark",
        |cx: &mut TaskContext<Wait>| {
            Box::pin(async move {
                cx.data_mut().fired_ms = Some(wall_ms());
                Ok(Outcome::done())
            })
        },
    );
    let runtime = Runtime::builder()
        .register_definition(definition, registry)
        .sweep_interval(None)
        .build()
        .unwrap();
    // Due between 500 ms and 1.5 s from now, spread evenly, started in random-ish order.
    let base = wall_ms() + 500;
    let mut ids = Vec::new();
    for i in 0..count {
        let offset = (i * 7919) % count * 1000 / count;
        let data = Wait {
            until_ms: base + offset,
            fired_ms: None,
        };
        let started = runtime
            .start_by_name(
                "Lateness",
                serde_json::to_value(data).unwrap(),
                StartOptions::default(),
            )
            .await
            .unwrap();
        ids.push(started.instance_id);
    }
    let setup = wall_ms().saturating_sub(base - 500);
    let mut lateness = Vec::new();
    for id in &ids {
        runtime
            .await_completion(id, Duration::from_secs(30))
            .await
            .unwrap();
        let data: Wait = runtime
            .get_state(id)
            .await
            .unwrap()
            .unwrap()
            .data()
            .unwrap();
        lateness.push(data.fired_ms.unwrap().saturating_sub(data.until_ms));
    }
    lateness.sort_unstable();
    println!("timers: {count}, in process, MemoryStore, sweep disabled (setup took {setup} ms)");
    println!("| timers | p50 late | p99 late | max late |");
    println!("|---|---|---|---|");
    println!(
        "| {count} | {} ms | {} ms | {} ms |",
        percentile(&lateness, 0.50),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(0)
    );
}

fn main() {
    let count = std::env::var("TIMER_BENCH_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(bench(count));
}
