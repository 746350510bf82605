//! The scope an activity runs in: the one surface of the engine the built-in activities talk
//! to, instead of the executor. The executor implements it; through it an activity sees the
//! graph, the instance's state and the run's time, schedules and completes contexts (ENG-11 to
//! ENG-16), creates bookmarks (ENG-19, ENG-20), journals, asks for work between instances
//! (ACT-24), and runs the user code registered for the definition against the instance's data
//! (ACT-6, ACT-10, ACT-16, ACT-19), without seeing the data's type, the middleware, events,
//! commits inside the run or task attempts.

use serde_json::Value;
use workflow_model::DONE;

use crate::engine::error::RunError;
use crate::engine::graph::{Graph, NodeIndex};
use crate::engine::registry::OutcomeFn;
use crate::engine::state::{
    ActivityStatus, Bookmark, ContextId, Detail, FaultKind, FaultRecord, JournalKind, ParentLink,
    WorkflowState,
};
use crate::engine::task::TaskError;

/// Why a step failed: an activity failing for good (recorded, ENG-17) or an engine problem
/// that aborts the run (nothing committed).
#[derive(Debug)]
pub(crate) enum StepError {
    Fault {
        context: ContextId,
        record: FaultRecord,
    },
    Abort(RunError),
}

impl From<RunError> for StepError {
    fn from(value: RunError) -> Self {
        StepError::Abort(value)
    }
}

pub(crate) fn engine_fault(context: ContextId, message: impl Into<String>) -> StepError {
    StepError::Fault {
        context,
        record: FaultRecord {
            kind: FaultKind::Engine,
            message: message.into(),
            attempt: 1,
        },
    }
}

/// Work between instances that a run asks of the runtime, performed after its commit
/// (ACT-24): in memory, "in the same commit" means queued by the commit and carried out
/// before the runtime call that caused it returns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Link {
    /// Start a child instance of `workflow` with `input`.
    Start {
        workflow: String,
        instance_id: String,
        input: Value,
        parent: ParentLink,
    },
    /// Cancel a child instance: its waiting SubWorkflow was cancelled.
    Cancel { instance_id: String },
    /// Resume a parent's `wf.sub_workflow` bookmark with a child's final status and output.
    Resume {
        instance_id: String,
        bookmark_id: String,
        payload: Value,
    },
}

/// What an owner's callback learns about its child (ENG-15).
#[derive(Debug, Clone)]
pub(crate) struct ChildInfo {
    pub(crate) id: ContextId,
    pub(crate) node_id: String,
    pub(crate) status: ActivityStatus,
    pub(crate) result: Option<Value>,
    pub(crate) tag: Option<String>,
    pub(crate) payload: Option<Value>,
}

/// How a registered assign fn run by [`Scope::call_assign`] failed; the data stays as it was
/// before the call (FLT-4).
#[derive(Debug)]
pub(crate) enum UserFailure {
    /// It returned an error.
    Failed(TaskError),
    /// It panicked.
    Panicked,
}

/// A state machine's transition whose condition declined the trigger that completed it
/// (SM-4): the machine stayed in `state` and re-armed the trigger. A run lists these in its
/// outcome, so a send can report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeclinedTransition {
    /// The state the machine stayed in.
    pub(crate) state: String,
    /// The transition's name as written (its key without the index).
    pub(crate) transition: String,
    /// The registry name of its condition.
    pub(crate) condition: Option<String>,
}

/// The engine as an activity sees it (see the module docs). `'g` is the lifetime of the
/// graph the run executes, so what an activity reads of it outlives each call.
pub(crate) trait Scope<'g> {
    /// The graph of the definition being run.
    fn graph(&self) -> &'g Graph;
    /// The instance's state.
    fn state(&self) -> &WorkflowState;
    /// The instance's state, to change what only the activity owns (its properties, its
    /// queue items, its variables).
    fn state_mut(&mut self) -> &mut WorkflowState;
    /// The run's time, in microseconds since the epoch (read once per run).
    fn now(&self) -> crate::base::Micros;
    /// What caused the run: the send time of the stimulus it delivers, or the due time of
    /// the timer it fires; `None` for a start, a recovery or a child's result (RT-30).
    fn caused_at(&self) -> Option<crate::base::Micros>;
    /// Lists, in the run's outcome, a transition whose condition declined its trigger (SM-4).
    fn declined(&mut self, declined: DeclinedTransition);

    /// ENG-11: schedules `node`, a direct child of the owner's node, with a completion tag and
    /// a callback name; returns the child's context id.
    fn schedule_child(
        &mut self,
        owner: ContextId,
        node: NodeIndex,
        tag: Option<String>,
        callback: Option<&str>,
        payload: Option<Value>,
    ) -> Result<ContextId, StepError>;
    /// Appends a continuation work item for `owner` itself (SM-6).
    fn schedule_continuation(
        &mut self,
        owner: ContextId,
        callback: &str,
        tag: &str,
        payload: Option<Value>,
    );
    /// ENG-14: completes a `Running` context (a no-op otherwise) and signals its owner.
    fn complete(
        &mut self,
        id: ContextId,
        result: Option<Value>,
        outcomes: Vec<String>,
    ) -> Result<(), StepError>;
    /// ENG-16: cancels a non-final context and its descendants, then signals its owner.
    fn cancel(&mut self, id: ContextId) -> Result<(), StepError>;
    /// Cancels `child` without calling its owner back (SM-5.1: callbacks dropped).
    fn cancel_silently(&mut self, child: ContextId) -> Result<(), StepError>;
    /// ACT-24: cancels the child instances of the `wf.sub_workflow` bookmarks `which` picks,
    /// once this run commits.
    fn cancel_child_instances(&mut self, which: &dyn Fn(&Bookmark) -> bool);
    /// ENG-19, ENG-20: creates a bookmark owned by a `Running` context; an identical one
    /// (same hash and callback) is returned instead of doubled.
    fn create_bookmark(
        &mut self,
        id: ContextId,
        name: &str,
        hash: String,
        payload: Value,
        callback: Option<&str>,
    ) -> Result<String, StepError>;
    /// Appends a journal entry (kept if the journal level keeps its kind).
    fn record(&mut self, kind: JournalKind, context: Option<ContextId>, detail: Value);
    /// [`Scope::record`] with a detail already written as its stored text.
    fn record_detail(&mut self, kind: JournalKind, context: Option<ContextId>, detail: Detail);
    /// Whether the journal keeps entries of this kind (a detail not kept is not built).
    fn journal_keeps(&self, kind: JournalKind) -> bool;
    /// Asks for work between instances once this run commits (ACT-24).
    fn link(&mut self, link: Link);

    /// RT-22: a stimulus payload that did not decode while a bookmark is being resumed
    /// rejects the run; `None` otherwise (the error stays a fault).
    fn payload_rejection(&self, error: &TaskError) -> Option<StepError>;
    /// Evaluates the registered condition `name` for the activity `owner` (ACT-6): an error
    /// or a panic faults `owner`; no name is `true`.
    fn condition(
        &mut self,
        owner: ContextId,
        name: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<bool, StepError>;
    /// Runs the registered value fn `name` for `owner` (ACT-10); an error or a panic faults
    /// `owner`.
    fn value_fn(&mut self, owner: ContextId, name: &str) -> Result<Value, StepError>;
    /// Runs the registered items fn `name` for `owner` (ACT-16).
    fn items_fn(&mut self, owner: ContextId, name: &str) -> Result<Vec<Value>, StepError>;
    /// Runs the registered assign fn `name` on the data with `value` (ACT-19, ACT-24): the
    /// data changes only when it succeeds. `Err` when no such fn is registered, or the data
    /// does not decode or encode; `Ok(Err(_))` when the fn itself failed.
    fn call_assign(
        &mut self,
        owner: ContextId,
        name: &str,
        value: &Value,
    ) -> Result<Result<(), UserFailure>, StepError>;
    /// Replaces the data with `json` if it decodes into the data's type; the decoder's
    /// message otherwise, and nothing changes.
    fn replace_data(&mut self, json: Value) -> Result<(), String>;
    /// The outcome mapping registered for events of payload type `payload_type` (ACT-19).
    fn outcome_fn(&self, payload_type: &str) -> Option<&'g OutcomeFn>;

    /// The id of `node` in the graph (`""` for an index out of it).
    fn node_id(&self, node: NodeIndex) -> &'g str {
        self.graph().node(node).map_or("", |n| n.id.as_str())
    }

    /// The property `key` of context `id` (ENG-6).
    fn prop(&self, id: ContextId, key: &str) -> Option<&Value> {
        self.state().context(id).and_then(|c| c.properties.get(key))
    }

    /// The property `key` of context `id` as a number, 0 when absent.
    fn prop_u64(&self, id: ContextId, key: &str) -> u64 {
        self.prop(id, key).and_then(Value::as_u64).unwrap_or(0)
    }

    /// The instant property `key` of context `id` (µs since the epoch), 0 when absent.
    fn prop_instant(&self, id: ContextId, key: &str) -> crate::base::Micros {
        self.prop(id, key).and_then(Value::as_i64).unwrap_or(0)
    }

    /// Sets the property `key` of context `id`.
    fn set_prop(&mut self, id: ContextId, key: &str, value: Value) {
        if let Some(c) = self.state_mut().context_mut(id) {
            c.properties.insert(key.to_owned(), value);
        }
    }
}

/// The outcomes of an activity that completes with `done` (FC-2).
pub(crate) fn done() -> Vec<String> {
    vec![DONE.to_owned()]
}

/// A failure for good of `context` with `message` (FLT-4).
pub(crate) fn permanent(context: ContextId, message: String) -> StepError {
    StepError::Fault {
        context,
        record: FaultRecord {
            kind: FaultKind::Error,
            message,
            attempt: 1,
        },
    }
}

/// Runs side-effect-free user code for `owner`: an error or a panic faults `owner` (ACT-6).
pub(crate) fn user_result<T>(
    owner: ContextId,
    what: &str,
    name: &str,
    f: impl FnOnce() -> Result<T, TaskError>,
) -> Result<T, StepError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(StepError::Fault {
            context: owner,
            record: FaultRecord {
                kind: FaultKind::Error,
                message: format!("{what} `{name}` failed: {error}"),
                attempt: 1,
            },
        }),
        Err(_) => Err(StepError::Fault {
            context: owner,
            record: FaultRecord {
                kind: FaultKind::Panicked,
                message: format!("{what} `{name}` panicked"),
                attempt: 1,
            },
        }),
    }
}
