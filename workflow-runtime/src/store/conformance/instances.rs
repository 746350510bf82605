//! Instances: creation, commits and their versions, listing, purge, the activation guard.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;

use super::fixtures::{
    SEC, T0, TTL, bookmark, create_leased, doc, final_commit, new_instance, queue_item, timer,
    waiting,
};
use super::harness::{Harness, TestBackend};
use crate::store::{
    BookmarkQuery, ControlKind, ControlRequest, InstanceFilter, InstanceStatus, InstanceSubStatus,
    LeaseKey, Micros, NewJournalRecord, NewTimer, PurgeFilter, StoreError,
};

/// C-1: create then load gives an equal state at version 1.
pub async fn c01_round_trip(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let state = json!({
        "format": 1,
        "contexts": [{ "id": 1, "node_id": "root", "properties": {} }, { "id": 2, "node_id": "root:a" }],
        "queue": [{ "context": 2, "entry": "resume" }, { "context": 1, "entry": "start" }],
        "callbacks": [[2, 1]],
        "bookmarks": { "b1": { "hash": "h", "payload": null } },
        "nested": { "a": { "b": { "c": [1, [2, [3, {}]]] } } },
        "text": "Grüße, 世界, 🚀, \"quoted\" \\ \n",
        "min": i64::MIN,
        "max": u64::MAX,
        "float": 0.5,
        "empty_map": {},
        "empty_list": [],
    });
    let mut new = new_instance("wf-1");
    new.state = state.clone();
    new.correlation_id = Some("order-42".to_owned());
    new.origin_at = T0 - SEC;
    assert_eq!(store.create_instance(new).await.unwrap(), 1);
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.state, state);
    assert_eq!(loaded.state["min"].as_i64(), Some(i64::MIN));
    assert_eq!(loaded.state["max"].as_u64(), Some(u64::MAX));
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.instance_id, "wf-1");
    assert_eq!(loaded.definition_name, "order");
    assert_eq!(loaded.definition_version, "v1");
    assert_eq!(loaded.status, InstanceStatus::Running);
    assert_eq!(loaded.sub_status, Some(InstanceSubStatus::Pending));
    assert_eq!(loaded.correlation_id.as_deref(), Some("order-42"));
    assert_eq!(loaded.origin_at, T0 - SEC);
    assert_eq!(loaded.created_at, T0);
    assert_eq!(loaded.updated_at, T0);
    assert_eq!(loaded.finished_at, None);
    assert_eq!(loaded.lease, None);
    assert_eq!(loaded.control_request, None);
    assert!(matches!(
        store.load_instance("nope").await,
        Err(StoreError::NotFound {
            what: "instance",
            ..
        })
    ));
}

/// C-2: creating an existing id gives `AlreadyExists` and changes nothing; invalid ids and
/// documents are refused (ST-23, ST-19).
pub async fn c02_create_existing(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let mut again = new_instance("wf-1");
    again.state = doc(7);
    again.definition_name = "other".to_owned();
    let err = store.create_instance(again).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::AlreadyExists {
            what: "instance",
            id: "wf-1".to_owned()
        }
    );
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.state, doc(0));
    assert_eq!(loaded.definition_name, "order");
    for bad in ["", "has space", "slash/no", &"x".repeat(129)] {
        let err = store.create_instance(new_instance(bad)).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Invalid {
                    what: "instance_id",
                    ..
                }
            ),
            "{bad:?}: {err:?}"
        );
    }
    store
        .create_instance(new_instance(&"x".repeat(128)))
        .await
        .unwrap();
    store
        .create_instance(new_instance("A-z_0.9:x"))
        .await
        .unwrap();
    let mut no_format = new_instance("wf-2");
    no_format.state = json!({ "n": 1 });
    assert!(matches!(
        store.create_instance(no_format).await,
        Err(StoreError::Invalid { what: "state", .. })
    ));
}

/// C-3: a commit increments the version by one and the next load sees the new state.
pub async fn c03_commit_increments_version(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.correlation_id = Some("c-1".to_owned());
    assert_eq!(store.commit(c).await.unwrap(), 2);
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.state, doc(1));
    assert_eq!(loaded.status, InstanceStatus::Suspended);
    assert_eq!(loaded.sub_status, Some(InstanceSubStatus::Waiting));
    assert_eq!(loaded.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(loaded.updated_at, T0 + SEC);
    assert_eq!(loaded.lease.as_ref().map(|l| l.token), Some(lease.token));
    let mut c = final_commit("wf-1", 2, lease.token, T0 + 2 * SEC);
    c.correlation_id = Some("c-1".to_owned());
    assert_eq!(store.commit(c).await.unwrap(), 3);
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.version, 3);
    assert_eq!(loaded.status, InstanceStatus::Finished);
    assert_eq!(loaded.finished_at, Some(T0 + 2 * SEC));
    assert_eq!(loaded.lease, None, "the commit released the lease");
    assert!(matches!(
        store.commit(waiting("missing", 1, 1, 0)).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// C-4: a stale version gives `Conflict`; bookmarks, timers, journal, receipts and queue are
/// unchanged.
pub async fn c04_stale_version_writes_nothing(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    store
        .commit(waiting("wf-1", 1, lease.token, 1))
        .await
        .unwrap();
    let mut stale = waiting("wf-1", 1, lease.token, 2);
    stale.bookmarks_added.push(bookmark("b1", "h", T0));
    stale.timers_added.push(NewTimer {
        timer_id: "t1".to_owned(),
        kind: "delay".to_owned(),
        due_at: T0,
    });
    stale.journal.push(NewJournalRecord {
        at: T0,
        kind: "step".to_owned(),
        context_id: Some(1),
        node_id: None,
        detail: json!({}),
    });
    stale.receipts.push("s-q1".to_owned());
    stale.consumed_queue_items.push("q1".to_owned());
    let err = store.commit(stale).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict {
            instance: "wf-1".to_owned(),
            expected: 1,
            actual: 2
        }
    );
    assert!(err.is_conflict() && !err.is_transient());
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!((loaded.version, loaded.state), (2, doc(1)));
    assert!(store.list_bookmarks("wf-1").await.unwrap().is_empty());
    assert!(store.list_timers("wf-1").await.unwrap().is_empty());
    assert!(store.read_journal("wf-1", 0, 10).await.unwrap().is_empty());
    assert!(!store.has_receipt("wf-1", "s-q1").await.unwrap());
    let page = store.claim_queue_page("node-a", T0, TTL, 10).await.unwrap();
    assert_eq!(page.len(), 1, "the queue item was not consumed");
}

/// C-5: sixteen concurrent commits on the same version: exactly one succeeds.
pub async fn c05_concurrent_commits_one_wins(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut tasks = Vec::new();
    for n in 0..16 {
        let store = store.storage().clone();
        tasks.push(tokio::spawn(async move {
            store.commit(waiting("wf-1", 1, lease.token, n)).await
        }));
    }
    let mut won = Vec::new();
    let mut conflicts = 0;
    for (n, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(version) => won.push((n, version)),
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }) => conflicts += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(conflicts, 15);
    let (n, version) = won[0];
    assert_eq!(version, 2);
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.state, doc(n as i64));
}

/// ST-16: a commit also writes rows for other instances: instances it started (with their
/// receipts), queue items addressed to them and cascaded control requests, all or nothing.
pub async fn c16_commit_writes_other_instances(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "parent").await;
    store.create_instance(new_instance("other")).await.unwrap();
    store.create_instance(new_instance("taken")).await.unwrap();
    let mut done = new_instance("done");
    done.status = InstanceStatus::Finished;
    done.sub_status = None;
    store.create_instance(done).await.unwrap();
    let cancel = ControlRequest {
        kind: ControlKind::Cancel,
        reason: Some("parent cancelled".to_owned()),
    };
    let build = |version: u64| {
        let mut c = waiting("parent", version, lease.token, 1);
        let mut child = new_instance("child");
        child.receipt = Some("s-start".to_owned());
        child.state = doc(5);
        c.instances_created = vec![child];
        let mut item = queue_item("to-other", T0);
        item.targets = json!({ "instance_id": "other" });
        c.queue_items = vec![item];
        c.control_requests = vec![
            ("other".to_owned(), cancel.clone()),
            ("done".to_owned(), cancel.clone()),
            ("missing".to_owned(), cancel.clone()),
        ];
        c
    };
    // Rejected (stale version): none of it is written.
    assert!(store.commit(build(7)).await.is_err());
    // Rejected (an existing child id): none of it is written.
    let mut clash = build(1);
    clash.instances_created[0].instance_id = "taken".to_owned();
    assert!(matches!(
        store.commit(clash).await,
        Err(StoreError::AlreadyExists {
            what: "instance",
            ..
        })
    ));
    // Rejected (invalid child id) before anything is written.
    let mut invalid = build(1);
    invalid.instances_created[0].instance_id = "bad id".to_owned();
    assert!(matches!(
        store.commit(invalid).await,
        Err(StoreError::Invalid { .. })
    ));
    assert!(matches!(
        store.load_instance("child").await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        store.load_instance("other").await.unwrap().control_request,
        None
    );
    assert!(
        store
            .claim_queue_page("x", T0, 1, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.load_instance("parent").await.unwrap().version, 1);

    assert_eq!(store.commit(build(1)).await.unwrap(), 2);
    let child = store.load_instance("child").await.unwrap();
    assert_eq!((child.version, child.state), (1, doc(5)));
    assert!(store.has_receipt("child", "s-start").await.unwrap());
    assert_eq!(
        store.load_instance("other").await.unwrap().control_request,
        Some(cancel)
    );
    assert_eq!(
        store.load_instance("done").await.unwrap().control_request,
        None
    );
    let items = store.claim_queue_page("x", T0, 1, 10).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].targets, json!({ "instance_id": "other" }));
}

/// ENG-22: a final commit removes the instance's bookmarks and timers.
pub async fn final_status_clears_bookmarks_and_timers(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    c.timers_added = vec![timer("t1", T0)];
    store.commit(c).await.unwrap();
    store
        .commit(final_commit("wf-1", 2, lease.token, T0 + SEC))
        .await
        .unwrap();
    assert!(store.list_bookmarks("wf-1").await.unwrap().is_empty());
    assert!(store.list_timers("wf-1").await.unwrap().is_empty());
    assert_eq!(store.earliest_timer(T0).await.unwrap(), None);
}

/// C-23: `list_instances` filters and keyset paging that neither skips nor repeats rows while
/// other instances are inserted.
pub async fn c23_list_instances(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for i in 0..20 {
        let mut new = new_instance(&format!("wf-{i:02}"));
        if i % 2 == 1 {
            new.definition_name = "invoice".to_owned();
        }
        if i % 5 == 0 {
            new.status = InstanceStatus::Suspended;
            new.sub_status = Some(InstanceSubStatus::Waiting);
        }
        new.correlation_id = Some(format!("c{}", i % 3));
        store.create_instance(new).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut filter = InstanceFilter {
        limit: 6,
        ..InstanceFilter::default()
    };
    let mut inserted = 0;
    loop {
        let page = store.list_instances(filter.clone()).await.unwrap();
        let Some(last) = page.last() else { break };
        filter.after = Some(last.instance_id.clone());
        seen.extend(page.into_iter().map(|l| {
            let record = l.summary.unwrap();
            assert_eq!(record.instance_id, l.instance_id);
            l.instance_id
        }));
        // Inserting before and after the cursor while paging.
        store
            .create_instance(new_instance(&format!("aa-{inserted}")))
            .await
            .unwrap();
        store
            .create_instance(new_instance(&format!("zz-{inserted}")))
            .await
            .unwrap();
        inserted += 1;
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no repeats");
    for i in 0..20 {
        assert!(seen.contains(&format!("wf-{i:02}")), "no skips");
    }
    let count = |filter: InstanceFilter| {
        let store = store.storage().clone();
        async move { store.list_instances(filter).await.unwrap().len() }
    };
    assert_eq!(
        count(InstanceFilter {
            definition_name: Some("invoice".to_owned()),
            ..InstanceFilter::default()
        })
        .await,
        10
    );
    assert_eq!(
        count(InstanceFilter {
            status: Some(InstanceStatus::Suspended),
            ..InstanceFilter::default()
        })
        .await,
        4
    );
    assert_eq!(
        count(InstanceFilter {
            correlation_id: Some("c1".to_owned()),
            definition_name: Some("order".to_owned()),
            ..InstanceFilter::default()
        })
        .await,
        3,
        "wf-04, wf-10, wf-16"
    );
}

/// C-23: the listing text a creation or a commit carries is stored in the instance row and
/// listed with it, as is, and loaded with it; a commit without one stores none.
pub async fn c23_listing_text(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut new = new_instance("wf-1");
    new.listing = Some(r#"{"at":["Draft"]}"#.to_owned());
    store.create_instance(new).await.unwrap();
    store.create_instance(new_instance("wf-2")).await.unwrap();
    let listings = || {
        let store = store.storage().clone();
        async move {
            store
                .list_instances(InstanceFilter::default())
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.summary.unwrap().listing)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listings().await,
        [Some(r#"{"at":["Draft"]}"#.to_owned()), None]
    );
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0, TTL)
        .await
        .unwrap();
    let mut commit = waiting("wf-1", 1, lease.token, 1);
    commit.listing = Some(r#"{"at":["Review"]}"#.to_owned());
    store.commit(commit).await.unwrap();
    assert_eq!(
        listings().await,
        [Some(r#"{"at":["Review"]}"#.to_owned()), None]
    );
    // One row, one type: the instance loaded is the row listed, with its document.
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap()
        .remove(0)
        .summary
        .unwrap();
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.summary(), listed);
    assert_eq!(loaded.listing.as_deref(), Some(r#"{"at":["Review"]}"#));
    store
        .commit(waiting("wf-1", 2, lease.token, 2))
        .await
        .unwrap();
    assert_eq!(listings().await, [None, None]);
}

/// C-24: purge removes only final instances finished before the cut-off, with their
/// dependent rows, in batches; a live target gives `NotTerminal`.
pub async fn c24_purge(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for i in 0..7 {
        let id = format!("done-{i}");
        let lease = create_leased(&store, &id).await;
        let mut c = waiting(&id, 1, lease.token, 1);
        c.bookmarks_added = vec![bookmark(&format!("b-{i}"), "h", T0)];
        c.timers_added = vec![timer(&format!("t-{i}"), T0 + 100 * SEC)];
        c.receipts = vec!["s".to_owned()];
        c.journal = vec![NewJournalRecord {
            at: T0,
            kind: "k".to_owned(),
            context_id: None,
            node_id: None,
            detail: json!(null),
        }];
        store.commit(c).await.unwrap();
        let mut end = final_commit(&id, 2, lease.token, T0 + Micros::from(i) * SEC);
        if i == 6 {
            end.status = InstanceStatus::Cancelled;
        }
        store.commit(end).await.unwrap();
    }
    // Live and faulted ones are never purged.
    let lease = create_leased(&store, "live").await;
    let mut faulted = waiting("faulted", 1, 0, 1);
    faulted.status = InstanceStatus::Faulted;
    faulted.sub_status = None;
    let flease = create_leased(&store, "faulted").await;
    faulted.lease_token = flease.token;
    store.commit(faulted).await.unwrap();

    assert!(matches!(
        store.delete_instance("live").await,
        Err(StoreError::NotTerminal {
            status: InstanceStatus::Running,
            ..
        })
    ));
    assert!(matches!(
        store.delete_instance("faulted").await,
        Err(StoreError::NotTerminal {
            status: InstanceStatus::Faulted,
            ..
        })
    ));
    let mut bad = PurgeFilter::finished_before(T0 + 100 * SEC);
    bad.statuses = vec![InstanceStatus::Faulted];
    assert!(matches!(
        store.purge(bad).await,
        Err(StoreError::Invalid { .. })
    ));

    // Cut-off at T0 + 5 s: done-0..done-4 (finished at T0 + 0..4 s), in batches of 2.
    let mut filter = PurgeFilter::finished_before(T0 + 5 * SEC);
    filter.batch_size = 2;
    assert_eq!(store.purge(filter.clone()).await.unwrap(), 5);
    assert_eq!(
        store.purge(filter).await.unwrap(),
        0,
        "re-running is harmless"
    );
    for i in 0..5 {
        let id = format!("done-{i}");
        assert!(matches!(
            store.load_instance(&id).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(store.read_journal(&id, 0, 10).await.unwrap().is_empty());
        assert!(!store.has_receipt(&id, "s").await.unwrap());
    }
    assert!(store.load_instance("done-5").await.is_ok());
    assert_eq!(store.read_journal("done-5", 0, 10).await.unwrap().len(), 1);
    // Only Cancelled ones, of another definition: none; of this one: done-6.
    let mut cancelled = PurgeFilter::finished_before(T0 + 100 * SEC);
    cancelled.statuses = vec![InstanceStatus::Cancelled];
    cancelled.definition_name = Some("invoice".to_owned());
    assert_eq!(store.purge(cancelled.clone()).await.unwrap(), 0);
    cancelled.definition_name = Some("order".to_owned());
    assert_eq!(store.purge(cancelled).await.unwrap(), 1);
    store.delete_instance("done-5").await.unwrap();
    assert!(
        store
            .find_bookmarks(BookmarkQuery::by_hash("h", 100))
            .await
            .unwrap()
            .is_empty()
    );
    let remaining: Vec<String> = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.instance_id)
        .collect();
    assert_eq!(remaining, ["faulted", "live"]);
    let _ = lease;
}

/// C-21: activation guard: two concurrent creations in one scope, one wins; allowed again
/// once the winner is terminal; a correlation scope spans definitions.
pub async fn c21_activation_guard(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let scoped = |id: &str, definition: &str, scope: &str| {
        let mut new = new_instance(id);
        new.definition_name = definition.to_owned();
        new.activation_scope = Some(scope.to_owned());
        new
    };
    let mut tasks = Vec::new();
    for id in ["a", "b"] {
        let store = store.storage().clone();
        let new = scoped(id, "order", "singleton:order");
        tasks.push(tokio::spawn(
            async move { store.create_instance(new).await },
        ));
    }
    let mut winners = Vec::new();
    for (task, id) in tasks.into_iter().zip(["a", "b"]) {
        match task.await.unwrap() {
            Ok(_) => winners.push(id),
            Err(StoreError::ActivationConflict { scope, existing }) => {
                assert_eq!(scope, "singleton:order");
                assert_ne!(existing, id);
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1);
    let winner = winners[0];
    // Other scopes are free.
    store
        .create_instance(scoped("c", "order", "singleton:invoice"))
        .await
        .unwrap();
    // Terminal winner: allowed again.
    let lease = store
        .acquire_lease(&LeaseKey::instance(winner), "n", T0, TTL)
        .await
        .unwrap();
    store
        .commit(final_commit(winner, 1, lease.token, T0 + SEC))
        .await
        .unwrap();
    store
        .create_instance(scoped("d", "order", "singleton:order"))
        .await
        .unwrap();
    // A correlation scope spans definitions.
    store
        .create_instance(scoped("e", "order", "correlation:42"))
        .await
        .unwrap();
    assert_eq!(
        store
            .create_instance(scoped("f", "invoice", "correlation:42"))
            .await
            .unwrap_err(),
        StoreError::ActivationConflict {
            scope: "correlation:42".to_owned(),
            existing: "e".to_owned()
        }
    );
    // Through a commit, too: a child in a taken scope fails the whole commit.
    let plead = create_leased(&store, "parent").await;
    let mut c = waiting("parent", 1, plead.token, 1);
    c.instances_created = vec![scoped("g", "invoice", "correlation:42")];
    assert!(matches!(
        store.commit(c).await,
        Err(StoreError::ActivationConflict { .. })
    ));
    assert_eq!(store.load_instance("parent").await.unwrap().version, 1);
}
