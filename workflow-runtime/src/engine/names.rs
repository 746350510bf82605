//! The names the engine persists: callback names (ENG-12), reserved bookmark names and the
//! property and tag names activities share.

pub(crate) const ON_STEP: &str = "step_completed";
pub(crate) const ON_ENTRY: &str = "on_entry";
pub(crate) const ON_TRIGGER: &str = "on_trigger";
pub(crate) const ON_EXIT: &str = "on_exit";
pub(crate) const ON_ACTION: &str = "on_action";
pub(crate) const ON_CONTINUE: &str = "on_continue";
/// The callback of a wait's deadline bookmark (TM-14).
pub(crate) const ON_DEADLINE: &str = "deadline_reached";
/// The deadline bookmark's reserved name (TM-3, TM-14).
pub(crate) const DEADLINE: &str = "wf.deadline";
/// The bookmark name of a waiting SubWorkflow (ACT-3).
pub(crate) const SUB_WORKFLOW: &str = "wf.sub_workflow";
/// The callback of a SubWorkflow's bookmark (ENG-12).
pub(crate) const ON_CHILD_DONE: &str = "child_done";
/// The callback of a branch of If, Switch and Parallel (ENG-12).
pub(crate) const ON_BRANCH: &str = "branch_completed";
/// The callback of a loop body of While, ForEach and ParallelForEach (ENG-12).
pub(crate) const ON_BODY: &str = "body_completed";
/// The callback of a `wf.timer` bookmark: a tick (ACT-21).
pub(crate) const ON_TICK: &str = "tick";
/// A Timer's bookmark name (ACT-21, TM-3).
pub(crate) const TIMER: &str = "wf.timer";
pub(crate) const VALUE: &str = "value";
pub(crate) const PENDING: &str = "pending";
/// The saga scope's callback for its body.
pub(crate) const ON_SAGA_BODY: &str = "saga_body_completed";

/// The property holding a machine's current state (SM-1).
pub const CURRENT_STATE: &str = "current_state";
/// Tag of a state's entry (state-machine.md section 1).
pub const TAG_ENTERING: &str = "entering";
/// Tag of the automatic-cycle continuation (SM-6).
pub const TAG_CONTINUING: &str = "continuing";
/// The callback a flowchart's nodes report to (ENG-12).
pub(crate) const ON_NODE: &str = "node_settled";
/// The callback of a `wf.retry` bookmark: run the task again.
pub(crate) const ON_RETRY: &str = "retry_due";
/// The retry bookmark's reserved name (FLT-3).
pub(crate) const RETRY: &str = "wf.retry";
