//! The deferred step (a port of workflow-core's sample 05: start, sleep, continue), durable on
//! SQLite across a restart. workflow-core polls for due steps every 10 seconds; here the
//! runtime's timer driver waits for exactly the due time, and a process that was down at the
//! due time fires the timer once when it starts, late (TM-4, TM-8, TM-9).
//!
//! ```text
//! cargo run -p examples --example deferred      # starts, then sleeps: the process exits
//! sleep 5
//! cargo run -p examples --example deferred      # the new process continues, once
//! ```
//!
//! The file is `target/deferred-example.db` (or `DEFERRED_EXAMPLE_DB`, or the first argument);
//! `DEFERRED_SECONDS` sets the sleep (5 s). A run before the due time waits for it in process.
//! Delete the file to start over. The process is `examples/src/deferred.rs`, run as three
//! processes in turn by `examples/tests/deferred.rs`.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::sync::Arc;

use examples::deferred::{default_path, run};

fn main() -> Result<(), Box<dyn Error>> {
    let seconds = std::env::var("DEFERRED_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?
        .block_on(run(
            &default_path(),
            seconds,
            Arc::new(|line| println!("{line}")),
        ))
}
