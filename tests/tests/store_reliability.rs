//! Store-side reliability: what a send, a hostile file or a crash must not do to stored data.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use workflow_runtime::store::{MemoryStore, SqliteStore, Storage};
use workflow_runtime::{
    InstanceQuery, Runtime, SendError, SendReport, Stimulus, TaskContext, workflow,
};

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
        .inbox_worker(false)
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
                        .via_inbox(),
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
            .all(|r| r.inbox_item.as_deref() == Some(queued[0].item_id.as_str()))
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

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Account {
    id: String,
    confirmed: u32,
}

async fn confirm(ctx: &mut TaskContext<Account>) {
    ctx.data_mut().confirmed += 1;
}

workflow! {
    /// Started by `signup` (its trigger), then waits for `confirm` keyed by its id.
    pub workflow Signup(Account) {
        opened = event::<Account>("signup").trigger();
        wait = event("confirm").key(id);
        done = task(confirm);

        opened -> wait -> done;
    }
}

fn signups(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register::<Signup>()
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap()
}

/// Fifty sends at once, each a clone of `stimulus`, on `runtime`; their results in order.
async fn fifty(runtime: &Runtime, stimulus: Stimulus) -> Vec<Result<SendReport, SendError>> {
    let sends: Vec<_> = (0..50)
        .map(|_| {
            let runtime = runtime.clone();
            let stimulus = stimulus.clone();
            tokio::spawn(async move { runtime.send(stimulus).await })
        })
        .collect();
    let mut results = Vec::new();
    for send in sends {
        results.push(send.await.unwrap());
    }
    results
}

/// RT-19: fifty concurrent sends with one idempotency key whose trigger starts an instance
/// start exactly one and queue nothing; every report that names a started instance names
/// that one.
async fn one_key_one_start(store: Storage) {
    let runtime = signups(&store);
    let signup = Stimulus::new("signup")
        .payload(serde_json::json!({ "id": "acct-1", "confirmed": 0 }))
        .idempotency_key("signup/acct-1");
    let results = fifty(&runtime, signup).await;
    let instances = runtime
        .list_instances(InstanceQuery {
            definition: Some("Signup".to_owned()),
            ..InstanceQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        instances.len(),
        1,
        "one instance for one key: {instances:?}"
    );
    for result in &results {
        let report = result.as_ref().unwrap();
        assert_eq!(report.inbox_item, None, "{report:?}");
        assert!(report.deferred.is_empty(), "{report:?}");
        assert!(
            report
                .started
                .iter()
                .all(|s| s.instance_id == instances[0].instance_id),
            "{report:?}"
        );
    }
    assert!(
        results.iter().any(|r| r
            .as_ref()
            .is_ok_and(|r| !r.duplicate && r.started.len() == 1)),
        "one send reports the start: {results:?}"
    );
    let queued = store
        .claim_queue_page("inspector", now_micros(), 1, 1000)
        .await
        .unwrap();
    assert!(queued.is_empty(), "no stray copy: {queued:?}");
}

/// RT-18, RT-19: fifty concurrent sends with one idempotency key to a paused instance leave
/// exactly one held item; resumed, the instance takes the stimulus once.
async fn one_key_one_deferral(store: Storage) {
    let runtime = signups(&store);
    let opened = runtime
        .send(
            Stimulus::new("signup").payload(serde_json::json!({ "id": "acct-2", "confirmed": 0 })),
        )
        .await
        .unwrap();
    let id = opened.started[0].instance_id.clone();
    runtime.suspend(&id).await.unwrap();
    let confirmation = Stimulus::new("confirm")
        .key("acct-2")
        .idempotency_key("confirm/acct-2");
    let results = fifty(&runtime, confirmation).await;
    for result in &results {
        let report = result.as_ref().unwrap();
        assert_eq!(report.deferred, std::slice::from_ref(&id), "{report:?}");
    }
    let queued = store
        .claim_queue_page("inspector", now_micros(), 1, 1000)
        .await
        .unwrap();
    let ids: Vec<&str> = queued.iter().map(|q| q.item_id.as_str()).collect();
    assert_eq!(ids.len(), 1, "one held item for one key: {ids:?}");
    runtime.resume(&id).await.unwrap();
    runtime.deliver_inbox().await.unwrap();
    let state = runtime.get_state(&id).await.unwrap().unwrap();
    assert_eq!(state.data::<Account>().unwrap().confirmed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_trigger_sends_with_one_key_start_one_instance_in_memory() {
    one_key_one_start(Storage::new(Arc::new(MemoryStore::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_trigger_sends_with_one_key_start_one_instance_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Storage::new(Arc::new(
        SqliteStore::open(dir.path().join("start.db")).unwrap(),
    ));
    one_key_one_start(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deferred_sends_with_one_key_hold_one_item_in_memory() {
    one_key_one_deferral(Storage::new(Arc::new(MemoryStore::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deferred_sends_with_one_key_hold_one_item_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Storage::new(Arc::new(
        SqliteStore::open(dir.path().join("defer.db")).unwrap(),
    ));
    one_key_one_deferral(store).await;
}
