//! The store conformance suite (ST-33, ST-34), written once and run against every backend.
//!
//! Each case is an async function taking a fresh, empty store as an
//! `Arc<dyn TestBackend>`; it chooses every instant it passes (ST-3) and panics on a
//! violation. [`store_conformance_tests!`](crate::store_conformance_tests) instantiates every
//! case as a `#[tokio::test]` for a backend factory:
//!
//! ```text
//! async fn make() -> (Arc<dyn TestBackend>, ()) { (Arc::new(MemoryStore::new()), ()) }
//! workflow_runtime::store_conformance_tests!(make);
//! ```
//!
//! The factory returns the store and a guard (a temporary directory, say) dropped after the
//! case. Cases are numbered as in `docs/reference/store.md` (ST-34).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::missing_panics_doc
)]

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    BookmarkQuery, BoxFuture, Commit, ControlKind, ControlRequest, DEFAULT_MAX_STATE_BYTES,
    DeadLetterReason, IdempotencyRecord, InstanceFilter, InstanceStatus, InstanceSubStatus,
    JournalCompaction, Lease, LeaseKey, Micros, NewBookmark, NewInstance, NewJournalRecord,
    NewTimer, PurgeFilter, QueueFailure, QueueItem, Storage, Store, StoreError, StoreResult,
    TriggerRow, WakeUp,
};
use super::{DeadLetterFilter, NewIncident};

/// What a case runs against: the backend under test wrapped in the [`Storage`] policy layer
/// (every case goes through it, as the runtime does), plus the backend's raw test hooks.
/// Dereferences to the [`Storage`].
///
/// A backend written outside this crate runs the suite by implementing [`TestBackend`] and
/// calling [`store_conformance_tests!`](crate::store_conformance_tests) with a factory.
pub struct Harness {
    storage: Storage,
    backend: Arc<dyn TestBackend>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").finish_non_exhaustive()
    }
}

impl Harness {
    /// The harness of a fresh, empty backend.
    pub fn new(backend: Arc<dyn TestBackend>) -> Self {
        let store: Arc<dyn Store> = Arc::clone(&backend) as Arc<dyn Store>;
        Self {
            storage: Storage::new(store),
            backend,
        }
    }

    /// The policy layer over the backend.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The harness with a state size limit (C-27).
    #[must_use]
    pub fn with_max_state_bytes(mut self, limit: usize) -> Self {
        self.storage = self.storage.with_max_state_bytes(limit);
        self
    }

    /// Replaces an instance's stored state text as is (C-25).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn write_raw_state(&self, instance_id: &str, raw: &str) -> StoreResult<()> {
        self.backend.write_raw_state(instance_id, raw).await
    }

    /// The stored state text of an instance, as is (C-26).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn read_raw_state(&self, instance_id: &str) -> StoreResult<String> {
        self.backend.read_raw_state(instance_id).await
    }
}

impl std::ops::Deref for Harness {
    type Target = Storage;

    fn deref(&self) -> &Storage {
        &self.storage
    }
}

/// A store with the test hooks the suite needs (C-25, C-26): raw access to a state row.
pub trait TestBackend: Store {
    /// Replaces an instance's stored state text as is.
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>>;

    /// The stored state text of an instance, as is.
    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>>;
}

impl TestBackend for super::MemoryStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(std::future::ready(super::MemoryStore::write_raw_state(
            self,
            instance_id,
            raw,
        )))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(std::future::ready(super::MemoryStore::read_raw_state(
            self,
            instance_id,
        )))
    }
}

#[cfg(feature = "sqlite")]
impl TestBackend for super::SqliteStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(super::SqliteStore::write_raw_state(self, instance_id, raw))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(super::SqliteStore::read_raw_state(self, instance_id))
    }
}

#[cfg(feature = "postgres")]
impl TestBackend for super::PostgresStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(super::PostgresStore::write_raw_state(
            self,
            instance_id,
            raw,
        ))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(super::PostgresStore::read_raw_state(self, instance_id))
    }
}

/// Instantiates every conformance case as a `#[tokio::test]` in the calling module, for a
/// factory `async fn() -> (Arc<dyn TestBackend>, Guard)`.
///
/// `store_conformance_tests!(optional make)` takes a factory returning
/// `Option<(Arc<dyn TestBackend>, Guard)>` instead: `None` skips the case (the factory prints
/// why, e.g. no database server is reachable).
#[macro_export]
macro_rules! store_conformance_tests {
    (optional $make:path) => {
        $crate::store_conformance_tests!(@list @optional $make);
    };
    ($make:path) => {
        $crate::store_conformance_tests!(@list @required $make);
    };
    (@list @$mode:ident $make:path) => {
        $crate::store_conformance_tests!(@cases $mode $make;
            c01_round_trip,
            c02_create_existing,
            c03_commit_increments_version,
            c04_stale_version_writes_nothing,
            c05_concurrent_commits_one_wins,
            c06_fencing,
            c07_leases,
            c07_named_leases,
            c08_bookmark_lookup,
            c09_bookmark_diff,
            c10_correlation_rewrite,
            c11_triggers,
            c12_timers,
            c13_claim_runnable,
            c14_queue_pages,
            c15_queue_ttl,
            c16_queue_attempts,
            c17_dead_letter_once,
            c19_receipts,
            c22_journal,
            c23_list_instances,
            c24_purge,
            c25_decode_error,
            c26_format_too_new,
            c27_too_large,
            c29_control_requests,
            c35_child_waits,
            c34_clock,
            c16_commit_writes_other_instances,
            c22_journal_compaction,
            c28_wake_ups,
            c18_dead_letters,
            c20_idempotency_records,
            c21_activation_guard,
            incidents,
            retention_of_receipts_and_idempotency_records,
            trigger_schedules,
            final_status_clears_bookmarks_and_timers,
        );
    };
    (@cases required $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (store, guard) = $make().await;
                $crate::store::conformance::$case(store).await;
                drop(guard);
            }
        )*
    };
    (@cases optional $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some((store, guard)) = $make().await else { return };
                $crate::store::conformance::$case(store).await;
                drop(guard);
            }
        )*
    };
}

/// A fixed epoch for the suite's instants: 2023-11-14T22:13:20Z in µs.
pub const T0: Micros = 1_700_000_000_000_000;
/// One second in µs.
pub const SEC: Micros = 1_000_000;
/// The lease TTL the suite uses: 30 s.
pub const TTL: Micros = 30 * SEC;

/// A minimal state document of format 1.
pub fn doc(n: i64) -> Value {
    json!({ "format": 1, "n": n })
}

/// A `Running/Pending` instance of definition `order` created at `T0`.
pub fn new_instance(id: &str) -> NewInstance {
    NewInstance {
        instance_id: id.to_owned(),
        definition_name: "order".to_owned(),
        definition_version: "v1".to_owned(),
        status: InstanceStatus::Running,
        sub_status: Some(InstanceSubStatus::Pending),
        correlation_id: None,
        origin_at: T0,
        created_at: T0,
        state: doc(0),
        receipt: None,
        consumed_queue_item: None,
        activation_scope: None,
    }
}

/// A bookmark with `hash` created at `created_at`.
pub fn bookmark(id: &str, hash: &str, created_at: Micros) -> NewBookmark {
    NewBookmark {
        bookmark_id: id.to_owned(),
        hash: hash.to_owned(),
        name: "approved".to_owned(),
        node_id: "root:wait".to_owned(),
        context_id: 2,
        look_back: None,
        created_at,
    }
}

/// A queue item sent at `sent_at`, expiring 10 minutes later.
pub fn queue_item(id: &str, sent_at: Micros) -> QueueItem {
    QueueItem {
        item_id: id.to_owned(),
        stimulus_id: format!("s-{id}"),
        name: "approved".to_owned(),
        hash: "h".to_owned(),
        key_display: Some("order=1".to_owned()),
        payload: json!({ "ok": true, "n": u64::MAX }),
        correlation_id: None,
        targets: json!({ "instance_id": null }),
        sent_at,
        enqueued_at: sent_at,
        expires_at: sent_at + 600 * SEC,
        attempts: 0,
        last_error: None,
        last_attempt_at: None,
        held: false,
        idempotency_key: None,
    }
}

/// Creates `id` and acquires its lease for `owner` at `T0`.
pub async fn create_leased(store: &Storage, id: &str) -> Lease {
    store.create_instance(new_instance(id)).await.unwrap();
    store
        .acquire_lease(&LeaseKey::instance(id), "node-a", T0, TTL)
        .await
        .unwrap()
}

/// A `Suspended/Waiting` commit of `doc(n)`.
pub fn waiting(id: &str, version: u64, token: u64, n: i64) -> Commit {
    Commit::new(
        id,
        version,
        token,
        T0 + SEC,
        doc(n),
        InstanceStatus::Suspended,
        Some(InstanceSubStatus::Waiting),
    )
}

fn final_commit(id: &str, version: u64, token: u64, at: Micros) -> Commit {
    let mut c = Commit::new(
        id,
        version,
        token,
        at,
        doc(99),
        InstanceStatus::Finished,
        None,
    );
    c.release_lease = true;
    c
}

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

/// C-6: a superseded lease token is fenced even with the right version.
pub async fn c06_fencing(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = create_leased(&store, "wf-1").await;
    assert_eq!(a.expires_at, T0 + TTL);
    let later = T0 + TTL + SEC;
    let b = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", later, TTL)
        .await
        .unwrap();
    assert!(b.token > a.token);
    let err = store
        .commit(waiting("wf-1", 1, a.token, 1))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Fenced {
            resource: "instance:wf-1".to_owned(),
            token: a.token,
            current: b.token
        }
    );
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::instance("wf-1"), a.token, later, TTL)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .release_lease(&LeaseKey::instance("wf-1"), a.token)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.load_instance("wf-1").await.unwrap().version, 1);
    assert_eq!(
        store.commit(waiting("wf-1", 1, b.token, 2)).await.unwrap(),
        2
    );
    // A commit without any held lease is fenced too.
    store
        .release_lease(&LeaseKey::instance("wf-1"), b.token)
        .await
        .unwrap();
    assert!(matches!(
        store.commit(waiting("wf-1", 2, b.token, 3)).await,
        Err(StoreError::Fenced { .. })
    ));
}

/// C-7: leases: held, renew, release, takeover; tokens never reused.
pub async fn c07_leases(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = create_leased(&store, "wf-1").await;
    assert_eq!(a.token, 1);
    let err = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + SEC, TTL)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::LeaseHeld {
            resource: "instance:wf-1".to_owned(),
            holder: "node-a".to_owned(),
            until: T0 + TTL
        }
    );
    assert!(err.is_transient());
    let renewed = store
        .renew_lease(&LeaseKey::instance("wf-1"), a.token, T0 + 20 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewed.lease.token, a.token);
    assert_eq!(renewed.lease.expires_at, T0 + 50 * SEC);
    assert_eq!(renewed.control_request, None);
    // Still held after the original expiry because it was renewed.
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + 40 * SEC, TTL)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    store
        .release_lease(&LeaseKey::instance("wf-1"), a.token)
        .await
        .unwrap();
    let b = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + 41 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(b.token, a.token + 1, "release then acquire: a higher token");
    let record = store.load_instance("wf-1").await.unwrap();
    assert_eq!(
        record.lease.map(|l| (l.owner, l.token)),
        Some(("node-b".to_owned(), b.token))
    );
    // Expired: taken over.
    let c = store
        .acquire_lease(
            &LeaseKey::instance("wf-1"),
            "node-c",
            T0 + 41 * SEC + TTL,
            TTL,
        )
        .await
        .unwrap();
    assert_eq!(c.token, b.token + 1);
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("nope"), "x", T0, TTL)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// C-7 for named leases (ST-11).
pub async fn c07_named_leases(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = store
        .acquire_lease(&LeaseKey::named("purge"), "node-a", T0, TTL)
        .await
        .unwrap();
    assert_eq!(a.token, 1);
    assert!(matches!(
        store.acquire_lease(&LeaseKey::named("purge"), "node-b", T0 + SEC, TTL).await,
        Err(StoreError::LeaseHeld { holder, .. }) if holder == "node-a"
    ));
    let renewed = store
        .renew_lease(&LeaseKey::named("purge"), a.token, T0 + 10 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewed.lease.expires_at, T0 + 40 * SEC);
    let b = store
        .acquire_lease(&LeaseKey::named("purge"), "node-b", T0 + 41 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(b.token, 2);
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::named("purge"), a.token, T0 + 42 * SEC, TTL)
            .await,
        Err(StoreError::Fenced {
            token: 1,
            current: 2,
            ..
        })
    ));
    store
        .release_lease(&LeaseKey::named("purge"), b.token)
        .await
        .unwrap();
    assert!(matches!(
        store
            .release_lease(&LeaseKey::named("purge"), b.token)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    let c = store
        .acquire_lease(&LeaseKey::named("purge"), "node-c", T0 + 43 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(c.token, 3, "tokens are never reused");
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::named("other"), 1, T0, TTL)
            .await,
        Err(StoreError::Fenced { current: 0, .. })
    ));
}

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
    let ids = |rows: Vec<super::BookmarkRow>| -> Vec<String> {
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

fn trigger(node: &str, hash: &str, payload: Value) -> TriggerRow {
    TriggerRow {
        definition_name: "order".to_owned(),
        definition_version: "v1".to_owned(),
        node_id: node.to_owned(),
        hash: hash.to_owned(),
        name: "order_placed".to_owned(),
        key_display: None,
        payload,
        activation: json!({ "kind": "always" }),
        registered_at: T0,
    }
}

/// C-11: trigger replace by difference; re-running writes nothing; lookup by several hashes.
pub async fn c11_triggers(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let first = vec![
        trigger("root:a", "h1", json!({})),
        trigger("root:b", "h2", json!({})),
        trigger("root:c", "h3", json!({})),
    ];
    let diff = store.replace_triggers("order", first).await.unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (3, 0, 0));
    let mut other = trigger("root:x", "h1", json!({}));
    other.definition_name = "invoice".to_owned();
    store
        .replace_triggers("invoice", vec![other])
        .await
        .unwrap();

    let mut later_a = trigger("root:a", "h1", json!({}));
    later_a.registered_at = T0 + SEC; // only the registration time differs
    let second = vec![
        later_a,
        trigger("root:b", "h2", json!({ "changed": true })),
        trigger("root:d", "h4", json!({})),
    ];
    let diff = store
        .replace_triggers("order", second.clone())
        .await
        .unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (2, 1, 1));
    let diff = store.replace_triggers("order", second).await.unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (0, 0, 3));

    let found = store
        .find_triggers(&["h1".to_owned(), "h2".to_owned(), "h3".to_owned()])
        .await
        .unwrap();
    let keys: Vec<(String, String)> = found
        .iter()
        .map(|t| (t.definition_name.clone(), t.node_id.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("invoice".to_owned(), "root:x".to_owned()),
            ("order".to_owned(), "root:a".to_owned()),
            ("order".to_owned(), "root:b".to_owned()),
        ]
    );
    assert_eq!(found[2].payload, json!({ "changed": true }));
    assert_eq!(found[1].registered_at, T0, "unchanged rows keep their row");
    let mut wrong = trigger("root:a", "h1", json!({}));
    wrong.definition_name = "invoice".to_owned();
    assert!(matches!(
        store.replace_triggers("order", vec![wrong]).await,
        Err(StoreError::Invalid { .. })
    ));
    let diff = store.replace_triggers("order", Vec::new()).await.unwrap();
    assert_eq!(diff.removed, 3);
}

fn timer(id: &str, due_at: Micros) -> NewTimer {
    NewTimer {
        timer_id: id.to_owned(),
        kind: "delay".to_owned(),
        due_at,
    }
}

/// C-12: timers: earliest due time, due claims in order, disjoint claimers, expired claims,
/// parked timers, deletion by commit.
pub async fn c12_timers(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    assert_eq!(store.earliest_timer(T0).await.unwrap(), None);
    let a = create_leased(&store, "wf-a").await;
    let b = create_leased(&store, "wf-b").await;
    let mut c = waiting("wf-a", 1, a.token, 1);
    c.timers_added = vec![
        timer("t3", T0 + 30 * SEC),
        timer("t1", T0 + 10 * SEC),
        timer("t2", T0 + 20 * SEC),
    ];
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-b", 1, b.token, 1);
    c.timers_added = vec![timer("t0", T0 + 5 * SEC), timer("t9", T0 + 90 * SEC)];
    store.commit(c).await.unwrap();
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 5 * SEC));

    // Park wf-b's timers: never returned.
    let mut c = waiting("wf-b", 2, b.token, 2);
    c.timers_parked = Some(true);
    store.commit(c).await.unwrap();
    assert!(
        store
            .list_timers("wf-b")
            .await
            .unwrap()
            .iter()
            .all(|t| t.parked)
    );
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 10 * SEC));

    let now = T0 + 25 * SEC;
    let claim_ttl = 30 * SEC;
    let first = store
        .claim_due_timers("node-a", now, claim_ttl, 1)
        .await
        .unwrap();
    let second = store
        .claim_due_timers("node-b", now, claim_ttl, 10)
        .await
        .unwrap();
    let ids = |rows: &[super::TimerRow]| -> Vec<String> {
        rows.iter().map(|t| t.timer_id.clone()).collect()
    };
    assert_eq!(ids(&first), ["t1"]);
    assert_eq!(ids(&second), ["t2"], "disjoint, and only due_at <= now");
    assert_eq!(first[0].instance_id.as_deref(), Some("wf-a"));
    assert!(
        store
            .claim_due_timers("node-c", now, claim_ttl, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Claimed timers are not "earliest" while claimed.
    assert_eq!(
        store.earliest_timer(now).await.unwrap(),
        Some(T0 + 30 * SEC)
    );
    // The claims expire: claimable again.
    let after = now + claim_ttl;
    let again = store
        .claim_due_timers("node-c", after, claim_ttl, 10)
        .await
        .unwrap();
    assert_eq!(ids(&again), ["t1", "t2", "t3"]);

    // A commit that deletes t1 removes it; unparking wf-b brings t0 back.
    let mut c = waiting("wf-a", 2, a.token, 2);
    c.timers_removed = vec!["t1".to_owned()];
    store.commit(c).await.unwrap();
    assert_eq!(ids(&store.list_timers("wf-a").await.unwrap()), ["t2", "t3"]);
    let mut c = waiting("wf-b", 3, b.token, 3);
    c.timers_parked = Some(false);
    store.commit(c).await.unwrap();
    let later = after + claim_ttl;
    let due = store
        .claim_due_timers("node-d", later, claim_ttl, 10)
        .await
        .unwrap();
    assert_eq!(ids(&due), ["t0", "t2", "t3"]);
}

/// C-13: `claim_runnable` gives `Running` instances without a live lease, each to one claimer.
pub async fn c13_claim_runnable(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for (id, at) in [("r1", 3), ("r2", 1), ("r3", 2)] {
        let mut new = new_instance(id);
        new.created_at = T0 + at;
        store.create_instance(new).await.unwrap();
    }
    for (id, status) in [
        ("s1", InstanceStatus::Suspended),
        ("f1", InstanceStatus::Faulted),
        ("d1", InstanceStatus::Finished),
        ("x1", InstanceStatus::Cancelled),
    ] {
        let mut new = new_instance(id);
        new.status = status;
        new.sub_status = None;
        store.create_instance(new).await.unwrap();
    }
    // An interrupted one (Running/Executing) with a live lease.
    let held = create_leased(&store, "e1").await;
    let mut c = Commit::new(
        "e1",
        1,
        held.token,
        T0,
        doc(1),
        InstanceStatus::Running,
        Some(InstanceSubStatus::Executing),
    );
    c.correlation_id = None;
    store.commit(c).await.unwrap();

    let now = T0 + SEC;
    let first = store.claim_runnable("node-a", now, TTL, 2).await.unwrap();
    let second = store.claim_runnable("node-b", now, TTL, 10).await.unwrap();
    let ids = |rows: &[super::ClaimedInstance]| -> Vec<String> {
        rows.iter().map(|c| c.instance_id.clone()).collect()
    };
    assert_eq!(ids(&first), ["r2", "r3"], "oldest updated_at first");
    assert_eq!(ids(&second), ["r1"]);
    assert!(first.iter().all(|c| c.lease.expires_at == now + TTL));
    assert_eq!(first[0].sub_status, Some(InstanceSubStatus::Pending));
    let record = store.load_instance("r2").await.unwrap();
    assert_eq!(
        record.lease.map(|l| (l.owner, l.token)),
        Some(("node-a".to_owned(), first[0].lease.token))
    );
    assert!(
        store
            .claim_runnable("node-c", now, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // After the leases expire: all four Running ones, e1 interrupted.
    let later = now + TTL + SEC;
    let third = store
        .claim_runnable("node-c", later, TTL, 10)
        .await
        .unwrap();
    let mut got = ids(&third);
    got.sort();
    assert_eq!(got, ["e1", "r1", "r2", "r3"]);
    let e1 = third.iter().find(|c| c.instance_id == "e1").unwrap();
    assert_eq!(e1.sub_status, Some(InstanceSubStatus::Executing));
    assert!(e1.lease.token > held.token);
}

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

/// C-22: journal: append order, range reads, truncation of huge details.
pub async fn c22_journal(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let entry = |n: u64| NewJournalRecord {
        at: T0 + n as Micros,
        kind: format!("k{n}"),
        context_id: Some(n),
        node_id: Some("root".to_owned()),
        detail: json!({ "n": n }),
    };
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.journal = (1..=3).map(entry).collect();
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.journal = (4..=5).map(entry).collect();
    c.journal.push(NewJournalRecord {
        at: T0,
        kind: "big".to_owned(),
        context_id: None,
        node_id: None,
        detail: json!({ "blob": "x".repeat(super::MAX_JOURNAL_DETAIL_BYTES) }),
    });
    store.commit(c).await.unwrap();
    let all = store.read_journal("wf-1", 0, 100).await.unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(all[3].kind, "k4");
    assert_eq!(all[3].detail, json!({ "n": 4 }));
    assert_eq!(all[3].context_id, Some(4));
    assert_eq!(all[3].node_id.as_deref(), Some("root"));
    assert_eq!(all[5].detail["truncated"], json!(true));
    let range = store.read_journal("wf-1", 2, 2).await.unwrap();
    let seqs: Vec<u64> = range.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3]);
    assert!(store.read_journal("wf-2", 0, 10).await.unwrap().is_empty());
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

/// C-25: a corrupted state document gives `Decode` naming the instance; a list returns it as
/// an error item; other instances load normally.
pub async fn c25_decode_error(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for id in ["wf-1", "wf-2", "wf-3"] {
        store.create_instance(new_instance(id)).await.unwrap();
    }
    store
        .write_raw_state("wf-2", "{\"format\": 1, oops")
        .await
        .unwrap();
    let err = store.load_instance("wf-2").await.unwrap_err();
    match &err {
        StoreError::Decode { what, id, path, .. } => {
            assert_eq!(
                (*what, id.as_str(), path.as_str()),
                ("instance", "wf-2", "state")
            );
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert!(err.to_string().contains("wf-2"));
    assert_eq!(store.load_instance("wf-1").await.unwrap().state, doc(0));
    assert_eq!(store.load_instance("wf-3").await.unwrap().state, doc(0));
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    // A listing reads columns, not documents: the corrupted row is listed with its columns,
    // and loading it names it.
    assert!(listed[0].summary.is_ok());
    assert_eq!(listed[1].instance_id, "wf-2");
    assert!(listed[1].summary.is_ok());
    assert!(matches!(
        store.load_instance(&listed[1].instance_id).await,
        Err(StoreError::Decode { .. })
    ));
    assert!(listed[2].summary.is_ok());
    // A document without a format is a decode error too.
    store.write_raw_state("wf-3", "{\"n\": 1}").await.unwrap();
    assert!(matches!(
        store.load_instance("wf-3").await,
        Err(StoreError::Decode { path, .. }) if path == "state.format"
    ));
}

/// C-26: a document with a newer format gives `FormatTooNew` and is not modified.
pub async fn c26_format_too_new(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let raw = "{\"format\":2,\"future\":[1,2,3]}";
    store.write_raw_state("wf-1", raw).await.unwrap();
    assert_eq!(
        store.load_instance("wf-1").await.unwrap_err(),
        StoreError::FormatTooNew {
            what: "instance",
            id: "wf-1".to_owned(),
            found: 2,
            supported: super::STATE_FORMAT
        }
    );
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(listed[0].summary.as_ref().unwrap().version, 1);
    assert_eq!(store.read_raw_state("wf-1").await.unwrap(), raw);
    // Writing a newer format is refused.
    let mut new = new_instance("wf-2");
    new.state = json!({ "format": 2 });
    assert!(matches!(
        store.create_instance(new).await,
        Err(StoreError::Invalid { what: "state", .. })
    ));
}

/// C-27: an oversized document gives `TooLarge` and nothing is written.
pub async fn c27_too_large(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let big = json!({ "format": 1, "blob": "x".repeat(DEFAULT_MAX_STATE_BYTES) });
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.state = big.clone();
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    let err = store.commit(c).await.unwrap_err();
    assert!(
        matches!(err, StoreError::TooLarge { what: "state", limit, .. } if limit == DEFAULT_MAX_STATE_BYTES),
        "{err:?}"
    );
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!((loaded.version, loaded.state), (1, doc(0)));
    assert!(store.list_bookmarks("wf-1").await.unwrap().is_empty());
    let mut new = new_instance("wf-2");
    new.state = big;
    assert!(matches!(
        store.create_instance(new).await,
        Err(StoreError::TooLarge { .. })
    ));
    assert!(matches!(
        store.load_instance("wf-2").await,
        Err(StoreError::NotFound { .. })
    ));
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

/// C-29: a control request does not change the version, is returned by renewal, and is
/// cleared by the commit that honours it.
pub async fn c29_control_requests(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let request = ControlRequest {
        kind: ControlKind::Cancel,
        reason: Some("operator".to_owned()),
    };
    store
        .request_control("wf-1", request.clone())
        .await
        .unwrap();
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.control_request.as_ref(), Some(&request));
    // The owning runtime finds the requested instances, and only those.
    store.create_instance(new_instance("wf-2")).await.unwrap();
    let requested = |store: Storage| async move {
        store
            .list_instances(InstanceFilter {
                control_requested: true,
                ..InstanceFilter::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.instance_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(requested(store.storage().clone()).await, ["wf-1"]);
    let renewal = store
        .renew_lease(&LeaseKey::instance("wf-1"), lease.token, T0 + SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewal.control_request, Some(request));
    // The running commit (version 1) still succeeds.
    assert_eq!(
        store
            .commit(waiting("wf-1", 1, lease.token, 1))
            .await
            .unwrap(),
        2
    );
    assert!(
        store
            .load_instance("wf-1")
            .await
            .unwrap()
            .control_request
            .is_some()
    );
    let mut honour = Commit::new(
        "wf-1",
        2,
        lease.token,
        T0 + 2 * SEC,
        doc(2),
        InstanceStatus::Cancelled,
        None,
    );
    honour.clear_control_request = true;
    store.commit(honour).await.unwrap();
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.control_request, None);
    assert_eq!(loaded.finished_at, Some(T0 + 2 * SEC));
    assert!(requested(store.storage().clone()).await.is_empty());
    assert!(matches!(
        store
            .request_control(
                "wf-1",
                ControlRequest {
                    kind: ControlKind::Suspend,
                    reason: None
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
    // Refused: nothing recorded.
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.control_request, None);
    assert!(requested(store.storage().clone()).await.is_empty());
}

/// C-34: with `now` jumping forward and back, leases, claims, due times and TTLs follow it and
/// nothing else.
pub async fn c34_clock(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let far = T0 + 1000 * SEC;
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", far, TTL)
        .await
        .unwrap();
    // Back in time: the lease is still live there.
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0, TTL)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.timers_added = vec![timer("t1", T0 + 10 * SEC)];
    store.commit(c).await.unwrap();
    assert!(
        store
            .claim_due_timers("x", T0, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .claim_due_timers("x", T0 + 10 * SEC, TTL, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Back again: the claim is live in the past and the future alike until it expires.
    assert!(
        store
            .claim_due_timers("y", T0 + 11 * SEC, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut item = queue_item("q1", T0);
    item.expires_at = T0 + 5 * SEC;
    store.enqueue(item).await.unwrap();
    assert_eq!(store.expire_queue(T0 + 4 * SEC, 10).await.unwrap(), 0);
    assert_eq!(
        store.claim_queue_page("z", T0, 1, 10).await.unwrap().len(),
        1,
        "not expired at T0"
    );
    assert_eq!(store.expire_queue(T0 + 5 * SEC, 10).await.unwrap(), 1);
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

/// C-22: compaction in the same commit: a range replaced by its summary, order kept.
pub async fn c22_journal_compaction(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let entry = |n: u64| NewJournalRecord {
        at: T0 + n as Micros,
        kind: format!("k{n}"),
        context_id: None,
        node_id: None,
        detail: json!(n),
    };
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.journal = (1..=5).map(entry).collect();
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.journal_compaction = Some(JournalCompaction {
        through_seq: 4,
        summary: NewJournalRecord {
            at: T0 + 4,
            kind: "compacted".to_owned(),
            context_id: None,
            node_id: None,
            detail: json!({ "entries": 4 }),
        },
    });
    c.journal = vec![entry(6)];
    // A rejected compaction changes nothing.
    let mut stale = c.clone();
    stale.expected_version = 1;
    assert!(store.commit(stale).await.is_err());
    assert_eq!(store.read_journal("wf-1", 0, 100).await.unwrap().len(), 5);
    store.commit(c).await.unwrap();
    let all = store.read_journal("wf-1", 0, 100).await.unwrap();
    let got: Vec<(u64, String)> = all.iter().map(|e| (e.seq, e.kind.clone())).collect();
    assert_eq!(
        got,
        [
            (4, "compacted".to_owned()),
            (5, "k5".to_owned()),
            (6, "k6".to_owned())
        ]
    );
}

fn drain(rx: &mut tokio::sync::broadcast::Receiver<WakeUp>) -> Vec<WakeUp> {
    let mut hints = Vec::new();
    while let Ok(hint) = rx.try_recv() {
        hints.push(hint);
    }
    hints
}

/// C-28: enqueue, a commit adding a bookmark, a runnable instance and a terminal instance
/// each produce a hint (sent before the operation's future completes).
pub async fn c28_wake_ups(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut rx = store.subscribe();
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::QueueChanged));

    store.create_instance(new_instance("wf-1")).await.unwrap();
    let runnable = WakeUp::InstanceRunnable {
        id: "wf-1".to_owned(),
    };
    assert!(drain(&mut rx).contains(&runnable));

    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    c.timers_added = vec![timer("t1", T0 + 5 * SEC), timer("t2", T0 + 3 * SEC)];
    store.commit(c).await.unwrap();
    let hints = drain(&mut rx);
    assert!(hints.contains(&WakeUp::QueueChanged), "{hints:?}");
    assert!(hints.contains(&WakeUp::TimersChanged {
        earliest: Some(T0 + 3 * SEC)
    }));

    store
        .request_control(
            "wf-1",
            ControlRequest {
                kind: ControlKind::Cancel,
                reason: None,
            },
        )
        .await
        .unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::ControlRequested {
        id: "wf-1".to_owned()
    }));

    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.status = InstanceStatus::Running;
    c.sub_status = Some(InstanceSubStatus::Pending);
    c.release_lease = true;
    store.commit(c).await.unwrap();
    assert!(drain(&mut rx).contains(&runnable));

    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    store
        .commit(final_commit("wf-1", 3, lease.token, T0 + SEC))
        .await
        .unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::InstanceTerminal {
        id: "wf-1".to_owned()
    }));
    // A failed operation sends nothing.
    assert!(
        store
            .commit(waiting("wf-1", 1, lease.token, 9))
            .await
            .is_err()
    );
    assert!(drain(&mut rx).is_empty());
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
    let ids = |rows: Vec<super::DeadLetter>| -> Vec<String> {
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

/// ST-12, FLT-6, FLT-8, FLT-9: the faulting commit opens an incident, the commit of the
/// operator action resolves it, an `unreadable_state` incident is inserted alone, purge
/// removes them with their instance.
pub async fn incidents(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let opened = |id: &str, at: Micros| NewIncident {
        incident_id: id.to_owned(),
        kind: "activity_failed".to_owned(),
        created_at: at,
        record: json!({ "node_id": "root:pay", "error": "card declined" }),
    };
    let mut fault = waiting("wf-1", 1, lease.token, 1);
    fault.status = InstanceStatus::Faulted;
    fault.sub_status = None;
    fault.incidents_opened = vec![opened("i-1", T0 + 2)];
    store.commit(fault).await.unwrap();
    // A rejected commit opens nothing.
    let mut stale = waiting("wf-1", 1, lease.token, 1);
    stale.incidents_opened = vec![opened("i-x", T0)];
    assert!(store.commit(stale).await.is_err());
    // Inserted alone for another instance whose state is unreadable.
    store.create_instance(new_instance("wf-2")).await.unwrap();
    store.write_raw_state("wf-2", "garbage").await.unwrap();
    store
        .insert_incident(
            "wf-2",
            NewIncident {
                incident_id: "i-2".to_owned(),
                kind: "unreadable_state".to_owned(),
                created_at: T0 + 1,
                record: json!({}),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        store.insert_incident("wf-2", opened("i-2", T0)).await,
        Err(StoreError::AlreadyExists {
            what: "incident",
            ..
        })
    ));
    assert!(matches!(
        store.insert_incident("nope", opened("i-3", T0)).await,
        Err(StoreError::NotFound { .. })
    ));
    let listed = store.list_incidents("wf-1").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].instance_id, "wf-1");
    assert_eq!(listed[0].definition_name, "order");
    assert_eq!(listed[0].record["error"], json!("card declined"));
    assert_eq!(listed[0].resolved_at, None);
    let all = store.list_all_incidents(true, None, 10).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|i| i.incident_id.as_str()).collect();
    assert_eq!(ids, ["i-2", "i-1"], "created_at order across instances");
    let after = store
        .list_all_incidents(false, Some((T0 + 1, "i-2".to_owned())), 10)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);

    // The retry commit resolves it.
    let mut retry = waiting("wf-1", 2, lease.token, 2);
    retry.status = InstanceStatus::Running;
    retry.sub_status = Some(InstanceSubStatus::Executing);
    retry.incidents_resolved = vec![("i-1".to_owned(), "retried".to_owned())];
    retry
        .incidents_resolved
        .push(("i-2".to_owned(), "not mine".to_owned()));
    store.commit(retry).await.unwrap();
    let listed = store.list_incidents("wf-1").await.unwrap();
    assert_eq!(listed[0].resolved_at, Some(T0 + SEC));
    assert_eq!(listed[0].resolution.as_deref(), Some("retried"));
    let open: Vec<String> = store
        .list_all_incidents(true, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.incident_id)
        .collect();
    assert_eq!(open, ["i-2"], "another instance's incident is not resolved");

    // Purge removes an instance's incidents.
    store
        .commit(final_commit("wf-1", 3, lease.token, T0 + 2 * SEC))
        .await
        .unwrap();
    assert_eq!(
        store
            .purge(PurgeFilter::finished_before(T0 + 3 * SEC))
            .await
            .unwrap(),
        1
    );
    assert!(store.list_incidents("wf-1").await.unwrap().is_empty());
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

/// ST-9, ST-17, TM-11 to TM-13: trigger schedules are timer rows without an instance; firing
/// creates the instance and advances the schedule in one operation, once per occurrence.
pub async fn trigger_schedules(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let schedule = |id: &str, kind: &str, due_at: Micros| super::Schedule {
        schedule_id: id.to_owned(),
        definition_name: "report".to_owned(),
        node_id: "root:every_hour".to_owned(),
        kind: kind.to_owned(),
        due_at,
        fired: false,
    };
    assert!(
        store
            .put_schedule(schedule("cron-1", "cron", T0 + 10 * SEC))
            .await
            .unwrap()
    );
    // Re-registering keeps next_due.
    assert!(
        !store
            .put_schedule(schedule("cron-1", "cron", T0 + 99 * SEC))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_schedule(schedule("start-1", "start_at", T0 + 5 * SEC))
            .await
            .unwrap()
    );
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 5 * SEC));

    let now = T0 + 10 * SEC;
    let due = store.claim_due_timers("n", now, TTL, 10).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|t| t.timer_id.as_str()).collect();
    assert_eq!(ids, ["start-1", "cron-1"]);
    assert_eq!(due[1].instance_id, None);
    assert_eq!(due[1].definition_name.as_deref(), Some("report"));
    assert_eq!(due[1].node_id.as_deref(), Some("root:every_hour"));

    // Fire the cron occurrence: instance created, next_due advanced, claim released.
    let mut first = new_instance("report-t10");
    first.definition_name = "report".to_owned();
    first.activation_scope = Some("singleton:report".to_owned());
    assert_eq!(
        store
            .fire_schedule("cron-1", T0 + 10 * SEC, first.clone(), Some(T0 + 70 * SEC))
            .await
            .unwrap(),
        super::ScheduleFiring::Started
    );
    assert!(store.load_instance("report-t10").await.is_ok());
    // A late duplicate of the same occurrence writes nothing.
    let mut twin = first.clone();
    twin.instance_id = "report-twin".to_owned();
    assert_eq!(
        store
            .fire_schedule("cron-1", T0 + 10 * SEC, twin, Some(T0 + 70 * SEC))
            .await
            .unwrap(),
        super::ScheduleFiring::Stale
    );
    assert!(store.load_instance("report-twin").await.is_err());
    // Next occurrence: the singleton is still running, refused, but the schedule advances.
    let mut second = first.clone();
    second.instance_id = "report-t70".to_owned();
    assert_eq!(
        store
            .fire_schedule("cron-1", T0 + 70 * SEC, second, Some(T0 + 130 * SEC))
            .await
            .unwrap(),
        super::ScheduleFiring::Refused {
            existing: "report-t10".to_owned()
        }
    );
    let schedules = store.list_schedules("report").await.unwrap();
    assert_eq!(schedules.len(), 2);
    assert_eq!(schedules[0].schedule_id, "cron-1");
    assert_eq!(schedules[0].due_at, T0 + 130 * SEC);

    // StartAt fires once and is never claimed again.
    let mut start = new_instance("report-start");
    start.definition_name = "report".to_owned();
    assert_eq!(
        store
            .fire_schedule("start-1", T0 + 5 * SEC, start, None)
            .await
            .unwrap(),
        super::ScheduleFiring::Started
    );
    let schedules = store.list_schedules("report").await.unwrap();
    assert!(schedules[1].fired);
    assert!(
        !store
            .put_schedule(schedule("start-1", "start_at", T0))
            .await
            .unwrap()
    );
    let later = T0 + 1000 * SEC;
    let due = store.claim_due_timers("n", later, TTL, 10).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|t| t.timer_id.as_str()).collect();
    assert_eq!(ids, ["cron-1"]);
    // Removing the trigger removes its schedule; an instance's timer is not a schedule.
    assert!(store.delete_schedule("cron-1").await.unwrap());
    assert!(!store.delete_schedule("cron-1").await.unwrap());
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.timers_added = vec![timer("t1", T0)];
    store.commit(c).await.unwrap();
    assert!(!store.delete_schedule("t1").await.unwrap());
    assert_eq!(store.list_timers("wf-1").await.unwrap().len(), 1);
}

/// PostgreSQL test databases: each caller gets a store on a fresh schema of its own, dropped
/// with the guard, so tests run in parallel on one database.
#[cfg(feature = "postgres")]
pub mod postgres {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::store::{PostgresOptions, PostgresStore};

    /// The server the tests use: `WORKFLOW_PG_URL`, else the local default
    /// `postgres://postgres@127.0.0.1:5432/postgres`.
    pub fn database_url() -> String {
        std::env::var("WORKFLOW_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    /// A fresh schema name: `wf_test_<pid>_<time>_<n>`.
    pub fn fresh_schema_name() -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!(
            "wf_test_{}_{nanos}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Drops its schema (with every table in it) when dropped.
    #[derive(Debug)]
    pub struct SchemaGuard {
        url: String,
        schema: String,
    }

    impl SchemaGuard {
        /// A guard for `schema` on the server at `url`.
        pub fn new(url: impl Into<String>, schema: impl Into<String>) -> Self {
            Self {
                url: url.into(),
                schema: schema.into(),
            }
        }

        /// The schema's name.
        pub fn schema(&self) -> &str {
            &self.schema
        }
    }

    impl Drop for SchemaGuard {
        fn drop(&mut self) {
            let (url, schema) = (self.url.clone(), self.schema.clone());
            // Drop runs inside the test's runtime, which cannot be blocked on: use a thread
            // with its own.
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                runtime.block_on(async {
                    use sqlx::Connection;
                    let mut conn = sqlx::PgConnection::connect(&url).await.ok()?;
                    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .execute(&mut conn)
                        .await
                        .ok()?;
                    conn.close().await.ok()
                })
            });
            let _ = dropped.join();
        }
    }

    /// A store on a fresh schema, or `None` (with the reason printed) when no server is
    /// reachable at [`database_url`].
    pub async fn fresh_store() -> Option<(Arc<PostgresStore>, SchemaGuard)> {
        fresh_store_with(PostgresOptions::default()).await
    }

    /// [`fresh_store`] with options (the schema name is replaced by a fresh one).
    pub async fn fresh_store_with(
        options: PostgresOptions,
    ) -> Option<(Arc<PostgresStore>, SchemaGuard)> {
        let url = database_url();
        let schema = fresh_schema_name();
        let guard = SchemaGuard::new(url.clone(), schema.clone());
        let options = PostgresOptions {
            max_connections: 4,
            ..options.schema(schema)
        };
        match PostgresStore::connect_with(&url, &options).await {
            Ok(store) => Some((Arc::new(store), guard)),
            Err(crate::store::StoreError::Unavailable { message }) => {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("skipped: no PostgreSQL server reachable at {url}: {message}");
                }
                None
            }
            Err(other) => panic!("opening the PostgreSQL store failed: {other}"),
        }
    }
}
