//! Bookmarks, correlation ids, child waits and receipts.

use std::sync::Arc;

use super::fixtures::{
    SEC, T0, bookmark, create_leased, final_commit, new_instance, queue_item, waiting,
};
use super::harness::{Harness, TestBackend};
use crate::store::{BookmarkQuery, Micros, StoreError};

/// C-8: among 10 000 bookmarks, exactly the matching ones, in `(created_at, id)` order, with
/// filters and stable paging.
pub async fn c08_bookmark_lookup(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut expected: Vec<(Micros, String, String)> = Vec::new();
    for i in 0..5 {
        let id = format!("wf-{i}");
        let lease = create_leased(&store, &id).await;
        let mut c = waiting(&id, 1, lease.token, 1);
        c.correlation_id = Some(format!("corr-{}", i % 2));
        for j in 0..2000 {
            let hash = format!("h{}", j % 10);
            // Creation times interleave across instances and repeat, so ids break ties.
            let created = T0 + Micros::from((j * 7 + i * 3) % 500);
            let bookmark_id = format!("b-{i}-{j:04}");
            if hash == "h3" {
                expected.push((created, bookmark_id.clone(), id.clone()));
            }
            c.bookmarks_added
                .push(bookmark(&bookmark_id, &hash, created));
        }
        store.commit(c).await.unwrap();
    }
    expected.sort();
    assert_eq!(expected.len(), 1000);

    // Paging through all of them: stable and complete.
    let mut seen = Vec::new();
    let mut query = BookmarkQuery::by_hash("h3", 128);
    loop {
        let page = store.find_bookmarks(query.clone()).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 128);
        let last = page.last().unwrap();
        query.after = Some((last.created_at, last.bookmark_id.clone()));
        seen.extend(page);
    }
    let got: Vec<(Micros, String, String)> = seen
        .iter()
        .map(|b| (b.created_at, b.bookmark_id.clone(), b.instance_id.clone()))
        .collect();
    assert_eq!(got, expected);
    let first = &seen[0];
    assert_eq!(first.hash, "h3");
    assert_eq!(first.definition_name, "order");
    assert_eq!(first.definition_version, "v1");
    assert_eq!(first.name, "approved");
    assert_eq!(first.node_id, "root:wait");
    assert_eq!(first.context_id, 2);

    let mut by_instance = BookmarkQuery::by_hash("h3", 1000);
    by_instance.instance_id = Some("wf-2".to_owned());
    let rows = store.find_bookmarks(by_instance).await.unwrap();
    assert_eq!(rows.len(), 200);
    assert!(rows.iter().all(|b| b.instance_id == "wf-2"));

    let mut by_correlation = BookmarkQuery::by_hash("h3", 1000);
    by_correlation.correlation_id = Some("corr-1".to_owned());
    let rows = store.find_bookmarks(by_correlation).await.unwrap();
    assert_eq!(rows.len(), 400, "wf-1 and wf-3");
    assert!(
        rows.iter()
            .all(|b| b.correlation_id.as_deref() == Some("corr-1"))
    );

    let mut by_id = BookmarkQuery::by_hash("h3", 10);
    by_id.bookmark_id = Some("b-4-0013".to_owned());
    let rows = store.find_bookmarks(by_id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].instance_id, "wf-4");
    let mut wrong_hash = BookmarkQuery::by_hash("h4", 10);
    wrong_hash.bookmark_id = Some("b-4-0013".to_owned());
    assert!(store.find_bookmarks(wrong_hash).await.unwrap().is_empty());
    assert!(
        store
            .find_bookmarks(BookmarkQuery::by_hash("none", 10))
            .await
            .unwrap()
            .is_empty()
    );
}

/// C-9: a commit that adds two bookmarks and removes one leaves the index equal to the state;
/// a rejected commit leaves it unchanged.
pub async fn c09_bookmark_diff(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.bookmarks_added = vec![bookmark("b1", "h", T0), bookmark("b2", "h", T0 + 1)];
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.bookmarks_added = vec![bookmark("b3", "h", T0 + 2), bookmark("b4", "g", T0 + 3)];
    c.bookmarks_removed = vec!["b1".to_owned()];
    store.commit(c).await.unwrap();
    let ids = |rows: Vec<crate::store::BookmarkRow>| -> Vec<String> {
        rows.into_iter().map(|b| b.bookmark_id).collect()
    };
    assert_eq!(
        ids(store.list_bookmarks("wf-1").await.unwrap()),
        ["b2", "b3", "b4"]
    );
    // Rejected by version: unchanged.
    let mut c = waiting("wf-1", 2, lease.token, 3);
    c.bookmarks_added = vec![bookmark("b5", "h", T0 + 4)];
    c.bookmarks_removed = vec!["b2".to_owned()];
    assert!(store.commit(c).await.is_err());
    // Rejected by a duplicate bookmark id: unchanged, and the state too.
    let mut c = waiting("wf-1", 3, lease.token, 3);
    c.bookmarks_removed = vec!["b2".to_owned()];
    c.bookmarks_added = vec![bookmark("b3", "h", T0 + 4)];
    assert!(matches!(
        store.commit(c).await,
        Err(StoreError::AlreadyExists {
            what: "bookmark",
            ..
        })
    ));
    assert_eq!(
        ids(store.list_bookmarks("wf-1").await.unwrap()),
        ["b2", "b3", "b4"]
    );
    assert_eq!(
        ids(store
            .find_bookmarks(BookmarkQuery::by_hash("h", 10))
            .await
            .unwrap()),
        ["b2", "b3"]
    );
    assert_eq!(store.load_instance("wf-1").await.unwrap().version, 3);
}

/// C-10: changing an instance's correlation id rewrites it on its bookmark rows.
pub async fn c10_correlation_rewrite(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.correlation_id = Some("old".to_owned());
    c.bookmarks_added = vec![bookmark("b1", "h", T0), bookmark("b2", "h", T0 + 1)];
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.correlation_id = Some("new".to_owned());
    c.bookmarks_added = vec![bookmark("b3", "h", T0 + 2)];
    store.commit(c).await.unwrap();
    let rows = store.list_bookmarks("wf-1").await.unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter()
            .all(|b| b.correlation_id.as_deref() == Some("new"))
    );
    let mut q = BookmarkQuery::by_hash("h", 10);
    q.correlation_id = Some("old".to_owned());
    assert!(store.find_bookmarks(q).await.unwrap().is_empty());
    let mut c = waiting("wf-1", 3, lease.token, 3);
    c.correlation_id = None;
    store.commit(c).await.unwrap();
    let rows = store.list_bookmarks("wf-1").await.unwrap();
    assert!(rows.iter().all(|b| b.correlation_id.is_none()));
}

/// C-35: the bookmarks of parents waiting on a child workflow are found by name alone, in
/// bookmark-id order and paged, without the other bookmarks; a removed one is gone.
pub async fn c35_child_waits(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut expected = Vec::new();
    for i in 0..3 {
        let id = format!("wf-{i}");
        let lease = create_leased(&store, &id).await;
        let mut c = waiting(&id, 1, lease.token, 1);
        c.bookmarks_added
            .push(bookmark(&format!("b-{i}-event"), "h-event", T0));
        let mut child = bookmark(&format!("b-{i}-child"), &format!("h-child-{i}"), T0);
        child.name = crate::store::CHILD_WAIT.to_owned();
        c.bookmarks_added.push(child);
        store.commit(c).await.unwrap();
        expected.push((format!("b-{i}-child"), id));
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.find_child_waits(after.clone(), 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.bookmark_id.clone());
        seen.extend(page);
    }
    let got: Vec<(String, String)> = seen
        .iter()
        .map(|b| (b.bookmark_id.clone(), b.instance_id.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(seen.iter().all(|b| b.name == crate::store::CHILD_WAIT));

    // The child's wait resumed: its bookmark is no longer listed.
    let record = store.load_instance("wf-1").await.unwrap();
    let token = record.lease.as_ref().map_or(0, |l| l.token);
    let mut c = waiting("wf-1", record.version, token, 2);
    c.bookmarks_removed.push("b-1-child".to_owned());
    store.commit(c).await.unwrap();
    let left: Vec<String> = store
        .find_child_waits(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.bookmark_id)
        .collect();
    assert_eq!(left, ["b-0-child", "b-2-child"]);
}

/// C-19: a commit carrying an existing receipt is rejected; after a commit it is found.
pub async fn c19_receipts(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.receipts = vec!["s1".to_owned()];
    store.commit(c).await.unwrap();
    assert!(store.has_receipt("wf-1", "s1").await.unwrap());
    assert!(!store.has_receipt("wf-2", "s1").await.unwrap());
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.receipts = vec!["s2".to_owned(), "s1".to_owned()];
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    let err = store.commit(c).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::ReceiptExists {
            instance: "wf-1".to_owned(),
            stimulus_id: "s1".to_owned()
        }
    );
    assert!(err.is_conflict());
    assert!(
        !store.has_receipt("wf-1", "s2").await.unwrap(),
        "nothing written"
    );
    assert!(store.list_bookmarks("wf-1").await.unwrap().is_empty());
    assert_eq!(store.load_instance("wf-1").await.unwrap().version, 2);
    // A creation writes its receipt and consumes its queue item (ST-17).
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    let mut new = new_instance("wf-2");
    new.receipt = Some("s-q1".to_owned());
    new.consumed_queue_item = Some("q1".to_owned());
    store.create_instance(new).await.unwrap();
    assert!(store.has_receipt("wf-2", "s-q1").await.unwrap());
    assert!(!store.ack_queue_item("q1").await.unwrap());
}

/// C-46: a stimulus is consumed anywhere once one instance's commit or creation wrote its
/// receipt, and not before.
pub async fn c46_consumed_anywhere(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    assert!(!store.consumed_anywhere("s1").await.unwrap());
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.receipts = vec!["s1".to_owned()];
    store.commit(c).await.unwrap();
    assert!(store.consumed_anywhere("s1").await.unwrap());
    assert!(!store.consumed_anywhere("s2").await.unwrap());
    let mut new = new_instance("wf-2");
    new.receipt = Some("s-created".to_owned());
    store.create_instance(new).await.unwrap();
    assert!(store.consumed_anywhere("s-created").await.unwrap());
    assert!(!store.consumed_anywhere("s-").await.unwrap(), "exact ids");
}

/// C-47: the key index (RT-36). A commit's `keys_added` are found by key, in instance-id
/// order and up to the limit, written again without a duplicate, kept when the instance
/// finishes and removed when it is purged; a commit refused by its version indexes nothing.
pub async fn c47_key_index(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    assert!(store.instances_with_key("k1", 20).await.unwrap().is_empty());
    for id in ["wf-2", "wf-1"] {
        let lease = create_leased(&store, id).await;
        let mut c = waiting(id, 1, lease.token, 1);
        c.keys_added = vec!["k1".to_owned(), format!("k-{id}")];
        store.commit(c).await.unwrap();
    }
    assert_eq!(
        store.instances_with_key("k1", 20).await.unwrap(),
        vec!["wf-1".to_owned(), "wf-2".to_owned()]
    );
    assert_eq!(
        store.instances_with_key("k1", 1).await.unwrap(),
        vec!["wf-1".to_owned()]
    );
    assert_eq!(
        store.instances_with_key("k-wf-2", 20).await.unwrap(),
        vec!["wf-2".to_owned()]
    );
    assert!(
        store.instances_with_key("k", 20).await.unwrap().is_empty(),
        "exact keys"
    );

    // Refused by its version: nothing indexed.
    let held = create_leased(&store, "wf-3").await;
    let mut stale = waiting("wf-3", 7, held.token, 1);
    stale.keys_added = vec!["k-stale".to_owned()];
    assert!(matches!(
        store.commit(stale).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(
        store
            .instances_with_key("k-stale", 20)
            .await
            .unwrap()
            .is_empty()
    );

    // The same key again (a later commit of wf-3, then its end): one row, kept when it
    // finishes.
    let mut c = waiting("wf-3", 1, held.token, 1);
    c.keys_added = vec!["k1".to_owned()];
    store.commit(c).await.unwrap();
    let mut again = waiting("wf-3", 2, held.token, 2);
    again.keys_added = vec!["k1".to_owned()];
    store.commit(again).await.unwrap();
    store
        .commit(final_commit("wf-3", 3, held.token, T0 + 2 * SEC))
        .await
        .unwrap();
    assert_eq!(
        store.instances_with_key("k1", 20).await.unwrap(),
        vec!["wf-1".to_owned(), "wf-2".to_owned(), "wf-3".to_owned()]
    );
    // Purged: its rows go with it.
    store.delete_instance("wf-3").await.unwrap();
    assert_eq!(
        store.instances_with_key("k1", 20).await.unwrap(),
        vec!["wf-1".to_owned(), "wf-2".to_owned()]
    );
}

/// C-45: a commit with a `definition_version` re-pins the instance (ENG-54): its row and every
/// bookmark row, kept or added by that commit, carry the new version; a commit refused by its
/// version re-pins nothing; a commit without one keeps the version.
pub async fn c45_repin(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.bookmarks_added.push(bookmark("b-kept", "h1", T0));
    c.bookmarks_added.push(bookmark("b-gone", "h2", T0));
    store.commit(c).await.unwrap();

    let versions = |rows: Vec<crate::store::BookmarkRow>| {
        let mut found: Vec<(String, String)> = rows
            .into_iter()
            .map(|b| (b.bookmark_id, b.definition_version))
            .collect();
        found.sort();
        found
    };
    // Refused by its version: nothing re-pinned.
    let mut stale = waiting("wf-1", 1, lease.token, 2);
    stale.definition_version = Some("v2".to_owned());
    assert!(matches!(
        store.commit(stale).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store
            .load_instance("wf-1")
            .await
            .unwrap()
            .definition_version,
        "v1"
    );

    let mut c = waiting("wf-1", 2, lease.token, 3);
    c.definition_version = Some("v2".to_owned());
    c.bookmarks_removed.push("b-gone".to_owned());
    c.bookmarks_added.push(bookmark("b-new", "h3", T0 + 1));
    store.commit(c).await.unwrap();
    assert_eq!(
        store
            .load_instance("wf-1")
            .await
            .unwrap()
            .definition_version,
        "v2"
    );
    let pinned = |id: &str| (id.to_owned(), "v2".to_owned());
    assert_eq!(
        versions(store.list_bookmarks("wf-1").await.unwrap()),
        [pinned("b-kept"), pinned("b-new")]
    );

    // A commit without a version keeps the one the instance has.
    store
        .commit(waiting("wf-1", 3, lease.token, 4))
        .await
        .unwrap();
    assert_eq!(
        store
            .load_instance("wf-1")
            .await
            .unwrap()
            .definition_version,
        "v2"
    );
}
