//! Dead letters.

use std::sync::Arc;

use super::fixtures::{SEC, T0, TTL, queue_item};
use super::harness::{Harness, TestBackend};
use crate::store::{DeadLetterFilter, DeadLetterReason, StoreError};

/// C-17: two concurrent moves of the same item store one dead letter.
pub async fn c17_dead_letter_once(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..2 {
        let store = store.storage().clone();
        tasks.push(tokio::spawn(async move {
            store
                .dead_letter("q1", DeadLetterReason::Rejected, Some("no"), T0 + n)
                .await
        }));
    }
    let mut moved = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() {
            moved += 1;
        }
    }
    assert_eq!(moved, 1);
    let dead = store
        .list_dead_letters(DeadLetterFilter::all(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, DeadLetterReason::Rejected);
    assert_eq!(dead[0].error.as_deref(), Some("no"));
}

/// C-18: dead letters: list with filters, replay (fresh TTL, zero attempts, same stimulus id),
/// delete, removal after their TTL.
pub async fn c18_dead_letters(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for (id, at) in [("q1", 0), ("q2", 1), ("q3", 2)] {
        store.enqueue(queue_item(id, T0 + at)).await.unwrap();
    }
    store
        .dead_letter("q1", DeadLetterReason::Rejected, Some("no"), T0 + 10)
        .await
        .unwrap();
    store
        .record_queue_failure("q2", "boom", T0 + 11, 1)
        .await
        .unwrap();
    store
        .dead_letter("q3", DeadLetterReason::Rejected, None, T0 + 12)
        .await
        .unwrap();
    let rejected = store
        .list_dead_letters(DeadLetterFilter::of_reason(DeadLetterReason::Rejected, 10))
        .await
        .unwrap();
    let ids: Vec<&str> = rejected.iter().map(|d| d.item.item_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q3"]);
    assert_eq!(
        store
            .list_dead_letters(DeadLetterFilter::all(2))
            .await
            .unwrap()
            .len(),
        2
    );

    // Replay q2: fresh TTL, zero attempts, same ids.
    let now = T0 + 100 * SEC;
    let replayed = store.replay_dead_letter("q2", now, 60 * SEC).await.unwrap();
    assert_eq!(replayed.stimulus_id, "s-q2");
    assert_eq!(replayed.attempts, 0);
    assert_eq!(replayed.last_error, None);
    assert_eq!(replayed.expires_at, now + 60 * SEC);
    let page = store.claim_queue_page("n", now, TTL, 10).await.unwrap();
    assert_eq!(page, [replayed]);
    assert!(matches!(
        store.replay_dead_letter("q2", now, SEC).await,
        Err(StoreError::NotFound { .. })
    ));

    assert!(store.delete_dead_letter("q3").await.unwrap());
    assert!(!store.delete_dead_letter("q3").await.unwrap());
    // TTL: q1 died at T0 + 10 µs.
    assert_eq!(store.purge_dead_letters(T0 + 10, 100).await.unwrap(), 0);
    assert_eq!(store.purge_dead_letters(T0 + 11, 100).await.unwrap(), 1);
    assert!(
        store
            .list_dead_letters(DeadLetterFilter::all(10))
            .await
            .unwrap()
            .is_empty()
    );

    // Filters by name and hash, and keyset paging.
    for (id, name, hash) in [("d1", "a", "ha"), ("d2", "b", "hb"), ("d3", "a", "ha")] {
        let mut item = queue_item(id, T0);
        item.name = name.to_owned();
        item.hash = hash.to_owned();
        store.enqueue(item).await.unwrap();
        store
            .dead_letter(id, DeadLetterReason::Rejected, None, T0 + 50)
            .await
            .unwrap();
    }
    let by_name = DeadLetterFilter {
        name: Some("a".to_owned()),
        ..DeadLetterFilter::all(10)
    };
    let ids = |rows: Vec<crate::store::DeadLetter>| -> Vec<String> {
        rows.into_iter().map(|d| d.item.item_id).collect()
    };
    assert_eq!(
        ids(store.list_dead_letters(by_name).await.unwrap()),
        ["d1", "d3"]
    );
    let by_hash = DeadLetterFilter {
        hash: Some("hb".to_owned()),
        ..DeadLetterFilter::all(10)
    };
    assert_eq!(ids(store.list_dead_letters(by_hash).await.unwrap()), ["d2"]);
    let page_two = DeadLetterFilter {
        after: Some((T0 + 50, "d1".to_owned())),
        ..DeadLetterFilter::all(1)
    };
    assert_eq!(
        ids(store.list_dead_letters(page_two).await.unwrap()),
        ["d2"]
    );
}
