//! Migrations of `workflow!` flowcharts and sequences (ENG-55): waiting instances of a first
//! version kept in a `v1` module moved to the current version, node by node as a `match`
//! rustc checks maps them, across restarts on the memory store, SQLite and PostgreSQL
//! (skipped without a server at `WORKFLOW_PG_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

mod support;

use serde::{Deserialize, Serialize};
use support::{Migrating, Reopener, quiet, send_resumed, start_order, wall_now};
use workflow_runtime::store::{MemoryStore, Storage};
use workflow_runtime::{
    Completion, JournalKind, ManualClock, Migrate, MigrateError, Migration, MigrationOutcome,
    MigrationRefusal, Runtime, Workflow, workflow,
};

/// The first version's data.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShipmentV1 {
    order_id: String,
    total: u64,
}

/// The current version's data: the total in cents, and a currency.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Shipment {
    order_id: String,
    total_cents: u64,
    currency: String,
}

mod v1 {
    use workflow_runtime::workflow;

    workflow! {
        /// The first version, kept to run (and migrate) its instances.
        #[workflow(name = "shipping")]
        pub workflow Shipping(super::ShipmentV1) {
            paid = event("payment").key(order_id);
            cooling = after(hours(1));
            packed = event("packed").key(order_id);

            start -> paid -> cooling -> packed;
        }
    }

    workflow! {
        /// Waits for two events at once.
        #[workflow(name = "pair")]
        pub workflow Pair(super::ShipmentV1) {
            split = fork [left, right];
            left = event("left").key(order_id);
            right = event("right").key(order_id);
            both = join(all);

            start -> split;
            split.left -> left -> both;
            split.right -> right -> both;
        }
    }

    workflow! {
        /// A sequence: a wait for the payment, then for the shipment.
        #[workflow(name = "steps")]
        pub workflow Steps(super::ShipmentV1) = sequence [
            paid = event("payment").key(order_id),
            shipped = event("shipped").key(order_id),
        ];
    }

    /// A state machine named like the flowchart.
    #[workflow_runtime::state_machine(data = super::ShipmentV1, initial = Open, name = "shipping")]
    pub enum ShippingMachine {
        #[on(pay: event("payment").key(order_id) => Paid)]
        Open,
        Paid,
    }
}

workflow! {
    /// The current version: the payment wait renamed, a longer cooling-off, and a shipment.
    #[workflow(name = "shipping")]
    pub workflow Shipping(Shipment) {
        wait_payment = event("payment").key(order_id);
        cool_off = after(hours(2));
        packed = event("packed").key(order_id);
        shipped = event("shipped").key(order_id);

        start -> wait_payment -> cool_off -> packed -> shipped;
    }
}

fn shipment(old: ShipmentV1) -> Shipment {
    Shipment {
        order_id: old.order_id,
        total_cents: old.total * 100,
        currency: "EUR".to_owned(),
    }
}

impl Migrate<v1::Shipping> for Shipping {
    fn state(old: v1::ShippingNode) -> ShippingNode {
        match old {
            v1::ShippingNode::Paid => ShippingNode::WaitPayment,
            v1::ShippingNode::Cooling => ShippingNode::CoolOff,
            v1::ShippingNode::Packed => ShippingNode::Packed,
        }
    }

    fn data(old: ShipmentV1) -> Shipment {
        shipment(old)
    }
}

workflow! {
    /// The current version of the pair: one wait after the other.
    #[workflow(name = "pair")]
    pub workflow Pair(Shipment) {
        left = event("left").key(order_id);
        right = event("right").key(order_id);

        start -> left -> right;
    }
}

impl Migrate<v1::Pair> for Pair {
    fn state(old: v1::PairNode) -> PairNode {
        match old {
            v1::PairNode::Left => PairNode::Left,
            v1::PairNode::Right => PairNode::Right,
        }
    }

    fn data(old: ShipmentV1) -> Shipment {
        shipment(old)
    }
}

workflow! {
    /// The current sequence: a wait for packing between payment and shipment.
    #[workflow(name = "steps")]
    pub workflow Steps(Shipment) = sequence [
        paid = event("payment").key(order_id),
        packed = event("packed").key(order_id),
        shipped = event("shipped").key(order_id),
    ];
}

impl Migrate<v1::Steps> for Steps {
    fn state(old: v1::StepsNode) -> StepsNode {
        match old {
            v1::StepsNode::Paid => StepsNode::Paid,
            v1::StepsNode::Shipped => StepsNode::Shipped,
        }
    }

    fn data(old: ShipmentV1) -> Shipment {
        shipment(old)
    }
}

workflow! {
    /// A flowchart of another name.
    #[workflow(name = "returns")]
    pub workflow ReturnsFlow(Shipment) {
        returned = event("returned").key(order_id);
        start -> returned;
    }
}

impl Migrate<v1::Shipping> for ReturnsFlow {
    fn state(_: v1::ShippingNode) -> ReturnsFlowNode {
        ReturnsFlowNode::Returned
    }

    fn data(old: ShipmentV1) -> Shipment {
        shipment(old)
    }
}

/// A state machine migrated to a flowchart of the same name: rustc accepts the mapping, the
/// runtime refuses the kinds.
impl Migrate<v1::ShippingMachine> for Shipping {
    fn state(old: v1::ShippingMachine) -> ShippingNode {
        match old {
            v1::ShippingMachine::Open => ShippingNode::WaitPayment,
            v1::ShippingMachine::Paid => ShippingNode::CoolOff,
        }
    }

    fn data(old: ShipmentV1) -> Shipment {
        shipment(old)
    }
}

const HOUR: i64 = 3_600_000_000;

/// What the store holds of an instance, to compare before and after.
async fn stored(store: &Storage, id: &str) -> (String, u64, String, Vec<String>, Vec<i64>) {
    let record = store.load_instance_text(id).await.unwrap();
    let bookmarks = store.list_bookmarks(id).await.unwrap();
    let timers = store.list_timers(id).await.unwrap();
    (
        record.definition_version,
        record.version,
        record.state,
        bookmarks.into_iter().map(|b| b.name).collect(),
        timers.into_iter().map(|t| t.due_at).collect(),
    )
}

/// The names of the bookmarks an instance waits on, with the version of each row.
async fn waits(store: &Storage, id: &str) -> Vec<(String, String)> {
    store
        .list_bookmarks(id)
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.name, b.definition_version))
        .collect()
}

fn would(from: &str, to: &str) -> MigrationOutcome {
    MigrationOutcome::WouldMigrate {
        from_state: from.into(),
        to_state: to.into(),
    }
}

/// Instances of the first version waiting at three nodes (an event, a timer, another event),
/// left by a first process; a second process runs both versions, dry-runs then migrates
/// them; a third runs only the current version and drives every instance to its end by
/// events and time.
async fn migrate_across_restarts(stores: &Reopener) {
    let clock = ManualClock::new(ManualClock::DEFAULT_START);
    let t0 = ManualClock::DEFAULT_START;
    {
        let store = stores.open().await;
        let runtime = quiet(Runtime::builder())
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .register::<v1::Shipping>()
            .build()
            .unwrap();
        for id in ["a", "b", "c"] {
            start_order(&runtime, "shipping", id).await;
        }
        assert_eq!(send_resumed(&runtime, "payment", "c").await, ["c"]);
        clock.advance(Duration::from_secs(3600));
        runtime.fire_due_timers().await.unwrap();
        // `c` waits for packing; `b` pays an hour later and cools off until `t0 + 2h`.
        assert_eq!(send_resumed(&runtime, "payment", "b").await, ["b"]);
        let timers: Vec<i64> = store
            .list_timers("b")
            .await
            .unwrap()
            .iter()
            .map(|t| t.due_at)
            .collect();
        assert_eq!(timers, [t0 + 2 * HOUR]);
        let old = v1::Shipping::version().to_owned();
        assert_eq!(waits(&store, "c").await, [("packed".to_owned(), old)]);
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    // The deploy comes half an hour later.
    clock.advance(Duration::from_secs(1800));
    {
        let store = stores.open().await;
        let runtime = quiet(Runtime::builder())
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .register_previous::<v1::Shipping>()
            .register::<Shipping>()
            .build()
            .unwrap();
        let mut before = Vec::new();
        for id in ["a", "b", "c"] {
            before.push(stored(&store, id).await);
        }
        // A dry run reports each instance and writes nothing.
        let dry = runtime
            .migrate::<v1::Shipping, Shipping>(Migration::all().dry_run())
            .await
            .unwrap();
        let planned: Vec<(&str, &MigrationOutcome)> = dry
            .instances
            .iter()
            .map(|i| (i.instance_id.as_str(), &i.outcome))
            .collect();
        assert_eq!(
            planned,
            [
                ("a", &would("paid", "wait_payment")),
                ("b", &would("cooling", "cool_off")),
                ("c", &would("packed", "packed")),
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
            .migrate::<v1::Shipping, Shipping>(Migration::all())
            .await
            .unwrap();
        assert_eq!(report.migrated(), ["a", "b", "c"], "{report:?}");
        let new = Shipping::version().to_owned();
        for id in ["a", "b", "c"] {
            assert_eq!(stored(&store, id).await.0, new, "`{id}` is not re-pinned");
            let snapshot = runtime.get_state(id).await.unwrap().unwrap();
            let data: Shipment = snapshot.data().unwrap();
            assert_eq!((data.total_cents, data.currency.as_str()), (1200, "EUR"));
            let migrated = snapshot
                .journal()
                .iter()
                .find(|e| e.kind == JournalKind::Migrated)
                .unwrap_or_else(|| panic!("no Migrated entry for `{id}`"));
            assert_eq!(
                migrated.detail.get("to_version"),
                Some(&serde_json::json!(new))
            );
        }
        // The new positions' waits, on rows of the new version.
        assert_eq!(
            waits(&store, "a").await,
            [("payment".to_owned(), new.clone())]
        );
        assert_eq!(
            waits(&store, "c").await,
            [("packed".to_owned(), new.clone())]
        );
        // `b`'s timer is re-armed for `cool_off`: two hours from when it started cooling in
        // the first version (`t0 + 1h`), not from the migration (`t0 + 1h30`).
        assert_eq!(
            store
                .list_timers("b")
                .await
                .unwrap()
                .iter()
                .map(|t| t.due_at)
                .collect::<Vec<_>>(),
            [t0 + 3 * HOUR]
        );
        assert!(store.list_timers("a").await.unwrap().is_empty());
        runtime.shutdown(Duration::from_secs(5)).await;
    }
    {
        // The first version is no longer registered: the instances run on the current one.
        let store = stores.open().await;
        let runtime = quiet(Runtime::builder())
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .register::<Shipping>()
            .build()
            .unwrap();
        assert!(runtime.unregistered_versions().await.unwrap().is_empty());
        assert_eq!(send_resumed(&runtime, "payment", "a").await, ["a"]);
        // `b` has not cooled off yet at `t0 + 2h30`: the first version's hour is not what
        // counts.
        clock.advance(Duration::from_secs(3600));
        runtime.fire_due_timers().await.unwrap();
        assert_eq!(
            send_resumed(&runtime, "packed", "b").await,
            Vec::<String>::new()
        );
        clock.advance(Duration::from_secs(2 * 3600));
        runtime.fire_due_timers().await.unwrap();
        for id in ["a", "b", "c"] {
            assert_eq!(
                send_resumed(&runtime, "packed", id).await,
                [id],
                "packed {id}"
            );
            assert_eq!(
                send_resumed(&runtime, "shipped", id).await,
                [id],
                "shipped {id}"
            );
            let done = runtime
                .await_completion(id, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(matches!(done, Completion::Finished(_)), "{id}: {done:?}");
        }
        runtime.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_flowchart_instances_migrate_across_restarts_on_memory() {
    migrate_across_restarts(&Reopener::Memory(Arc::new(MemoryStore::new()))).await;
}

support::across_restarts_on_each_store!(
    migrate_across_restarts =>
    waiting_flowchart_instances_migrate_across_restarts_on_sqlite,
    waiting_flowchart_instances_migrate_across_restarts_on_postgres
);

/// Two runtimes on one memory store: the first left instances of `Old` waiting.
async fn waiting_on<Old: Workflow>(ids: &[&str]) -> (Arc<MemoryStore>, Runtime) {
    let memory = Arc::new(MemoryStore::new());
    let old = quiet(Runtime::builder())
        .store(Storage::new(memory.clone()))
        .register::<Old>()
        .build()
        .unwrap();
    for id in ids {
        start_order(&old, Old::name(), id).await;
    }
    let runtime = quiet(Runtime::builder())
        .store(Storage::new(memory.clone()))
        .register_previous::<Old>()
        .register::<Shipping>()
        .register::<Pair>()
        .register::<Steps>()
        .register::<ReturnsFlow>()
        .build()
        .unwrap();
    (memory, runtime)
}

#[tokio::test]
async fn a_running_flowchart_instance_is_refused_and_migrates_once_it_waits() {
    let (_memory, runtime) = waiting_on::<v1::Shipping>(&["a", "b"]).await;
    Migrating::<v1::Shipping, Shipping>::new(&runtime)
        .refuse_a_running_instance_until_it_waits(
            ManualClock::DEFAULT_START.max(wall_now()),
            async |store: &Storage| stored(store, "a").await,
        )
        .await;
}

#[tokio::test]
async fn a_failure_half_way_leaves_each_flowchart_instance_wholly_in_one_version() {
    let (memory, runtime) = waiting_on::<v1::Shipping>(&["a", "b", "c"]).await;
    Migrating::<v1::Shipping, Shipping>::new(&runtime)
        .refuse_only_the_instance_whose_commit_fails(&memory, async |store: &Storage| {
            stored(store, "a").await
        })
        .await;
    let store = runtime.store().clone();
    // `a` is wholly on the first version: row, document, bookmark rows.
    let old = v1::Shipping::version().to_owned();
    assert_eq!(waits(&store, "a").await, [("payment".to_owned(), old)]);
    // `b` and `c` wholly on the current one.
    for id in ["b", "c"] {
        assert_eq!(
            waits(&store, id).await,
            [("payment".to_owned(), Shipping::version().to_owned())]
        );
    }
    // Both versions run: `a` on the first (on to its timer), `b` on the current one.
    assert_eq!(send_resumed(&runtime, "payment", "a").await, ["a"]);
    assert_eq!(send_resumed(&runtime, "payment", "b").await, ["b"]);
    assert_eq!(store.list_timers("a").await.unwrap().len(), 1);
    // Migrated again, `a` moves from where it is now: its first version's timer.
    let again = runtime
        .migrate::<v1::Shipping, Shipping>(Migration::all())
        .await
        .unwrap();
    assert_eq!(
        again.instances.first().map(|i| &i.outcome),
        Some(&MigrationOutcome::Migrated {
            from_state: "cooling".into(),
            to_state: "cool_off".into(),
            status: workflow_runtime::WorkflowStatus::Suspended,
            sub_status: Some(workflow_runtime::SubStatus::Waiting),
        })
    );
}

#[tokio::test]
async fn an_instance_waiting_at_two_nodes_of_a_fork_is_refused_and_nothing_written() {
    let (_memory, runtime) = waiting_on::<v1::Pair>(&["p"]).await;
    let store = runtime.store().clone();
    let before = stored(&store, "p").await;
    assert_eq!(before.3.len(), 2, "both branches wait");
    let report = runtime
        .migrate::<v1::Pair, Pair>(Migration::all())
        .await
        .unwrap();
    let [(id, why)] = report.refused()[..] else {
        panic!("{report:?}");
    };
    assert_eq!(id, "p");
    assert_eq!(
        why.to_string(),
        "the instance does not migrate from where it waits: 2 nodes are active (`left`, `right`): only an instance waiting at one node migrates"
    );
    assert_eq!(stored(&store, "p").await, before);
    // One branch done, the join waits for the other: a join in progress.
    assert_eq!(send_resumed(&runtime, "left", "p").await, ["p"]);
    let before = stored(&store, "p").await;
    let report = runtime
        .migrate::<v1::Pair, Pair>(Migration::all())
        .await
        .unwrap();
    assert!(
        matches!(
            report.refused()[..],
            [("p", MigrationRefusal::Unplaceable { reason })] if reason.contains("node `both` waits for more of its inbound connections")
        ),
        "{report:?}"
    );
    assert_eq!(stored(&store, "p").await, before);
}

#[tokio::test]
async fn a_sequence_instance_migrates_to_its_step_and_runs_on() {
    let (_memory, runtime) = waiting_on::<v1::Steps>(&["s", "t"]).await;
    let store = runtime.store().clone();
    assert_eq!(send_resumed(&runtime, "payment", "t").await, ["t"]);
    let report = runtime
        .migrate::<v1::Steps, Steps>(Migration::all())
        .await
        .unwrap();
    assert_eq!(report.migrated(), ["s", "t"], "{report:?}");
    let new = Steps::version().to_owned();
    assert_eq!(
        waits(&store, "s").await,
        [("payment".to_owned(), new.clone())]
    );
    // `t` paid in the first version: it waits for the shipment, not for the new packing step.
    assert_eq!(waits(&store, "t").await, [("shipped".to_owned(), new)]);
    assert_eq!(send_resumed(&runtime, "shipped", "t").await, ["t"]);
    for event in ["payment", "packed", "shipped"] {
        assert_eq!(send_resumed(&runtime, event, "s").await, ["s"], "{event}");
    }
    for id in ["s", "t"] {
        let done = runtime
            .await_completion(id, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(done, Completion::Finished(_)), "{id}: {done:?}");
    }
}

#[tokio::test]
async fn a_flowchart_migration_between_unrelated_definitions_is_refused_and_writes_nothing() {
    let (memory, runtime) = waiting_on::<v1::Shipping>(&["a"]).await;
    let store = runtime.store().clone();
    let before = stored(&store, "a").await;
    let error = runtime
        .migrate::<v1::Shipping, ReturnsFlow>(Migration::all())
        .await
        .unwrap_err();
    assert_eq!(
        error,
        MigrateError::Unrelated {
            from: "shipping".into(),
            to: "returns".into()
        }
    );
    assert_eq!(stored(&store, "a").await, before);

    // A state machine and a flowchart of one name: the kinds differ.
    let old = quiet(Runtime::builder())
        .store(Storage::new(memory.clone()))
        .register::<v1::ShippingMachine>()
        .build()
        .unwrap();
    start_order(&old, "shipping", "m").await;
    let before_m = stored(&store, "m").await;
    let error = runtime
        .migrate::<v1::ShippingMachine, Shipping>(Migration::all())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MigrateError::KindsDiffer { from_kind, to_kind, .. }
            if from_kind == "state machine" && to_kind == "flowchart or sequence"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("a migration moves instances between two state machines, or between two flowcharts or sequences"),
        "{error}"
    );
    assert_eq!(stored(&store, "m").await, before_m);
    assert_eq!(stored(&store, "a").await, before);
}

#[tokio::test]
async fn a_recorded_flowchart_migration_maps_nodes_by_name() {
    let (_memory, runtime) = waiting_on::<v1::Steps>(&["s"]).await;
    runtime.index_triggers().await.unwrap();
    let store = runtime.store().clone();
    let report = runtime
        .migrate_recorded(
            "steps",
            v1::Steps::version(),
            Steps::version(),
            Migration::all(),
        )
        .await
        .unwrap();
    assert_eq!(report.migrated(), ["s"], "{report:?}");
    assert_eq!(
        waits(&store, "s").await,
        [("payment".to_owned(), Steps::version().to_owned())]
    );
    // Back is refused: the current version's `packed` has no node of that name in the first.
    let error = runtime
        .migrate_recorded(
            "steps",
            Steps::version(),
            v1::Steps::version(),
            Migration::all(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        MigrateError::UnmappedNodes {
            name: "steps".into(),
            nodes: vec!["packed".into()]
        }
    );
    assert!(
        error.to_string().contains("no waiting node named `packed`"),
        "{error}"
    );
}
