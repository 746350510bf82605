//! Flow-control queues in the run path (QU-10, QU-11): a task of a queue runs only with one of
//! its slots, on the memory, SQLite and PostgreSQL stores; the builder refuses undeclared
//! queues and bad declarations.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

mod support;

use serde_json::json;
use support::{memory_storage, until_queue_counts, wall_now, work_in_single};
use workflow_runtime::model::Definition;
use workflow_runtime::store::Storage;
use workflow_runtime::{BuildError, Queue, Registry, Runtime, StartOptions, TaskContext};

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
    // QU-11: a start whose task waits for a slot returns with its instance suspended; the
    // instance runs when a release names it.
    let mut ids = Vec::new();
    for start in starts {
        ids.push(start.await.unwrap().instance_id);
    }
    for id in &ids {
        runtime
            .await_completion(id, Duration::from_secs(60))
            .await
            .unwrap();
    }
    assert_eq!(overlap.ended.load(Ordering::SeqCst), 200);
    let max = overlap.max.load(Ordering::SeqCst);
    assert!(max <= 5, "{max} tasks of a queue of 5 overlapped");
    assert!(max >= 2, "the queue never ran two at once ({max})");
    let usage = store.queue_usage(wall_now()).await.unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!(
        (usage[0].queue.as_str(), usage[0].running, usage[0].waiting),
        ("imports", 0, 0),
        "every slot released, nobody left in line"
    );
    runtime.shutdown(Duration::from_secs(5)).await;
}

support::on_each_store!(
    two_hundred_on_a_queue_of_five =>
    concurrency_is_never_exceeded_on_memory,
    concurrency_is_never_exceeded_on_sqlite,
    concurrency_is_never_exceeded_on_postgres
);

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

/// A task's priority orders the line: with the one slot held, three low-priority attempts and
/// then one high-priority attempt wait; the high one runs first, the low ones in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_runs_first_then_arrival_order() {
    let order = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let registry = |order: &Arc<std::sync::Mutex<Vec<String>>>,
                    gate: &Arc<tokio::sync::Semaphore>| {
        let (order, gate) = (Arc::clone(order), Arc::clone(gate));
        Registry::new().task("work", move |cx: &mut TaskContext<serde_json::Value>| {
            let (order, gate) = (Arc::clone(&order), Arc::clone(&gate));
            Box::pin(async move {
                let label = cx.data()["label"].as_str().unwrap_or_default().to_owned();
                if label == "blocker" {
                    gate.acquire().await.unwrap().forget();
                }
                order.lock().unwrap().push(label);
                Ok(workflow_runtime::Outcome::done())
            })
        })
    };
    let store = memory_storage();
    let runtime = Arc::new(
        Runtime::builder()
            .store(store.clone())
            .queue(Queue::new("single").concurrency(1))
            .register_definition(work_in_single("Low", 0), registry(&order, &gate))
            .register_definition(work_in_single("High", 9), registry(&order, &gate))
            .build()
            .unwrap(),
    );
    let start = |name: &'static str, label: &'static str| {
        let runtime = Arc::clone(&runtime);
        tokio::spawn(async move {
            runtime
                .start_by_name(name, json!({ "label": label }), StartOptions::default())
                .await
                .unwrap()
        })
    };
    let mut runs = vec![start("Low", "blocker")];
    until_queue_counts(&store, "single", 1, 0).await;
    for (i, label) in ["low-1", "low-2", "low-3"].into_iter().enumerate() {
        runs.push(start("Low", label));
        until_queue_counts(&store, "single", 1, u32::try_from(i).unwrap() + 1).await;
    }
    runs.push(start("High", "high"));
    until_queue_counts(&store, "single", 1, 4).await;
    gate.add_permits(1);
    for run in runs {
        let id = run.await.unwrap().instance_id;
        runtime
            .await_completion(&id, Duration::from_secs(10))
            .await
            .unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["blocker", "high", "low-1", "low-2", "low-3"]
    );
}
