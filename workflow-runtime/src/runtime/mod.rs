//! The [`Runtime`]: registration, start, send, read, await, cancel, subscribe, recover and
//! purge (ENG-47 to ENG-51), on a [`Store`].
//!
//! Every run takes the instance lease through the one leased run guard (`lease.rs`, ST-14),
//! loads the instance (version and state document), runs while the guard renews the lease,
//! and commits the document, status columns, bookmark diff and journal under the loaded
//! version and the lease's fencing token (ENG-28), releasing the lease with the last commit.
//! A `Conflict` or `Fenced` answer discards the run and is returned typed (ENG-29); a lost
//! lease cancels the run (ENG-36). Runs of one instance in one process also queue on a local
//! lock, which the recovery sweep never waits for: it hands an instance another run of this
//! process holds back at once. The background work (timer driver, queue worker, recovery
//! sweep) and shutdown are in `lifecycle.rs`.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use workflow_model::Diagnostics;

use crate::base::new_ulid;
use crate::engine::events::{EventStream, LifecycleEvent};
use crate::engine::executor::{
    Checkpoint, CommitStrategy, DEFAULT_MAX_STEPS_PER_RUN, Link, Middleware, RunEnd, RunError,
    RunTarget,
};
use crate::engine::state::{
    DefinitionRef, Incident, Journal, JournalEntry, JournalLevel, ParentLink, SubStatus,
    TriggerStart, WorkflowState, WorkflowStatus,
};
use crate::store::{
    Commit, InstanceFilter, InstanceStatus, InstanceSubStatus, Micros, NewInstance, PurgeFilter,
    Storage, StoreError,
};
use crate::workflow::{StateMachineWorkflow, Workflow};

mod builder;
mod cache;
mod commit;
mod control;
mod faults;
mod lease;
mod lifecycle;
mod list;
mod report;
mod retention;
mod router;
mod timers;

pub(crate) use crate::base::now_micros;
pub use crate::routing::{Refusal, Rejection, SendError, SendReport, Stimulus};
pub use crate::status::Started;
pub use builder::RuntimeBuilder;
use builder::{ErasedWorkflow, RunOutput};
use commit::{
    RunCommits, Tracker, decode_document, decode_loaded, encode_document, journal_entry,
    run_store_error,
};
pub use control::{Control, ControlError};
use control::{RunHandle, RunSignals};
pub use faults::RetryError;
use lease::{LeaseGuard, LeaseSettings, NamedLease};
pub use lifecycle::LifecycleError;
pub use list::{InstanceQuery, InstanceSummary};
pub use retention::{Retention, RetentionReport};
pub use timers::TimerFiring;

// ---- errors, one enum per operation family ---------------------------------------------

/// Why [`RuntimeBuilder::build`] failed (ENG-45, ENG-47).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The definition breaks validation rules.
    #[error("definition `{name}` is invalid: {diagnostics}")]
    Invalid {
        /// The definition name.
        name: String,
        /// Every problem found.
        diagnostics: Diagnostics,
    },
    /// A JSON definition does not load.
    #[error("JSON definition does not load: {message}")]
    Load {
        /// The loader's message.
        message: String,
    },
    /// A task node names a fn the registry does not have.
    #[error("definition `{workflow}`: node `{node}` runs `{name}`, which is not registered")]
    UnknownActivity {
        /// The definition name.
        workflow: String,
        /// The node id.
        node: String,
        /// The missing registry name.
        name: String,
    },
    /// A transition names a condition the registry does not have.
    #[error(
        "definition `{workflow}`: node `{node}` uses condition `{name}`, which is not registered"
    )]
    UnknownCondition {
        /// The definition name.
        workflow: String,
        /// The node id: a machine, an `if`, a `switch` or a `while`.
        node: String,
        /// The missing registry name.
        name: String,
    },
    /// A `for_each`, `parallel_for_each`, `set_variable`, `finish`, `correlate` or
    /// `sub_workflow` node names an items, value or assign fn the registry does not have
    /// ([`Registry::items`](crate::Registry::items), [`Registry::value`](crate::Registry::value),
    /// [`Registry::assign`](crate::Registry::assign)).
    #[error("definition `{workflow}`: node `{node}` uses {kind} `{name}`, which is not registered")]
    UnknownFunction {
        /// The definition name.
        workflow: String,
        /// The node id.
        node: String,
        /// `"items fn"`, `"value fn"` or `"assign fn"`.
        kind: &'static str,
        /// The missing registry name.
        name: String,
    },
    /// The definition uses an activity kind this engine does not run yet.
    #[error(
        "definition `{workflow}`: node `{node}` is a `{kind}`, which this runtime does not run yet"
    )]
    UnsupportedActivity {
        /// The definition name.
        workflow: String,
        /// The node id.
        node: String,
        /// The kind.
        kind: &'static str,
    },
    /// The definition declares a setting this runtime does not honour yet (a node commit
    /// setting, a workflow commit strategy, a deadline on a detached sub-workflow): refused
    /// rather than silently ignored.
    #[error(
        "definition `{workflow}`: node `{node}` sets `{setting}`, which this runtime does not honour yet"
    )]
    UnsupportedSetting {
        /// The definition name.
        workflow: String,
        /// The node id (`root` level settings name the definition's root).
        node: String,
        /// The setting: `commit`, `commit_strategy` or `deadline`.
        setting: &'static str,
    },
    /// A SubWorkflow names a workflow that is not registered (ACT-V10).
    #[error("definition `{workflow}`: node `{node}` starts unknown workflow `{name}`")]
    UnknownWorkflow {
        /// The definition name.
        workflow: String,
        /// The SubWorkflow's node id.
        node: String,
        /// The missing workflow name.
        name: String,
    },
    /// An event declares its outcomes but no outcome mapping is registered for its payload
    /// type ([`Registry::outcome`](crate::Registry::outcome), ACT-V8).
    #[error(
        "definition `{workflow}`: event `{node}` declares outcomes but its payload type `{payload}` does not choose one (no outcome mapping is registered under `{payload}`)"
    )]
    EventWithoutOutcome {
        /// The definition name.
        workflow: String,
        /// The event's node id.
        node: String,
        /// The event's payload type name, empty when it names none.
        payload: String,
    },
    /// Two nodes share an id path.
    #[error("definition `{workflow}`: node id `{node}` is used twice")]
    DuplicateNode {
        /// The definition name.
        workflow: String,
        /// The node id.
        node: String,
    },
    /// Receipts would be removed while a copy of their stimulus can still be delivered
    /// (ST-30): their retention must be at least the dead letters' plus the queue TTL.
    #[error(
        "receipts are kept {receipts:?}, less than the dead letters' retention plus the queue TTL ({required:?}): a replayed stimulus could be applied twice"
    )]
    ReceiptRetentionTooShort {
        /// The receipts' retention.
        receipts: Duration,
        /// The least it may be.
        required: Duration,
    },
    /// Two different current versions of one name were registered.
    #[error("definition `{name}` registered with two versions: `{first}` and `{second}`")]
    ConflictingCurrentVersion {
        /// The definition name.
        name: String,
        /// The first version.
        first: String,
        /// The second version.
        second: String,
    },
}

/// Why a start failed (ENG-48).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// No definition is registered under this name.
    #[error("no definition is registered under `{name}`")]
    DefinitionNotRegistered {
        /// The name.
        name: String,
    },
    /// An instance with this id exists.
    #[error("instance `{instance}` already exists")]
    InstanceExists {
        /// The id.
        instance: String,
    },
    /// The input does not serialize, or does not decode into the workflow's data type.
    #[error(
        "input does not fit the workflow data{}: {message}",
        path.as_ref().map(|p| format!(" at `{p}`")).unwrap_or_default()
    )]
    Input {
        /// Where in the input (`customer.id`, `items[2].sku`), when known.
        path: Option<String>,
        /// Why.
        message: String,
    },
    /// The instance id given in [`StartOptions::instance_id`] is not a valid id (ST-23).
    #[error("invalid instance id `{id}`: {reason}")]
    InvalidInstanceId {
        /// The id as given.
        id: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The definition's activation strategy refused a new instance (RT-16).
    #[error("activation refused: {refusal:?}")]
    ActivationRefused {
        /// Why.
        refusal: Refusal,
    },
    /// The new instance's state document, as created or at its first run's first commit, is
    /// larger than the store's limit ([`Storage::with_max_state_bytes`], ST-24). Nothing was
    /// kept: the caller still has the input, so the start is refused rather than left
    /// faulted.
    #[error(
        "the state of new instance `{instance}` is too large: {size} bytes, limit {limit}; nothing was kept"
    )]
    StateTooLarge {
        /// The id the instance would have had.
        instance: String,
        /// The size of the refused document, in bytes.
        size: usize,
        /// The store's limit, in bytes.
        limit: usize,
    },
    /// The first run failed; nothing was kept. Except [`RunError::StateTooLarge`]: a first
    /// run that had committed before its state grew over the limit may have done what
    /// others see (children started, stimuli sent), so its instance stays, faulted with a
    /// `state_too_large` incident (ST-24).
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why resuming a bookmark by id failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// The instance does not exist.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// The run failed (`BookmarkNotFound` included); the instance is unchanged.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why reading an instance failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The stored document does not decode.
    #[error("instance `{instance}` does not decode: {message}")]
    Decode {
        /// The id.
        instance: String,
        /// Why.
        message: String,
    },
    /// The store failed.
    #[error("instance `{instance}`: {error}")]
    Store {
        /// The id.
        instance: String,
        /// The store's error.
        error: StoreError,
    },
}

/// How an instance ended, from [`Runtime::await_completion`].
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The root completed; the output (the final data unless an activity set one).
    Finished(Value),
    /// Cancelled, with the reason given.
    Cancelled(Option<String>),
}

/// Why awaiting completion gave no [`Completion`] (ENG-48).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwaitError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// The instance faulted (FLT-5).
    #[error("instance faulted: {}", incident.fault.message)]
    Faulted {
        /// The incident.
        incident: Box<Incident>,
    },
    /// Not final within the timeout; the instance keeps running.
    #[error("instance `{instance}` is still {status:?} after the timeout")]
    Timeout {
        /// The id.
        instance: String,
        /// Its status then.
        status: WorkflowStatus,
    },
    /// The instance was cancelled ([`Runtime::await_data`] only; `await_completion`
    /// returns [`Completion::Cancelled`]).
    #[error("instance `{instance}` was cancelled{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// The id.
        instance: String,
        /// The reason given.
        reason: Option<String>,
    },
    /// The output does not decode as the workflow's data type ([`Runtime::await_data`]).
    #[error("instance `{instance}`: the output does not decode as the workflow's data: {message}")]
    Output {
        /// The id.
        instance: String,
        /// The decoder's message.
        message: String,
    },
    /// The instance could not be read.
    #[error("instance `{instance}`: {error}")]
    State {
        /// The id.
        instance: String,
        /// Why.
        error: StateError,
    },
}

/// Why a cancel failed (ENG-50).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Already `Finished` or `Cancelled`; nothing changed.
    #[error("instance is already {status:?}")]
    AlreadyTerminal {
        /// Its final status.
        status: WorkflowStatus,
    },
    /// The stored state could not be cancelled; nothing changed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why a purge failed (ST-31).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PurgeError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Only `Finished` and `Cancelled` instances can be purged.
    #[error("instance is {status:?}, not final")]
    NotTerminal {
        /// Its status.
        status: WorkflowStatus,
    },
    /// The store failed.
    #[error("instance `{instance}`: {error}")]
    Store {
        /// The id.
        instance: String,
        /// The store's error.
        error: StoreError,
    },
}

// ---- results ---------------------------------------------------------------------------

/// Options of a start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// A caller-chosen instance id (a ULID otherwise).
    pub instance_id: Option<String>,
    /// A correlation id.
    pub correlation_id: Option<String>,
}

/// A read-only snapshot of an instance (ENG-51).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSnapshot {
    /// The whole persisted state: status, contexts, bookmarks, queue, data...
    pub state: WorkflowState,
    /// The journal, stored apart from the state (ENG-41), oldest first.
    pub journal: Vec<JournalEntry>,
}

impl InstanceSnapshot {
    /// The status.
    pub fn status(&self) -> WorkflowStatus {
        self.state.status
    }

    /// The sub-status.
    pub fn sub_status(&self) -> Option<SubStatus> {
        self.state.sub_status
    }

    /// The current state name of a root state machine.
    pub fn current_state(&self) -> Option<&str> {
        let root = self.state.context(self.state.root?)?;
        root.properties
            .get(crate::engine::names::CURRENT_STATE)?
            .as_str()
    }

    /// The data, decoded as `D`.
    ///
    /// # Errors
    ///
    /// A `serde_json::Error` when the stored data does not decode as `D`.
    pub fn data<D: DeserializeOwned>(&self) -> Result<D, serde_json::Error> {
        serde_json::from_value(self.state.data.clone())
    }

    /// The journal entries, oldest first.
    pub fn journal(&self) -> &[JournalEntry] {
        &self.journal
    }
}

// ---- the runtime -------------------------------------------------------------------------

pub(crate) struct Inner {
    pub(crate) workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
    /// Where instances, bookmarks and journals live (ST-1).
    pub(crate) store: Storage,
    /// This runtime's lease owner name (ST-14).
    pub(crate) owner: String,
    /// The instance leases' TTL and renewal (ST-14).
    pub(crate) lease: LeaseSettings,
    pub(crate) commit_strategy: CommitStrategy,
    /// Serializes this process's runs of one instance, so they queue instead of meeting each
    /// other's lease (the lease still fences other processes, ST-14).
    pub(crate) locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The decoded states of instances whose run this runtime ended last (ENG-53).
    pub(crate) states: cache::StateCache,
    /// Children created by their parent's commit whose first run is still to do (ACT-24).
    pub(crate) created: Mutex<std::collections::HashSet<String>>,
    /// Wakes awaiters after each commit of this process (ENG-48).
    pub(crate) watches: Mutex<HashMap<String, watch::Sender<u64>>>,
    pub(crate) events: broadcast::Sender<LifecycleEvent>,
    pub(crate) max_steps_per_run: usize,
    pub(crate) journal_level: JournalLevel,
    pub(crate) max_journal_entries: usize,
    pub(crate) middleware: Middleware,
    /// Work between instances queued by commits (ACT-24), carried out before the runtime
    /// call that caused it returns.
    pub(crate) links: Mutex<VecDeque<Link>>,
    /// Set once the triggers are written to the store (RT-9).
    pub(crate) triggers_indexed: tokio::sync::OnceCell<()>,
    /// The time triggers' schedules were written (TM-11 to TM-13).
    pub(crate) schedules_written: tokio::sync::OnceCell<()>,
    /// The queue worker's doorbell, capacity one (RT-26).
    pub(crate) doorbell: Arc<tokio::sync::Notify>,
    /// The background tasks (timer driver, queue worker, recovery sweep).
    pub(crate) background: Mutex<lifecycle::Background>,
    /// Whether the timer driver runs in the background (TM-4).
    pub(crate) timer_driver: bool,
    /// Whether the queue worker runs in the background (RT-26).
    pub(crate) queue_worker: bool,
    /// The recovery sweep's interval; `None`: only [`Runtime::recover`] recovers.
    pub(crate) recovery_sweep: Option<Duration>,
    /// Serializes recovery passes (the sweep and [`Runtime::recover`]).
    pub(crate) recovery: tokio::sync::Mutex<()>,
    /// What the background purge removes (ST-30).
    pub(crate) retention: Retention,
    /// Final children's results queued by their commit, for the in-process resume of their
    /// parent to ack: `(parent, bookmark)` to `(item id, stimulus id)` (ACT-24).
    pub(crate) child_results: Mutex<HashMap<(String, String), (String, String)>>,
    /// Never-run instances a recovery sweep left to their creator, with when it first saw
    /// each.
    /// The token of the lease the sweep handed back.
    pub(crate) fresh: Mutex<HashMap<String, (std::time::Instant, u64)>>,
    /// The pending idempotency records of direct sends in progress, by stimulus id, with the
    /// number of sends of that stimulus in progress (concurrent sends with one key share the
    /// first one's): the first commit delivering the stimulus, or creating an instance for
    /// it, writes it (RT-19); the send completes it.
    pub(crate) pending_records: Mutex<HashMap<String, (crate::store::IdempotencyRecord, usize)>>,
    /// The queue items the queue worker is delivering to one instance, by `(instance id,
    /// stimulus id)`: the run's first commit deletes the item with the receipt it writes
    /// (RT-19), so a worker stopped before its acknowledgement leaves nothing to redeliver.
    pub(crate) consuming: Mutex<HashMap<(String, String), String>>,
    /// Serializes queue passes (the worker and [`Runtime::deliver_queued`]), and holds the
    /// items this process has put back undelivered and announced once (RT-27): put back
    /// again, they are not announced again.
    pub(crate) queue_passes: tokio::sync::Mutex<std::collections::HashSet<String>>,
    /// Notified whenever a run of this process ends (for [`Runtime::shutdown`]).
    pub(crate) idle: tokio::sync::Notify,
    /// The default queue TTL, µs (RT-28).
    pub(crate) queue_ttl: Micros,
    /// The queue worker's periodic sweep (RT-26).
    pub(crate) sweep: Duration,
    /// Workflow time (TM-1).
    pub(crate) clock: Arc<dyn crate::clock::Clock>,
    /// The timer driver's fallback sweep (TM-5); `None` disables it.
    pub(crate) sweep_interval: Option<Duration>,
    /// Set by [`Runtime::shutdown`]: stops the background tasks; dropped with the runtime.
    pub(crate) stop: watch::Sender<bool>,
    /// ENG-52's grace for cancelled tasks.
    pub(crate) cancel_grace: Duration,
    /// The cancellation token and control signals of each instance this process is running
    /// (FLT-15, ENG-50).
    pub(crate) running: Mutex<HashMap<String, RunHandle>>,
}

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
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.inner.workflows.keys().collect();
        names.sort();
        f.debug_struct("Runtime")
            .field("workflows", &names)
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}

/// The stimulus a run delivers (RT-19): its id, and whether the run's first commit writes
/// its receipt. Every delivery of an id that can reach the instance again keeps one (a queue
/// item, which a crash before its acknowledgement or an expired claim presents again; a send
/// with an idempotency key, which a retry presents again; a child's result). A send without
/// an idempotency key made its id itself, and its routing runs each instance at most once,
/// so its receipts would never be looked up: it writes none.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The stimulus id.
    pub(crate) stimulus_id: String,
    /// The first commit writes the receipt (instance, stimulus id).
    pub(crate) receipt: bool,
}

impl Delivery {
    /// A delivery whose id can be presented to the instance again: its receipt is written.
    pub(crate) fn kept(stimulus_id: String) -> Self {
        Self {
            stimulus_id,
            receipt: true,
        }
    }

    /// A delivery of an id no other delivery can present to the instance: no receipt.
    pub(crate) fn once(stimulus_id: String) -> Self {
        Self {
            stimulus_id,
            receipt: false,
        }
    }
}

/// This process's turn to run an instance (see [`Runtime::local_run`]).
pub(crate) struct LocalRun<'r> {
    locks: &'r Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    instance_id: String,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for LocalRun<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = lock(self.locks);
        // The map's reference and ours: nobody else waits.
        if self
            .mutex
            .take()
            .is_some_and(|m| Arc::strong_count(&m) == 2)
        {
            locks.remove(&self.instance_id);
        }
    }
}

/// Forgets a run's cancellation token when the run ends.
struct Running<'r> {
    inner: &'r Inner,
    instance_id: &'r str,
}

impl<'r> Running<'r> {
    /// Registers the run's token and signals.
    fn new(
        inner: &'r Inner,
        instance_id: &'r str,
        token: &crate::cancel::CancellationToken,
        signals: &Arc<RunSignals>,
    ) -> Self {
        lock(&inner.running).insert(
            instance_id.to_owned(),
            RunHandle {
                token: token.clone(),
                signals: Arc::clone(signals),
            },
        );
        Self { inner, instance_id }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.inner.running).remove(self.instance_id);
        self.inner.idle.notify_waiters();
    }
}

/// How often [`Runtime::await_completion`] re-reads the store without a local commit.
const AWAIT_POLL: Duration = Duration::from_millis(200);

/// What [`Runtime::recover`] did (ENG-25, ENG-26).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Instances run again (interrupted ones and ones never run), with their status after.
    pub recovered: Vec<Started>,
    /// Instances that could not run: `VersionNotRegistered` (left untouched, ENG-46), corrupt
    /// state, store errors.
    pub failed: Vec<RunError>,
    /// Parents resumed with the result of a child that had finished before the crash
    /// (ACT-24).
    pub parents_resumed: Vec<String>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Returns `Pending` once, so a long-running instance lets other tasks run between budgets.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Runtime {
    /// A builder with the default settings.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            pending: Vec::new(),
            max_steps_per_run: DEFAULT_MAX_STEPS_PER_RUN,
            journal_level: JournalLevel::default(),
            max_journal_entries: 1000,
            event_buffer: 1024,
            middleware: Middleware::default(),
            store: None,
            commit_strategy: CommitStrategy::default(),
            lease_ttl: lease::DEFAULT_TTL,
            lease_renewal: None,
            queue_worker: true,
            recovery_sweep: Some(lifecycle::DEFAULT_RECOVERY_SWEEP),
            retention: Retention::default(),
            owner: None,
            queue_ttl: crate::routing::DEFAULT_QUEUE_TTL,
            queue_sweep: router::queue::DEFAULT_SWEEP,
            clock: None,
            sweep_interval: Some(timers::DEFAULT_SWEEP),
            timer_driver: true,
            cancel_grace: crate::engine::executor::DEFAULT_CANCEL_GRACE,
        }
    }

    /// The store this runtime runs on, through its policy layer.
    pub fn store(&self) -> &Storage {
        &self.inner.store
    }

    /// Starts an instance of `W` with `input` as its data and runs its first run in the
    /// caller's task (ENG-48).
    ///
    /// # Errors
    ///
    /// [`StartError::DefinitionNotRegistered`] when `W` is not registered,
    /// [`StartError::InstanceExists`] when the id is taken, [`StartError::ActivationRefused`] when
    /// the activation strategy refuses a new instance, [`StartError::Input`] when the input does
    /// not serialize, and [`StartError::Run`] when the first run fails (nothing is kept).
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
        self.ensure_background();
        let mut result = self.start_inner(name, input, options, None).await;
        if self.process_links().await
            && let Ok(started) = &mut result
        {
            self.refresh(started).await;
        }
        result
    }

    /// A new instance of `name` (`Running/Pending`, version 1), checked but not yet stored.
    pub(crate) fn new_instance(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
        trigger: Option<TriggerStart>,
    ) -> Result<NewInstance<crate::store::policy::SerializedState>, StartError> {
        self.build_instance(name, input, options, parent, trigger)
            .map(|(instance, _)| instance)
    }

    /// [`Runtime::new_instance`], with the state its document encodes.
    fn build_instance(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
        trigger: Option<TriggerStart>,
    ) -> Result<
        (
            NewInstance<crate::store::policy::SerializedState>,
            WorkflowState,
        ),
        StartError,
    > {
        let workflow =
            self.inner
                .workflows
                .get(name)
                .ok_or_else(|| StartError::DefinitionNotRegistered {
                    name: name.to_owned(),
                })?;
        workflow
            .check_data(&input)
            .map_err(|(path, message)| StartError::Input { path, message })?;
        let instance_id = options.instance_id.unwrap_or_else(new_ulid);
        let now = self.inner.clock.now();
        let mut state = WorkflowState::new(
            instance_id.clone(),
            DefinitionRef {
                name: name.to_owned(),
                version: workflow.version().to_owned(),
            },
            input.clone(),
            input,
            Journal::new(self.inner.journal_level, self.inner.max_journal_entries),
            now,
        );
        state.correlation_id = options.correlation_id;
        state.parent = parent;
        let receipt = trigger.as_ref().map(|t| t.stimulus_id.clone());
        state.trigger = trigger;
        let document = encode_document(&state)?;
        let instance = NewInstance {
            instance_id,
            definition_name: name.to_owned(),
            definition_version: workflow.version().to_owned(),
            status: InstanceStatus::Running,
            sub_status: Some(InstanceSubStatus::Pending),
            correlation_id: state.correlation_id.clone(),
            origin_at: now,
            created_at: now,
            state: document,
            receipt,
            consumed_queue_item: None,
            activation_scope: None,
            listing: list::listing_text(&state),
            idempotency: None,
        };
        Ok((instance, state))
    }

    /// Creates the instance in the store (`Running/Pending`, version 1) and runs its first
    /// run, with its parent when a SubWorkflow starts it (ACT-24).
    pub(crate) async fn start_inner(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
    ) -> Result<Started, StartError> {
        let correlation = options.correlation_id.clone();
        let (mut new, state) = self.build_instance(name, input, options, parent.clone(), None)?;
        if parent.is_none() {
            // RT-16: `start` applies the activation strategy too.
            new.activation_scope = self
                .activation_scope(name, correlation.as_deref())
                .map_err(|refusal| StartError::ActivationRefused { refusal })?;
        }
        let instance_id = new.instance_id.clone();
        // Held from the creation through the first run: this process's recovery sweep leaves
        // the new instance to it.
        let local = self.local_run(&instance_id).await;
        let document = new.state.0.clone();
        let created = self.inner.store.create_instance(new).await;
        match created {
            // ENG-53: its first run, just below, starts from this state.
            Ok(version) => self.inner.states.keep(version, document, state),
            Err(StoreError::AlreadyExists { .. }) => {
                return Err(StartError::InstanceExists {
                    instance: instance_id,
                });
            }
            Err(StoreError::ActivationConflict { existing, .. }) => {
                return Err(StartError::ActivationRefused {
                    refusal: Refusal::ActivationRefused {
                        strategy: self.activation_of(name),
                        existing,
                    },
                });
            }
            Err(StoreError::Invalid {
                what: "instance_id",
                reason,
            }) => {
                return Err(StartError::InvalidInstanceId {
                    id: instance_id,
                    reason,
                });
            }
            Err(StoreError::Invalid { reason, .. }) => {
                return Err(StartError::Input {
                    path: None,
                    message: reason,
                });
            }
            Err(StoreError::TooLarge { size, limit, .. }) => {
                return Err(StartError::StateTooLarge {
                    instance: instance_id,
                    size,
                    limit,
                });
            }
            Err(error) => return Err(StartError::Run(run_store_error(&instance_id, error))),
        }
        match self.drive_first_local(&local, &instance_id, true).await {
            Ok(Some(started)) => Ok(started),
            Ok(None) => Err(StartError::Run(RunError::Store {
                instance: instance_id.clone(),
                error: StoreError::NotFound {
                    what: "instance",
                    id: instance_id,
                },
            })),
            // ST-24: the first run grew over the limit after it had committed; the instance
            // stays, faulted with a `state_too_large` incident.
            Err(error @ RunError::StateTooLarge { .. }) => Err(StartError::Run(error)),
            Err(error) => {
                // Nothing is kept of a start whose first run failed (unless the store is
                // unreachable: then recovery runs it later).
                self.discard(&instance_id).await;
                match error {
                    // ST-24: refused to the caller, who still holds the input.
                    RunError::Store {
                        error: StoreError::TooLarge { size, limit, .. },
                        ..
                    } => Err(StartError::StateTooLarge {
                        instance: instance_id,
                        size,
                        limit,
                    }),
                    error => Err(StartError::Run(error)),
                }
            }
        }
    }

    /// Removes an instance whose first run failed: committed `Cancelled`, then deleted.
    pub(crate) async fn discard(&self, instance_id: &str) {
        let store = &self.inner.store;
        let Ok(guard) =
            LeaseGuard::acquire(store, &self.inner.owner, instance_id, self.inner.lease).await
        else {
            return;
        };
        if let Ok(record) = store.load_instance_text(instance_id).await
            && record.status == InstanceStatus::Running
        {
            // The document says `Cancelled` too, should the delete below fail: a reader of
            // the state (and a retried start, told the id exists) sees what the row says.
            let state = match decode_document(instance_id, &record.state) {
                Ok(mut state) => {
                    state.status = WorkflowStatus::Cancelled;
                    state.sub_status = None;
                    state.cancel_reason =
                        Some("its start failed before its first commit".to_owned());
                    encode_document(&state).map_or(record.state, |s| s.0)
                }
                Err(_) => record.state,
            };
            let mut commit = Commit::new(
                instance_id,
                record.version,
                guard.token(),
                now_micros(),
                state,
                InstanceStatus::Cancelled,
                None,
            );
            commit.release_lease = true;
            if store.commit(commit).await.is_ok() {
                guard.released_by_commit();
                let _ = store.delete_instance(instance_id).await;
                return;
            }
        }
        guard.release().await;
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
        self.ensure_background();
        let target = RunTarget::Bookmarks {
            ids: vec![bookmark_id.to_owned()],
            payload,
        };
        let mut result = self.drive(instance_id, target).await;
        if self.process_links().await
            && let Ok(Some(started)) = &mut result
        {
            self.refresh(started).await;
        }
        result?.ok_or_else(|| ResumeError::InstanceNotFound {
            instance: instance_id.to_owned(),
        })
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
        self.ensure_background();
        let mut report = RecoveryReport::default();
        self.recovery_pass(&mut report, false).await?;
        self.resume_orphaned_parents(&mut report).await?;
        Ok(report)
    }

    /// One recovery pass: claims the runnable instances page by page and runs each under
    /// the claimed lease. One that another run of this process holds is handed back at once
    /// (that run takes it). Passes of one runtime are serialized.
    pub(crate) async fn recovery_pass(
        &self,
        report: &mut RecoveryReport,
        sweeping: bool,
    ) -> Result<(), StoreError> {
        const PAGE: usize = 16;
        let _pass = self.inner.recovery.lock().await;
        let store = &self.inner.store;
        if sweeping && !self.any_runnable().await? {
            return Ok(());
        }
        let mut seen = std::collections::HashSet::new();
        loop {
            let claimed =
                LeaseGuard::claim_runnable(store, &self.inner.owner, self.inner.lease, PAGE)
                    .await?;
            if claimed.is_empty() {
                break;
            }
            let mut any_new = false;
            for (guard, sub_status) in claimed {
                let id = guard.instance_id().to_owned();
                let new = seen.insert(id.clone());
                if self.stopping()
                    || !new
                    || (sweeping && self.left_to_creator(&guard, sub_status).await)
                {
                    guard.release().await;
                    continue;
                }
                let Some(local) = self.try_local_run(&id) else {
                    guard.release().await;
                    continue;
                };
                any_new = true;
                let definition = self
                    .inner
                    .store
                    .load_instance_text(&id)
                    .await
                    .map(|r| r.definition_name)
                    .unwrap_or_default();
                match self.run_leased(guard, RunTarget::None, None).await {
                    Ok(started) => {
                        // ENG-25, ENG-26: what an operator looks for after a crash.
                        tracing::info!(
                            definition = definition.as_str(),
                            instance = id.as_str(),
                            interrupted = sub_status == Some(InstanceSubStatus::Executing),
                            status = %started.status,
                            "instance recovered"
                        );
                        report.recovered.push(started);
                    }
                    Err(error) => report.failed.push(error),
                }
                drop(local);
            }
            self.process_links().await;
            if !any_new {
                break;
            }
        }
        Ok(())
    }

    /// Whether a recovery sweep may find work (ENG-25): a `Running` instance whose lease is
    /// absent or expired. One read of the first page of `Running` instances, so that a sweep
    /// with nothing to recover writes nothing (claiming is a write, even of no rows); a full
    /// page, or a row that does not decode, is left to the claim to sort out.
    async fn any_runnable(&self) -> Result<bool, StoreError> {
        const PROBE: usize = 100;
        let page = self
            .inner
            .store
            .list_instances(InstanceFilter {
                status: Some(InstanceStatus::Running),
                limit: PROBE,
                ..InstanceFilter::default()
            })
            .await?;
        let now = now_micros();
        Ok(page.len() >= PROBE
            || page.iter().any(|listed| match &listed.summary {
                Ok(summary) => summary.lease.as_ref().is_none_or(|l| l.expires_at <= now),
                Err(_) => true,
            }))
    }

    /// ACT-24 after a crash: a child whose final commit was written but whose parent was not
    /// resumed yet (the resume follows the commit in process). Each suspended parent waiting on
    /// a `wf.sub_workflow` bookmark whose child is final is resumed with the child's result.
    pub(crate) async fn resume_orphaned_parents(
        &self,
        report: &mut RecoveryReport,
    ) -> Result<(), StoreError> {
        // Only the bookmarks of parents waiting on a child (an indexed query), never every
        // suspended instance: start-up stays independent of how many are suspended.
        let mut after = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let page = self
                .inner
                .store
                .find_child_waits(after.clone(), 500)
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(last.bookmark_id.clone());
            for row in page {
                if !seen.insert(row.instance_id.clone()) {
                    continue;
                }
                let Ok(record) = self.inner.store.load_instance_text(&row.instance_id).await else {
                    continue;
                };
                if record.status != InstanceStatus::Suspended {
                    continue;
                }
                let Ok(parent) = decode_document(&record.instance_id, &record.state) else {
                    continue;
                };
                for bookmark in &parent.bookmarks {
                    if bookmark.name != crate::engine::names::Reserved::SubWorkflow.name() {
                        continue;
                    }
                    let Some(child) = bookmark
                        .payload
                        .get("child_instance_id")
                        .and_then(Value::as_str)
                    else {
                        continue;
                    };
                    let Ok(Some(child)) = self.load_state(child).await else {
                        continue;
                    };
                    if !child.status.is_final() {
                        continue;
                    }
                    lock(&self.inner.links).push_back(Link::Resume {
                        instance_id: parent.instance_id.clone(),
                        bookmark_id: bookmark.id.clone(),
                        payload: serde_json::json!({
                            "child_instance_id": child.instance_id,
                            "status": child.status.to_string(),
                            "output": child.output,
                        }),
                    });
                    report.parents_resumed.push(parent.instance_id.clone());
                }
            }
        }
        self.process_links().await;
        Ok(())
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
        let store_error = |error| StateError::Store {
            instance: instance_id.to_owned(),
            error,
        };
        let Some(state) = self.load_state(instance_id).await? else {
            return Ok(None);
        };
        let mut entries = Vec::new();
        let mut from = 1;
        loop {
            let page = self
                .inner
                .store
                .read_journal(instance_id, from, 1000)
                .await
                .map_err(store_error)?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            entries.extend(page.into_iter().filter_map(journal_entry));
        }
        // ENG-42: the journal shown is bounded like the instance's.
        let journal =
            crate::engine::state::compact_entries(entries, state.journal.max_entries.max(2));
        Ok(Some(InstanceSnapshot { state, journal }))
    }

    /// The stored state document alone (no journal), or `None` for an unknown id.
    pub(crate) async fn load_state(
        &self,
        instance_id: &str,
    ) -> Result<Option<WorkflowState>, StateError> {
        match self.inner.store.load_instance_text(instance_id).await {
            Ok(record) => decode_document(instance_id, &record.state).map(Some),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(StoreError::Decode { message, .. }) => Err(StateError::Decode {
                instance: instance_id.to_owned(),
                message,
            }),
            Err(error) => Err(StateError::Store {
                instance: instance_id.to_owned(),
                error,
            }),
        }
    }

    /// Definitions pinned by live (non-final) instances in the store that this runtime does
    /// not run (ENG-46): `(name, version)` pairs with the number of instances, sorted. Their
    /// instances stay untouched; register the version (as the current one of its name) to run
    /// them.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the store fails.
    pub async fn unregistered_versions(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let mut found: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for status in [
            InstanceStatus::Running,
            InstanceStatus::Suspended,
            InstanceStatus::Faulted,
        ] {
            let mut filter = InstanceFilter {
                status: Some(status),
                limit: 500,
                ..InstanceFilter::default()
            };
            loop {
                let page = self.inner.store.list_instances(filter.clone()).await?;
                let Some(last) = page.last() else { break };
                filter.after = Some(last.instance_id.clone());
                for listed in &page {
                    let Ok(record) = &listed.summary else {
                        continue;
                    };
                    let current = self
                        .inner
                        .workflows
                        .get(&record.definition_name)
                        .map(|w| w.version());
                    if current != Some(record.definition_version.as_str()) {
                        *found
                            .entry((
                                record.definition_name.clone(),
                                record.definition_version.clone(),
                            ))
                            .or_default() += 1;
                    }
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|((name, version), count)| (name, version, count))
            .collect())
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
        let snapshot = self
            .load_state(instance_id)
            .await?
            .map(|state| InstanceSnapshot {
                state,
                journal: Vec::new(),
            });
        Ok(snapshot
            .as_ref()
            .and_then(InstanceSnapshot::current_state)
            .and_then(W::state_from_name))
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
        self.ensure_background();
        let mut receiver = lock(&self.inner.watches)
            .entry(instance_id.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        let not_found = || AwaitError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let mut status = WorkflowStatus::Running;
        let wait = async {
            loop {
                receiver.borrow_and_update();
                let state = match self.load_state(instance_id).await {
                    Ok(Some(state)) => state,
                    Ok(None) => return Err(not_found()),
                    Err(error) => {
                        return Err(AwaitError::State {
                            instance: instance_id.to_owned(),
                            error,
                        });
                    }
                };
                status = state.status;
                match state.status {
                    WorkflowStatus::Finished => {
                        return Ok(Completion::Finished(state.output.unwrap_or(Value::Null)));
                    }
                    WorkflowStatus::Cancelled => {
                        return Ok(Completion::Cancelled(state.cancel_reason));
                    }
                    WorkflowStatus::Faulted => {
                        if let Some(incident) = state.incidents.last().cloned() {
                            return Err(AwaitError::Faulted {
                                incident: Box::new(incident),
                            });
                        }
                    }
                    WorkflowStatus::Running | WorkflowStatus::Suspended => {}
                }
                // Woken by this runtime's commits, and re-reading the store now and then for
                // another process's.
                if let Ok(Err(_)) = tokio::time::timeout(AWAIT_POLL, receiver.changed()).await {
                    return Err(not_found());
                }
            }
        };
        let result = match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(AwaitError::Timeout {
                instance: instance_id.to_owned(),
                status,
            }),
        };
        drop(receiver);
        let mut watches = lock(&self.inner.watches);
        // The last awaiter of the instance forgets its watch.
        if watches
            .get(instance_id)
            .is_some_and(|w| w.receiver_count() == 0)
        {
            watches.remove(instance_id);
        }
        result
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
        self.ensure_background();
        let result = self.cancel_inner(instance_id, reason).await;
        self.process_links().await;
        result
    }

    pub(crate) async fn cancel_inner(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<Control, CancelError> {
        let record = match self.inner.store.load_instance_text(instance_id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => {
                return Err(CancelError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                });
            }
            Err(error) => return Err(CancelError::Run(run_store_error(instance_id, error))),
        };
        if record.status.is_final() {
            return Err(CancelError::AlreadyTerminal {
                status: record.status,
            });
        }
        let runs_here = self
            .inner
            .workflows
            .get(&record.definition_name)
            .is_some_and(|w| w.version() == record.definition_version);
        if !runs_here {
            // FLT-15: the runtime that runs it applies it.
            return Ok(self
                .request_control(instance_id, crate::store::ControlKind::Cancel, reason)
                .await?);
        }
        // FLT-15, FLT-16: a task of this instance running in this process gets its token
        // fired; its run is abandoned and this cancel goes next.
        if let Some(run) = lock(&self.inner.running).get(instance_id) {
            run.token.cancel();
        }
        let _local = self.local_run(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => {
                return Err(CancelError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                });
            }
            Err(StoreError::LeaseHeld { .. }) => {
                // FLT-15: running in another process, which honours the request.
                return Ok(self
                    .request_control(instance_id, crate::store::ControlKind::Cancel, reason)
                    .await?);
            }
            Err(error) => return Err(CancelError::Run(run_store_error(instance_id, error))),
        };
        match self.cancel_leased(&guard, reason).await {
            Ok(started) => {
                guard.released_by_commit();
                Ok(Control::Applied(started))
            }
            Err(error) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    async fn cancel_leased(
        &self,
        guard: &LeaseGuard<'_>,
        reason: Option<String>,
    ) -> Result<Started, CancelError> {
        let (state, commits) = self.load_for_run(guard).await?;
        if state.status.is_final() {
            return Err(CancelError::AlreadyTerminal {
                status: state.status,
            });
        }
        let workflow = self.workflow_for(&state)?;
        Ok(self
            .cancel_loaded(&*workflow, state, &commits, reason)
            .await?)
    }

    /// Cancels the loaded instance and commits it (final: the commit clears any control
    /// request).
    async fn cancel_loaded(
        &self,
        workflow: &dyn ErasedWorkflow,
        state: WorkflowState,
        commits: &RunCommits<'_>,
        reason: Option<String>,
    ) -> Result<Started, RunError> {
        let output = workflow.cancel(
            state,
            reason,
            &self.inner.middleware,
            self.inner.clock.now(),
        )?;
        let (_, started) = self.commit_and_publish(commits, output, true).await?;
        Ok(started)
    }

    /// Removes a final instance with its journal (ST-31).
    ///
    /// # Errors
    ///
    /// [`PurgeError::InstanceNotFound`] for an unknown id, [`PurgeError::NotTerminal`] for an
    /// instance that is not `Finished` or `Cancelled`, and [`PurgeError::Store`] when the store
    /// fails; nothing is removed in each case.
    pub async fn purge(&self, instance_id: &str) -> Result<(), PurgeError> {
        match self.inner.store.delete_instance(instance_id).await {
            Ok(()) => {
                lock(&self.inner.watches).remove(instance_id);
                Ok(())
            }
            Err(StoreError::NotFound { .. }) => Err(PurgeError::InstanceNotFound {
                instance: instance_id.to_owned(),
            }),
            Err(StoreError::NotTerminal { status, .. }) => Err(PurgeError::NotTerminal { status }),
            Err(error) => Err(PurgeError::Store {
                instance: instance_id.to_owned(),
                error,
            }),
        }
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
        let age = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let cut_off = now_micros().saturating_sub(age);
        self.inner
            .store
            .purge(PurgeFilter::finished_before(cut_off))
            .await
    }

    /// Subscribes to lifecycle events of every instance (ENG-39, ENG-40).
    pub fn subscribe(&self) -> EventStream {
        EventStream::new(self.inner.events.subscribe())
    }

    // ---- links between instances (ACT-24) ----------------------------------------------

    /// The status after linked work moved the instance on (a child that finished at once
    /// resumed its parent, ACT-24).
    pub(crate) async fn refresh(&self, started: &mut Started) {
        if let Ok(Some(state)) = self.load_state(&started.instance_id).await {
            started.status = state.status;
            started.sub_status = state.sub_status;
        }
    }

    /// Carries out the work between instances that commits queued: starts children, resumes
    /// parents with their children's results, cancels children of cancelled SubWorkflows.
    /// Iterative, so a chain of nested sub-workflows does not recurse. Returns whether it did
    /// anything. (In process, after the commit: not yet durable across a crash.)
    pub(crate) async fn process_links(&self) -> bool {
        let mut any = false;
        loop {
            let Some(link) = lock(&self.inner.links).pop_front() else {
                return any;
            };
            any = true;
            match link {
                Link::Start {
                    workflow,
                    instance_id,
                    input,
                    parent,
                } => {
                    let options = StartOptions {
                        instance_id: Some(instance_id.clone()),
                        ..StartOptions::default()
                    };
                    let bookmark = parent.bookmark_id.clone();
                    let parent_id = parent.instance_id.clone();
                    let created = lock(&self.inner.created).remove(&instance_id);
                    let started = if created {
                        // Created atomically with its parent's commit: run it.
                        match self.drive_first(&instance_id).await {
                            Ok(Some(started)) => Ok(started),
                            Ok(None) => Ok(Started {
                                instance_id: instance_id.clone(),
                                status: WorkflowStatus::Running,
                                sub_status: Some(SubStatus::Pending),
                            }),
                            Err(error) => {
                                self.discard(&instance_id).await;
                                Err(StartError::Run(error))
                            }
                        }
                    } else {
                        self.start_inner(&workflow, input, options, Some(parent))
                            .await
                    };
                    match (started, bookmark) {
                        // The parent learns that its child could not run (ACT-24).
                        (Err(error), Some(bookmark_id)) => {
                            lock(&self.inner.links).push_back(Link::Resume {
                                instance_id: parent_id,
                                bookmark_id,
                                payload: serde_json::json!({
                                    "child_instance_id": instance_id,
                                    "status": "Failed",
                                    "error": error.to_string(),
                                }),
                            });
                        }
                        // A detached child has no parent waiting for it: the operator is told.
                        (Err(error), None) => tracing::warn!(
                            instance = parent_id.as_str(),
                            child = instance_id.as_str(),
                            definition = workflow.as_str(),
                            %error,
                            "a detached child could not start"
                        ),
                        (Ok(_), _) => {}
                    }
                }
                Link::Cancel { instance_id } => {
                    // Already final or gone: nothing to cancel.
                    let _ = self
                        .cancel_inner(&instance_id, Some("parent cancelled".to_owned()))
                        .await;
                }
                Link::Resume {
                    instance_id,
                    bookmark_id,
                    payload,
                } => {
                    let target = RunTarget::Bookmarks {
                        ids: vec![bookmark_id.clone()],
                        payload,
                    };
                    // ACT-24: a child's result is also in the queue, written by the child's
                    // final commit; delivered here, its item is acked. A parent that was
                    // cancelled meanwhile has no bookmark left: the item is acked too. A
                    // busy parent keeps it for the queue worker.
                    let queued = lock(&self.inner.child_results)
                        .remove(&(instance_id.clone(), bookmark_id.clone()));
                    let Some((item_id, stimulus_id)) = queued else {
                        let _ = self.drive(&instance_id, target).await;
                        continue;
                    };
                    // RT-19: the parent's commit deletes the item with its receipt.
                    let key = (instance_id.clone(), stimulus_id.clone());
                    lock(&self.inner.consuming).insert(key.clone(), item_id.clone());
                    let delivered = self
                        .drive_consuming(&instance_id, target, Some(Delivery::kept(stimulus_id)))
                        .await;
                    lock(&self.inner.consuming).remove(&key);
                    if matches!(
                        delivered,
                        Ok(_)
                            | Err(RunError::BookmarkNotFound { .. } | RunError::NotRunnable { .. })
                    ) && let Err(error) = self.inner.store.ack_queue_item(&item_id).await
                    {
                        tracing::warn!(%item_id, %error, "a delivered child result stays queued; the worker finds it consumed");
                    }
                }
            }
        }
    }

    // ---- driving runs ------------------------------------------------------------------

    /// Waits for this process's other runs of the instance; the guard forgets the instance's
    /// lock when nobody else waits on it.
    pub(crate) async fn local_run(&self, instance_id: &str) -> LocalRun<'_> {
        let mutex = lock(&self.inner.locks)
            .entry(instance_id.to_owned())
            .or_default()
            .clone();
        let guard = mutex.clone().lock_owned().await;
        LocalRun {
            locks: &self.inner.locks,
            instance_id: instance_id.to_owned(),
            mutex: Some(mutex),
            guard: Some(guard),
        }
    }

    /// The registered workflow of the instance's pinned version, else `VersionNotRegistered`
    /// naming both fingerprints (ENG-46).
    pub(crate) fn workflow_for(
        &self,
        state: &WorkflowState,
    ) -> Result<Arc<dyn ErasedWorkflow>, RunError> {
        let registered = self.inner.workflows.get(&state.definition.name);
        match registered {
            Some(w) if w.version() == state.definition.version => Ok(w.clone()),
            _ => Err(RunError::VersionNotRegistered {
                instance: state.instance_id.clone(),
                name: state.definition.name.clone(),
                version: state.definition.version.clone(),
                registered: registered.map(|w| w.version().to_owned()),
            }),
        }
    }

    /// The settings of a run now.
    fn run_options(
        &self,
        cancel: Option<&crate::cancel::CancellationToken>,
    ) -> builder::RunOptions {
        builder::RunOptions {
            attempts: crate::engine::executor::AttemptSettings {
                clock: self.inner.clock.clone(),
                cancel_grace: self.inner.cancel_grace,
                instance_cancel: cancel.cloned(),
                pause: None,
                executing: None,
            },
            max_steps: self.inner.max_steps_per_run,
            // Events are built for subscribers and for the log (`LifecycleEvent::trace`
            // writes none below `warn`).
            emit_events: self.inner.events.receiver_count() > 0
                || tracing::enabled!(target: "workflow_runtime::events", tracing::Level::WARN),
            now: self.inner.clock.now(),
        }
    }

    /// This process's turn to run an instance if nobody here holds it now (the recovery
    /// sweep does not wait for the instance's other runs: they have it in hand).
    fn try_local_run(&self, instance_id: &str) -> Option<LocalRun<'_>> {
        let mutex = lock(&self.inner.locks)
            .entry(instance_id.to_owned())
            .or_default()
            .clone();
        let guard = mutex.clone().try_lock_owned().ok()?;
        Some(LocalRun {
            locks: &self.inner.locks,
            instance_id: instance_id.to_owned(),
            mutex: Some(mutex),
            guard: Some(guard),
        })
    }

    /// Takes the named lease of a singleton job of this store (ST-11), unless another
    /// process holds it.
    async fn named_lease(&self, name: &str) -> Result<Option<NamedLease<'_>>, StoreError> {
        // Long enough for a job's pass; a process that dies during one gives it up then.
        let ttl = self.inner.lease.ttl.max(Duration::from_secs(600));
        NamedLease::try_acquire(&self.inner.store, &self.inner.owner, name, ttl).await
    }

    /// Acquires the instance's lease for a run of this runtime (ST-14).
    async fn lease(&self, instance_id: &str) -> Result<LeaseGuard<'_>, StoreError> {
        LeaseGuard::acquire(
            &self.inner.store,
            &self.inner.owner,
            instance_id,
            self.inner.lease,
        )
        .await
    }

    /// Runs an instance under its lease; `Ok(None)` for an unknown id.
    pub(crate) async fn drive(
        &self,
        instance_id: &str,
        target: RunTarget,
    ) -> Result<Option<Started>, RunError> {
        self.drive_consuming(instance_id, target, None).await
    }

    /// [`Runtime::drive`] delivering a stimulus: its first commit consumes it, writing its
    /// receipt when the delivery keeps one (RT-19); a stimulus whose receipt the instance
    /// holds already fails that commit.
    pub(crate) async fn drive_consuming(
        &self,
        instance_id: &str,
        target: RunTarget,
        delivery: Option<Delivery>,
    ) -> Result<Option<Started>, RunError> {
        // This process's turn, held through the run.
        let _local = self.local_run(instance_id).await;
        let Some(guard) = self.claim_to_run(instance_id, false).await? else {
            return Ok(None);
        };
        self.run_leased(guard, target, delivery).await.map(Some)
    }

    /// The lease of a run of `instance_id`, `None` when the instance is gone. ENG-53: the
    /// state this runtime kept of it goes with the claim, which compares the stored record
    /// with it where the store holds it. A `first` run (of an instance just created) waits
    /// briefly for a lease held by anyone ([`LeaseGuard::acquire_first`]).
    async fn claim_to_run(
        &self,
        instance_id: &str,
        first: bool,
    ) -> Result<Option<LeaseGuard<'_>>, RunError> {
        let kept = self.inner.states.take_entry(instance_id);
        let (store, owner, lease) = (&self.inner.store, &self.inner.owner, self.inner.lease);
        let claimed = if first {
            LeaseGuard::acquire_first(store, owner, instance_id, lease, kept).await
        } else {
            LeaseGuard::acquire_kept(store, owner, instance_id, lease, kept).await
        };
        match claimed {
            Ok(guard) => Ok(Some(guard)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(run_store_error(instance_id, error)),
        }
    }

    /// Whether a sweep leaves this claimed instance to the process that created it: never
    /// leased by anyone but sweeps (the claim's token is the first, or follows the one this
    /// sweep handed back), never run (`Running/Pending` at version 1), and first seen so
    /// less than a lease TTL ago. The creator is about to run it (it waits for the lease the
    /// sweep hands back); if it died first, a sweep a lease TTL later runs it. An instance
    /// whose first run was interrupted had its lease taken by that run: it runs at once.
    async fn left_to_creator(
        &self,
        guard: &LeaseGuard<'_>,
        sub_status: Option<InstanceSubStatus>,
    ) -> bool {
        let id = guard.instance_id();
        let now = std::time::Instant::now();
        let seen_before = {
            let mut fresh = lock(&self.inner.fresh);
            // Forget what was seen long ago (it ran, or it is recovered now).
            fresh.retain(|_, (seen, _)| now.duration_since(*seen) < self.inner.lease.ttl * 2);
            fresh.get(id).copied()
        };
        let only_sweeps =
            guard.token() == 1 || seen_before.is_some_and(|(_, token)| guard.token() == token + 1);
        if sub_status != Some(InstanceSubStatus::Pending) || !only_sweeps {
            lock(&self.inner.fresh).remove(id);
            return false;
        }
        let never_run = self
            .inner
            .store
            .load_instance_text(id)
            .await
            .is_ok_and(|record| record.version == 1);
        let mut fresh = lock(&self.inner.fresh);
        if !never_run {
            fresh.remove(id);
            return false;
        }
        let first_seen = seen_before.map_or(now, |(seen, _)| seen);
        fresh.insert(id.to_owned(), (first_seen, guard.token()));
        now.duration_since(first_seen) < self.inner.lease.ttl
    }

    /// The first run of an instance just created (by a start, a trigger, a parent's commit
    /// or a schedule): its lease may only be held, briefly, by a recovery sweep, which is
    /// waited for.
    pub(crate) async fn drive_first(&self, instance_id: &str) -> Result<Option<Started>, RunError> {
        let local = self.local_run(instance_id).await;
        self.drive_first_local(&local, instance_id, false).await
    }

    /// With `refuse_too_large` (a caller's start), a first run over the state size limit
    /// returns its error instead of faulting the instance (ST-24).
    async fn drive_first_local(
        &self,
        _local: &LocalRun<'_>,
        instance_id: &str,
        refuse_too_large: bool,
    ) -> Result<Option<Started>, RunError> {
        let Some(guard) = self.claim_to_run(instance_id, true).await? else {
            return Ok(None);
        };
        match self
            .run_leased_faulting(guard, RunTarget::None, None, false, !refuse_too_large)
            .await
        {
            Ok(started) => Ok(Some(started)),
            // A recovery sweep of another process took the instance before this first run
            // and ran it to its end: that was its first run.
            Err(RunError::NotRunnable { instance, status }) => Ok(Some(Started {
                instance_id: instance,
                status,
                sub_status: None,
            })),
            Err(error) => Err(error),
        }
    }

    /// Runs under `guard` and settles the lease: released by the run's last commit, or here
    /// when the run is abandoned (the instance continues from its last commit, ENG-29).
    ///
    /// Not an `async fn`, nor is [`Runtime::run_leased_as`]: each returns the future of the
    /// one it forwards to, so a run's future is not wrapped (and moved) once more per name.
    fn run_leased<'a>(
        &'a self,
        guard: LeaseGuard<'a>,
        target: RunTarget,
        delivery: Option<Delivery>,
    ) -> impl Future<Output = Result<Started, RunError>> + Send + 'a {
        self.run_leased_as(guard, target, delivery, false)
    }

    /// [`Runtime::run_leased`]; with `resume`, the run resumes a paused instance (ENG-50).
    /// A cancel requested while it ran (FLT-15) is applied once it stops.
    pub(crate) fn run_leased_as<'a>(
        &'a self,
        guard: LeaseGuard<'a>,
        target: RunTarget,
        delivery: Option<Delivery>,
        resume: bool,
    ) -> impl Future<Output = Result<Started, RunError>> + Send + 'a {
        self.run_leased_faulting(guard, target, delivery, resume, true)
    }

    /// [`Runtime::run_leased_as`]; with `fault_too_large`, a run whose state grows over the
    /// store's limit faults the instance (ST-24); without it (a caller's start, refused
    /// instead), the run's error is returned as is.
    async fn run_leased_faulting(
        &self,
        guard: LeaseGuard<'_>,
        target: RunTarget,
        delivery: Option<Delivery>,
        resume: bool,
        fault_too_large: bool,
    ) -> Result<Started, RunError> {
        let instance_id = guard.instance_id().to_owned();
        let delivering = delivery.clone();
        let signals = Arc::new(RunSignals::default());
        signals
            .resume
            .store(resume, std::sync::atomic::Ordering::SeqCst);
        let result = self.drive_leased(&guard, target, delivery, &signals).await;
        let requested_cancel = signals.take_cancel();
        match (result, guard.lost()) {
            (Ok(started), _) => {
                guard.released_by_commit();
                match requested_cancel {
                    Some(reason) if !started.status.is_final() => Ok(self
                        .cancel_after_run(&instance_id, reason)
                        .await
                        .unwrap_or(started)),
                    _ => Ok(started),
                }
            }
            // ENG-36: the lease was lost, so the run was cancelled; another owner has the
            // instance. (A commit after the loss was refused as `Fenced`: returned as is.)
            (Err(RunError::Interrupted { .. }), Some(lost)) => {
                Err(run_store_error(&instance_id, lost))
            }
            (Err(error), Some(_)) => Err(error),
            (Err(RunError::Interrupted { .. }), None) => {
                if let Some(reason) = requested_cancel {
                    // FLT-15: an operator's cancel fired the token; it applies now, under
                    // this lease, from the last commit.
                    match self.cancel_leased(&guard, reason).await {
                        Ok(started) => {
                            guard.released_by_commit();
                            return Ok(started);
                        }
                        Err(error) => {
                            tracing::warn!(instance = %instance_id, %error, "a requested cancel could not be applied; it stays recorded");
                        }
                    }
                }
                // FLT-16: abandoned for the cancel waiting to run (or the shutdown); the
                // cancel reports the outcome.
                guard.release().await;
                let status = self
                    .load_state(&instance_id)
                    .await
                    .ok()
                    .flatten()
                    .map(|s| (s.status, s.sub_status));
                let (status, sub_status) =
                    status.unwrap_or((WorkflowStatus::Running, Some(SubStatus::Pending)));
                Ok(Started {
                    instance_id,
                    status,
                    sub_status,
                })
            }
            // ST-24: refused as too large, nothing of it written: the instance is faulted
            // from its last commit, so it does not loop. A caller's start is refused instead,
            // unless its first run has committed already: others may see what those commits
            // did (children started, stimuli sent), so the instance stays to own it.
            (
                Err(
                    error @ RunError::Store {
                        error: StoreError::TooLarge { size, limit, .. },
                        ..
                    },
                ),
                None,
            ) => {
                if !fault_too_large && !self.committed_since_creation(&instance_id).await {
                    guard.release().await;
                    return Err(error);
                }
                match self
                    .fault_too_large(&guard, size, limit, delivering, &signals)
                    .await
                {
                    Ok(faulted) => {
                        guard.released_by_commit();
                        Err(faulted)
                    }
                    Err(fault_error) => {
                        tracing::error!(instance = %instance_id, %error, %fault_error, "a run's state is over the size limit and faulting the instance failed; it stays at its last commit");
                        guard.release().await;
                        Err(error)
                    }
                }
            }
            (Err(error), None) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    /// Whether the instance has a commit after its creation (version 1); when that cannot be
    /// read, it is taken to have one, so nothing is removed on a guess.
    async fn committed_since_creation(&self, instance_id: &str) -> bool {
        self.inner
            .store
            .load_instance_text(instance_id)
            .await
            .map_or(true, |record| record.version > 1)
    }

    /// Loads the instance for a run holding `guard`'s lease.
    async fn load_for_run<'s>(
        &'s self,
        guard: &LeaseGuard<'_>,
    ) -> Result<(WorkflowState, RunCommits<'s>), RunError> {
        let instance_id = guard.instance_id();
        let record = match guard.take_loaded() {
            Some(loaded) => loaded,
            None => self.inner.store.load_instance_raw(instance_id).await,
        }
        .map_err(|error| run_store_error(instance_id, error))?;
        guard.set_definition(&record.definition_name);
        // ENG-53: the state this runtime committed last, if the record is still that commit
        // (found so by the claim, or here).
        let kept = guard.take_kept().or_else(|| {
            self.inner
                .states
                .take(instance_id, record.version, &record.state)
        });
        let state = match kept {
            Some(state) => state,
            None => decode_loaded(instance_id, &record.state)?,
        };
        let document_len = record.state.len();
        let commits = RunCommits {
            store: &self.inner.store,
            tracker: Mutex::new(Tracker {
                instance_id: instance_id.to_owned(),
                token: guard.token(),
                version: record.version,
                bookmarks: commit::committed_bookmarks(&state.bookmarks),
                incidents: state
                    .incidents
                    .iter()
                    .map(|i| (i.id.clone(), i.resolution.clone()))
                    .collect(),
                receipts: Vec::new(),
                consumed: Vec::new(),
                idempotency: None,
                unpark: false,
                clear_control: false,
                last_document: None,
                document_len,
                spare: record.state,
            }),
            control: record.control_request,
        };
        Ok((state, commits))
    }

    /// Runs under the lease until the run ends other than at its step budget: each budget
    /// slice is committed (ENG-10) and the task yields before the next. The last commit
    /// releases the lease; the lease is renewed meanwhile (ST-14).
    async fn drive_leased(
        &self,
        guard: &LeaseGuard<'_>,
        target: RunTarget,
        delivery: Option<Delivery>,
        signals: &Arc<RunSignals>,
    ) -> Result<Started, RunError> {
        use crate::store::ControlKind;
        let instance_id = guard.instance_id();
        let (mut state, commits) = self.load_for_run(guard).await?;
        signals.loaded(lock(&commits.tracker).version);
        if state.status.is_final() || state.status == WorkflowStatus::Faulted {
            return Err(RunError::NotRunnable {
                instance: instance_id.to_owned(),
                status: state.status,
            });
        }
        let resume = signals.resume.load(std::sync::atomic::Ordering::SeqCst);
        let paused = state.sub_status == Some(SubStatus::Paused);
        if paused && !resume {
            return Err(RunError::Paused {
                instance: instance_id.to_owned(),
            });
        }
        let workflow = self.workflow_for(&state)?;
        // ENG-50: a cancel or suspend requested before this run is honoured instead of it
        // (a stimulus it was to deliver is then not consumed).
        let targeted = matches!(target, RunTarget::Bookmarks { .. });
        match commits.control.clone() {
            Some(request) if request.kind == ControlKind::Cancel => {
                let started = self
                    .cancel_loaded(&*workflow, state, &commits, request.reason)
                    .await?;
                return if targeted {
                    Err(RunError::NotRunnable {
                        instance: instance_id.to_owned(),
                        status: started.status,
                    })
                } else {
                    Ok(started)
                };
            }
            Some(request) if request.kind == ControlKind::Suspend && !resume => {
                commits.clear_control_next();
                let output = workflow.pause(state, &self.inner.middleware, self.inner.clock.now());
                let (_, started) = self.commit_and_publish(&commits, output, true).await?;
                return if targeted {
                    Err(RunError::Paused {
                        instance: instance_id.to_owned(),
                    })
                } else {
                    Ok(started)
                };
            }
            Some(request)
                if resume && matches!(request.kind, ControlKind::Resume | ControlKind::Suspend) =>
            {
                commits.clear_control_next();
            }
            _ => {}
        }
        if resume && paused {
            // TM-10: the resume's first commit unparks the timers.
            commits.unpark_next();
        }
        {
            let mut tracker = lock(&commits.tracker);
            // RT-19: the commit delivering a direct send's stimulus writes its record.
            tracker.idempotency = delivery.as_ref().and_then(|d| {
                lock(&self.inner.pending_records)
                    .get(&d.stimulus_id)
                    .map(|(record, _)| record.clone())
            });
            if let Some(d) = &delivery
                && let Some(item) = lock(&self.inner.consuming)
                    .get(&(instance_id.to_owned(), d.stimulus_id.clone()))
                    .cloned()
            {
                tracker.consumed.push(item);
            }
            // RT-19: the receipt, unless the stimulus id cannot reach this instance again.
            tracker
                .receipts
                .extend(delivery.filter(|d| d.receipt).map(|d| d.stimulus_id));
        }
        // ENG-32: the run decides per task whether to commit (the node's setting, the
        // definition's strategy, then this runtime-wide one).
        let checkpoint: Option<(&dyn Checkpoint, CommitStrategy)> =
            Some((&commits, self.inner.commit_strategy));
        let token = crate::cancel::CancellationToken::new();
        let _running = Running::new(&self.inner, instance_id, &token, signals);
        // Pinned where it is built: the lease's hold polls it in place instead of taking it
        // by value into a future of its own (a second copy of it, moved there).
        let run = std::pin::pin!(async {
            let mut target = Some(target);
            loop {
                let target = target.take().unwrap_or(RunTarget::None);
                let mut options = self.run_options(Some(&token));
                options.attempts.pause = Some(Arc::clone(&signals.pause));
                options.attempts.executing = Some(guard.executing());
                let mut output = workflow
                    .run(state, target, options, &self.inner.middleware, checkpoint)
                    .await?;
                if signals.paused() {
                    // ENG-50: an operator's suspend reached the run; it stopped at an item
                    // boundary (or went idle) and is paused with its queue kept.
                    if Self::pauses(output.end) {
                        let paused = workflow.pause(
                            output.state,
                            &self.inner.middleware,
                            self.inner.clock.now(),
                        );
                        output.state = paused.state;
                        output.events.extend(paused.events);
                        output.end = paused.end;
                    }
                    if commits.control_kind() == Some(ControlKind::Suspend)
                        || output.end != RunEnd::Budget
                    {
                        commits.clear_control_next();
                    }
                }
                let end = output.end;
                let (next, started) = self
                    .commit_and_publish(&commits, output, end != RunEnd::Budget)
                    .await?;
                if end != RunEnd::Budget {
                    // ENG-53: the next run of a live instance starts from this state.
                    let kept = {
                        let mut tracker = lock(&commits.tracker);
                        tracker.last_document.take().map(|d| (tracker.version, d))
                    };
                    if let Some((version, document)) = kept {
                        self.inner.states.keep(version, document, next);
                    }
                    return Ok(started);
                }
                state = next;
                YieldNow(false).await;
            }
        });
        guard.hold(&token, Some(signals), run).await
    }

    /// The queue item carrying a final child's result to its parent's `wf.sub_workflow`
    /// bookmark (ACT-24), with the `(parent, bookmark)` it is for.
    fn child_result_item(
        &self,
        state: &WorkflowState,
    ) -> Option<(crate::store::QueueItem, (String, String))> {
        if !state.status.is_final() {
            return None;
        }
        let parent = state.parent.as_ref()?;
        let bookmark = parent.bookmark_id.as_ref()?;
        let payload = serde_json::json!({
            "child_instance_id": state.instance_id,
            "status": state.status.to_string(),
            "output": state.output,
        });
        let item = crate::routing::child_result_item(
            &parent.instance_id,
            bookmark,
            &state.instance_id,
            payload,
            self.inner.queue_ttl,
        )?;
        Some((item, (parent.instance_id.clone(), bookmark.clone())))
    }

    /// The mandatory commit of a run (ENG-31), then what follows commits: the links between
    /// instances, the events (ENG-33) and the awaiters.
    async fn commit_and_publish(
        &self,
        commits: &RunCommits<'_>,
        output: RunOutput,
        release: bool,
    ) -> Result<(WorkflowState, Started), RunError> {
        let mut state = output.state;
        // ACT-24, ST-16: children start in the parent's commit, so a crash cannot lose them
        // (a child never run is recovered as `Running/Pending`).
        let mut children = Vec::new();
        for link in &output.links {
            if let Link::Start {
                workflow,
                instance_id,
                input,
                parent,
            } = link
            {
                let options = StartOptions {
                    instance_id: Some(instance_id.clone()),
                    ..StartOptions::default()
                };
                // One that cannot be created is started (and fails) after the commit.
                if let Ok(child) =
                    self.new_instance(workflow, input.clone(), options, Some(parent.clone()), None)
                {
                    children.push(child);
                }
            }
        }
        let ids: Vec<String> = children.iter().map(|c| c.instance_id.clone()).collect();
        // ACT-24, ST-16: a final child's result for its parent is queued in its final commit,
        // so a crash between this commit and the parent's resume loses nothing (the queue
        // worker delivers it); the in-process resume below delivers and acks it at once.
        let result_item = self.child_result_item(&state);
        let queued: Vec<_> = result_item.iter().map(|(item, _)| item.clone()).collect();
        commits
            .commit(&mut state, release, children, queued)
            .await?;
        if let Some((item, key)) = result_item {
            lock(&self.inner.child_results).insert(key, (item.item_id, item.stimulus_id));
        }
        lock(&self.inner.created).extend(ids);
        {
            // ACT-24: the links of this run, and a final child's result for its parent.
            let mut links = lock(&self.inner.links);
            links.extend(output.links);
            if state.status.is_final()
                && let Some(parent) = &state.parent
                && let Some(bookmark) = &parent.bookmark_id
            {
                links.push_back(Link::Resume {
                    instance_id: parent.instance_id.clone(),
                    bookmark_id: bookmark.clone(),
                    payload: serde_json::json!({
                        "child_instance_id": state.instance_id,
                        "status": state.status.to_string(),
                        "output": state.output,
                    }),
                });
            }
        }
        let waiting_for: Vec<&str> = state.bookmarks.iter().map(|b| b.name.as_str()).collect();
        for event in output.events {
            event.trace(&waiting_for);
            // No subscriber is not an error.
            let _ = self.inner.events.send(event);
        }
        if let Some(watch) = lock(&self.inner.watches).get(&state.instance_id) {
            watch.send_modify(|n| *n += 1);
        }
        let started = Started {
            instance_id: state.instance_id.clone(),
            status: state.status,
            sub_status: state.sub_status,
        };
        Ok((state, started))
    }
}
