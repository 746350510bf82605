//! The in-memory [`Runtime`]: registration, start, send, read, await, cancel, subscribe
//! (engine.md section 10).
//!
//! Instances are kept between runs as serialized JSON, so every suspension is a real
//! persistence round trip (SM-8); the store trait of the durable-stores issue replaces this
//! map behind the same API. Runs of one instance are serialized by a per-instance lock (the
//! in-process stand-in for the lease, ST-14).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use workflow_model::{Definition, Diagnostics};

use crate::events::{EventStream, LifecycleEvent};
use crate::executor::{
    ActivityMiddleware, DEFAULT_MAX_STEPS_PER_RUN, Executor, Link, Middleware, RunEnd, RunError,
    RunTarget, WorkflowMiddleware,
};
use crate::graph::{Graph, GraphError, NamedRefs};
use crate::ids::{new_ulid, now_ms};
use crate::instance::{
    DefinitionRef, Incident, Journal, JournalLevel, ParentLink, SubStatus, WorkflowState,
    WorkflowStatus,
};
use crate::registry::{BoxFuture, Registry};
use crate::routing::{RoutingError, check_name, stimulus_hash};
use crate::workflow::{StateMachineWorkflow, Workflow};

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
    /// ([`Registry::items`], [`Registry::value`], [`Registry::assign`]).
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
    /// type ([`Registry::outcome`], ACT-V8).
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
    #[error("input does not fit the workflow data: {message}")]
    Input {
        /// Why.
        message: String,
    },
    /// The first run failed; nothing was kept.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// A stimulus (routing.md RT-1): a name, an optional correlation key, an optional target
/// instance, and a JSON payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Stimulus {
    /// The event name.
    pub name: String,
    /// The correlation key (RT-3); `None` is the unit key.
    pub key: Option<Value>,
    /// Restrict delivery to this instance.
    pub instance_id: Option<String>,
    /// The payload, decoded by the waiting activity.
    pub payload: Value,
    /// Why the key or payload given to the builder methods did not serialize.
    invalid: Option<String>,
}

impl Stimulus {
    /// A stimulus named `name` with a `null` payload.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            key: None,
            instance_id: None,
            payload: Value::Null,
            invalid: None,
        }
    }

    /// With a correlation key (any `Serialize` value; RT-3).
    #[must_use]
    pub fn key(mut self, key: impl Serialize) -> Self {
        match serde_json::to_value(key) {
            Ok(key) => self.key = Some(key),
            Err(e) => self.invalid = Some(format!("key does not serialize: {e}")),
        }
        self
    }

    /// Addressed to one instance.
    #[must_use]
    pub fn instance(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = Some(instance_id.into());
        self
    }

    /// With a typed payload. One that does not serialize makes [`Runtime::send`] fail with
    /// [`SendError::Payload`].
    #[must_use]
    pub fn payload(mut self, payload: impl Serialize) -> Self {
        match serde_json::to_value(payload) {
            Ok(payload) => self.payload = payload,
            Err(e) => self.invalid = Some(format!("payload does not serialize: {e}")),
        }
        self
    }
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The name or key cannot be routed (RT-2, RT-3).
    #[error(transparent)]
    Routing(#[from] RoutingError),
    /// The key or payload given to [`Stimulus`] did not serialize; nothing was sent.
    #[error("{message}")]
    Payload {
        /// Why.
        message: String,
    },
    /// No bookmark waits for this stimulus. (The bookmark queue of RT-23 comes with the
    /// routing issue; until then the stimulus is not kept.)
    #[error("no instance waits for `{name}` with this key")]
    NoMatchingBookmark {
        /// The stimulus name.
        name: String,
    },
    /// A run failed; that instance is unchanged.
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
}

// ---- results ---------------------------------------------------------------------------

/// What [`Runtime::start`] returns once the first run committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The new instance's id.
    pub instance_id: String,
    /// Its status after the first run.
    pub status: WorkflowStatus,
    /// Its sub-status.
    pub sub_status: Option<SubStatus>,
}

/// Options of a start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// A caller-chosen instance id (a ULID otherwise).
    pub instance_id: Option<String>,
    /// A correlation id.
    pub correlation_id: Option<String>,
}

/// What [`Runtime::send`] did: the instances it resumed, with their status after the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReport {
    /// One entry per resumed instance, in delivery order.
    pub resumed: Vec<Started>,
    /// Matching instances that could not run (faulted, or final in the meantime): the
    /// stimulus was not delivered to them. (The bookmark queue that defers it comes with the
    /// routing issue, RT-18.)
    pub not_delivered: Vec<RunError>,
}

/// A read-only snapshot of an instance (ENG-51).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSnapshot {
    /// The whole persisted state: status, contexts, bookmarks, queue, data...
    pub state: WorkflowState,
    /// The journal, stored apart from the state (ENG-41), oldest first.
    pub journal: Vec<crate::instance::JournalEntry>,
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
            .get(crate::activities::CURRENT_STATE)?
            .as_str()
    }

    /// The data, decoded as `D`.
    pub fn data<D: DeserializeOwned>(&self) -> Result<D, serde_json::Error> {
        serde_json::from_value(self.state.data.clone())
    }

    /// The journal entries, oldest first.
    pub fn journal(&self) -> &[crate::instance::JournalEntry] {
        &self.journal
    }
}

// ---- the registered workflows ------------------------------------------------------------

struct RunOutput {
    state: WorkflowState,
    events: Vec<LifecycleEvent>,
    end: RunEnd,
    /// Child instances to start or cancel once committed (ACT-24).
    links: Vec<Link>,
}

/// A registered definition with its user code, its data type erased.
trait ErasedWorkflow: Send + Sync {
    fn version(&self) -> &str;
    fn check_data(&self, data: &Value) -> Result<(), String>;
    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        max_steps: usize,
        middleware: &'a Middleware,
        emit_events: bool,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>>;
    fn cancel(
        &self,
        state: WorkflowState,
        reason: Option<String>,
        middleware: &Middleware,
    ) -> Result<RunOutput, RunError>;
    /// `(node id, workflow name)` of every SubWorkflow node, for ACT-V10 at build.
    fn sub_workflows(&self) -> Vec<(String, String)>;
}

struct Registered<D> {
    version: String,
    graph: Graph,
    registry: Registry<D>,
}

impl<D> ErasedWorkflow for Registered<D>
where
    D: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn version(&self) -> &str {
        &self.version
    }

    fn check_data(&self, data: &Value) -> Result<(), String> {
        serde_json::from_value::<D>(data.clone())
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        max_steps: usize,
        middleware: &'a Middleware,
        emit_events: bool,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>> {
        Box::pin(async move {
            let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
            executor.emit_events = emit_events;
            let end = executor.run(target, max_steps).await?;
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
    ) -> Result<RunOutput, RunError> {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.cancel_instance(reason)?;
        Ok(RunOutput {
            state: executor.state,
            events: executor.events,
            end: RunEnd::Finished,
            links: executor.links,
        })
    }

    fn sub_workflows(&self) -> Vec<(String, String)> {
        self.graph.sub_workflows()
    }
}

type Pending = Box<dyn FnOnce() -> Result<(String, Arc<dyn ErasedWorkflow>), BuildError> + Send>;

/// Builds a [`Runtime`]: register workflows, set limits, add middleware, then
/// [`RuntimeBuilder::build`] checks everything (ENG-47).
pub struct RuntimeBuilder {
    pending: Vec<Pending>,
    max_steps_per_run: usize,
    journal_level: JournalLevel,
    max_journal_entries: usize,
    event_buffer: usize,
    middleware: Middleware,
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
type HasFn<D> = fn(&Registry<D>, &str) -> bool;

fn register_parts<D>(
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
            graph,
            registry,
        }),
    ))
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

    /// Checks every registration (validator, registry, supported kinds, versions) and builds
    /// the runtime; the first problem is returned.
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
        let (events, _) = broadcast::channel(self.event_buffer);
        Ok(Runtime {
            inner: Arc::new(Inner {
                workflows,
                instances: Mutex::new(HashMap::new()),
                bookmarks: Mutex::new(HashMap::new()),
                events,
                max_steps_per_run: self.max_steps_per_run,
                journal_level: self.journal_level,
                max_journal_entries: self.max_journal_entries,
                middleware: self.middleware,
                links: Mutex::new(VecDeque::new()),
            }),
        })
    }
}

// ---- the runtime -------------------------------------------------------------------------

/// One stored instance: its JSON document and, apart from it, its journal (ENG-41).
struct Slot {
    json: String,
    journal: Journal,
}

/// What awaiters watch.
#[derive(Debug, Clone, PartialEq)]
struct Watched {
    status: WorkflowStatus,
    output: Option<Value>,
    reason: Option<String>,
    incident: Option<Incident>,
}

struct Entry {
    slot: Arc<tokio::sync::Mutex<Slot>>,
    watch: watch::Sender<Watched>,
}

struct Inner {
    workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
    instances: Mutex<HashMap<String, Entry>>,
    /// Stimulus hash -> `(instance, bookmark id)` in creation order: the bookmark index,
    /// updated with each commit's bookmark diff (ENG-23).
    bookmarks: Mutex<HashMap<String, Vec<(String, String)>>>,
    events: broadcast::Sender<LifecycleEvent>,
    max_steps_per_run: usize,
    journal_level: JournalLevel,
    max_journal_entries: usize,
    middleware: Middleware,
    /// Work between instances queued by commits (ACT-24), carried out before the runtime
    /// call that caused it returns.
    links: Mutex<VecDeque<Link>>,
}

/// The workflow runtime, in memory (engine.md section 10). Cheap to clone; clones share
/// instances.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.inner.workflows.keys().collect();
        names.sort();
        f.debug_struct("Runtime")
            .field("workflows", &names)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn decode_state(id: &str, json: &str) -> Result<WorkflowState, StateError> {
    serde_json::from_str(json).map_err(|e| StateError::Decode {
        instance: id.to_owned(),
        message: e.to_string(),
    })
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
    /// A builder with the defaults of engine.md.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            pending: Vec::new(),
            max_steps_per_run: DEFAULT_MAX_STEPS_PER_RUN,
            journal_level: JournalLevel::default(),
            max_journal_entries: 1000,
            event_buffer: 1024,
            middleware: Middleware::default(),
        }
    }

    /// Starts an instance of `W` with `input` as its data and runs its first run in the
    /// caller's task (ENG-48).
    pub async fn start<W: Workflow>(&self, input: W::Data) -> Result<Started, StartError> {
        self.start_with::<W>(input, StartOptions::default()).await
    }

    /// [`Runtime::start`] with options.
    pub async fn start_with<W: Workflow>(
        &self,
        input: W::Data,
        options: StartOptions,
    ) -> Result<Started, StartError> {
        let input = serde_json::to_value(input).map_err(|e| StartError::Input {
            message: e.to_string(),
        })?;
        self.start_by_name(W::name(), input, options).await
    }

    /// Starts an instance of the definition registered under `name` (a JSON registration,
    /// say) with JSON input.
    pub async fn start_by_name(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> Result<Started, StartError> {
        let mut result = self.start_inner(name, input, options, None).await;
        if self.process_links().await
            && let Ok(started) = &mut result
        {
            self.refresh(started).await;
        }
        result
    }

    /// Creates and runs an instance, with its parent when a SubWorkflow starts it (ACT-24).
    async fn start_inner(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
    ) -> Result<Started, StartError> {
        let workflow =
            self.inner
                .workflows
                .get(name)
                .ok_or_else(|| StartError::DefinitionNotRegistered {
                    name: name.to_owned(),
                })?;
        workflow
            .check_data(&input)
            .map_err(|message| StartError::Input { message })?;
        let instance_id = options.instance_id.unwrap_or_else(new_ulid);
        let mut state = WorkflowState::new(
            instance_id.clone(),
            DefinitionRef {
                name: name.to_owned(),
                version: workflow.version().to_owned(),
            },
            input.clone(),
            input,
            Journal::new(self.inner.journal_level, self.inner.max_journal_entries),
            now_ms(),
        );
        state.correlation_id = options.correlation_id;
        state.parent = parent;
        let json = serde_json::to_string(&state).map_err(|e| StartError::Input {
            message: e.to_string(),
        })?;
        let journal = Journal::new(self.inner.journal_level, self.inner.max_journal_entries);
        let slot = Arc::new(tokio::sync::Mutex::new(Slot { json, journal }));
        let guard = slot.clone().lock_owned().await;
        {
            let mut instances = lock(&self.inner.instances);
            if instances.contains_key(&instance_id) {
                return Err(StartError::InstanceExists {
                    instance: instance_id,
                });
            }
            let (watch, _) = watch::channel(Watched {
                status: state.status,
                output: None,
                reason: None,
                incident: None,
            });
            instances.insert(instance_id.clone(), Entry { slot, watch });
        }
        match self
            .drive_locked(guard, &instance_id, RunTarget::None)
            .await
        {
            Ok(started) => Ok(started),
            Err(error) => {
                // Nothing is kept of a start whose first run failed.
                lock(&self.inner.instances).remove(&instance_id);
                Err(StartError::Run(error))
            }
        }
    }

    /// Sends a stimulus (ENG-49): every bookmark waiting for its name and key (in the given
    /// instance, if any) is resumed with the payload, one run per instance, in bookmark
    /// creation order.
    pub async fn send(&self, stimulus: Stimulus) -> Result<SendReport, SendError> {
        let mut result = self.send_inner(stimulus).await;
        if self.process_links().await
            && let Ok(report) = &mut result
        {
            for started in &mut report.resumed {
                self.refresh(started).await;
            }
        }
        result
    }

    async fn send_inner(&self, stimulus: Stimulus) -> Result<SendReport, SendError> {
        check_name(&stimulus.name)?;
        if let Some(message) = stimulus.invalid.clone() {
            return Err(SendError::Payload { message });
        }
        let hash = stimulus_hash(&stimulus.name, stimulus.key.as_ref(), None)?;
        let matches: Vec<(String, String)> = lock(&self.inner.bookmarks)
            .get(&hash)
            .cloned()
            .unwrap_or_default();
        let mut targets: Vec<(String, Vec<String>)> = Vec::new();
        for (instance, bookmark) in matches {
            if stimulus
                .instance_id
                .as_ref()
                .is_some_and(|only| *only != instance)
            {
                continue;
            }
            match targets.iter_mut().find(|(i, _)| *i == instance) {
                Some((_, ids)) => ids.push(bookmark),
                None => targets.push((instance, vec![bookmark])),
            }
        }
        let mut resumed = Vec::new();
        let mut not_delivered = Vec::new();
        for (instance, ids) in targets {
            let target = RunTarget::Bookmarks {
                ids,
                payload: stimulus.payload.clone(),
            };
            match self.drive(&instance, target).await {
                Ok(Some(started)) => resumed.push(started),
                // Consumed elsewhere in the meantime: routing treats it as gone (ENG-25).
                Ok(None) | Err(RunError::BookmarkNotFound { .. }) => {}
                Err(error @ RunError::NotRunnable { .. }) => not_delivered.push(error),
                Err(error) => return Err(SendError::Run(error)),
            }
        }
        if resumed.is_empty() {
            if let Some(error) = not_delivered.into_iter().next() {
                return Err(SendError::Run(error));
            }
            return Err(SendError::NoMatchingBookmark {
                name: stimulus.name,
            });
        }
        Ok(SendReport {
            resumed,
            not_delivered,
        })
    }

    /// Resumes one bookmark by id (RT-34), e.g. a `wf.delay` bookmark before timers exist.
    pub async fn resume_bookmark(
        &self,
        instance_id: &str,
        bookmark_id: &str,
        payload: Value,
    ) -> Result<Started, ResumeError> {
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

    /// A snapshot of an instance, or `None` for an unknown id (ENG-51).
    pub async fn get_state(
        &self,
        instance_id: &str,
    ) -> Result<Option<InstanceSnapshot>, StateError> {
        let Some(slot) = self.slot(instance_id) else {
            return Ok(None);
        };
        let guard = slot.lock().await;
        let state = decode_state(instance_id, &guard.json)?;
        Ok(Some(InstanceSnapshot {
            state,
            journal: guard.journal.entries.clone(),
        }))
    }

    /// The typed current state of a state-machine instance: `None` for an unknown id or a
    /// machine that has not started.
    pub async fn current_state<W: StateMachineWorkflow>(
        &self,
        instance_id: &str,
    ) -> Result<Option<W::State>, StateError> {
        let snapshot = self.get_state(instance_id).await?;
        Ok(snapshot
            .as_ref()
            .and_then(InstanceSnapshot::current_state)
            .and_then(W::state_from_name))
    }

    /// Waits until the instance is final or faulted, at most `timeout` (ENG-48). Needs a Tokio
    /// runtime with time enabled.
    pub async fn await_completion(
        &self,
        instance_id: &str,
        timeout: Duration,
    ) -> Result<Completion, AwaitError> {
        let mut receiver = {
            let instances = lock(&self.inner.instances);
            let entry = instances
                .get(instance_id)
                .ok_or_else(|| AwaitError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                })?;
            entry.watch.subscribe()
        };
        let wait = async {
            loop {
                let seen = receiver.borrow_and_update().clone();
                match seen.status {
                    WorkflowStatus::Finished => {
                        return Ok(Completion::Finished(seen.output.unwrap_or(Value::Null)));
                    }
                    WorkflowStatus::Cancelled => return Ok(Completion::Cancelled(seen.reason)),
                    WorkflowStatus::Faulted => {
                        if let Some(incident) = seen.incident {
                            return Err(AwaitError::Faulted {
                                incident: Box::new(incident),
                            });
                        }
                    }
                    WorkflowStatus::Running | WorkflowStatus::Suspended => {}
                }
                if receiver.changed().await.is_err() {
                    return Err(AwaitError::InstanceNotFound {
                        instance: instance_id.to_owned(),
                    });
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(AwaitError::Timeout {
                instance: instance_id.to_owned(),
                status: receiver.borrow().status,
            }),
        }
    }

    /// Cancels an instance (ENG-50): the tree is cancelled, bookmarks and queued work removed,
    /// open incidents resolved as `cancelled`, `WorkflowCancelled` published. On a final
    /// instance: `AlreadyTerminal`, nothing changes. A run in progress finishes first (the
    /// per-instance lock); honouring a cancel request mid-run comes with the durable store.
    pub async fn cancel(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<(), CancelError> {
        let result = self.cancel_inner(instance_id, reason).await;
        self.process_links().await;
        result
    }

    async fn cancel_inner(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<(), CancelError> {
        let not_found = || CancelError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let slot = self.slot(instance_id).ok_or_else(not_found)?;
        let mut guard = slot.lock_owned().await;
        let state = decode_state(instance_id, &guard.json).map_err(|e| {
            CancelError::Run(RunError::StateCorrupt {
                instance: instance_id.to_owned(),
                reason: e.to_string(),
            })
        })?;
        if state.status.is_final() {
            return Err(CancelError::AlreadyTerminal {
                status: state.status,
            });
        }
        let workflow = self.workflow_for(&state)?;
        let before = state.bookmarks.clone();
        let output = workflow.cancel(state, reason, &self.inner.middleware)?;
        self.commit(&mut guard, instance_id, &before, output)?;
        Ok(())
    }

    /// Removes a final instance with its journal (ST-31).
    pub async fn purge(&self, instance_id: &str) -> Result<(), PurgeError> {
        let not_found = || PurgeError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let slot = self.slot(instance_id).ok_or_else(not_found)?;
        let guard = slot.lock().await;
        let state = decode_state(instance_id, &guard.json).map_err(|_| not_found())?;
        if !state.status.is_final() {
            return Err(PurgeError::NotTerminal {
                status: state.status,
            });
        }
        lock(&self.inner.instances).remove(instance_id);
        Ok(())
    }

    /// Subscribes to lifecycle events of every instance (ENG-39, ENG-40).
    pub fn subscribe(&self) -> EventStream {
        EventStream {
            receiver: self.inner.events.subscribe(),
        }
    }

    // ---- links between instances (ACT-24) ----------------------------------------------

    /// The status after linked work moved the instance on (a child that finished at once
    /// resumed its parent, ACT-24).
    async fn refresh(&self, started: &mut Started) {
        if let Ok(Some(snapshot)) = self.get_state(&started.instance_id).await {
            started.status = snapshot.state.status;
            started.sub_status = snapshot.state.sub_status;
        }
    }

    /// Carries out the work between instances that commits queued: starts children, resumes
    /// parents with their children's results, cancels children of cancelled SubWorkflows.
    /// Iterative, so a chain of nested sub-workflows does not recurse. Returns whether it did
    /// anything.
    async fn process_links(&self) -> bool {
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
                    let started = self
                        .start_inner(&workflow, input, options, Some(parent))
                        .await;
                    if let (Err(error), Some(bookmark_id)) = (started, bookmark) {
                        // The parent learns that its child could not run (ACT-24).
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
                        ids: vec![bookmark_id],
                        payload,
                    };
                    // A parent that was cancelled meanwhile has no bookmark left.
                    let _ = self.drive(&instance_id, target).await;
                }
            }
        }
    }

    // ---- driving runs ------------------------------------------------------------------

    fn slot(&self, instance_id: &str) -> Option<Arc<tokio::sync::Mutex<Slot>>> {
        lock(&self.inner.instances)
            .get(instance_id)
            .map(|e| e.slot.clone())
    }

    fn workflow_for(&self, state: &WorkflowState) -> Result<Arc<dyn ErasedWorkflow>, RunError> {
        match self.inner.workflows.get(&state.definition.name) {
            Some(w) if w.version() == state.definition.version => Ok(w.clone()),
            // ENG-46 will give `VersionNotRegistered`; the in-memory runtime holds one version.
            _ => Err(RunError::StateCorrupt {
                instance: state.instance_id.clone(),
                reason: format!(
                    "definition `{}` version `{}` is not registered",
                    state.definition.name, state.definition.version
                ),
            }),
        }
    }

    /// Runs an instance; `Ok(None)` for an unknown id.
    async fn drive(
        &self,
        instance_id: &str,
        target: RunTarget,
    ) -> Result<Option<Started>, RunError> {
        let Some(slot) = self.slot(instance_id) else {
            return Ok(None);
        };
        let guard = slot.lock_owned().await;
        self.drive_locked(guard, instance_id, target)
            .await
            .map(Some)
    }

    /// Runs under the instance lock until the run ends other than at its step budget: each
    /// budget slice is committed (ENG-10) and the task yields before the next.
    async fn drive_locked(
        &self,
        mut guard: tokio::sync::OwnedMutexGuard<Slot>,
        instance_id: &str,
        target: RunTarget,
    ) -> Result<Started, RunError> {
        let mut target = Some(target);
        loop {
            let state =
                decode_state(instance_id, &guard.json).map_err(|e| RunError::StateCorrupt {
                    instance: instance_id.to_owned(),
                    reason: e.to_string(),
                })?;
            if state.status.is_final() || state.status == WorkflowStatus::Faulted {
                return Err(RunError::NotRunnable {
                    instance: instance_id.to_owned(),
                    status: state.status,
                });
            }
            let workflow = self.workflow_for(&state)?;
            let before = state.bookmarks.clone();
            let target = target.take().unwrap_or(RunTarget::None);
            let output = workflow
                .run(
                    state,
                    target,
                    self.inner.max_steps_per_run,
                    &self.inner.middleware,
                    self.inner.events.receiver_count() > 0,
                )
                .await?;
            let end = output.end;
            let started = self.commit(&mut guard, instance_id, &before, output)?;
            if end != RunEnd::Budget {
                return Ok(started);
            }
            YieldNow(false).await;
        }
    }

    /// Commits a run: the document, the bookmark index diff (ENG-23), then the events and the
    /// watchers (ENG-33: events follow commits).
    fn commit(
        &self,
        guard: &mut Slot,
        instance_id: &str,
        before: &[crate::instance::Bookmark],
        output: RunOutput,
    ) -> Result<Started, RunError> {
        let mut state = output.state;
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
                        "status": format!("{:?}", state.status),
                        "output": state.output,
                    }),
                });
            }
        }
        guard.journal.entries.append(&mut state.journal.entries);
        guard.journal.compact();
        guard.json = serde_json::to_string(&state).map_err(|e| RunError::StateCorrupt {
            instance: instance_id.to_owned(),
            reason: format!("state does not serialize: {e}"),
        })?;
        {
            let mut index = lock(&self.inner.bookmarks);
            for gone in before
                .iter()
                .filter(|b| !state.bookmarks.iter().any(|a| a.id == b.id))
            {
                if let Some(list) = index.get_mut(&gone.hash) {
                    list.retain(|(i, id)| !(i == instance_id && *id == gone.id));
                    if list.is_empty() {
                        index.remove(&gone.hash);
                    }
                }
            }
            for new in state
                .bookmarks
                .iter()
                .filter(|a| !before.iter().any(|b| b.id == a.id))
            {
                index
                    .entry(new.hash.clone())
                    .or_default()
                    .push((instance_id.to_owned(), new.id.clone()));
            }
        }
        for event in output.events {
            // No subscriber is not an error.
            let _ = self.inner.events.send(event);
        }
        if let Some(entry) = lock(&self.inner.instances).get(instance_id) {
            entry.watch.send_replace(Watched {
                status: state.status,
                output: if state.status == WorkflowStatus::Finished {
                    state.output.clone()
                } else {
                    None
                },
                reason: state.cancel_reason.clone(),
                incident: if state.status == WorkflowStatus::Faulted {
                    state.incidents.last().cloned()
                } else {
                    None
                },
            });
        }
        Ok(Started {
            instance_id: instance_id.to_owned(),
            status: state.status,
            sub_status: state.sub_status,
        })
    }
}
