//! Store-side reliability: what a send, a hostile file or a crash must not do to stored data.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use workflow_runtime::store::{MemoryStore, SqliteStore, Storage};
use workflow_runtime::{Runtime, Stimulus};

fn now_micros() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

fn operator(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .queue_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap()
}

/// RT-19: fifty concurrent enqueued sends with one idempotency key leave exactly one queue
/// item, and every send gets the first send's report (all but one marked duplicate).
async fn one_key_one_item(store: Storage) {
    let runtime = operator(&store);
    let sends = (0..50).map(|_| {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            runtime
                .send(
                    Stimulus::new("payment")
                        .idempotency_key("pay-42")
                        .payload(serde_json::json!({ "amount": 42 }))
                        .enqueued(),
                )
                .await
                .unwrap()
        })
    });
    let mut reports = Vec::new();
    for send in sends.collect::<Vec<_>>() {
        reports.push(send.await.unwrap());
    }
    let queued = store
        .claim_queue_page("inspector", now_micros(), 1, 1000)
        .await
        .unwrap();
    assert_eq!(queued.len(), 1, "one item for one key: {queued:?}");
    assert_eq!(reports.iter().filter(|r| !r.duplicate).count(), 1);
    assert!(
        reports
            .iter()
            .all(|r| r.queued.as_deref() == Some(queued[0].item_id.as_str()))
    );
    // The record was written with the item: a retried send finds it.
    let record = store.find_idempotency_record("pay-42").await.unwrap();
    assert!(record.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_with_one_key_queue_one_item_in_memory() {
    one_key_one_item(Storage::new(Arc::new(MemoryStore::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_with_one_key_queue_one_item_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Storage::new(Arc::new(
        SqliteStore::open(dir.path().join("send.db")).unwrap(),
    ));
    one_key_one_item(store).await;
}
