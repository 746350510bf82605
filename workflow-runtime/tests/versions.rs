//! Versions side by side and migrations (ENG-45, ENG-54): two versions of one state machine
//! running in one runtime, and waiting instances moved from the previous version to the new
//! one across restarts, on the memory store, SQLite and PostgreSQL (skipped without a server
//! at `WORKFLOW_PG_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

mod support;

use serde::{Deserialize, Serialize};
use support::{Migrating, Reopener, quiet, send_resumed, start_order, wall_now};
use workflow_runtime::store::{InstanceStatus, MemoryStore, Storage};
use workflow_runtime::{
    Completion, JournalKind, Migrate, MigrateError, Migration, MigrationOutcome, Runtime,
    StartOptions, Workflow, state_machine,
};

/// The first version's data.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OrderV1 {
    order_id: String,
    total: u64,
}

/// The current version's data: the total in cents, and a currency.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    total_cents: u64,
    currency: String,
}

mod v1 {
    use workflow_runtime::state_machine;

    /// The first version, kept to run (and migrate) its instances.
    #[state_machine(data = super::OrderV1, initial = New, name = "order")]
    pub enum OrderFlow {
        #[on(pay: event("payment").key(order_id) => Paid)]
        New,
        #[on(pack: event("packed").key(order_id) => Packed)]
        Paid,
        #[on(ship: event("shipped").key(order_id) => Shipped)]
        Packed,
        Shipped,
    }
}

/// The current version: `New` renamed `Open`, which expires after a week, and a cancel.
#[state_machine(data = Order, initial = Open, name = "order")]
pub enum OrderFlow {
    #[on(pay: event("payment").key(order_id) => Paid)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    #[on(expire: after(Duration::from_secs(7 * 24 * 3600)) => Cancelled)]
    /// Placed, not paid.
    Open,
    #[on(pack: event("packed").key(order_id) => Packed)]
    /// Paid.
    Paid,
    #[on(ship: event("shipped").key(order_id) => Shipped)]
    /// Packed.
    Packed,
    /// Shipped.
    Shipped,
    /// Cancelled.
    Cancelled,
}

impl Migrate<v1::OrderFlow> for OrderFlow {
    fn state(old: v1::OrderFlow) -> Self {
        match old {
            v1::OrderFlow::New => OrderFlow::Open,
            v1::OrderFlow::Paid => OrderFlow::Paid,
            v1::OrderFlow::Packed => OrderFlow::Packed,
            v1::OrderFlow::Shipped => OrderFlow::Shipped,
        }
    }

    fn data(old: OrderV1) -> Order {
        Order {
            order_id: old.order_id,
            total_cents: old.total * 100,
            currency: "EUR".to_owned(),
        }
    }
}

/// An unrelated state machine (another name).
#[state_machine(data = Order, initial = Open, name = "invoice")]
pub enum InvoiceFlow {
    #[on(pay: event("paid").key(order_id) => Paid)]
    /// Open.
    Open,
    /// Paid.
    Paid,
}

impl Migrate<v1::OrderFlow> for InvoiceFlow {
    fn state(old: v1::OrderFlow) -> Self {
        match old {
            v1::OrderFlow::New => InvoiceFlow::Open,
            v1::OrderFlow::Paid | v1::OrderFlow::Packed | v1::OrderFlow::Shipped => {
                InvoiceFlow::Paid
            }
        }
    }

    fn data(old: OrderV1) -> Order {
        <OrderFlow as Migrate<v1::OrderFlow>>::data(old)
    }
}

/// A quiet runtime on `store` that runs only the first version.
fn first_version_runtime(store: Storage) -> Runtime {
    quiet(Runtime::builder())
        .store(store)
        .register::<v1::OrderFlow>()
        .build()
        .unwrap()
}

/// A quiet runtime on `store` that runs the first version beside the current one.
fn both_versions_runtime(store: Storage) -> Runtime {
    quiet(Runtime::builder())
        .store(store)
        .register_previous::<v1::OrderFlow>()
        .register::<OrderFlow>()
        .build()
        .unwrap()
}

/// Starts an instance `id` of the first version.
async fn start_v1(runtime: &Runtime, id: &str) {
    start_order(runtime, v1::OrderFlow::name(), id).await;
}

/// What the store holds of an instance, to compare before and after.
async fn stored(store: &Storage, id: &str) -> (String, u64, String, usize, usize) {
    let record = store.load_instance_text(id).await.unwrap();
    let bookmarks = store.list_bookmarks(id).await.unwrap();
    let timers = store.list_timers(id).await.unwrap();
    (
        record.definition_version,
        record.version,
        record.state,
        bookmarks.len(),
        timers.len(),
    )
}

/// The bookmark rows' versions of an instance.
async fn bookmark_versions(store: &Storage, id: &str) -> Vec<String> {
    store
        .list_bookmarks(id)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.definition_version)
        .collect()
}

/// Instances waiting in three states of the first version, left by a first process; a
/// second process runs both versions, dry-runs then migrates them; a third runs only the
/// current version and drives every instance to its end by events.
async fn migrate_across_restarts(stores: &Reopener) {
    {
        let store = stores.open().await;
        let runtime = first_version_runtime(store.clone());
        for id in ["a", "b", "c"] {
            start_v1(&runtime, id).await;
        }
        send_resumed(&runtime, "payment", "b").await;
        send_resumed(&runtime, "payment", "c").await;
        send_resumed(&runtime, "packed", "c").await;
        assert_eq!(
            runtime.current_state::<v1::OrderFlow>("c").await.unwrap(),
            Some(v1::OrderFlow::Packed)
        );
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    {
        let store = stores.open().await;
        let runtime = both_versions_runtime(store.clone());
        let mut before = Vec::new();
        for id in ["a", "b", "c"] {
            before.push(stored(&store, id).await);
        }
        // A dry run reports each instance and writes nothing.
        let dry = runtime
            .migrate::<v1::OrderFlow, OrderFlow>(Migration::all().dry_run())
            .await
            .unwrap();
        assert!(dry.dry_run);
        let planned: Vec<(&str, &MigrationOutcome)> = dry
            .instances
            .iter()
            .map(|i| (i.instance_id.as_str(), &i.outcome))
            .collect();
        assert_eq!(
            planned,
            [
                (
                    "a",
                    &MigrationOutcome::WouldMigrate {
                        from_state: "New".into(),
                        to_state: "Open".into()
                    }
                ),
                (
                    "b",
                    &MigrationOutcome::WouldMigrate {
                        from_state: "Paid".into(),
                        to_state: "Paid".into()
                    }
                ),
                (
                    "c",
                    &MigrationOutcome::WouldMigrate {
                        from_state: "Packed".into(),
                        to_state: "Packed".into()
                    }
                ),
            ]
        );
        for (id, was) in ["a", "b", "c"].into_iter().zip(&before) {
            assert_eq!(
                &stored(&store, id).await,
                was,
                "the dry run wrote to `{id}`"
            );
        }

        let report = runtime
            .migrate::<v1::OrderFlow, OrderFlow>(Migration::all())
            .await
            .unwrap();
        assert_eq!(report.migrated(), ["a", "b", "c"], "{report:?}");
        assert_eq!(report.to_version, OrderFlow::version());
        for id in ["a", "b", "c"] {
            let (version, ..) = stored(&store, id).await;
            assert_eq!(version, OrderFlow::version(), "`{id}` is not re-pinned");
            for bookmark in bookmark_versions(&store, id).await {
                assert_eq!(bookmark, OrderFlow::version(), "a bookmark row of `{id}`");
            }
            let snapshot = runtime.get_state(id).await.unwrap().unwrap();
            let data: Order = snapshot.data().unwrap();
            assert_eq!((data.total_cents, data.currency.as_str()), (1200, "EUR"));
            let migrated = snapshot
                .journal()
                .iter()
                .find(|e| e.kind == JournalKind::Migrated)
                .unwrap_or_else(|| panic!("no Migrated entry for `{id}`"));
            assert_eq!(
                migrated.detail.get("to_version"),
                Some(&serde_json::json!(OrderFlow::version()))
            );
        }
        assert_eq!(
            runtime.current_state::<OrderFlow>("a").await.unwrap(),
            Some(OrderFlow::Open)
        );
        // The new position's waits: `Open` expires (a timer row), the others wait for events.
        assert_eq!(store.list_timers("a").await.unwrap().len(), 1);
        assert_eq!(store.list_timers("b").await.unwrap().len(), 0);
        assert_eq!(store.list_bookmarks("a").await.unwrap().len(), 3);
        // The entry of the new state did not run: nothing was journalled as started.
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    {
        // The first version is no longer registered: the instances run on the current one.
        let store = stores.open().await;
        let runtime = quiet(Runtime::builder())
            .store(store.clone())
            .register::<OrderFlow>()
            .build()
            .unwrap();
        assert!(runtime.unregistered_versions().await.unwrap().is_empty());
        assert_eq!(send_resumed(&runtime, "payment", "a").await, ["a"]);
        assert_eq!(store.list_timers("a").await.unwrap().len(), 0);
        for id in ["a", "b"] {
            assert_eq!(send_resumed(&runtime, "packed", id).await, [id]);
        }
        for id in ["a", "b", "c"] {
            assert_eq!(send_resumed(&runtime, "shipped", id).await, [id]);
            let done = runtime
                .await_completion(id, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(matches!(done, Completion::Finished(_)), "{id}: {done:?}");
            assert_eq!(
                runtime.current_state::<OrderFlow>(id).await.unwrap(),
                Some(OrderFlow::Shipped)
            );
        }
        runtime.shutdown(Duration::from_secs(5)).await;
    }
}

support::across_restarts_on_each_store!(
    migrate_across_restarts =>
    waiting_instances_migrate_across_restarts_on_sqlite,
    waiting_instances_migrate_across_restarts_on_postgres
);

#[tokio::test]
async fn two_versions_run_side_by_side_and_one_send_reaches_both() {
    let memory = Arc::new(MemoryStore::new());
    let old = first_version_runtime(Storage::new(memory.clone()));
    start_v1(&old, "k").await;
    let old_version = v1::OrderFlow::version();

    let runtime = both_versions_runtime(Storage::new(memory.clone()));
    assert_eq!(runtime.registered_versions("order"), {
        let mut both = vec![
            (old_version.to_owned(), false),
            (OrderFlow::version().to_owned(), true),
        ];
        both.sort();
        both
    });
    // New instances start on the current version.
    let new = runtime
        .start_by_name(
            "order",
            serde_json::json!({"order_id": "k", "total_cents": 500, "currency": "EUR"}),
            StartOptions {
                instance_id: Some("n".to_owned()),
                ..StartOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(new.status, workflow_runtime::WorkflowStatus::Suspended);
    let store = runtime.store();
    assert_eq!(stored(store, "k").await.0, old_version);
    assert_eq!(stored(store, "n").await.0, OrderFlow::version());
    let listed: Vec<(String, String)> = store
        .list_instances(workflow_runtime::store::InstanceFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|l| {
            let s = l.summary.unwrap();
            (s.instance_id, s.definition_version)
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("k".to_owned(), old_version.to_owned()),
            ("n".to_owned(), OrderFlow::version().to_owned())
        ]
    );
    assert!(runtime.unregistered_versions().await.unwrap().is_empty());

    // One send reaches an instance of each version; each goes on on its own.
    let mut reached = send_resumed(&runtime, "payment", "k").await;
    reached.sort();
    assert_eq!(reached, ["k", "n"]);
    assert_eq!(
        runtime.current_state::<v1::OrderFlow>("k").await.unwrap(),
        Some(v1::OrderFlow::Paid)
    );
    assert_eq!(
        runtime.current_state::<OrderFlow>("n").await.unwrap(),
        Some(OrderFlow::Paid)
    );

    // A runtime with the current version only does not run the old instance: it is listed.
    let current_only = quiet(Runtime::builder())
        .store(Storage::new(memory.clone()))
        .register::<OrderFlow>()
        .build()
        .unwrap();
    assert_eq!(
        current_only.unregistered_versions().await.unwrap(),
        [("order".to_owned(), old_version.to_owned(), 1)]
    );

    for event in ["packed", "shipped"] {
        let mut reached = send_resumed(&runtime, event, "k").await;
        reached.sort();
        assert_eq!(reached, ["k", "n"], "{event}");
    }
    for id in ["k", "n"] {
        let done = runtime
            .await_completion(id, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(done, Completion::Finished(_)), "{id}: {done:?}");
    }
}

#[tokio::test]
async fn a_second_current_version_is_refused_and_a_previous_one_needs_a_current_one() {
    let twice = Runtime::builder()
        .register::<v1::OrderFlow>()
        .register::<OrderFlow>()
        .build()
        .unwrap_err();
    assert!(
        matches!(&twice, workflow_runtime::BuildError::ConflictingCurrentVersion { name, .. } if name == "order"),
        "{twice}"
    );
    assert!(twice.to_string().contains("register_previous"), "{twice}");
    let alone = Runtime::builder()
        .register_previous::<v1::OrderFlow>()
        .build()
        .unwrap_err();
    assert!(
        matches!(&alone, workflow_runtime::BuildError::PreviousWithoutCurrent { name } if name == "order"),
        "{alone}"
    );
}

/// Two runtimes on one memory store: the first left instances waiting on the first version.
async fn waiting_on_v1(ids: &[&str]) -> (Arc<MemoryStore>, Runtime) {
    let memory = Arc::new(MemoryStore::new());
    let old = first_version_runtime(Storage::new(memory.clone()));
    for id in ids {
        start_v1(&old, id).await;
    }
    let runtime = both_versions_runtime(Storage::new(memory.clone()));
    (memory, runtime)
}

#[tokio::test]
async fn a_running_instance_is_refused_and_migrates_once_it_waits() {
    let (_memory, runtime) = waiting_on_v1(&["a", "b"]).await;
    Migrating::<v1::OrderFlow, OrderFlow>::new(&runtime)
        .refuse_a_running_instance_until_it_waits(wall_now(), async |store: &Storage| {
            stored(store, "a").await
        })
        .await;
}

#[tokio::test]
async fn a_failure_half_way_leaves_each_instance_wholly_in_one_version() {
    let (memory, runtime) = waiting_on_v1(&["a", "b", "c"]).await;
    Migrating::<v1::OrderFlow, OrderFlow>::new(&runtime)
        .refuse_only_the_instance_whose_commit_fails(&memory, async |store: &Storage| {
            stored(store, "a").await
        })
        .await;
    let store = runtime.store().clone();
    // `a` is wholly on the first version: row, document, bookmarks, no timer.
    assert_eq!(
        bookmark_versions(&store, "a").await,
        [v1::OrderFlow::version()]
    );
    assert_eq!(
        runtime.current_state::<v1::OrderFlow>("a").await.unwrap(),
        Some(v1::OrderFlow::New)
    );
    // `b` and `c` wholly on the current one.
    for id in ["b", "c"] {
        let (version, _, _, bookmarks, timers) = stored(&store, id).await;
        assert_eq!(
            (version.as_str(), bookmarks, timers),
            (OrderFlow::version(), 3, 1)
        );
        assert!(
            bookmark_versions(&store, id)
                .await
                .iter()
                .all(|v| v == OrderFlow::version())
        );
    }
    // Both versions run: `a` on the first, `b` on the current one.
    assert_eq!(send_resumed(&runtime, "payment", "a").await, ["a"]);
    assert_eq!(send_resumed(&runtime, "cancel", "b").await, ["b"]);
    assert_eq!(
        runtime.current_state::<OrderFlow>("b").await.unwrap(),
        Some(OrderFlow::Cancelled)
    );
    // Migrated again, `a` moves from where it is now.
    let again = runtime
        .migrate::<v1::OrderFlow, OrderFlow>(Migration::all())
        .await
        .unwrap();
    assert_eq!(again.migrated(), ["a"]);
    assert_eq!(
        runtime.current_state::<OrderFlow>("a").await.unwrap(),
        Some(OrderFlow::Paid)
    );
}

#[tokio::test]
async fn a_migration_between_unrelated_definitions_is_refused_and_writes_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let old = first_version_runtime(Storage::new(memory.clone()));
    start_v1(&old, "a").await;
    let runtime = quiet(Runtime::builder())
        .store(Storage::new(memory.clone()))
        .register_previous::<v1::OrderFlow>()
        .register::<OrderFlow>()
        .register::<InvoiceFlow>()
        .build()
        .unwrap();
    let store = runtime.store().clone();
    let before = stored(&store, "a").await;
    let error = runtime
        .migrate::<v1::OrderFlow, InvoiceFlow>(Migration::all())
        .await
        .unwrap_err();
    assert_eq!(
        error,
        MigrateError::Unrelated {
            from: "order".into(),
            to: "invoice".into()
        }
    );
    assert!(
        error
            .to_string()
            .contains("`order` and `invoice` are unrelated")
    );
    assert_eq!(stored(&store, "a").await, before);

    // To a version this runtime does not register: refused, naming it.
    let unregistered = first_version_runtime(Storage::new(memory.clone()));
    let error = unregistered
        .migrate::<v1::OrderFlow, OrderFlow>(Migration::all())
        .await
        .unwrap_err();
    assert!(
        matches!(error, MigrateError::NotRegistered { .. }),
        "{error}"
    );
    assert_eq!(stored(&store, "a").await, before);
    assert_eq!(
        store.load_instance_text("a").await.unwrap().status,
        InstanceStatus::Suspended
    );
}

#[tokio::test]
async fn a_recorded_migration_maps_states_by_name_and_refuses_an_unmapped_one() {
    let (memory, runtime) = waiting_on_v1(&["a", "b"]).await;
    // Both versions are recorded by the runtime that registers them.
    runtime.index_triggers().await.unwrap();
    let store = runtime.store().clone();
    let before = stored(&store, "a").await;
    // `New` has no state of that name in the current version.
    let error = runtime
        .migrate_recorded(
            "order",
            v1::OrderFlow::version(),
            OrderFlow::version(),
            Migration::all(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        MigrateError::UnmappedStates {
            name: "order".into(),
            states: vec!["New".into()]
        }
    );
    assert!(
        error.to_string().contains("no state named `New`"),
        "{error}"
    );
    assert_eq!(stored(&store, "a").await, before);
    drop(memory);
}
