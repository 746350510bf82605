//! Flow-control queues in the run path (QU-10, QU-11): a task of a queue runs only with one of
//! its slots, on the memory, SQLite and PostgreSQL stores; the builder refuses undeclared
//! queues and bad declarations.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::store::Storage;
use workflow_runtime::{
    BuildError, MemoryStore, Queue, Registry, Runtime, SqliteStore, StartOptions, TaskContext,
};

/// How many attempts overlap now, the most that ever did, and how many ended.
#[derive(Default)]
struct Overlap {
    now: AtomicUsize,
    max: AtomicUsize,
    ended: AtomicUsize,
}

const IMPORTS: Queue = Queue::new("imports").concurrency(5);

fn definition(queue: &str) -> Definition {
    serde_json::from_value(json!({
        "name": "Import",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "import", "function": "import", "queue": queue }
        ] }
    }))
    .unwrap()
}

fn registry(overlap: &Arc<Overlap>) -> Registry<serde_json::Value> {
    let overlap = Arc::clone(overlap);
    Registry::new().task("import", move |_cx: &mut TaskContext<serde_json::Value>| {
        let overlap = Arc::clone(&overlap);
        Box::pin(async move {
            let running = overlap.now.fetch_add(1, Ordering::SeqCst) + 1;
            overlap.max.fetch_max(running, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(3)).await;
            overlap.now.fetch_sub(1, Ordering::SeqCst);
            overlap.ended.fetch_add(1, Ordering::SeqCst);
            Ok(workflow_runtime::Outcome::done())
        })
    })
}

/// 200 instances started at once, each running one task of a queue of 5: every task ran, and
/// at no instant did more than 5 overlap.
async fn two_hundred_on_a_queue_of_five(store: Storage) {
    let overlap = Arc::new(Overlap::default());
    let runtime = Arc::new(
        Runtime::builder()
            .store(store.clone())
            .queue(IMPORTS)
            .register_definition(definition("imports"), registry(&overlap))
            .build()
            .unwrap(),
    );
    let starts: Vec<_> = (0..200)
        .map(|_| {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(async move {
                runtime
                    .start_by_name("Import", json!({}), StartOptions::default())
                    .await
                    .unwrap()
            })
        })
        .collect();
    for start in starts {
        start.await.unwrap();
    }
    assert_eq!(overlap.ended.load(Ordering::SeqCst), 200);
    let max = overlap.max.load(Ordering::SeqCst);
    assert!(max <= 5, "{max} tasks of a queue of 5 overlapped");
    assert!(max >= 2, "the queue never ran two at once ({max})");
    let usage = store.queue_usage(i64::MAX / 2).await.unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!((usage[0].queue.as_str(), usage[0].waiting), ("imports", 0));
    runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_never_exceeded_on_memory() {
    two_hundred_on_a_queue_of_five(Storage::new(Arc::new(MemoryStore::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_never_exceeded_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("flow.db")).unwrap();
    two_hundred_on_a_queue_of_five(Storage::new(Arc::new(store))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_never_exceeded_on_postgres() {
    let Some((store, _guard)) = workflow_runtime::store::conformance::postgres::fresh_store().await
    else {
        return;
    };
    two_hundred_on_a_queue_of_five(Storage::new(store)).await;
}

#[test]
fn an_undeclared_queue_is_refused_at_build_with_a_suggestion() {
    let overlap = Arc::new(Overlap::default());
    let err = Runtime::builder()
        .queue(IMPORTS)
        .register_definition(definition("import"), registry(&overlap))
        .build()
        .err()
        .unwrap();
    assert!(
        matches!(&err, BuildError::UnknownQueue { queue, suggestion, .. }
            if queue == "import" && suggestion.as_deref() == Some("imports")),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "definition `Import`: node `root:import` runs in queue `import`, which is not declared; did you mean `imports`?"
    );
}

#[test]
fn a_bad_declaration_is_refused_at_build_naming_the_field() {
    let cases = [
        (Queue::new("imports").per_process(0), "per_process"),
        (
            Queue::new("imports").rate(10, Duration::from_secs(2 * 86_400)),
            "rate.period",
        ),
        (Queue::new("imp orts"), "name"),
    ];
    for (queue, field) in cases {
        match Runtime::builder().queue(queue).build() {
            Err(BuildError::Queue(error)) => assert_eq!(error.field(), field, "{error}"),
            other => panic!("{field}: {:?}", other.err()),
        }
    }
}
