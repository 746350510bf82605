//! The instances page with 100,000 instances in the store: p50 and p99 render time of the
//! console's pages (counts, filters, paging), through the router as a request would go, on
//! a SQLite store and, when `WORKFLOW_PG_URL` is set, on PostgreSQL.
//!
//! Run with `cargo bench -p workflow-console --bench instances`. Environment:
//! `CONSOLE_BENCH_INSTANCES` (default 100000), `CONSOLE_BENCH_REQUESTS` (default 200 per page).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_precision_loss,
    clippy::indexing_slicing,
    missing_docs
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::json;
use tower::ServiceExt as _;
use workflow_console::Console;
use workflow_runtime::Runtime;
use workflow_runtime::store::{
    InstanceListing, InstanceStatus, InstanceSubStatus, NewInstance, SqliteStore, Storage, Store,
};

const T0: i64 = 1_760_000_000_000_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Instance `n`: most finished, a fifth waiting for a payment, some running, 2 % faulted.
fn instance(n: usize) -> NewInstance {
    let definitions = ["Orders", "Invoices", "Shipments"];
    let definition = definitions[n % 3];
    let (status, sub, at, waiting) = match n % 50 {
        0 => (InstanceStatus::Faulted, None, vec!["charge"], vec![]),
        1..=10 => (
            InstanceStatus::Suspended,
            Some(InstanceSubStatus::Waiting),
            vec!["AwaitingPayment"],
            vec!["payment"],
        ),
        11..=14 => (
            InstanceStatus::Running,
            Some(InstanceSubStatus::Executing),
            vec!["charge"],
            vec![],
        ),
        _ => (InstanceStatus::Finished, None, vec![], vec![]),
    };
    let listing = InstanceListing {
        at: at.iter().map(|s| (*s).to_owned()).collect(),
        waiting_for: waiting.iter().map(|s| (*s).to_owned()).collect(),
        open_incidents: usize::from(status == InstanceStatus::Faulted),
    };
    NewInstance {
        instance_id: format!("{definition}-{n:07}"),
        definition_name: definition.to_owned(),
        definition_version: format!("{:064x}", n % 3),
        status,
        sub_status: sub,
        correlation_id: Some(format!("customer-{}", n % 997)),
        origin_at: T0 + n as i64 * 1000,
        created_at: T0 + n as i64 * 1000,
        state: json!({"format": 2, "data": {"n": n, "customer": "ACME Corporation"}}),
        receipt: None,
        consumed_queue_item: None,
        activation_scope: None,
        listing: Some(listing.encode()),
        idempotency: None,
    }
}

async fn fill(store: &Storage, count: usize) {
    let started = Instant::now();
    let mut next = 0;
    while next < count {
        let mut batch = tokio::task::JoinSet::new();
        for n in next..(next + 500).min(count) {
            let store = store.clone();
            batch.spawn(async move { store.create_instance(instance(n)).await.unwrap() });
        }
        batch.join_all().await;
        next += 500;
    }
    println!(
        "  filled {count} instances in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

async fn render(router: &Router, uri: &str) -> Duration {
    let started = Instant::now();
    let response = router
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(!body.is_empty());
    started.elapsed()
}

async fn measure(what: &str, store: Arc<dyn Store>, count: usize) {
    let runtime = Runtime::builder()
        .store(store)
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    fill(runtime.store(), count).await;
    let router = Console::new(runtime.clone()).router();
    let requests = env("CONSOLE_BENCH_REQUESTS", 200);
    let middle = format!("Invoices-{:07}", count / 2 + 1);
    let pages = [
        ("first page, counts", "/".to_owned()),
        ("status=faulted", "/?status=faulted".to_owned()),
        (
            "definition + status",
            "/?definition=Orders&status=suspended".to_owned(),
        ),
        ("at=charge (row filter)", "/?at=charge".to_owned()),
        ("a page in the middle", format!("/?after={middle}")),
        ("correlation key", "/?correlation=customer-42".to_owned()),
        ("metrics", "/metrics".to_owned()),
    ];
    println!("\n{what}, {count} instances, {requests} requests a page");
    println!("| page | p50 ms | p99 ms |\n| --- | ---: | ---: |");
    let mut census: Vec<Duration> = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        runtime.store().census().await.unwrap();
        census.push(started.elapsed());
    }
    census.sort();
    println!(
        "| the census alone (`Storage::census`, 20 runs) | {:.1} | {:.1} |",
        census[10].as_secs_f64() * 1000.0,
        census[19].as_secs_f64() * 1000.0
    );
    for (name, uri) in pages {
        render(&router, &uri).await; // warm the caches
        let mut times: Vec<Duration> = Vec::with_capacity(requests);
        for _ in 0..requests {
            times.push(render(&router, &uri).await);
        }
        times.sort();
        let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
        println!(
            "| {name} (`{uri}`) | {:.1} | {:.1} |",
            at(0.50).as_secs_f64() * 1000.0,
            at(0.99).as_secs_f64() * 1000.0
        );
    }
    runtime.shutdown(Duration::from_secs(1)).await;
}

fn main() {
    let count = env("CONSOLE_BENCH_INSTANCES", 100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path().join("bench.db")).unwrap();
        measure("SQLite", Arc::new(sqlite), count).await;
        if let Ok(url) = std::env::var("WORKFLOW_PG_URL") {
            use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_schema_name};
            use workflow_runtime::store::{PostgresOptions, PostgresStore};
            let schema = fresh_schema_name();
            let _guard = SchemaGuard::new(url.clone(), schema.clone());
            let options = PostgresOptions {
                max_connections: 8,
                ..PostgresOptions::default().schema(schema)
            };
            let store = PostgresStore::connect_with(&url, &options).await.unwrap();
            measure("PostgreSQL", Arc::new(store), count).await;
        } else {
            println!("\nPostgreSQL: skipped (WORKFLOW_PG_URL is not set)");
        }
    });
}
