//! Registration and the builder: definitions checked at build (ENG-45, ENG-47).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::broadcast;
use workflow_model::{Activation, Definition};

use super::{BuildError, Inner, Runtime};
use crate::base::new_ulid;
use crate::base::{BoxFuture, Micros};
use crate::clock::{Clock, SystemClock};
use crate::engine::events::LifecycleEvent;
use crate::engine::executor::{
    ActivityMiddleware, AttemptSettings, Checkpoint, CommitStrategy, Executor, Link, Middleware,
    RunEnd, RunError, RunTarget, WorkflowMiddleware,
};
use crate::engine::graph::{Graph, GraphError, NamedRefs};
use crate::engine::registry::Registry;
use crate::engine::state::{JournalLevel, WorkflowState};
use crate::store::{MemoryStore, Storage};
use crate::workflow::Workflow;

// ---- the registered workflows ------------------------------------------------------------

pub(crate) struct RunOutput {
    pub(super) state: WorkflowState,
    pub(super) events: Vec<LifecycleEvent>,
    pub(super) end: RunEnd,
    /// Child instances to start or cancel once committed (ACT-24).
    pub(super) links: Vec<Link>,
}

/// The settings of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// Clock, grace and the instance's cancellation token for task attempts.
    pub(super) attempts: AttemptSettings,
    /// The step budget (ENG-10).
    pub(super) max_steps: usize,
    /// Whether lifecycle events are collected (someone subscribed).
    pub(super) emit_events: bool,
    /// The run's time, from the runtime's clock (TM-1).
    pub(super) now: Micros,
}

/// A registered definition with its user code, its data type erased.
pub(crate) trait ErasedWorkflow: Send + Sync {
    fn version(&self) -> &str;
    /// The definition's JSON form.
    fn json(&self) -> &str;
    /// Whether `data` decodes into the data type: on failure, the field path (when not
    /// the root) and the message.
    fn check_data(&self, data: &Value) -> Result<(), (Option<String>, String)>;
    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        options: RunOptions,
        middleware: &'a Middleware,
        checkpoint: Option<(&'a dyn Checkpoint, CommitStrategy)>,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>>;
    fn cancel(
        &self,
        state: WorkflowState,
        reason: Option<String>,
        middleware: &Middleware,
        now: Micros,
    ) -> Result<RunOutput, RunError>;
    /// Pauses the instance (ENG-50): `Suspended/Paused`, everything else kept.
    fn pause(&self, state: WorkflowState, middleware: &Middleware, now: Micros) -> RunOutput;
    /// `(node id, workflow name)` of every SubWorkflow node, for ACT-V10 at build.
    fn sub_workflows(&self) -> Vec<(String, String)>;
    /// The event trigger nodes (ACT-7): `(node path id, event name)`, in graph order.
    fn event_triggers(&self) -> Vec<(String, String)>;
    /// The time trigger nodes (ACT-7, TM-11 to TM-13), in graph order.
    fn time_triggers(&self) -> Vec<(String, crate::engine::graph::TimeTrigger)>;
    /// The activation strategy (RT-15).
    fn activation(&self) -> Activation;
}

pub(super) struct Registered<D> {
    pub(super) version: String,
    /// The definition's JSON form, recorded in the store for tools.
    pub(super) json: String,
    pub(super) graph: Graph,
    pub(super) registry: Registry<D>,
    pub(super) activation: Activation,
}

impl<D> ErasedWorkflow for Registered<D>
where
    D: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn version(&self) -> &str {
        &self.version
    }

    fn json(&self) -> &str {
        &self.json
    }

    fn check_data(&self, data: &Value) -> Result<(), (Option<String>, String)> {
        serde_path_to_error::deserialize::<_, D>(data.clone())
            .map(drop)
            .map_err(|e| {
                let path = e.path().to_string();
                let path = (path != ".").then_some(path);
                (path, e.into_inner().to_string())
            })
    }

    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        options: RunOptions,
        middleware: &'a Middleware,
        checkpoint: Option<(&'a dyn Checkpoint, CommitStrategy)>,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>> {
        Box::pin(async move {
            let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
            executor.now = options.now;
            executor.attempts = options.attempts;
            executor.emit_events = options.emit_events;
            executor.checkpoint = checkpoint;
            let end = executor.run(target, options.max_steps).await?;
            Ok(RunOutput {
                state: executor.state,
                events: executor.events,
                end,
                links: executor.links,
            })
        })
    }

    fn cancel(
        &self,
        state: WorkflowState,
        reason: Option<String>,
        middleware: &Middleware,
        now: Micros,
    ) -> Result<RunOutput, RunError> {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.now = now;
        executor.cancel_instance(reason)?;
        Ok(RunOutput {
            state: executor.state,
            events: executor.events,
            end: RunEnd::Finished,
            links: executor.links,
        })
    }

    fn pause(&self, state: WorkflowState, middleware: &Middleware, now: Micros) -> RunOutput {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.now = now;
        executor.pause_instance();
        RunOutput {
            state: executor.state,
            events: executor.events,
            end: RunEnd::Suspended(crate::engine::state::SubStatus::Paused),
            links: executor.links,
        }
    }

    fn sub_workflows(&self) -> Vec<(String, String)> {
        self.graph.sub_workflows()
    }

    fn event_triggers(&self) -> Vec<(String, String)> {
        self.graph.event_triggers()
    }

    fn time_triggers(&self) -> Vec<(String, crate::engine::graph::TimeTrigger)> {
        self.graph.time_triggers()
    }

    fn activation(&self) -> Activation {
        self.activation
    }
}

pub(super) type Pending =
    Box<dyn FnOnce() -> Result<(String, Arc<dyn ErasedWorkflow>), BuildError> + Send>;

/// Builds a [`Runtime`]: register workflows, set limits, add middleware, then
/// [`RuntimeBuilder::build`] checks everything (ENG-47).
///
/// # Examples
///
/// A runtime on a SQLite file, with a shorter lease and a cap on the steps of one run:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use workflow_runtime::{Runtime, SqliteStore, TaskContext, workflow};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Job;
///
/// async fn work(_ctx: &mut TaskContext<Job>) {}
///
/// workflow! {
///     workflow Nightly(Job) = sequence [task(work)];
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("jobs.db");
/// let runtime = Runtime::builder()
///     .store(Arc::new(SqliteStore::open(&path)?))
///     .register::<Nightly>()
///     .lease_ttl(Duration::from_secs(30))
///     .max_steps_per_run(1_000)
///     .build()?;
/// runtime.recover().await?; // instances a crashed process left mid-run
/// # Ok(())
/// # }
/// ```
pub struct RuntimeBuilder {
    pub(super) pending: Vec<Pending>,
    pub(super) max_steps_per_run: usize,
    pub(super) journal_level: JournalLevel,
    pub(super) max_journal_entries: usize,
    pub(super) event_buffer: usize,
    pub(super) middleware: Middleware,
    pub(super) store: Option<Storage>,
    pub(super) commit_strategy: CommitStrategy,
    pub(super) lease_ttl: Duration,
    pub(super) lease_renewal: Option<Duration>,
    pub(super) queue_worker: bool,
    pub(super) recovery_sweep: Option<Duration>,
    pub(super) retention: super::Retention,
    pub(super) owner: Option<String>,
    pub(super) queue_ttl: Duration,
    pub(super) queue_sweep: Duration,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) sweep_interval: Option<Duration>,
    pub(super) timer_driver: bool,
    pub(super) cancel_grace: Duration,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("registrations", &self.pending.len())
            .field("max_steps_per_run", &self.max_steps_per_run)
            .finish_non_exhaustive()
    }
}

/// A `Registry::has_*` lookup.
pub(super) type HasFn<D> = fn(&Registry<D>, &str) -> bool;

pub(super) fn register_parts<D>(
    definition: &Definition,
    version: String,
    registry: Registry<D>,
) -> Result<(String, Arc<dyn ErasedWorkflow>), BuildError>
where
    D: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let name = definition.name.clone();
    workflow_model::validate(definition).map_err(|diagnostics| BuildError::Invalid {
        name: name.clone(),
        diagnostics,
    })?;
    refuse_unsupported_settings(definition)?;
    let graph = Graph::build(definition).map_err(|e| match e {
        GraphError::DuplicateNode { node } => BuildError::DuplicateNode {
            workflow: name.clone(),
            node,
        },
        GraphError::Unsupported { node, kind } => BuildError::UnsupportedActivity {
            workflow: name.clone(),
            node,
            kind,
        },
    })?;
    let (tasks, conditions) = graph.functions();
    if let Some((node, function)) = tasks.iter().find(|(_, f)| !registry.has_task(f)) {
        return Err(BuildError::UnknownActivity {
            workflow: name,
            node: (*node).to_owned(),
            name: (*function).to_owned(),
        });
    }
    if let Some((node, condition)) = conditions.iter().find(|(_, c)| !registry.has_condition(c)) {
        return Err(BuildError::UnknownCondition {
            workflow: name,
            node: (*node).to_owned(),
            name: (*condition).to_owned(),
        });
    }
    if let Some((node, payload)) = graph
        .event_choices()
        .into_iter()
        .find(|(_, p)| !p.is_some_and(|p| registry.has_outcome(p)))
    {
        return Err(BuildError::EventWithoutOutcome {
            workflow: name,
            node: node.rsplit(':').next().unwrap_or(node).to_owned(),
            payload: payload.unwrap_or_default().to_owned(),
        });
    }
    let [items, values, assigns] = graph.data_functions();
    let checks: [(&'static str, &NamedRefs<'_>, HasFn<D>); 3] = [
        ("items fn", &items, Registry::has_items),
        ("value fn", &values, Registry::has_value),
        ("assign fn", &assigns, Registry::has_assign),
    ];
    for (kind, refs, has) in checks {
        if let Some((node, function)) = refs.iter().find(|(_, f)| !has(&registry, f)) {
            return Err(BuildError::UnknownFunction {
                workflow: name,
                node: (*node).to_owned(),
                kind,
                name: (*function).to_owned(),
            });
        }
    }
    Ok((
        name,
        Arc::new(Registered {
            version,
            json: definition.to_json_pretty(),
            graph,
            registry,
            activation: definition.activation.unwrap_or_default(),
        }),
    ))
}

/// The model's settings that the runtime does not honour are refused at build, naming the
/// node and the setting (never silently ignored): a deadline on a detached sub-workflow.
/// Commit strategies and node commit settings (ENG-32), retry policies, attempt timeouts and
/// compensations are honoured.
fn refuse_unsupported_settings(definition: &Definition) -> Result<(), BuildError> {
    use workflow_model::Activity;
    let refuse = |node: &str, setting: &'static str| BuildError::UnsupportedSetting {
        workflow: definition.name.clone(),
        node: node.to_owned(),
        setting,
    };
    let mut stack = vec![&definition.root];
    while let Some(activity) = stack.pop() {
        // TM-14: a detached child is not waited for, so a deadline would have nothing to end.
        if let Activity::SubWorkflow(sub) = activity
            && sub.mode == workflow_model::SubWorkflowMode::Detach
            && sub.deadline_ms.is_some()
        {
            return Err(refuse(&sub.id, "deadline"));
        }
        stack.extend(activity.children());
    }
    Ok(())
}

impl RuntimeBuilder {
    /// Registers the workflow type `W` (macro-generated or written by hand).
    #[must_use]
    pub fn register<W: Workflow>(mut self) -> Self {
        self.pending.push(Box::new(|| {
            register_parts(W::definition(), W::version().to_owned(), W::registry())
        }));
        self
    }

    /// Registers a definition built from the model, with its registry of user code.
    #[must_use]
    pub fn register_definition<D>(mut self, definition: Definition, registry: Registry<D>) -> Self
    where
        D: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        self.pending.push(Box::new(move || {
            let version = definition.fingerprint();
            register_parts(&definition, version, registry)
        }));
        self
    }

    /// Registers a JSON definition (the format of `workflow_model`'s crate docs), loaded and
    /// validated at [`RuntimeBuilder::build`].
    #[must_use]
    pub fn register_json<D>(mut self, json: impl Into<String>, registry: Registry<D>) -> Self
    where
        D: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let json = json.into();
        self.pending.push(Box::new(move || {
            let definition = Definition::from_json(&json).map_err(|e| BuildError::Load {
                message: e.to_string(),
            })?;
            let version = definition.fingerprint();
            register_parts(&definition, version, registry)
        }));
        self
    }

    /// The step budget of one run (ENG-10; default 10 000). At least 1.
    #[must_use]
    pub fn max_steps_per_run(mut self, steps: usize) -> Self {
        self.max_steps_per_run = steps.max(1);
        self
    }

    /// The journal level and bound of new instances (ENG-42; default `Activities`, 1000).
    #[must_use]
    pub fn journal(mut self, level: JournalLevel, max_entries: usize) -> Self {
        self.journal_level = level;
        self.max_journal_entries = max_entries;
        self
    }

    /// The buffer of each subscriber (ENG-40; default 1024).
    #[must_use]
    pub fn event_buffer(mut self, capacity: usize) -> Self {
        self.event_buffer = capacity.max(1);
        self
    }

    /// Adds a user layer to the activity middleware chain (ENG-34).
    #[must_use]
    pub fn activity_middleware(mut self, layer: impl ActivityMiddleware) -> Self {
        self.middleware.activity.push(Arc::new(layer));
        self
    }

    /// Adds a user layer to the workflow middleware chain (ENG-38).
    #[must_use]
    pub fn workflow_middleware(mut self, layer: impl WorkflowMiddleware) -> Self {
        self.middleware.workflow.push(Arc::new(layer));
        self
    }

    /// The store instances live in (ENG-47; default: a fresh [`MemoryStore`], not durable):
    /// a backend (`Arc<SqliteStore>`, `Arc<dyn Store>`) or a [`Storage`] configured around
    /// one (its state size limit, say). Keep a clone of a `Storage` to share its wake-up
    /// hints with the runtime. For durability: `.store(Arc::new(SqliteStore::open(path)?))`.
    #[must_use]
    pub fn store(mut self, store: impl Into<Storage>) -> Self {
        self.store = Some(store.into());
        self
    }

    /// Commits inside runs besides the mandatory ones (ENG-32; default
    /// [`CommitStrategy::RunEnd`]).
    #[must_use]
    pub fn commit_strategy(mut self, strategy: CommitStrategy) -> Self {
        self.commit_strategy = strategy;
        self
    }

    /// How long an instance lease lasts without renewal (ST-14; default 30 s). A run renews
    /// its lease while it lasts ([`RuntimeBuilder::lease_renewal`]), so this bounds how long
    /// the instance of a process that died stays unrecovered: the recovery sweep
    /// ([`RuntimeBuilder::recovery_sweep`]) runs it once the lease expired. (A SQLite file is
    /// written by one process, so a store that opens it takes over the leases at once.)
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How often a running run renews its instance lease (ST-14; default 10 s, or a third of
    /// the TTL when that is shorter; at most a third of the TTL when this is not shorter than
    /// it). A renewal that is refused (another owner took the expired lease) fires the run's
    /// cancellation token, and its commit is refused by fencing (ENG-36).
    #[must_use]
    pub fn lease_renewal(mut self, every: Duration) -> Self {
        self.lease_renewal = Some(every);
        self
    }

    /// The recovery sweep's interval (ENG-25, ENG-26; default 10 s): a background pass that
    /// runs again the `Running` instances whose lease is free or expired, once at start and
    /// then at this interval. `None` disables it; [`Runtime::recover`] then recovers.
    #[must_use]
    pub fn recovery_sweep(mut self, every: Option<Duration>) -> Self {
        self.recovery_sweep = every.map(|every| every.max(Duration::from_millis(1)));
        self
    }

    /// What the background retention purge removes, and how often (ST-30; default
    /// [`Retention::default`](super::Retention): receipts and idempotency records after 8
    /// days, dead letters after 7, finished instances never, hourly).
    /// [`Runtime::purge_expired`] runs one pass by hand.
    #[must_use]
    pub fn retention(mut self, retention: super::Retention) -> Self {
        self.retention = retention;
        self
    }

    /// No background work at all (what [`crate::testing::TestRuntime`] builds): no timer
    /// driver, queue worker, recovery sweep or retention purge.
    #[must_use]
    pub(crate) fn without_background(mut self) -> Self {
        self.timer_driver = false;
        self.queue_worker = false;
        self.recovery_sweep = None;
        self.retention.every = None;
        self
    }

    /// Whether the queue worker (RT-26) runs in the background (default true). Without it,
    /// queued stimuli are delivered by [`Runtime::deliver_queued`] (or after
    /// [`Runtime::start_workers`]).
    #[must_use]
    pub fn queue_worker(mut self, enabled: bool) -> Self {
        self.queue_worker = enabled;
        self
    }

    /// How long an unmatched stimulus waits in the bookmark queue before it becomes a dead
    /// letter `Expired` (RT-28; default 10 minutes). A send may set its own.
    #[must_use]
    pub fn queue_ttl(mut self, ttl: Duration) -> Self {
        self.queue_ttl = ttl;
        self
    }

    /// The queue worker's periodic sweep (RT-26; default 10 s).
    #[must_use]
    pub fn queue_sweep(mut self, every: Duration) -> Self {
        self.queue_sweep = every.max(Duration::from_millis(1));
        self
    }

    /// The lease owner name of this runtime (default: a fresh ULID).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The source of workflow time (TM-1; default [`SystemClock`]): timestamps, due times of
    /// delays and timers. Leases stay on the wall clock. For tests, a
    /// [`ManualClock`](crate::ManualClock), or [`crate::testing::TestRuntime`].
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The timer driver's fallback sweep (TM-5; default 30 s): the longest the driver waits
    /// without a hint before it looks for due timers again. `None` disables it: timers then
    /// fire on the precise wait alone.
    #[must_use]
    pub fn sweep_interval(mut self, interval: Option<Duration>) -> Self {
        self.sweep_interval = interval;
        self
    }

    /// Whether the in-process timer driver (TM-4) runs in the background (default true).
    /// Without it, due timers fire only through
    /// [`Runtime::fire_due_timers`] (what [`crate::testing::TestRuntime`] does, step by step).
    #[must_use]
    pub fn timer_driver(mut self, enabled: bool) -> Self {
        self.timer_driver = enabled;
        self
    }

    /// How long a cancelled task may take to return after its token fired before its
    /// future is dropped (ENG-52; default 10 s).
    #[must_use]
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Checks every registration (validator, registry, supported kinds, versions) and builds
    /// the runtime; the first problem is returned. Inside a tokio runtime, it starts the
    /// background work: the timer driver, the queue worker and the recovery sweep, which runs
    /// again the instances a crash interrupted (built outside tokio, the first operation
    /// starts it, see [`Runtime::run_background`]). [`Runtime::shutdown`] stops it.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming the first problem: an invalid definition (with every diagnostic),
    /// a task, condition or other fn that is not registered, a setting or activity this runtime does
    /// not run, or two current versions of one name.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let mut workflows: HashMap<String, Arc<dyn ErasedWorkflow>> = HashMap::new();
        for pending in self.pending {
            let (name, workflow) = pending()?;
            if let Some(existing) = workflows.get(&name) {
                if existing.version() != workflow.version() {
                    return Err(BuildError::ConflictingCurrentVersion {
                        name,
                        first: existing.version().to_owned(),
                        second: workflow.version().to_owned(),
                    });
                }
                continue;
            }
            workflows.insert(name, workflow);
        }
        // ACT-V10: a SubWorkflow names a registered workflow.
        for (name, workflow) in &workflows {
            for (node, child) in workflow.sub_workflows() {
                if !workflows.contains_key(&child) {
                    return Err(BuildError::UnknownWorkflow {
                        workflow: name.clone(),
                        node,
                        name: child,
                    });
                }
            }
        }
        // ST-30: no receipt may be removed while a copy of its stimulus can be delivered.
        let required = self.retention.dead_letters.saturating_add(self.queue_ttl);
        if self.retention.receipts < required {
            return Err(BuildError::ReceiptRetentionTooShort {
                receipts: self.retention.receipts,
                required,
            });
        }
        let store = self
            .store
            .unwrap_or_else(|| Storage::new(Arc::new(MemoryStore::new())));
        // ENG-42: the stored journal is bounded like the state's, unless the storage was
        // given its own cap.
        let store = match store.max_journal_entries() {
            Some(_) => store,
            None => store.with_max_journal_entries(Some(
                u64::try_from(self.max_journal_entries).unwrap_or(u64::MAX),
            )),
        };
        let (events, _) = broadcast::channel(self.event_buffer);
        let (stop, _) = tokio::sync::watch::channel(false);
        let runtime = Runtime {
            inner: Arc::new(Inner {
                workflows,
                store,
                owner: self.owner.unwrap_or_else(new_ulid),
                lease: super::LeaseSettings::new(self.lease_ttl, self.lease_renewal),
                commit_strategy: self.commit_strategy,
                locks: Mutex::new(HashMap::new()),
                states: super::cache::StateCache::default(),
                watches: Mutex::new(HashMap::new()),
                created: Mutex::new(std::collections::HashSet::new()),
                events,
                max_steps_per_run: self.max_steps_per_run,
                journal_level: self.journal_level,
                max_journal_entries: self.max_journal_entries,
                middleware: self.middleware,
                links: Mutex::new(VecDeque::new()),
                triggers_indexed: tokio::sync::OnceCell::new(),
                schedules_written: tokio::sync::OnceCell::new(),
                doorbell: Arc::new(tokio::sync::Notify::new()),
                background: Mutex::new(super::lifecycle::Background::default()),
                timer_driver: self.timer_driver,
                queue_worker: self.queue_worker,
                recovery_sweep: self.recovery_sweep,
                recovery: tokio::sync::Mutex::new(()),
                queue_passes: tokio::sync::Mutex::new(std::collections::HashSet::new()),
                child_results: Mutex::new(HashMap::new()),
                fresh: Mutex::new(HashMap::new()),
                pending_records: Mutex::new(HashMap::new()),
                consuming: Mutex::new(HashMap::new()),
                retention: self.retention,
                idle: tokio::sync::Notify::new(),
                queue_ttl: i64::try_from(self.queue_ttl.as_micros()).unwrap_or(i64::MAX),
                sweep: self.queue_sweep,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                sweep_interval: self.sweep_interval,
                cancel_grace: self.cancel_grace,
                running: Mutex::new(HashMap::new()),
                stop,
            }),
        };
        runtime.ensure_background();
        Ok(runtime)
    }
}
