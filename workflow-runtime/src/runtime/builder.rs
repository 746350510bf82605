//! Registration and the builder: definitions checked at build (ENG-45, ENG-47).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use workflow_model::Definition;

use super::errors::BuildError;
use super::lease;
use super::registered::{ErasedWorkflow, Registered};
use super::retention::Retention;
use crate::clock::Clock;
use crate::engine::executor::{
    ActivityMiddleware, CommitStrategy, DEFAULT_CANCEL_GRACE, DEFAULT_MAX_STEPS_PER_RUN,
    Middleware, WorkflowMiddleware,
};
use crate::engine::graph::{Graph, GraphError, NamedRefs};
use crate::engine::registry::Registry;
use crate::engine::state::JournalLevel;
use crate::store::{MemoryStore, Storage};
use crate::trace::{TraceBridge, TraceParent};
use crate::workflow::Workflow;

/// The default interval of the recovery sweep (ENG-25): 10 s.
const DEFAULT_RECOVERY_SWEEP: Duration = Duration::from_secs(10);
/// The default periodic sweep of the inbox worker (RT-26): 10 s.
const DEFAULT_QUEUE_SWEEP: Duration = Duration::from_secs(10);
/// The default fallback sweep of the timer driver (TM-5): 30 s.
const DEFAULT_FALLBACK_SWEEP: Duration = Duration::from_secs(30);

pub(crate) type Pending = (
    Role,
    Box<dyn FnOnce() -> Result<(String, Arc<dyn ErasedWorkflow>), BuildError> + Send>,
);

/// Whether a registration is its name's current version (ENG-45): the one new instances
/// start on, or a previous one, kept to run the instances pinned to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Current,
    Previous,
}

/// Builds a [`Runtime`](crate::Runtime): register workflows, set limits, add middleware, then
/// [`RuntimeBuilder::build`](crate::RuntimeBuilder::build) checks everything (ENG-47).
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
    pub(crate) pending: Vec<Pending>,
    pub(crate) max_steps_per_run: usize,
    pub(crate) journal_level: JournalLevel,
    pub(crate) max_journal_entries: usize,
    pub(crate) event_buffer: usize,
    pub(crate) middleware: Middleware,
    pub(crate) store: Option<Storage>,
    pub(crate) commit_strategy: CommitStrategy,
    pub(crate) lease_ttl: Duration,
    pub(crate) lease_renewal: Option<Duration>,
    pub(crate) queue_worker: bool,
    pub(crate) recovery_sweep: Option<Duration>,
    pub(crate) retention: Retention,
    pub(crate) owner: Option<String>,
    pub(crate) queue_ttl: Duration,
    pub(crate) queue_sweep: Duration,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) sweep_interval: Option<Duration>,
    pub(crate) timer_driver: bool,
    /// Whether the runtime counts its metrics (ENG-60).
    pub(crate) metrics: bool,
    pub(crate) cancel_grace: Duration,
    pub(crate) trace: TraceBridge,
    pub(crate) queues: Vec<workflow_model::Queue>,
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
pub(crate) type HasFn<D> = fn(&Registry<D>, &str) -> bool;

pub(crate) fn register_parts<D>(
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
            run_queue: definition.queue.clone(),
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
    /// A builder with the default settings (what `Runtime::builder` gives).
    pub(crate) fn new() -> Self {
        Self {
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
            recovery_sweep: Some(DEFAULT_RECOVERY_SWEEP),
            retention: Retention::default(),
            owner: None,
            queue_ttl: crate::routing::DEFAULT_QUEUE_TTL,
            queue_sweep: DEFAULT_QUEUE_SWEEP,
            clock: None,
            sweep_interval: Some(DEFAULT_FALLBACK_SWEEP),
            timer_driver: true,
            metrics: true,
            cancel_grace: DEFAULT_CANCEL_GRACE,
            trace: TraceBridge::default(),
            queues: Vec::new(),
        }
    }

    /// Registers the workflow type `W` (macro-generated or written by hand) as its name's
    /// current version: new instances start on it (ENG-45).
    #[must_use]
    pub fn register<W: Workflow>(mut self) -> Self {
        // QU-10: the queues the macros declared with the workflow come with it.
        self.queues.extend(W::queues());
        self.pending.push((
            Role::Current,
            Box::new(|| register_parts(W::definition(), W::version().to_owned(), W::registry())),
        ));
        self
    }

    /// Registers `W` as a previous version of its name (ENG-45): the instances pinned to it go
    /// on running on it, while new instances start on the current version, registered with
    /// [`RuntimeBuilder::register`](crate::RuntimeBuilder::register). Keep the old type in a
    /// module of its own (`mod v1`) with the same `name = ".."`; move its waiting instances
    /// to the current version with [`Runtime::migrate`](crate::Runtime::migrate), if you
    /// want to.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::{Runtime, state_machine};
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
    /// #[state_machine(data = Order, initial = New, name = "order")]
    /// enum OrderFlow {
    ///     #[on(pay: event("payment") => Paid)]
    ///     #[on(cancel: event("cancel") => Cancelled)]
    ///     New,
    ///     Paid,
    ///     Cancelled,
    /// }
    ///
    /// fn main() {
    ///     let runtime = Runtime::builder()
    ///         .register_previous::<v1::OrderFlow>()
    ///         .register::<OrderFlow>()
    ///         .build();
    ///     assert!(runtime.is_ok());
    /// }
    /// ```
    #[must_use]
    pub fn register_previous<W: Workflow>(mut self) -> Self {
        self.queues.extend(W::queues());
        self.pending.push((
            Role::Previous,
            Box::new(|| register_parts(W::definition(), W::version().to_owned(), W::registry())),
        ));
        self
    }

    /// Registers a definition built from the model, with its registry of user code.
    #[must_use]
    pub fn register_definition<D>(mut self, definition: Definition, registry: Registry<D>) -> Self
    where
        D: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        self.pending.push((
            Role::Current,
            Box::new(move || {
                let version = definition.fingerprint();
                register_parts(&definition, version, registry)
            }),
        ));
        self
    }

    /// Registers a JSON definition (the format of `workflow_model`'s crate docs), loaded and
    /// validated at [`RuntimeBuilder::build`](crate::RuntimeBuilder::build).
    #[must_use]
    pub fn register_json<D>(mut self, json: impl Into<String>, registry: Registry<D>) -> Self
    where
        D: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let json = json.into();
        self.pending.push((
            Role::Current,
            Box::new(move || {
                let definition = Definition::from_json(&json).map_err(|e| BuildError::Load {
                    message: e.to_string(),
                })?;
                let version = definition.fingerprint();
                register_parts(&definition, version, registry)
            }),
        ));
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
    /// a backend (`Arc<SqliteStore>`, `Arc<dyn Store>`) or a [`Storage`](crate::store::Storage) configured around
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
    /// its lease while it lasts ([`RuntimeBuilder::lease_renewal`](crate::RuntimeBuilder::lease_renewal)), so this bounds how long
    /// the instance of a process that died stays unrecovered: the recovery sweep
    /// ([`RuntimeBuilder::recovery_sweep`](crate::RuntimeBuilder::recovery_sweep)) runs it once the lease expired. (A SQLite file is
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
    /// then at this interval. `None` disables it; [`Runtime::recover`](crate::Runtime::recover) then recovers.
    #[must_use]
    pub fn recovery_sweep(mut self, every: Option<Duration>) -> Self {
        self.recovery_sweep = every.map(|every| every.max(Duration::from_millis(1)));
        self
    }

    /// What the background retention purge removes, and how often (ST-30; default
    /// [`Retention::default`]: receipts and idempotency records after 8
    /// days, dead letters after 7, finished instances never, hourly).
    /// [`Runtime::purge_expired`](crate::Runtime::purge_expired) runs one pass by hand.
    #[must_use]
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// No background work at all (what [`crate::testing::TestRuntime`] builds): no timer
    /// driver, inbox worker, recovery sweep or retention purge.
    #[must_use]
    pub(crate) fn without_background(mut self) -> Self {
        self.timer_driver = false;
        self.queue_worker = false;
        self.recovery_sweep = None;
        self.retention.every = None;
        self
    }

    /// Whether the inbox worker (RT-26) runs in the background (default true). Without it,
    /// the stimuli kept in the inbox are delivered by
    /// [`Runtime::deliver_inbox`](crate::Runtime::deliver_inbox) (or after
    /// [`Runtime::start_workers`](crate::Runtime::start_workers)).
    #[must_use]
    pub fn inbox_worker(mut self, enabled: bool) -> Self {
        self.queue_worker = enabled;
        self
    }

    /// How long an unmatched stimulus waits in the inbox before it becomes a dead letter
    /// `Expired` (RT-28; default 10 minutes). A send may set its own.
    #[must_use]
    pub fn inbox_ttl(mut self, ttl: Duration) -> Self {
        self.queue_ttl = ttl;
        self
    }

    /// The inbox worker's periodic sweep (RT-26; default 10 s).
    #[must_use]
    pub fn inbox_sweep(mut self, every: Duration) -> Self {
        self.queue_sweep = every.max(Duration::from_millis(1));
        self
    }

    /// Declares a flow-control queue (QU-1, QU-10): each attempt of a task that runs in it
    /// takes one of its slots first, shared with every process on the same store. Checked
    /// at [`build`](Self::build): an invalid declaration is [`BuildError::Queue`] naming the
    /// field, and a task running in an undeclared queue is [`BuildError::UnknownQueue`] with
    /// a did-you-mean.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::{Queue, Runtime};
    ///
    /// const PAYMENTS: Queue = Queue::new("payments")
    ///     .concurrency(5)
    ///     .rate(25, Duration::from_secs(1));
    ///
    /// let runtime = Runtime::builder().queue(PAYMENTS).build();
    /// assert!(runtime.is_ok());
    /// let zero = Runtime::builder().queue(Queue::new("imports").concurrency(0)).build();
    /// assert_eq!(
    ///     zero.unwrap_err().to_string(),
    ///     "queue `imports`: `concurrency` must be at least 1"
    /// );
    /// ```
    #[must_use]
    pub fn queue(mut self, queue: workflow_model::Queue) -> Self {
        self.queues.push(queue);
        self
    }

    /// The lease owner name of this runtime (default: a fresh ULID).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The source of workflow time (TM-1; default [`SystemClock`](crate::SystemClock)): timestamps, due times of
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

    /// Whether the in-process timer driver (TM-4), and with it the debounce driver (RT-35),
    /// runs in the background (default true). Without it, due timers fire and due debounced
    /// sends are delivered only through
    /// [`Runtime::fire_due_timers`](crate::Runtime::fire_due_timers) (what [`crate::testing::TestRuntime`] does, step by step).
    #[must_use]
    pub fn timer_driver(mut self, enabled: bool) -> Self {
        self.timer_driver = enabled;
        self
    }

    /// Whether the runtime counts what it does for [`Runtime::metrics`](crate::Runtime::metrics)
    /// (default true; ENG-60). Counting costs a few relaxed atomic adds and clock reads per
    /// run; with `false` nothing is counted, the clock is not read for it, and every value
    /// stays 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let runtime = workflow_runtime::Runtime::builder().metrics(false).build()?;
    /// assert_eq!(runtime.metrics().stimuli.sent, 0);
    /// # Ok::<(), workflow_runtime::BuildError>(())
    /// ```
    #[must_use]
    pub fn metrics(mut self, enabled: bool) -> Self {
        self.metrics = enabled;
        self
    }

    /// Where a send or a start takes its W3C trace context (ENG-61) when neither it
    /// ([`Stimulus::traceparent`](crate::Stimulus::traceparent),
    /// [`StartOptions::traceparent`](crate::StartOptions)) nor its task
    /// ([`TraceParent::scope`], a run of this runtime) gives one: for example the context of
    /// the current OpenTelemetry span.
    #[must_use]
    pub fn trace_context_from(
        mut self,
        source: impl Fn() -> Option<TraceParent> + Send + Sync + 'static,
    ) -> Self {
        self.trace.source = Some(Arc::new(source));
        self
    }

    /// Called with the `workflow.execution` span of each run that continues a trace context,
    /// and that context, before the run enters the span (ENG-61): for example to make the
    /// context the span's OpenTelemetry parent (`OpenTelemetrySpanExt::set_parent`), so the
    /// run joins the trace of the send or start in whichever process it ran.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use workflow_runtime::{Runtime, TraceParent};
    ///
    /// let continued: Arc<Mutex<Vec<String>>> = Arc::default();
    /// let seen = Arc::clone(&continued);
    /// let runtime = Runtime::builder()
    ///     .on_execution_span(move |_span, parent: &TraceParent| {
    ///         seen.lock().unwrap().push(parent.trace_id());
    ///     })
    ///     .build()?;
    /// # let _ = runtime;
    /// # Ok::<(), workflow_runtime::BuildError>(())
    /// ```
    #[must_use]
    pub fn on_execution_span(
        mut self,
        hook: impl Fn(&tracing::Span, &TraceParent) + Send + Sync + 'static,
    ) -> Self {
        self.trace.on_span = Some(Arc::new(hook));
        self
    }

    /// How long a cancelled task may take to return after its token fired before its
    /// future is dropped (ENG-52; default 10 s).
    #[must_use]
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Checks every registration (validator, registry, supported kinds, versions) and the
    /// settings; the first problem is returned. Gives the registered workflows and the store
    /// the runtime is built on.
    pub(crate) fn checked(&mut self) -> Result<Checked, BuildError> {
        // QU-2: every declared queue is valid, and one name has one declaration.
        let mut queues: Vec<workflow_model::Queue> = Vec::new();
        for queue in std::mem::take(&mut self.queues) {
            queue.validate().map_err(BuildError::Queue)?;
            match queues.iter().find(|q| q.name() == queue.name()) {
                Some(existing) if *existing != queue => {
                    return Err(BuildError::ConflictingQueue {
                        name: queue.name().to_owned(),
                        first: Box::new(existing.clone()),
                        second: Box::new(queue),
                    });
                }
                Some(_) => {}
                None => queues.push(queue),
            }
        }
        let mut workflows: HashMap<String, Arc<dyn ErasedWorkflow>> = HashMap::new();
        let mut previous: Vec<(String, Arc<dyn ErasedWorkflow>)> = Vec::new();
        for (role, pending) in std::mem::take(&mut self.pending) {
            let (name, workflow) = pending()?;
            if role == Role::Previous {
                previous.push((name, workflow));
                continue;
            }
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
        // ENG-45: a previous version runs its instances beside its name's current version.
        let mut versions: HashMap<(String, String), Arc<dyn ErasedWorkflow>> = workflows
            .iter()
            .map(|(name, w)| ((name.clone(), w.version().to_owned()), Arc::clone(w)))
            .collect();
        for (name, workflow) in previous {
            if !workflows.contains_key(&name) {
                return Err(BuildError::PreviousWithoutCurrent { name });
            }
            versions
                .entry((name, workflow.version().to_owned()))
                .or_insert(workflow);
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
        // QU-10, QU-14: every queue a task or a run runs in is declared.
        for (name, workflow) in versions.iter().map(|((name, _), w)| (name, w)) {
            let run_queue = workflow
                .run_queue()
                .map(|queue| ("(the definition)".to_owned(), queue.to_owned()));
            for (node, queue) in workflow.task_queues().into_iter().chain(run_queue) {
                if !queues.iter().any(|q| q.name() == queue) {
                    let names: Vec<&str> = queues.iter().map(workflow_model::Queue::name).collect();
                    return Err(BuildError::UnknownQueue {
                        workflow: name.clone(),
                        node,
                        suggestion: workflow_model::suggest(&queue, names).map(str::to_owned),
                        queue,
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
            .take()
            .unwrap_or_else(|| Storage::new(Arc::new(MemoryStore::new())));
        // ENG-42: the stored journal is bounded like the state's, unless the storage was
        // given its own cap.
        let store = match store.max_journal_entries() {
            Some(_) => store,
            None => store.with_max_journal_entries(Some(
                u64::try_from(self.max_journal_entries).unwrap_or(u64::MAX),
            )),
        };
        Ok(Checked {
            workflows,
            versions,
            store,
            queues,
        })
    }
}

/// What a checked builder gives the runtime: the registered workflows and the store.
pub(crate) struct Checked {
    /// The current version of each name.
    pub(crate) workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
    /// Every registered version, current and previous, by name and version.
    pub(crate) versions: HashMap<(String, String), Arc<dyn ErasedWorkflow>>,
    pub(crate) store: Storage,
    /// The declared flow-control queues, checked (QU-2).
    pub(crate) queues: Vec<workflow_model::Queue>,
}
