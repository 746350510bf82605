//! An order service over HTTP: the runtime embedded in an axum application, durable on
//! SQLite, with a graceful shutdown on ctrl-c.
//!
//! ```text
//! cargo run -p examples --example web                # listens on 127.0.0.1:3000
//! curl -X POST localhost:3000/orders -H 'content-type: application/json' \
//!      -d '{"order_id": "o-1", "total": 30}'
//! curl -X POST localhost:3000/orders/o-1/events/payment -H 'content-type: application/json' \
//!      -d '{"amount": 30}'
//! curl localhost:3000/instances/o-1                  # status, state, data, diagram
//! curl localhost:3000/instances/o-1/diagram          # the Mermaid diagram alone
//! ```
//!
//! The address is `WEB_EXAMPLE_ADDR` (default `127.0.0.1:3000`), the database
//! `WEB_EXAMPLE_DB` (default `target/web-example.db`). The routes are in
//! `examples/src/web.rs` and tested by `examples/tests/web.rs`.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::sync::Arc;

use examples::web::{WebOrder, router};
use workflow_runtime::{Runtime, SqliteStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let addr = std::env::var("WEB_EXAMPLE_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let path =
        std::env::var("WEB_EXAMPLE_DB").unwrap_or_else(|_| "target/web-example.db".to_owned());
    let runtime = Runtime::builder()
        .store(Arc::new(SqliteStore::open(&path)?))
        .register::<WebOrder>()
        .build()?;
    runtime.recover().await?;
    runtime.start_workers().await?;
    let runtime = Arc::new(runtime);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("order service on http://{addr} (SQLite file {path}); ctrl-c to stop");
    axum::serve(listener, router(Arc::clone(&runtime)))
        .with_graceful_shutdown(async {
            // If the signal cannot be listened for, serve until the process is killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
    println!("stopping: waiting for running tasks");
    runtime.shutdown().await;
    Ok(())
}
