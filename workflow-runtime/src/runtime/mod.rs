//! The [`Runtime`]: registration, start, send, read, await, cancel, subscribe, recover and
//! purge (ENG-47 to ENG-51), on a [`Store`](crate::store::Store).
//!
//! `Runtime` is a thin, cheap-to-clone facade over services that own their state (wired in
//! `core.rs`): the run path (`run_path/`: claim, lease and renewal, load, run, commit,
//! publish), starts, the links between instances, control (suspend, resume, cancel, retry),
//! queries, the router (`router/`: delivery, trigger index, queue worker, dead letters), the
//! timers (`timers/`: driver, schedules) and the lifecycle (`lifecycle/`: background tasks,
//! recovery, retention, shutdown). Nothing below this file imports it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::engine::events::EventStream;
use crate::engine::executor::RunTarget;
use crate::engine::state::Incident;
use crate::store::{DeadLetter, DeadLetterFilter, QueueItem, Storage, StoreError};
use crate::workflow::{Migrate, Positioned, StateMachineWorkflow, Workflow};

mod builder;
mod cache;
mod control;
mod core;
mod definitions;
mod document;
mod errors;
mod lease;
mod lifecycle;
mod links;
mod list;
mod listing;
mod metrics;
mod migration;
mod outcomes;
mod queries;
mod registered;
mod retention;
mod router;
mod run_path;
mod signals;
mod starts;
mod timers;
mod versions;
mod watches;

pub use crate::routing::{
    AddressedInstance, Declined, NotAwaited, Refusal, Rejection, SendError, SendReport, Stimulus,
};
pub use crate::status::Started;
pub use builder::RuntimeBuilder;
pub use errors::{
    AwaitError, BuildError, CancelError, ControlError, LifecycleError, PurgeError, ResumeError,
    RetryError, StartError, StateError,
};
pub use list::{InstanceQuery, InstanceSummary};
pub use metrics::{DefinitionMetrics, HistogramSnapshot, RuntimeMetrics, StimulusMetrics};
pub use migration::{
    InstanceMigration, MigrateError, Migration, MigrationOutcome, MigrationRefusal, MigrationReport,
};
pub use outcomes::{Completion, Control, InstanceSnapshot, RecoveryReport, StartOptions};
pub use retention::{Retention, RetentionReport};
pub use timers::TimerFiring;

use self::core::Core;
use run_path::RunOptions;

/// The workflow runtime (ENG-47 to ENG-51), on a [`Store`](crate::store::Store): in memory by default, durable
/// on a [`SqliteStore`](crate::store::SqliteStore). Cheap to clone; clones share instances.
///
/// # Examples
///
/// Register a workflow, start an instance and read its data back:
///
/// ```
/// use workflow_runtime::{Runtime, TaskContext, WorkflowStatus, workflow};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Greeting {
///     greeted: bool,
/// }
///
/// async fn greet(ctx: &mut TaskContext<Greeting>) {
///     ctx.data_mut().greeted = true;
/// }
///
/// workflow! {
///     workflow Hello(Greeting) = sequence [task(greet)];
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder().register::<Hello>().build()?;
/// let started = runtime.start::<Hello>(Greeting::default()).await?;
/// assert_eq!(started.status, WorkflowStatus::Finished);
///
/// let snapshot = runtime.get_state(&started.instance_id).await?.ok_or("no instance")?;
/// assert!(snapshot.data::<Greeting>()?.greeted);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Runtime {
    core: Arc<Core>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workflows", &self.core.run_path.definitions().names())
            .field("owner", &self.core.run_path.owner())
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Checks every registration (validator, registry, supported kinds, versions) and builds
    /// the runtime; the first problem is returned. Inside a tokio runtime, it starts the
    /// background work: the timer driver, the inbox worker and the recovery sweep, which runs
    /// again the instances a crash interrupted (built outside tokio, the first operation
    /// starts it, see [`Runtime::run_background`]). [`Runtime::shutdown`] stops it.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming the first problem: an invalid definition (with every diagnostic),
    /// a task, condition or other fn that is not registered, a setting or activity this runtime does
    /// not run, or two current versions of one name.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let runtime = Runtime {
            core: Arc::new(Core::build(self)?),
        };
        runtime.core.lifecycle.ensure_background();
        Ok(runtime)
    }
}

impl Runtime {
    /// A builder with the default settings.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::new()
    }

    /// The store this runtime runs on, through its policy layer.
    pub fn store(&self) -> &Storage {
        &self.core.store
    }

    /// What this runtime counted since it was built (ENG-60): runs by definition and the
    /// status they left, task attempts, retries and durations, timer lateness, lease losses
    /// and the run path's store latency. Reading them takes no lock the runs take.
    /// [`RuntimeMetrics::to_prometheus`] writes them in the Prometheus text format.
    pub fn metrics(&self) -> RuntimeMetrics {
        self.core.run_path.metrics().snapshot()
    }

    /// Starts an instance of `W` with `input` as its data and runs its first run in the
    /// caller's task (ENG-48), and returns the status that run left. A run that finds its
    /// flow-control queue full (a task's, or the definition's) does not wait in the caller's
    /// task: it returns `Suspended` with [`SubStatus::WaitingForSlot`] once the wait is
    /// committed, and the instance runs when a slot is free.
    ///
    /// # Errors
    ///
    /// [`StartError::DefinitionNotRegistered`] when `W` is not registered,
    /// [`StartError::InstanceExists`] when the id is taken, [`StartError::ActivationRefused`] when
    /// the activation strategy refuses a new instance, [`StartError::Input`] when the input does
    /// not serialize, and [`StartError::Run`] when the first run fails (nothing is kept).
    ///
    /// [`SubStatus::WaitingForSlot`]: crate::SubStatus::WaitingForSlot
    pub async fn start<W: Workflow>(&self, input: W::Data) -> Result<Started, StartError> {
        self.start_with::<W>(input, StartOptions::default()).await
    }

    /// [`Runtime::start`] with options.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`]; [`StartError::InvalidInstanceId`] also when
    /// [`StartOptions::instance_id`] is not a valid id (1 to 128 bytes of `[A-Za-z0-9._:-]`).
    pub async fn start_with<W: Workflow>(
        &self,
        input: W::Data,
        options: StartOptions,
    ) -> Result<Started, StartError> {
        let input = serde_json::to_value(input).map_err(|e| StartError::Input {
            path: None,
            message: e.to_string(),
        })?;
        self.start_by_name(W::name(), input, options).await
    }

    /// Starts an instance of the definition registered under `name` (a JSON registration,
    /// say) with JSON input.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`]; [`StartError::Input`] also when the input does not decode into the
    /// workflow's data type.
    pub async fn start_by_name(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> Result<Started, StartError> {
        let core = &*self.core;
        core.lifecycle.ensure_background();
        // The versions this process runs are recorded before its first instance starts on
        // one, so tools reading the store can show every instance's version (once per
        // runtime; the queue worker records them too and retries a failure).
        if let Err(error) = core.router.ensure_triggers().await {
            tracing::warn!(%error, "recording the registered definitions failed");
        }
        let mut result = core.starts.start(name, input, options, None).await;
        if core.links.process().await
            && let Ok(started) = &mut result
        {
            core.links.refresh(started).await;
        }
        result
    }

    /// Resumes one bookmark by id (RT-34), e.g. a `wf.delay` bookmark before timers exist.
    ///
    /// # Errors
    ///
    /// [`ResumeError::InstanceNotFound`] for an unknown instance, [`ResumeError::Run`] when the run
    /// fails (an unknown bookmark included); the instance is then unchanged.
    pub async fn resume_bookmark(
        &self,
        instance_id: &str,
        bookmark_id: &str,
        payload: Value,
    ) -> Result<Started, ResumeError> {
        let core = &*self.core;
        core.lifecycle.ensure_background();
        let target = RunTarget::Bookmarks {
            ids: vec![bookmark_id.to_owned()],
            payload,
        };
        let mut result = core.run_path.run(instance_id, RunOptions::to(target)).await;
        if core.links.process().await
            && let Ok(Some(started)) = &mut result
        {
            core.links.refresh(started).await;
        }
        result?.ok_or_else(|| ResumeError::InstanceNotFound {
            instance: instance_id.to_owned(),
        })
    }

    /// Sends a stimulus (RT-14 to RT-24): in one call, starts the definitions whose
    /// event trigger matches (RT-15, subject to their activation strategy) and resumes every
    /// bookmark waiting for its name and key (RT-17), narrowed by instance id, correlation id
    /// or bookmark id, one run per instance; a stimulus that matched nothing is kept in the
    /// inbox for a bookmark that appears later (RT-21), unless [`Stimulus::inbox`] is off. With an
    /// idempotency key, a retried send returns the first report with `duplicate: true`.
    ///
    /// # Errors
    ///
    /// Before anything is written: [`SendError::Routing`] for a name, key or correlation id that
    /// cannot be routed, [`SendError::Payload`] or [`SendError::PayloadTooLarge`] for the payload,
    /// [`SendError::IdempotencyKeyReused`] for a key used by another send, and
    /// [`SendError::InstanceNotFound`], [`SendError::InstanceTerminal`],
    /// [`SendError::BookmarkNotFound`] or [`SendError::BookmarkStimulusMismatch`] for a target that
    /// cannot take it. [`SendError::Store`] when the store fails (what was committed stays; a
    /// retry with the same idempotency key is safe) and [`SendError::Run`] when a run fails (that
    /// instance is unchanged).
    pub async fn send(&self, stimulus: Stimulus) -> Result<SendReport, SendError> {
        self.core.router.send(stimulus).await
    }

    /// Starts an instance of `W` inside the application's own PostgreSQL transaction
    /// (ST-37): it exists only if `tx` commits, and its first run follows the commit, in
    /// whichever process's recovery sweep hears of it first (a notification sent on commit;
    /// without it, the next sweep a lease TTL later). `tx` must be on the store's database.
    /// Returns the new instance's id.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use workflow_runtime::{Runtime, workflow, TaskContext};
    /// # #[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
    /// # pub struct Order { id: String }
    /// # async fn ship(_ctx: &mut TaskContext<Order>) {}
    /// # workflow! { pub workflow Fulfil(Order) = sequence [task(ship)]; }
    /// # async fn place(runtime: &Runtime, pool: &sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind("o-1").execute(&mut *tx).await?;
    /// runtime.start_in::<Fulfil>(&mut tx, Order { id: "o-1".into() }).await?;
    /// tx.commit().await?; // the order and its workflow, or neither
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`]; a store that is not a `PostgresStore` is refused. A failed
    /// write leaves `tx` aborted: roll it back.
    #[cfg(feature = "postgres")]
    pub async fn start_in<W: Workflow>(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        input: W::Data,
    ) -> Result<String, StartError> {
        self.start_in_with::<W>(tx, input, StartOptions::default())
            .await
    }

    /// [`Runtime::start_in`] with options (an instance id, a correlation id).
    ///
    /// # Errors
    ///
    /// As [`Runtime::start_in`].
    #[cfg(feature = "postgres")]
    pub async fn start_in_with<W: Workflow>(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        input: W::Data,
        options: StartOptions,
    ) -> Result<String, StartError> {
        let input = serde_json::to_value(input).map_err(|e| StartError::Input {
            path: None,
            message: e.to_string(),
        })?;
        self.core
            .starts
            .start_in(tx, W::name(), input, options)
            .await
    }

    /// Queues a stimulus inside the application's own PostgreSQL transaction (ST-37): it
    /// exists only if `tx` commits, and the queue worker of whichever process hears of it
    /// routes it after the commit, as an enqueued send (RT-23). The report names the queued
    /// item. `tx` must be on the store's database.
    ///
    /// # Errors
    ///
    /// The validation errors of [`Runtime::send`]; a store that is not a `PostgresStore` is
    /// refused. A failed write leaves `tx` aborted: roll it back.
    #[cfg(feature = "postgres")]
    pub async fn send_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        stimulus: Stimulus,
    ) -> Result<SendReport, SendError> {
        self.core.router.send_in(tx, stimulus).await
    }

    /// A snapshot of an instance, or `None` for an unknown id (ENG-51).
    ///
    /// # Errors
    ///
    /// A [`StateError`] when the stored document does not decode or the store fails.
    pub async fn get_state(
        &self,
        instance_id: &str,
    ) -> Result<Option<InstanceSnapshot>, StateError> {
        self.core.queries.get_state(instance_id).await
    }

    /// The typed current state of a state-machine instance: `None` for an unknown id or a
    /// machine that has not started.
    ///
    /// # Errors
    ///
    /// A [`StateError`] when the stored document does not decode or the store fails.
    pub async fn current_state<W: StateMachineWorkflow>(
        &self,
        instance_id: &str,
    ) -> Result<Option<W::State>, StateError> {
        self.core.queries.current_state::<W>(instance_id).await
    }

    /// Lists the store's instances matching `query`, in id order, at most `query.limit`; pass
    /// the last id as [`InstanceQuery::after`] for the next page. An instance whose stored
    /// state does not decode is listed with [`InstanceSummary::unreadable`], never skipped.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the store fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::{InstanceQuery, Runtime, TaskContext, WorkflowStatus, workflow};
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Note {
    ///     text: String,
    /// }
    ///
    /// async fn noop(_ctx: &mut TaskContext<Note>) {}
    ///
    /// workflow! {
    ///     workflow Notes(Note) = sequence [task(noop), wait = event("read")];
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder().register::<Notes>().build()?;
    /// runtime.start::<Notes>(Note::default()).await?;
    ///
    /// let waiting = runtime
    ///     .list_instances(InstanceQuery {
    ///         status: Some(WorkflowStatus::Suspended),
    ///         ..InstanceQuery::default()
    ///     })
    ///     .await?;
    /// assert_eq!(waiting.len(), 1);
    /// assert_eq!(waiting[0].waiting_for, ["read"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_instances(
        &self,
        query: InstanceQuery,
    ) -> Result<Vec<InstanceSummary>, StoreError> {
        self.core.queries.list_instances(query).await
    }

    /// Waits until the instance is final or faulted, at most `timeout` (ENG-48). Needs a Tokio
    /// runtime with time enabled. It re-reads the store after each commit of this runtime, and
    /// every 200 ms for commits of other processes on the same store.
    ///
    /// # Errors
    ///
    /// [`AwaitError::Faulted`] with the incident as soon as the instance faults,
    /// [`AwaitError::Timeout`] when it is not final within `timeout` (it keeps running),
    /// [`AwaitError::InstanceNotFound`] for an unknown id, and [`AwaitError::State`] when it
    /// cannot be read.
    pub async fn await_completion(
        &self,
        instance_id: &str,
        timeout: Duration,
    ) -> Result<Completion, AwaitError> {
        self.core.lifecycle.ensure_background();
        self.core
            .queries
            .await_completion(instance_id, timeout)
            .await
    }

    /// Waits until the instance finishes, at most `timeout`, and returns its output decoded
    /// as the workflow's data type (the final data, unless an activity set another output).
    ///
    /// # Errors
    ///
    /// As [`Runtime::await_completion`], and [`AwaitError::Cancelled`] for a cancelled
    /// instance, [`AwaitError::Output`] when the output does not decode as `W::Data`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::prelude::*;
    ///
    /// #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    /// pub struct Count {
    ///     n: u32,
    /// }
    ///
    /// async fn bump(ctx: &mut TaskContext<Count>) {
    ///     ctx.data_mut().n += 1;
    /// }
    ///
    /// workflow! {
    ///     pub workflow Twice(Count) = sequence [task(bump), again = task(bump)];
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::builder().register::<Twice>().build()?;
    /// let id = runtime.start::<Twice>(Count::default()).await?.instance_id;
    /// let done: Count = runtime.await_data::<Twice>(&id, Duration::from_secs(5)).await?;
    /// assert_eq!(done, Count { n: 2 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn await_data<W: Workflow>(
        &self,
        instance_id: &str,
        timeout: Duration,
    ) -> Result<W::Data, AwaitError> {
        match self.await_completion(instance_id, timeout).await? {
            Completion::Finished(output) => {
                serde_json::from_value(output).map_err(|error| AwaitError::Output {
                    instance: instance_id.to_owned(),
                    message: error.to_string(),
                })
            }
            Completion::Cancelled(reason) => Err(AwaitError::Cancelled {
                instance: instance_id.to_owned(),
                reason,
            }),
        }
    }

    /// The incidents recorded against an instance (FLT-6), open and resolved, oldest first;
    /// `None` for an unknown id.
    ///
    /// # Errors
    ///
    /// A [`StateError`] when the instance cannot be read or decoded.
    pub async fn incidents(&self, instance_id: &str) -> Result<Option<Vec<Incident>>, StateError> {
        self.core.queries.incidents(instance_id).await
    }

    /// Definitions pinned by live (non-final) instances in the store that this runtime does
    /// not run (ENG-46): `(name, version)` pairs with the number of instances, sorted. Their
    /// instances stay untouched; register the version (with
    /// [`RuntimeBuilder::register_previous`], beside the current one, ENG-45) to run them, or
    /// [`Runtime::migrate`] them to a version registered here (ENG-54).
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the store fails.
    pub async fn unregistered_versions(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.core.queries.unregistered_versions().await
    }

    /// The versions of the definition `name` registered in this runtime (ENG-45), sorted,
    /// each with whether it is the current one (new instances start on it); empty for an
    /// unknown name.
    pub fn registered_versions(&self, name: &str) -> Vec<(String, bool)> {
        self.core
            .run_path
            .definitions()
            .versions_of(name)
            .into_iter()
            .map(|(workflow, current)| (workflow.version().to_owned(), current))
            .collect()
    }

    /// Moves the waiting instances of `Old` to the version `New` (ENG-54), one by one, each
    /// atomically: its position and data mapped by `New`'s [`Migrate`] implementation (which
    /// rustc checks), its waits and timers those of its new position, a `Migrated` journal
    /// entry, and the instance pinned to `New`. For a state machine the position is its
    /// state (whose entry does not run again); for a `workflow!` flowchart or sequence, the
    /// one node it waits at (ENG-55: its wait armed again, a timer counted from when the old
    /// node started; an instance waiting at several nodes, in a join or in a task is refused
    /// as [`MigrationRefusal::Unplaceable`]). `New` must be registered here; `Old` need not
    /// be. A running instance is refused (migrate it again later), as is one not waiting;
    /// the report says what happened to each. With [`Migration::dry_run`], each is checked
    /// and nothing written.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::{Migrate, Migration, Runtime, state_machine};
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// pub struct Order;
    ///
    /// mod v1 {
    ///     use super::Order;
    ///     #[workflow_runtime::state_machine(data = Order, initial = New, name = "order")]
    ///     pub enum OrderFlow {
    ///         #[on(pay: event("payment") => Paid)]
    ///         New,
    ///         Paid,
    ///     }
    /// }
    ///
    /// #[state_machine(data = Order, initial = Open, name = "order")]
    /// enum OrderFlow {
    ///     #[on(pay: event("payment") => Paid)]
    ///     #[on(cancel: event("cancel") => Cancelled)]
    ///     Open,
    ///     Paid,
    ///     Cancelled,
    /// }
    ///
    /// impl Migrate<v1::OrderFlow> for OrderFlow {
    ///     fn state(old: v1::OrderFlow) -> Self {
    ///         match old {
    ///             v1::OrderFlow::New => OrderFlow::Open,
    ///             v1::OrderFlow::Paid => OrderFlow::Paid,
    ///         }
    ///     }
    ///     fn data(old: Order) -> Order {
    ///         old
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder()
    ///     .register_previous::<v1::OrderFlow>()
    ///     .register::<OrderFlow>()
    ///     .build()?;
    /// let report = runtime
    ///     .migrate::<v1::OrderFlow, OrderFlow>(Migration::all())
    ///     .await?;
    /// assert!(report.instances.is_empty()); // nothing waits on v1 in a fresh store
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`MigrateError`] when the migration as a whole is refused (nothing written): `New`
    /// not registered here, two unrelated definitions (different names), the same version on
    /// both sides, a state machine on one side and a flowchart or sequence on the other
    /// ([`MigrateError::KindsDiffer`]), or a store failure while listing the instances.
    pub async fn migrate<Old, New>(
        &self,
        migration: Migration,
    ) -> Result<MigrationReport, MigrateError>
    where
        Old: Positioned,
        New: Migrate<Old>,
    {
        let map = |state: &str, data: Value| -> Result<(String, Value), MigrationRefusal> {
            let old =
                Old::position_from_name(state).ok_or_else(|| MigrationRefusal::UnmappedState {
                    state: state.to_owned(),
                })?;
            let data_error = |e: serde_json::Error| MigrationRefusal::Data {
                message: e.to_string(),
            };
            let data: Old::Data = serde_json::from_value(data).map_err(data_error)?;
            let new_data = serde_json::to_value(New::data(data)).map_err(data_error)?;
            Ok((New::position_name(New::state(old)).to_owned(), new_data))
        };
        self.core
            .versions
            .migrate(
                versions::Side {
                    name: Old::name(),
                    version: Old::version(),
                },
                Old::definition(),
                versions::Side {
                    name: New::name(),
                    version: New::version(),
                },
                &map,
                migration,
            )
            .await
    }

    /// [`Runtime::migrate`] between two versions of `name` as recorded in the store (their
    /// JSON form, written by every process that registers them), without the application's
    /// types: states (or a flowchart's or sequence's waiting nodes, ENG-55) are mapped by
    /// name and data is kept as it is (what `workflow migrate` does). Refused as a whole,
    /// before anything is written, when a state (or waiting node) of `from_version` has no
    /// counterpart of the same name in `to_version`. The new version runs without the
    /// application's code, so an instance whose new state would need it at once is refused.
    ///
    /// # Errors
    ///
    /// A [`MigrateError`]: a version not recorded, roots of different kinds, unmapped states
    /// or nodes, the same version twice, or a store failure.
    pub async fn migrate_recorded(
        &self,
        name: &str,
        from_version: &str,
        to_version: &str,
        migration: Migration,
    ) -> Result<MigrationReport, MigrateError> {
        self.core
            .versions
            .migrate_recorded(
                versions::Side {
                    name,
                    version: from_version,
                },
                versions::Side {
                    name,
                    version: to_version,
                },
                migration,
            )
            .await
    }

    /// Subscribes to lifecycle events of every instance (ENG-39, ENG-40).
    pub fn subscribe(&self) -> EventStream {
        self.core.run_path.subscribe()
    }

    /// Cancels an instance (ENG-50): the tree is cancelled, bookmarks and queued work removed,
    /// open incidents resolved as `cancelled`, `WorkflowCancelled` published. On a final
    /// instance: `AlreadyTerminal`, nothing changes. A task of the instance running in this
    /// process has its cancellation token fired (FLT-16): its run is abandoned (nothing of it
    /// committed) and the cancel applies from the last commit.
    ///
    /// When the instance runs in another process (its lease is held there), or on a
    /// definition version this runtime does not run, the cancel is recorded durably and
    /// [`Control::Requested`] returned (FLT-15): the owning runtime fires the running task's
    /// token and cancels the instance at its next step. Never a "locked" error.
    ///
    /// # Errors
    ///
    /// [`CancelError::InstanceNotFound`] for an unknown id, [`CancelError::AlreadyTerminal`] for a
    /// finished or cancelled instance, and [`CancelError::Run`] when the cancellation cannot be
    /// committed; nothing changes in each case.
    pub async fn cancel(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<Control, CancelError> {
        self.core.lifecycle.ensure_background();
        let result = self.core.controller.cancel(instance_id, reason).await;
        self.core.links.process().await;
        result
    }

    /// Suspends (pauses) an instance (ENG-50): nothing of it runs until [`Runtime::resume`].
    /// A task it is running finishes its current attempt (no cancellation token fires); the
    /// run stops at the next item boundary, and the instance becomes `Suspended/Paused` with
    /// its inbox items and bookmarks kept and its timers parked (TM-10). Stimuli sent to it meanwhile
    /// are held in the inbox and delivered after the resume. Suspending a paused instance
    /// changes nothing.
    ///
    /// When the instance runs in another process, or on a definition version this runtime
    /// does not run, the suspend is recorded durably and [`Control::Requested`] returned: the
    /// runtime that owns it applies it at the instance's next step.
    ///
    /// # Errors
    ///
    /// [`ControlError::InstanceNotFound`] for an unknown id, [`ControlError::AlreadyTerminal`]
    /// for a finished or cancelled instance, [`ControlError::NotSuspendable`] for a faulted one,
    /// [`ControlError::Run`] when the store fails; nothing changes in each case.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::{Control, Runtime, SubStatus, TaskContext, workflow};
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Invoice {
    ///     paid: bool,
    /// }
    ///
    /// async fn mark_paid(ctx: &mut TaskContext<Invoice>) {
    ///     ctx.data_mut().paid = true;
    /// }
    ///
    /// workflow! {
    ///     workflow Billing(Invoice) = sequence [
    ///         wait = event("paid"),
    ///         task(mark_paid),
    ///     ];
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder().register::<Billing>().build()?;
    /// let id = runtime.start::<Billing>(Invoice::default()).await?.instance_id;
    ///
    /// let paused = runtime.suspend(&id).await?;
    /// assert_eq!(paused.applied().and_then(|s| s.sub_status), Some(SubStatus::Paused));
    ///
    /// // While paused, the event is held instead of delivered.
    /// let report = runtime.send(workflow_runtime::Stimulus::new("paid")).await?;
    /// assert_eq!(report.deferred, vec![id.clone()]);
    ///
    /// runtime.resume(&id).await?;
    /// runtime.deliver_inbox().await?;
    /// let snapshot = runtime.get_state(&id).await?.ok_or("gone")?;
    /// assert!(snapshot.data::<Invoice>()?.paid);
    /// # let _ = Duration::ZERO;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn suspend(&self, instance_id: &str) -> Result<Control, ControlError> {
        self.core.lifecycle.ensure_background();
        let result = self.core.controller.suspend(instance_id).await;
        self.core.links.process().await;
        result
    }

    /// Resumes a paused instance (ENG-50): its timers are unparked (those that fell due fire
    /// at once, TM-10), its queued work runs on, and the stimuli held for it while it was
    /// paused are delivered by the inbox worker.
    ///
    /// When the instance runs in another process, or on a definition version this runtime
    /// does not run, the resume is recorded durably and [`Control::Requested`] returned: the
    /// runtime that owns it applies it.
    ///
    /// # Errors
    ///
    /// [`ControlError::InstanceNotFound`] for an unknown id, [`ControlError::AlreadyTerminal`]
    /// for a finished or cancelled instance, [`ControlError::NotResumable`] for one that is not
    /// paused, [`ControlError::Run`] when its run fails (nothing of it is committed).
    pub async fn resume(&self, instance_id: &str) -> Result<Control, ControlError> {
        self.core.lifecycle.ensure_background();
        let result = self.core.controller.resume(instance_id).await;
        self.core.links.process().await;
        if matches!(result, Ok(Control::Applied(_))) {
            // The stimuli held while it was paused.
            self.core.controller.ring();
        }
        result
    }

    /// The operator's retry (FLT-8, ENG-50) of a `Faulted` instance: its incidents are
    /// resolved as `retried`, its timers unparked (TM-10), and each faulted activity runs
    /// again from scratch with a fresh attempt budget (`Faulted -> Running`); nothing else
    /// changes. One fenced commit: of two racing operators, one gets a conflict.
    ///
    /// When the instance is leased by another process, or pinned to a definition version this
    /// runtime does not run, the retry is recorded durably and [`Control::Requested`] returned:
    /// the runtime that owns the instance applies it.
    ///
    /// # Errors
    ///
    /// [`RetryError::InstanceNotFound`] for an unknown id, [`RetryError::NotFaulted`] for an
    /// instance that is not `Faulted`, [`RetryError::CompensatedFailure`] when sagas compensated
    /// the failure, and [`RetryError::Run`] when the run fails (a conflict with another operator
    /// included).
    pub async fn retry(&self, instance_id: &str) -> Result<Control, RetryError> {
        self.core.lifecycle.ensure_background();
        let result = self.core.controller.retry(instance_id).await;
        self.core.links.process().await;
        result
    }

    /// Removes a final instance with its journal (ST-31).
    ///
    /// # Errors
    ///
    /// [`PurgeError::InstanceNotFound`] for an unknown id, [`PurgeError::NotTerminal`] for an
    /// instance that is not `Finished` or `Cancelled`, and [`PurgeError::Store`] when the store
    /// fails; nothing is removed in each case.
    pub async fn purge(&self, instance_id: &str) -> Result<(), PurgeError> {
        self.core.queries.purge(instance_id).await
    }

    /// Retention (ST-31): removes the `Finished` and `Cancelled` instances that became final
    /// more than `older_than` ago, with their bookmarks, journal and receipts, in atomic
    /// batches. Returns how many were removed.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the store fails; batches already removed stay removed, and running it
    /// again continues.
    pub async fn purge_finished(&self, older_than: Duration) -> Result<u64, StoreError> {
        self.core.queries.purge_finished(older_than).await
    }

    /// One retention pass now (what the background purge does every
    /// [`Retention::every`]): removes what is older than the runtime's [`Retention`] ages,
    /// in batches. Returns `None` when another process holds the retention lease (it is
    /// purging).
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn purge_expired(&self) -> Result<Option<RetentionReport>, StoreError> {
        self.core.lifecycle.retention().purge_expired().await
    }

    /// Runs again every runnable instance whose lease is free or expired (ENG-25, ENG-26):
    /// instances left `Running/Executing` by a process that died mid-run (their interrupted
    /// contexts re-run their entry point: activities run **at least once**, ENG-5), and ones
    /// created but never run. The recovery sweep started with the runtime does this in the
    /// background ([`RuntimeBuilder::recovery_sweep`]) reading only those instances (one
    /// indexed query), so calling this is only needed without it, or for the report. This
    /// call also looks for parents whose child finished before a crash without queuing its
    /// result (ACT-24: a child's final commit queues it, so only files written before that
    /// need the search); it reads only the parents waiting on a child (one indexed query),
    /// never the other suspended instances. An
    /// instance pinned to an unregistered version is reported as `VersionNotRegistered` and
    /// left untouched (ENG-46).
    ///
    /// # Errors
    ///
    /// The store's, when claiming or listing fails.
    pub async fn recover(&self) -> Result<RecoveryReport, StoreError> {
        self.core.lifecycle.ensure_background();
        self.core.lifecycle.recovery().recover().await
    }

    /// One pass of the inbox (RT-27, RT-28): expired items become dead letters
    /// `Expired`; every other item is offered, oldest first, to the bookmarks its look-back
    /// admits (RT-31: sent at or after the instance's `origin_at`, `SinceOrigin`), and deleted
    /// once delivered. Each pending item is visited at most once per pass. Returns how many
    /// items were delivered. The worker calls it; tests and tools may too.
    pub async fn deliver_inbox(&self) -> Result<usize, StoreError> {
        self.core.router.deliver_inbox().await
    }

    /// Indexes the triggers (RT-9) and starts the inbox worker (RT-26, see the module docs)
    /// on the current tokio runtime, unless it runs (even on a runtime built with
    /// [`RuntimeBuilder::inbox_worker`](crate::RuntimeBuilder::inbox_worker) off). The
    /// runtime starts it by itself (see [`Runtime::run_background`]).
    ///
    /// # Errors
    ///
    /// The store's, when indexing the triggers fails.
    pub async fn start_workers(&self) -> Result<(), StoreError> {
        self.core.router.ensure_triggers().await?;
        self.core.lifecycle.start_queue_worker();
        Ok(())
    }

    /// Writes the event triggers of every registered definition to the store, each
    /// definition's set replaced by difference (RT-9 to RT-11): a definition registered
    /// without triggers has its rows removed. Done once per runtime, by
    /// [`Runtime::start_workers`], the first [`Runtime::send`] or the first start; call it again after
    /// another process changed the index to re-assert this process's view.
    pub async fn index_triggers(&self) -> Result<(), StoreError> {
        self.core.router.index_triggers().await
    }

    /// Removes the trigger rows of a definition no process registers any more (RT-11).
    pub async fn retire_definition(&self, name: &str) -> Result<(), StoreError> {
        self.core.router.retire_definition(name).await
    }

    /// Puts a dead letter back in the inbox with a fresh TTL (the runtime's default), zero attempts and
    /// the same stimulus id, so receipts still prevent a double application (RT-28).
    pub async fn replay_dead_letter(&self, item_id: &str) -> Result<QueueItem, StoreError> {
        self.core.router.replay_dead_letter(item_id).await
    }

    /// Dead letters (RT-28), oldest first.
    pub async fn dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.core.router.dead_letters(filter).await
    }

    /// Claims the timers due at the clock's now (TM-6) and resumes each one's bookmark through
    /// the normal resume path, the time triggers' schedules first, then the instances' timers
    /// in due order, a few at once: the resume payload is `{ "due_at", "fired_at" }` (µs),
    /// which the Delay completes with and journals (TM-8). Then delivers the debounced sends
    /// that are due (RT-35).
    /// The timer driver calls it; call it yourself on a runtime built without one.
    pub async fn fire_due_timers(&self) -> Result<TimerFiring, StoreError> {
        self.core.lifecycle.ensure_background();
        let mut report = self.core.timers.fire_due_timers().await?;
        report.debounced = self.core.router.fire_due_debounces().await?;
        Ok(report)
    }

    /// Writes the schedules of every registered definition's time triggers, once per
    /// runtime (TM-11 to TM-13); the timer driver and [`crate::testing::TestRuntime`] do it
    /// before their first claim. A schedule's id is derived from the definition, the node and
    /// the trigger's settings: an unchanged trigger keeps its `next_due` (and a fired StartAt
    /// stays fired), a changed one gets a new schedule due from now and the old one is
    /// removed, as is the schedule of a removed trigger.
    pub async fn schedule_triggers(&self) -> Result<(), StoreError> {
        self.core.timers.schedule_triggers().await
    }

    /// Starts the timer driver on the current tokio runtime, unless one already runs
    /// (even on a runtime built with [`RuntimeBuilder::timer_driver`] off). The runtime starts
    /// it by itself (see [`Runtime::run_background`]). Returns whether it started one.
    ///
    /// [`RuntimeBuilder::timer_driver`]: crate::RuntimeBuilder::timer_driver
    pub fn start_timer_driver(&self) -> bool {
        self.core.lifecycle.start_timer_driver()
    }

    /// Starts the background work on the current tokio runtime, whichever part of it is
    /// enabled and not running (the timer driver unless
    /// [`RuntimeBuilder::timer_driver`](super::RuntimeBuilder::timer_driver) is off, the
    /// inbox worker unless [`RuntimeBuilder::inbox_worker`](super::RuntimeBuilder::inbox_worker)
    /// is off, the recovery sweep unless
    /// [`RuntimeBuilder::recovery_sweep`](super::RuntimeBuilder::recovery_sweep) is `None`,
    /// the retention purge unless [`Retention::every`](super::Retention) is `None`).
    /// `build` inside tokio and every operation do it already; after
    /// [`Runtime::shutdown`] only this call starts the work again.
    ///
    /// # Errors
    ///
    /// [`LifecycleError::NoTokioRuntime`] outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let runtime = workflow_runtime::Runtime::builder().build()?;
    /// runtime.run_background()?;
    /// runtime.shutdown(std::time::Duration::from_secs(1)).await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn run_background(&self) -> Result<(), LifecycleError> {
        self.core.lifecycle.run_background()
    }

    /// Shuts this runtime down (RT-26, ENG-36, ENG-51, ENG-52). The timer driver, the inbox
    /// worker and the recovery sweep stop, and are awaited: once this returns and the last
    /// clone is dropped, nothing of the runtime holds its store (a SQLite file reopens at
    /// once). The tasks this process is running get up to `grace` to finish; then their
    /// cancellation tokens fire and their runs are *interrupted*: abandoned without a commit
    /// and without counting an attempt, so the instances continue from their last commit in
    /// the next process (its recovery sweep runs them). A task that ignores its token is
    /// dropped after [`RuntimeBuilder::cancel_grace`](super::RuntimeBuilder::cancel_grace).
    /// Build a new runtime to run again (or call [`Runtime::run_background`]). Last, the
    /// store's wake-ups for other processes still waiting to be sent are sent
    /// ([`Storage::flush_hints`](crate::store::Storage::flush_hints), at most 2 s).
    pub async fn shutdown(&self, grace: Duration) {
        self.core.lifecycle.shutdown(grace).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Runtime;

    /// The worker holds only a weak reference: dropping the last runtime ends it, and
    /// `shutdown` joins it.
    #[test]
    fn rt26_the_worker_stops_on_shutdown_and_on_drop() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .ok();
        let Some(rt) = rt else { return };
        rt.block_on(async {
            let runtime = Runtime::builder().build().ok();
            let Some(runtime) = runtime else { return };
            assert!(runtime.start_workers().await.is_ok());
            runtime.shutdown(std::time::Duration::ZERO).await;
            assert!(!runtime.core.lifecycle.queue_worker_runs());
            assert!(runtime.start_workers().await.is_ok());
            let core = Arc::downgrade(&runtime.core);
            let router = Arc::downgrade(&runtime.core.router);
            drop(runtime);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert!(core.upgrade().is_none(), "the runtime state leaked");
            assert!(router.upgrade().is_none(), "the router leaked");
        });
    }

    /// The first segments of the paths that follow `prefix` in `code`: `a` for `prefix::a::B`,
    /// and `a`, `b` for `prefix::{a::C, b}`.
    fn first_segments(code: &str, prefix: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            found.push(std::mem::take(&mut item));
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                found.push(item);
            } else {
                found.push(rest.to_owned());
            }
        }
        found
            .iter()
            .map(|path| {
                path.trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .filter(|segment| !segment.is_empty())
            .collect()
    }

    /// The services of the runtime's folder call down, never back into the facade: no file
    /// of the folder names an item of this file (only the modules it declares), and `impl
    /// Runtime` is written here alone.
    #[test]
    fn nothing_in_the_runtime_folder_imports_the_facade() {
        use std::path::{Path, PathBuf};
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
        let facade = std::fs::read_to_string(dir.join("mod.rs")).unwrap_or_default();
        let modules: Vec<&str> = facade
            .lines()
            .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
            .collect();
        assert!(
            modules.contains(&"run_path"),
            "the facade's modules are read"
        );
        let mut files: Vec<PathBuf> = Vec::new();
        let mut folders = vec![dir.clone()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && path != dir.join("mod.rs")
                {
                    files.push(path);
                }
            }
        }
        assert!(files.len() > 10, "the folder's files are read");
        let mut up = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            // Comments and doc links are not imports.
            let code: String = text
                .lines()
                .map(|line| line.split("//").next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            let depth = file
                .strip_prefix(&dir)
                .map(|p| p.components().count())
                .unwrap_or(1);
            let in_folder_mod = file.file_name().is_some_and(|n| n == "mod.rs");
            // The path from this file to the facade.
            let to_facade = match (depth, in_folder_mod) {
                (1, _) | (2, true) => "super::",
                _ => "super::super::",
            };
            let mut named = first_segments(&code, "crate::runtime::");
            named.extend(
                first_segments(&code, to_facade)
                    .into_iter()
                    .filter(|segment| segment != "super"),
            );
            for segment in named {
                if !modules.contains(&segment.as_str()) {
                    up.push(format!("{}: {segment}", file.display()));
                }
            }
            if code.contains("impl Runtime {") || code.contains("impl Runtime{") {
                up.push(format!("{}: impl Runtime", file.display()));
            }
        }
        assert!(up.is_empty(), "the facade is reached from below: {up:#?}");
    }
}
