//! Scaffolding shared by the runtime's integration tests: store openers (memory, SQLite in a
//! folder, PostgreSQL on a fresh schema from `WORKFLOW_PG_URL`), the wall clock the leases
//! use, quiet runtimes, starts and sends by name, the flow-control queues' counts and
//! outside slot holders, the migration scenarios state machines and flowcharts share, and
//! the macros that declare a scenario's test on each store. Each test file takes what it
//! needs (`mod support;`): the rest is unused there.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use workflow_runtime::model::Definition;
use workflow_runtime::store::conformance::postgres::{SchemaGuard, database_url, fresh_store};
use workflow_runtime::store::{
    LeaseClaim, LeaseKey, MemoryStore, PostgresOptions, PostgresStore, SlotAsk, SlotLease,
    SlotOutcome, SqliteStore, Storage,
};
use workflow_runtime::{
    Migrate, Migration, MigrationRefusal, Positioned, Priority, Queue, Runtime, RuntimeBuilder,
    StartOptions, Stimulus,
};

/// Wall-clock now, µs since the epoch (leases and slots are on the wall clock).
pub(crate) fn wall_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// A store on a new, empty memory store.
pub(crate) fn memory_storage() -> Storage {
    Storage::new(Arc::new(MemoryStore::new()))
}

/// A store on the SQLite file at `path` (created if missing, reopened if not).
pub(crate) fn sqlite_storage(path: impl AsRef<Path>) -> Storage {
    Storage::new(Arc::new(SqliteStore::open(path).unwrap()))
}

/// A store on a fresh PostgreSQL schema and the guard that drops it, or `None` when no
/// server answers at `WORKFLOW_PG_URL`.
pub(crate) async fn fresh_postgres_storage() -> Option<(Storage, SchemaGuard)> {
    let (store, guard) = fresh_store().await?;
    Some((Storage::new(store), guard))
}

/// A new connection to the PostgreSQL schema `schema` at `WORKFLOW_PG_URL` (as a restarted
/// process opens it).
pub(crate) async fn reopen_postgres_storage(schema: &str) -> Storage {
    let options = PostgresOptions::default().schema(schema);
    Storage::new(Arc::new(
        PostgresStore::connect_with(&database_url(), &options)
            .await
            .unwrap(),
    ))
}

/// Where a test's store lives, to open it again as a restarted process does.
pub(crate) enum Reopener {
    /// One memory store, shared by every opening.
    Memory(Arc<MemoryStore>),
    /// The SQLite file at this path.
    Sqlite(PathBuf),
    /// This schema on the PostgreSQL server at `WORKFLOW_PG_URL`.
    Postgres(String),
}

impl Reopener {
    /// A new handle on the store.
    pub(crate) async fn open(&self) -> Storage {
        match self {
            Self::Memory(memory) => Storage::new(memory.clone()),
            Self::Sqlite(path) => sqlite_storage(path),
            Self::Postgres(schema) => reopen_postgres_storage(schema).await,
        }
    }
}

/// A builder with no recovery sweep, inbox worker or timer driver: the test drives it.
pub(crate) fn quiet(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder
        .recovery_sweep(None)
        .inbox_worker(false)
        .timer_driver(false)
}

/// Starts the workflow `name` with the instance id `id` on the order
/// `{"order_id": id, "total": 12}`.
pub(crate) async fn start_order(runtime: &Runtime, name: &str, id: &str) {
    runtime
        .start_by_name(
            name,
            serde_json::json!({"order_id": id, "total": 12}),
            StartOptions {
                instance_id: Some(id.to_owned()),
                ..StartOptions::default()
            },
        )
        .await
        .unwrap();
}

/// Sends the event `name` with the key `key`: the ids of the instances it resumed.
pub(crate) async fn send_resumed(runtime: &Runtime, name: &str, key: &str) -> Vec<String> {
    let report = runtime.send(Stimulus::new(name).key(key)).await.unwrap();
    report
        .resumed
        .iter()
        .map(|r| r.instance_id.clone())
        .collect()
}

/// The queue `queue`'s running and waiting counts ((0, 0) when it is not listed).
pub(crate) async fn queue_counts(store: &Storage, queue: &str) -> (u32, u32) {
    let usage = store.queue_usage(wall_now()).await.unwrap();
    usage
        .iter()
        .find(|u| u.queue == queue)
        .map_or((0, 0), |u| (u.running, u.waiting))
}

/// The queue `queue`'s line (holders in serving order), running count and waiting count.
pub(crate) async fn queue_line(store: &Storage, queue: &str) -> (Vec<String>, u32, u32) {
    let usage = store.queue_usage(wall_now()).await.unwrap();
    let found = usage.iter().find(|u| u.queue == queue).unwrap();
    (found.line.clone(), found.running, found.waiting)
}

/// Polls the queue `queue` until it counts `running` running and `waiting` waiting; fails
/// after 10 s with what it counted last.
pub(crate) async fn until_queue_counts(store: &Storage, queue: &str, running: u32, waiting: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = queue_counts(store, queue).await;
        if now == (running, waiting) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{queue}` counts {now:?} (running, waiting), not {:?}",
            (running, waiting)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A workflow `name` of one task `work` in the queue `single` at `priority`.
pub(crate) fn work_in_single(name: &str, priority: u8) -> Definition {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "work", "function": "work", "queue": "single",
              "priority": priority }
        ] }
    }))
    .unwrap()
}

/// Takes a slot of `queue` for the holder `holder` of the owner `outside` (lowest priority,
/// a minute's lease), as another process would; fails if it has to wait.
pub(crate) async fn hold_slot_outside(store: &Storage, queue: &Queue, holder: &str) -> SlotLease {
    let ask = SlotAsk {
        holder: holder.to_owned(),
        owner: "outside".to_owned(),
        key: None,
        priority: Priority::MIN,
        now: wall_now(),
        ttl: 60_000_000,
        place_ttl: None,
    };
    let SlotOutcome::Granted { lease, .. } = store.acquire_slot(queue, ask).await.unwrap() else {
        panic!("the outside holder waits")
    };
    lease
}

/// Migrations from `Old` to `New` in a runtime whose instances `a`, `b` (and `c`) wait on
/// `Old`: the scenarios state machines and flowcharts share.
pub(crate) struct Migrating<'r, Old, New> {
    runtime: &'r Runtime,
    versions: PhantomData<fn() -> (Old, New)>,
}

impl<'r, Old: Positioned, New: Migrate<Old>> Migrating<'r, Old, New> {
    /// Migrations in `runtime`.
    pub(crate) fn new(runtime: &'r Runtime) -> Self {
        Self {
            runtime,
            versions: PhantomData,
        }
    }

    /// Another process holds the lease of `a` (claimed at `now`): a dry run and a migration
    /// both refuse it as running and migrate `b`, and `snapshot` sees `a` unchanged; once the
    /// lease is given back, `a` migrates.
    pub(crate) async fn refuse_a_running_instance_until_it_waits<S: PartialEq + Debug>(
        &self,
        now: i64,
        snapshot: impl AsyncFn(&Storage) -> S,
    ) {
        let (runtime, store) = (self.runtime, self.runtime.store());
        // Another process runs `a`: it holds its lease.
        let lease = store
            .claim_instance(
                "a",
                LeaseClaim {
                    owner: "another-process".to_owned(),
                    token: None,
                    now,
                    ttl: 60_000_000,
                },
            )
            .await
            .unwrap();
        let before = snapshot(store).await;
        // A dry run sees it running too, without taking any lease.
        let dry = runtime
            .migrate::<Old, New>(Migration::all().dry_run())
            .await
            .unwrap();
        assert_eq!(dry.refused(), [("a", &MigrationRefusal::Running)]);
        assert_eq!(dry.migrated(), ["b"]);
        let report = runtime.migrate::<Old, New>(Migration::all()).await.unwrap();
        assert_eq!(report.refused(), [("a", &MigrationRefusal::Running)]);
        assert_eq!(report.migrated(), ["b"]);
        assert_eq!(snapshot(store).await, before);

        store
            .release_lease(&LeaseKey::Instance("a".to_owned()), lease.lease.token)
            .await
            .unwrap();
        let again = runtime
            .migrate::<Old, New>(Migration::only(["a"]))
            .await
            .unwrap();
        assert_eq!(again.migrated(), ["a"]);
    }

    /// Migrates every instance while the first commit on `memory` fails: `a` is refused as
    /// failed and `snapshot` sees it unchanged; `b` and `c` migrate.
    pub(crate) async fn refuse_only_the_instance_whose_commit_fails<S: PartialEq + Debug>(
        &self,
        memory: &MemoryStore,
        snapshot: impl AsyncFn(&Storage) -> S,
    ) {
        let store = self.runtime.store();
        let before = snapshot(store).await;
        // The first instance's commit fails; the others go on.
        memory.fail_next_commits(1).unwrap();
        let report = self
            .runtime
            .migrate::<Old, New>(Migration::all())
            .await
            .unwrap();
        assert!(
            matches!(
                report.refused()[..],
                [("a", MigrationRefusal::Failed { .. })]
            ),
            "{report:?}"
        );
        assert_eq!(report.migrated(), ["b", "c"]);
        assert_eq!(snapshot(store).await, before);
    }
}

/// Declares three tests that run the scenario `$scenario(store: Storage)` on a memory store,
/// on SQLite in a temporary folder and on a fresh PostgreSQL schema; the PostgreSQL test is
/// skipped without a server, or fails then when `postgres required` is given.
#[allow(unused_macros)]
macro_rules! on_each_store {
    ($scenario:ident => $memory:ident, $sqlite:ident, $postgres:ident) => {
        $crate::support::on_each_store!(@ $scenario => $memory, $sqlite, $postgres, {
            return;
        });
    };
    ($scenario:ident => $memory:ident, $sqlite:ident, $postgres:ident, postgres required) => {
        $crate::support::on_each_store!(@ $scenario => $memory, $sqlite, $postgres, {
            panic!("WORKFLOW_PG_URL is not set: the PostgreSQL test must run")
        });
    };
    (@ $scenario:ident => $memory:ident, $sqlite:ident, $postgres:ident, $missing:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $scenario($crate::support::memory_storage()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let dir = tempfile::tempdir().unwrap();
            $scenario($crate::support::sqlite_storage(dir.path().join("flow.db"))).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let Some((store, _guard)) = $crate::support::fresh_postgres_storage().await else $missing;
            $scenario(store).await;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_each_store;

/// Declares two tests that run the scenario `$scenario(stores: &Reopener)`, which opens its
/// store again across restarts, on SQLite in a temporary folder and on a fresh PostgreSQL
/// schema; the PostgreSQL test is skipped without a server, or fails then when
/// `postgres required` is given.
#[allow(unused_macros)]
macro_rules! across_restarts_on_each_store {
    ($scenario:ident => $sqlite:ident, $postgres:ident) => {
        $crate::support::across_restarts_on_each_store!(@ $scenario => $sqlite, $postgres, {
            return;
        });
    };
    ($scenario:ident => $sqlite:ident, $postgres:ident, postgres required) => {
        $crate::support::across_restarts_on_each_store!(@ $scenario => $sqlite, $postgres, {
            panic!("WORKFLOW_PG_URL is not set: the PostgreSQL test must run")
        });
    };
    (@ $scenario:ident => $sqlite:ident, $postgres:ident, $missing:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("store.db");
            $scenario(&$crate::support::Reopener::Sqlite(path)).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let Some((first, guard)) = $crate::support::fresh_postgres_storage().await else $missing;
            drop(first);
            let schema = guard.schema().to_owned();
            $scenario(&$crate::support::Reopener::Postgres(schema)).await;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use across_restarts_on_each_store;
