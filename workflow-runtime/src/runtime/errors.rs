//! The runtime's errors: one enum per operation family.

use std::time::Duration;

use workflow_model::Diagnostics;

use crate::engine::executor::RunError;
use crate::engine::state::{Incident, SubStatus, WorkflowStatus};
use crate::routing::Refusal;
use crate::store::StoreError;

/// Why [`RuntimeBuilder::build`](crate::RuntimeBuilder::build) failed (ENG-45, ENG-47).
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
    /// A flow-control queue declared with [`RuntimeBuilder::queue`](crate::RuntimeBuilder::queue)
    /// is invalid (QU-2).
    #[error("{0}")]
    Queue(workflow_model::QueueError),
    /// One queue name is declared twice with different limits (QU-10), by
    /// [`RuntimeBuilder::queue`](crate::RuntimeBuilder::queue) or by the workflows registered.
    #[error("queue `{name}` is declared twice with different limits: {first} and {second}")]
    ConflictingQueue {
        /// The queue name.
        name: String,
        /// The declaration seen first.
        first: Box<workflow_model::Queue>,
        /// The declaration that differs.
        second: Box<workflow_model::Queue>,
    },
    /// A task runs in a queue the builder does not declare (QU-10).
    #[error(
        "definition `{workflow}`: node `{node}` runs in queue `{queue}`, which is not declared{}",
        suggestion.as_ref().map_or_else(String::new, |s| format!("; did you mean `{s}`?"))
    )]
    UnknownQueue {
        /// The definition name.
        workflow: String,
        /// The node id.
        node: String,
        /// The queue named.
        queue: String,
        /// The closest declared queue, if one is close.
        suggestion: Option<String>,
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
    /// Two different current versions of one name were registered (ENG-45).
    #[error(
        "definition `{name}` registered with two current versions: `{first}` and `{second}`; register the older one with `register_previous`"
    )]
    ConflictingCurrentVersion {
        /// The definition name.
        name: String,
        /// The first version.
        first: String,
        /// The second version.
        second: String,
    },
    /// A previous version was registered for a name without a current version (ENG-45).
    #[error(
        "definition `{name}` has a previous version registered but no current one; register the current one with `register`"
    )]
    PreviousWithoutCurrent {
        /// The definition name.
        name: String,
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
    /// The instance id given in [`StartOptions::instance_id`](crate::StartOptions::instance_id) is not a valid id (ST-23).
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
    /// larger than the store's limit ([`Storage::with_max_state_bytes`](crate::store::Storage::with_max_state_bytes), ST-24). Nothing was
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

/// Why awaiting completion gave no [`Completion`](crate::Completion) (ENG-48).
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
    /// The instance was cancelled ([`Runtime::await_data`](crate::Runtime::await_data) only; `await_completion`
    /// returns [`Completion::Cancelled`](crate::Completion::Cancelled)).
    #[error("instance `{instance}` was cancelled{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// The id.
        instance: String,
        /// The reason given.
        reason: Option<String>,
    },
    /// The output does not decode as the workflow's data type ([`Runtime::await_data`](crate::Runtime::await_data)).
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

/// Why [`Runtime::suspend`](crate::Runtime::suspend) or [`Runtime::resume`](crate::Runtime::resume) failed; nothing changed (ENG-50).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Already `Finished` or `Cancelled`.
    #[error("instance `{instance}` is already {status}")]
    AlreadyTerminal {
        /// The id.
        instance: String,
        /// Its final status.
        status: WorkflowStatus,
    },
    /// Only a paused instance (`Suspended/Paused`) is resumed.
    #[error("instance `{instance}` is {status}{}, not paused: there is nothing to resume", sub_status.map(|s| format!("/{s}")).unwrap_or_default())]
    NotResumable {
        /// The id.
        instance: String,
        /// Its status.
        status: WorkflowStatus,
        /// Its sub-status.
        sub_status: Option<SubStatus>,
    },
    /// A faulted instance is not suspended: retry it or cancel it.
    #[error("instance `{instance}` is Faulted: retry it or cancel it instead")]
    NotSuspendable {
        /// The id.
        instance: String,
    },
    /// The store failed, or the change could not be committed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why [`Runtime::retry`](crate::Runtime::retry) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Only a `Faulted` instance is retried.
    #[error("instance `{instance}` is {status}, not Faulted")]
    NotFaulted {
        /// The id.
        instance: String,
        /// Its status.
        status: WorkflowStatus,
    },
    /// A compensation failed (FLT-13): resuming the compensation list is not implemented
    /// yet. Cancel the instance. (A compensated failure is retried: its outermost
    /// compensated scope restarts, FLT-8.)
    #[error("instance `{instance}`: a compensation failed; retrying it is not supported yet")]
    CompensatedFailure {
        /// The id.
        instance: String,
    },
    /// The run failed (a conflict with another operator, a store error).
    #[error(transparent)]
    Run(#[from] RunError),
}

impl From<CancelError> for RetryError {
    fn from(error: CancelError) -> Self {
        match error {
            CancelError::InstanceNotFound { instance } => Self::InstanceNotFound { instance },
            CancelError::Run(error) => Self::Run(error),
            CancelError::AlreadyTerminal { status } => Self::NotFaulted {
                instance: String::new(),
                status,
            },
        }
    }
}

/// Why the background work could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// Called outside a tokio runtime: timers, the bookmark queue and recovery need one.
    #[error(
        "no tokio runtime: the timer driver, the queue worker and the recovery sweep run on tokio; call this inside a tokio runtime"
    )]
    NoTokioRuntime,
}
