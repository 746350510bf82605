//! One process of a cluster: several processes of one application sharing a PostgreSQL
//! database. Each registers the same definitions (a state machine, a sequence and a workflow
//! started every second by a timer), builds its runtime on `PostgresStore`, and runs whatever
//! work is due, whichever process started it: instances, events, timers, retries and the
//! timer trigger's occurrences (one instance per occurrence across all processes). SIGTERM or
//! ctrl-c shuts it down gracefully: running tasks get 10 s to finish, then the rest is left to
//! the other processes, which take it over once its leases expire.
//!
//! ```text
//! psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE workflow_cluster'
//! export WORKFLOW_PG_URL=postgres://postgres@127.0.0.1:5432/workflow_cluster
//! cargo run -p examples --example worker -- 0..100   # starts instances 0..100, then works
//! cargo run -p examples --example worker             # in another terminal: works too
//! ```
//!
//! `WORKER_SCHEMA` chooses the schema (default `workflow`). The definitions and the loop are
//! `examples::cluster`; the multi-process test (`examples/tests/cluster.rs`) runs three of these
//! processes, kills one with SIGKILL and restarts it.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::time::Duration;

use examples::cluster::{WorkerConfig, run_worker};

/// Completes on ctrl-c or, on Unix, SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn parse_range(arg: &str) -> Result<std::ops::Range<u32>, Box<dyn Error + Send + Sync>> {
    let (from, to) = arg
        .split_once("..")
        .ok_or_else(|| format!("expected a range like 0..100, got {arg:?}"))?;
    Ok(from.parse()?..to.parse()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .init();
    let url = std::env::var("WORKFLOW_PG_URL")
        .map_err(|_| "set WORKFLOW_PG_URL to the database, e.g. postgres://postgres@127.0.0.1:5432/workflow_cluster")?;
    let mut config = WorkerConfig::new(url);
    if let Ok(schema) = std::env::var("WORKER_SCHEMA") {
        config.schema = schema;
    }
    if let Some(arg) = std::env::args().nth(1) {
        config.starts = parse_range(&arg)?;
    }
    println!(
        "worker {}: schema {}, starting instances {:?}; ctrl-c or SIGTERM stops it",
        std::process::id(),
        config.schema,
        config.starts
    );
    run_worker(config, shutdown_signal(), Duration::from_secs(10)).await?;
    println!("worker {}: stopped", std::process::id());
    Ok(())
}
