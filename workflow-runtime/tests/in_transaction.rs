//! Work started in the application's own PostgreSQL transaction (ST-37): an order row and its
//! workflow, and the event paying it, exist together or not at all, and another process runs
//! them after the commit. Skipped, saying why, without a reachable server (`WORKFLOW_PG_URL`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::Connection;
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name,
};
use workflow_runtime::store::{PostgresOptions, PostgresStore};
use workflow_runtime::{Runtime, StartOptions, Stimulus, TaskContext, WorkflowStatus, workflow};

/// An order: its id, and whether it was shipped.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    id: String,
    shipped: bool,
}

async fn ship(ctx: &mut TaskContext<Order>) {
    ctx.data_mut().shipped = true;
}

workflow! {
    /// Waits for `paid` keyed by the order id, then ships.
    pub workflow Fulfil(Order) = sequence [event("paid").key(id), task(ship)];
}

async fn open(schema: &str) -> Arc<PostgresStore> {
    let options = PostgresOptions::default().schema(schema);
    Arc::new(
        PostgresStore::connect_with(&database_url(), &options)
            .await
            .unwrap(),
    )
}

/// The application's process: it starts and sends, and runs nothing in the background.
fn application(store: Arc<PostgresStore>) -> Runtime {
    Runtime::builder()
        .store(store)
        .register::<Fulfil>()
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap()
}

/// A worker process with the default sweeps (10 s) and lease TTL (30 s).
fn worker(store: Arc<PostgresStore>) -> Runtime {
    let runtime = Runtime::builder()
        .store(store)
        .register::<Fulfil>()
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    runtime
}

/// Places order `id` in one transaction: its row, its workflow and its payment; commits or
/// rolls back.
async fn place(app: &Runtime, store: &PostgresStore, schema: &str, id: &str, commit: bool) {
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO \"{schema}\".orders (id) VALUES ($1)"))
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let options = StartOptions {
        instance_id: Some(format!("fulfil-{id}")),
        ..StartOptions::default()
    };
    let order = Order {
        id: id.to_owned(),
        shipped: false,
    };
    let started = app.start_in_with::<Fulfil>(&mut tx, order, options).await;
    assert_eq!(started.unwrap(), format!("fulfil-{id}"));
    let report = app
        .send_in(&mut tx, Stimulus::new("paid").key(id))
        .await
        .unwrap();
    assert!(report.inbox_item.is_some(), "{report:?}");
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_started_in_a_transaction_exists_only_if_it_commits_and_another_process_runs_it() {
    let url = database_url();
    if let Err(error) = sqlx::PgConnection::connect(&url).await {
        eprintln!("skipped: no PostgreSQL server reachable at {url}: {error}");
        return;
    }
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let app_store = open(&schema).await;
    sqlx::query(&format!(
        "CREATE TABLE \"{schema}\".orders (id TEXT PRIMARY KEY)"
    ))
    .execute(app_store.pool())
    .await
    .unwrap();
    let app = application(Arc::clone(&app_store));
    let other = worker(open(&schema).await);

    // Rolled back: no order, no instance, nothing queued, nothing run meanwhile.
    place(&app, &app_store, &schema, "o-1", false).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let orders: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{schema}\".orders"))
        .fetch_one(app_store.pool())
        .await
        .unwrap();
    assert_eq!(orders, 0);
    assert!(app.get_state("fulfil-o-1").await.unwrap().is_none());
    assert!(other.get_state("fulfil-o-1").await.unwrap().is_none());
    assert!(app_store.queued(100).await.unwrap().is_empty());

    // Committed: the other process runs the instance and delivers the payment at once,
    // though its sweeps come every 10 s.
    let committed = Instant::now();
    place(&app, &app_store, &schema, "o-2", true).await;
    loop {
        let snapshot = other.get_state("fulfil-o-2").await.unwrap().unwrap();
        if snapshot.status() == WorkflowStatus::Finished {
            let order: Order = snapshot.data().unwrap();
            assert!(order.shipped, "{order:?}");
            break;
        }
        assert!(
            committed.elapsed() < Duration::from_secs(5),
            "the committed order was not fulfilled: {:?}",
            snapshot.status()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    eprintln!(
        "in a transaction: fulfilled {:?} after the commit",
        committed.elapsed()
    );
    assert!(app_store.queued(100).await.unwrap().is_empty());
    other.shutdown(Duration::from_secs(5)).await;
}
