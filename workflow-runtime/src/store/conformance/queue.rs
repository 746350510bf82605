//! The stimulus queue and idempotency records.

use std::sync::Arc;

use serde_json::{Value, json};

use super::fixtures::{SEC, T0, TTL, create_leased, new_instance, queue_item, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{
    DeadLetterFilter, DeadLetterReason, IdempotencyRecord, QueueFailure, QueueItem, StoreError,
};

/// C-14: queue pages in `(sent_at, id)` order; disjoint concurrent claims; release.
pub async fn c14_queue_pages(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for (id, at) in [("q3", 2), ("q1", 1), ("q2", 1), ("q4", 3), ("q5", 4)] {
        store.enqueue(queue_item(id, T0 + at)).await.unwrap();
    }
    assert!(matches!(
        store.enqueue(queue_item("q1", T0)).await,
        Err(StoreError::AlreadyExists {
            what: "queue item",
            ..
        })
    ));
    let now = T0 + SEC;
    let a = store.claim_queue_page("node-a", now, TTL, 2).await.unwrap();
    let b = store.claim_queue_page("node-b", now, TTL, 2).await.unwrap();
    let ids =
        |items: &[QueueItem]| -> Vec<String> { items.iter().map(|q| q.item_id.clone()).collect() };
    assert_eq!(ids(&a), ["q1", "q2"]);
    assert_eq!(ids(&b), ["q3", "q4"]);
    assert_eq!(a[0], queue_item("q1", T0 + 1), "round trip");
    // Release by the wrong owner does nothing; by the owner makes it claimable.
    store.release_queue_item("q1", "node-b").await.unwrap();
    store.release_queue_item("q3", "node-b").await.unwrap();
    let c = store
        .claim_queue_page("node-c", now, TTL, 10)
        .await
        .unwrap();
    assert_eq!(ids(&c), ["q3", "q5"]);
    // Expired claims: everything is claimable again.
    let d = store
        .claim_queue_page("node-d", now + TTL, TTL, 10)
        .await
        .unwrap();
    assert_eq!(ids(&d), ["q1", "q2", "q3", "q4", "q5"]);
    assert!(store.ack_queue_item("q2").await.unwrap());
    assert!(!store.ack_queue_item("q2").await.unwrap());
    // Renewal keeps the owner's claim; another owner's live claim, or a gone item, refuses it;
    // a lapsed claim is taken back.
    let later = now + TTL;
    assert!(
        store
            .renew_queue_claim("q1", "node-d", later, later + 2 * TTL)
            .await
            .unwrap()
    );
    assert!(
        !store
            .renew_queue_claim("q1", "node-x", later, later + TTL)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_queue_page("node-x", later + TTL, TTL, 10)
            .await
            .unwrap()
            .iter()
            .all(|q| q.item_id != "q1"),
        "a renewed claim holds past its first expiry"
    );
    assert!(
        !store
            .renew_queue_claim("q2", "node-d", later, later + TTL)
            .await
            .unwrap(),
        "a gone item"
    );
    assert!(
        store
            .renew_queue_claim("q1", "node-y", later + 2 * TTL, later + 3 * TTL)
            .await
            .unwrap(),
        "a lapsed claim is taken back"
    );
    // A commit consuming an item deletes it.
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.consumed_queue_items = vec!["q1".to_owned()];
    c.receipts = vec!["s-q1".to_owned()];
    store.commit(c).await.unwrap();
    let e = store
        .claim_queue_page("node-e", now + 3 * TTL, TTL, 10)
        .await
        .unwrap();
    assert_eq!(ids(&e), ["q3", "q4", "q5"]);
}

/// C-15: an expired item becomes exactly one dead letter `Expired`; a held one does not.
pub async fn c15_queue_ttl(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut short = queue_item("q1", T0);
    short.expires_at = T0 + 10 * SEC;
    let mut held = queue_item("q2", T0);
    held.expires_at = T0 + 10 * SEC;
    held.held = true;
    store.enqueue(short).await.unwrap();
    store.enqueue(held).await.unwrap();
    store.enqueue(queue_item("q3", T0)).await.unwrap();
    assert_eq!(store.expire_queue(T0 + 9 * SEC, 100).await.unwrap(), 0);
    let now = T0 + 10 * SEC;
    // An expired item is not delivered.
    let page = store.claim_queue_page("node-a", now, 1, 10).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|q| q.item_id.as_str()).collect();
    assert_eq!(ids, ["q2", "q3"]);
    assert_eq!(store.expire_queue(now, 100).await.unwrap(), 1);
    assert_eq!(store.expire_queue(now, 100).await.unwrap(), 0);
    let dead = store
        .list_dead_letters(DeadLetterFilter::all(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].item.item_id, "q1");
    assert_eq!(dead[0].item.stimulus_id, "s-q1");
    assert_eq!(dead[0].reason, DeadLetterReason::Expired);
    assert_eq!(dead[0].dead_at, now);
    assert!(
        store
            .list_dead_letters(DeadLetterFilter::of_reason(DeadLetterReason::Failed, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(!store.ack_queue_item("q1").await.unwrap(), "left the queue");
    assert!(matches!(
        store.enqueue(queue_item("q1", T0)).await,
        Err(StoreError::AlreadyExists { .. })
    ));
}

/// C-16: each failure increments attempts; at the maximum the item dies `Failed`.
pub async fn c16_queue_attempts(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    let claimed = store.claim_queue_page("node-a", T0, TTL, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        store
            .record_queue_failure("q1", "boom 1", T0 + 1, 3)
            .await
            .unwrap(),
        QueueFailure::Retry { attempts: 1 }
    );
    // The failure released the claim.
    let again = store
        .claim_queue_page("node-b", T0 + 2, TTL, 10)
        .await
        .unwrap();
    assert_eq!(again[0].attempts, 1);
    assert_eq!(again[0].last_error.as_deref(), Some("boom 1"));
    assert_eq!(again[0].last_attempt_at, Some(T0 + 1));
    assert_eq!(
        store
            .record_queue_failure("q1", "boom 2", T0 + 3, 3)
            .await
            .unwrap(),
        QueueFailure::Retry { attempts: 2 }
    );
    assert_eq!(
        store
            .record_queue_failure("q1", "boom 3", T0 + 4, 3)
            .await
            .unwrap(),
        QueueFailure::DeadLettered
    );
    let dead = store
        .list_dead_letters(DeadLetterFilter::all(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, DeadLetterReason::Failed);
    assert_eq!(dead[0].error.as_deref(), Some("boom 3"));
    assert_eq!(dead[0].item.attempts, 3);
    assert!(matches!(
        store.record_queue_failure("q1", "x", T0, 3).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// C-20: idempotency records: store and look up; a reuse with a different hash is detectable.
pub async fn c20_idempotency_records(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let record = IdempotencyRecord {
        key: "send-1".to_owned(),
        hash: "h1".to_owned(),
        payload_digest: "d1".to_owned(),
        report: json!({ "resumed": ["wf-1"], "started": [] }),
        created_at: T0,
    };
    assert_eq!(
        store.put_idempotency_record(record.clone()).await.unwrap(),
        None
    );
    assert_eq!(
        store.find_idempotency_record("send-1").await.unwrap(),
        Some(record.clone())
    );
    let mut reuse = record.clone();
    reuse.hash = "h2".to_owned();
    reuse.report = json!({});
    let existing = store.put_idempotency_record(reuse).await.unwrap().unwrap();
    assert_eq!(existing, record, "not overwritten");
    assert_ne!(existing.hash, "h2", "the reuse is detectable");
    assert_eq!(store.find_idempotency_record("other").await.unwrap(), None);

    // Replaced: a send completing its record.
    let mut complete = record.clone();
    complete.report = json!({ "resumed": ["wf-1", "wf-2"], "started": [] });
    store
        .replace_idempotency_record(complete.clone())
        .await
        .unwrap();
    assert_eq!(
        store.find_idempotency_record("send-1").await.unwrap(),
        Some(complete)
    );
}

/// C-20, RT-19: a commit carries the idempotency record of the send it delivers, written in
/// its transaction: a commit refused by its version or its fencing token writes none, a
/// commit that succeeds writes it, and an existing record with the key stays as it was.
pub async fn c20_idempotency_record_in_commit(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let record = |key: &str, report: Value| IdempotencyRecord {
        key: key.to_owned(),
        hash: "h1".to_owned(),
        payload_digest: "d1".to_owned(),
        report,
        created_at: T0,
    };
    let lease = create_leased(&store, "wf-1").await;

    // A stale version: refused, no record.
    let mut stale = waiting("wf-1", 7, lease.token, 1);
    stale.idempotency = Some(record("k-stale", json!({ "n": 1 })));
    assert!(matches!(
        store.commit(stale).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store.find_idempotency_record("k-stale").await.unwrap(),
        None
    );

    // A superseded lease token: fenced, no record.
    let mut fenced = waiting("wf-1", 1, lease.token + 1, 1);
    fenced.idempotency = Some(record("k-fenced", json!({ "n": 2 })));
    assert!(matches!(
        store.commit(fenced).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        store.find_idempotency_record("k-fenced").await.unwrap(),
        None
    );

    // A receipt that exists: refused, no record.
    let mut first = waiting("wf-1", 1, lease.token, 1);
    first.receipts.push("s-1".to_owned());
    first.idempotency = Some(record("k-1", json!({ "n": 3 })));
    assert_eq!(store.commit(first).await.unwrap(), 2);
    assert_eq!(
        store.find_idempotency_record("k-1").await.unwrap(),
        Some(record("k-1", json!({ "n": 3 })))
    );
    let mut again = waiting("wf-1", 2, lease.token, 2);
    again.receipts.push("s-1".to_owned());
    again.idempotency = Some(record("k-2", json!({ "n": 4 })));
    assert!(store.commit(again).await.is_err());
    assert_eq!(store.find_idempotency_record("k-2").await.unwrap(), None);
    assert_eq!(store.load_instance("wf-1").await.unwrap().version, 2);

    // An existing key: the commit succeeds, the first record stays.
    let mut later = waiting("wf-1", 2, lease.token, 3);
    later.idempotency = Some(record("k-1", json!({ "n": 5 })));
    assert_eq!(store.commit(later).await.unwrap(), 3);
    assert_eq!(
        store.find_idempotency_record("k-1").await.unwrap(),
        Some(record("k-1", json!({ "n": 3 })))
    );
}

/// C-20, RT-19: an instance created for a send carries the send's idempotency record,
/// written in the same operation: a creation refused (the id exists, the activation scope is
/// taken) writes none, a creation that succeeds writes it, and an existing record with the key
/// stays as it was. An instance created by a commit (a child) carries one the same way.
pub async fn c20_idempotency_record_in_creation(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let record = |key: &str, n: i64| IdempotencyRecord {
        key: key.to_owned(),
        hash: "h1".to_owned(),
        payload_digest: "d1".to_owned(),
        report: json!({ "n": n }),
        created_at: T0,
    };
    let mut first = new_instance("wf-1");
    first.idempotency = Some(record("k-1", 1));
    store.create_instance(first).await.unwrap();
    assert_eq!(
        store.find_idempotency_record("k-1").await.unwrap(),
        Some(record("k-1", 1))
    );

    // The id exists: refused, no record.
    let mut again = new_instance("wf-1");
    again.idempotency = Some(record("k-again", 2));
    assert!(matches!(
        store.create_instance(again).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(
        store.find_idempotency_record("k-again").await.unwrap(),
        None
    );

    // The activation scope is taken: refused, no record.
    let mut holder = new_instance("wf-2");
    holder.activation_scope = Some("singleton:order".to_owned());
    store.create_instance(holder).await.unwrap();
    let mut rival = new_instance("wf-3");
    rival.activation_scope = Some("singleton:order".to_owned());
    rival.idempotency = Some(record("k-rival", 3));
    assert!(matches!(
        store.create_instance(rival).await,
        Err(StoreError::ActivationConflict { .. })
    ));
    assert_eq!(
        store.find_idempotency_record("k-rival").await.unwrap(),
        None
    );

    // An existing key: the instance is created, the first record stays.
    let mut later = new_instance("wf-4");
    later.idempotency = Some(record("k-1", 4));
    store.create_instance(later).await.unwrap();
    assert_eq!(
        store.find_idempotency_record("k-1").await.unwrap(),
        Some(record("k-1", 1))
    );

    // A child created by a commit writes its record with the commit.
    let lease = create_leased(&store, "parent").await;
    let mut child = new_instance("child");
    child.idempotency = Some(record("k-child", 5));
    let mut c = waiting("parent", 1, lease.token, 1);
    c.instances_created = vec![child];
    store.commit(c).await.unwrap();
    assert_eq!(
        store.find_idempotency_record("k-child").await.unwrap(),
        Some(record("k-child", 5))
    );
}

/// The ids of every queue item, claimed at `at` for a microsecond.
async fn claim_all(store: &Harness, at: i64) -> Vec<String> {
    let page = store
        .claim_queue_page("inspector", at, 1, 100)
        .await
        .unwrap();
    let mut ids: Vec<String> = page.into_iter().map(|q| q.item_id).collect();
    ids.sort();
    ids
}

/// C-20, RT-19: a send's queue items and its idempotency record are written in one
/// operation: when the key has a record, nothing at all is written and the record is
/// returned; a send completing its own record writes its items and replaces the record
/// together; an item id that exists writes neither.
pub async fn c20_idempotency_record_with_items(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let record = |n: i64| IdempotencyRecord {
        key: "send-1".to_owned(),
        hash: "h1".to_owned(),
        payload_digest: "d1".to_owned(),
        report: json!({ "n": n }),
        created_at: T0,
    };
    assert_eq!(
        store
            .enqueue_send(vec![queue_item("q1", T0)], Some(record(1)))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.find_idempotency_record("send-1").await.unwrap(),
        Some(record(1))
    );
    // The key is taken: the item is not written, the first record is returned.
    assert_eq!(
        store
            .enqueue_send(vec![queue_item("q2", T0)], Some(record(2)))
            .await
            .unwrap(),
        Some(record(1))
    );
    assert_eq!(claim_all(&store, T0 + SEC).await, ["q1"]);

    // Completing: the items and the replaced record together.
    store
        .enqueue_completing(vec![queue_item("q3", T0)], record(3))
        .await
        .unwrap();
    assert_eq!(
        store.find_idempotency_record("send-1").await.unwrap(),
        Some(record(3))
    );
    assert_eq!(claim_all(&store, T0 + 2 * SEC).await, ["q1", "q3"]);

    // An item id that exists: neither the item nor the record is written.
    assert!(matches!(
        store
            .enqueue_completing(vec![queue_item("q1", T0)], record(4))
            .await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(
        store.find_idempotency_record("send-1").await.unwrap(),
        Some(record(3))
    );
}

/// ST-30: receipts and idempotency records are removed after their retention.
pub async fn retention_of_receipts_and_idempotency_records(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1); // committed at T0 + 1 s
    c.receipts = vec!["s1".to_owned()];
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.now = T0 + 5 * SEC;
    c.receipts = vec!["s2".to_owned()];
    store.commit(c).await.unwrap();
    assert_eq!(store.purge_receipts(T0 + SEC, 10).await.unwrap(), 0);
    assert_eq!(store.purge_receipts(T0 + 2 * SEC, 10).await.unwrap(), 1);
    assert!(!store.has_receipt("wf-1", "s1").await.unwrap());
    assert!(store.has_receipt("wf-1", "s2").await.unwrap());
    for (key, at) in [("k1", T0), ("k2", T0 + 10 * SEC)] {
        store
            .put_idempotency_record(IdempotencyRecord {
                key: key.to_owned(),
                hash: "h".to_owned(),
                payload_digest: "d".to_owned(),
                report: json!(null),
                created_at: at,
            })
            .await
            .unwrap();
    }
    assert_eq!(
        store.purge_idempotency_records(T0 + SEC, 10).await.unwrap(),
        1
    );
    assert_eq!(store.find_idempotency_record("k1").await.unwrap(), None);
    assert!(store.find_idempotency_record("k2").await.unwrap().is_some());
}
