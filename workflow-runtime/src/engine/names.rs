//! The names the engine persists: callback names (ENG-12), reserved bookmark names and the
//! property and tag names activities share.

/// The bookmark names the engine reserves (`wf.*`): what an instance waits on besides user
/// events. A user event may not take a `wf.` name (RT-4); the timer-backed ones own a timer row
/// whose kind is [`Reserved::timer_kind`] (TM-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reserved {
    /// A task's next attempt (`wf.retry`, FLT-3).
    Retry,
    /// A Delay (`wf.delay`, ACT-20).
    Delay,
    /// A repeating Timer's next tick (`wf.timer`, ACT-21).
    Timer,
    /// A StartAt not as trigger (`wf.start_at`, ACT-22).
    StartAt,
    /// A Cron not as trigger (`wf.cron`, ACT-23).
    Cron,
    /// The deadline of an Event or SubWorkflow wait (`wf.deadline`, TM-14).
    Deadline,
    /// A SubWorkflow waiting for its child (`wf.sub_workflow`, ACT-24).
    SubWorkflow,
    /// A task's attempt waiting for a flow-control slot (`wf.slot`, QU-11).
    Slot,
}

impl Reserved {
    /// Every reserved name.
    pub(crate) const ALL: [Reserved; 8] = [
        Reserved::Retry,
        Reserved::Delay,
        Reserved::Timer,
        Reserved::StartAt,
        Reserved::Cron,
        Reserved::Deadline,
        Reserved::SubWorkflow,
        Reserved::Slot,
    ];

    /// The bookmark name (`"wf.retry"`, ...).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Reserved::Retry => "wf.retry",
            Reserved::Delay => "wf.delay",
            Reserved::Timer => "wf.timer",
            Reserved::StartAt => "wf.start_at",
            Reserved::Cron => "wf.cron",
            Reserved::Deadline => "wf.deadline",
            Reserved::SubWorkflow => crate::store::CHILD_WAIT,
            Reserved::Slot => "wf.slot",
        }
    }

    /// The reserved name `name` is, if any.
    pub(crate) fn from_name(name: &str) -> Option<Reserved> {
        Reserved::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The kind of the timer row a bookmark of this name owns (TM-3); `None` for a wait
    /// without a timer (a SubWorkflow's).
    pub(crate) const fn timer_kind(self) -> Option<&'static str> {
        match self {
            Reserved::Retry => Some("retry"),
            Reserved::Delay => Some("delay"),
            Reserved::Timer => Some("timer"),
            Reserved::StartAt => Some("start_at"),
            Reserved::Cron => Some("cron"),
            Reserved::Deadline => Some("deadline"),
            Reserved::SubWorkflow => None,
            Reserved::Slot => Some(SLOT_TIMER),
        }
    }
}

pub(crate) const ON_STEP: &str = "step_completed";
pub(crate) const ON_ENTRY: &str = "on_entry";
pub(crate) const ON_TRIGGER: &str = "on_trigger";
pub(crate) const ON_EXIT: &str = "on_exit";
pub(crate) const ON_ACTION: &str = "on_action";
pub(crate) const ON_CONTINUE: &str = "on_continue";
/// The callback that arms a migrated machine's current state (ENG-54).
pub(crate) const ON_MIGRATED: &str = "on_migrated";
/// The callback of a wait's deadline bookmark (TM-14).
pub(crate) const ON_DEADLINE: &str = "deadline_reached";
/// The callback of a SubWorkflow's bookmark (ENG-12).
pub(crate) const ON_CHILD_DONE: &str = "child_done";
/// The callback of a branch of If, Switch and Parallel (ENG-12).
pub(crate) const ON_BRANCH: &str = "branch_completed";
/// The callback of a loop body of While, ForEach and ParallelForEach (ENG-12).
pub(crate) const ON_BODY: &str = "body_completed";
/// The callback of a `wf.timer` bookmark: a tick (ACT-21).
pub(crate) const ON_TICK: &str = "tick";
pub(crate) const VALUE: &str = "value";
pub(crate) const PENDING: &str = "pending";
/// The saga scope's callback for its body.
pub(crate) const ON_SAGA_BODY: &str = "saga_body_completed";

/// The property holding a machine's current state (SM-1).
pub const CURRENT_STATE: &str = "current_state";
/// The property holding when the transition into a machine's current state was caused (the
/// run's [`caused_at`](crate::engine::activities::scope::Scope::caused_at)); absent in the
/// initial state, or when that run had no such instant: `since_entered` waits then look
/// back to the instance's origin (RT-30).
pub(crate) const ENTERED_AT: &str = "entered_at";
/// Tag of a state's entry (SM-2).
pub const TAG_ENTERING: &str = "entering";
/// Tag of the automatic-cycle continuation (SM-6).
pub const TAG_CONTINUING: &str = "continuing";
/// Tag of the continuation that arms a migrated machine's current state (ENG-54), or places
/// a migrated flowchart or sequence at its node (ENG-55).
pub(crate) const TAG_MIGRATED: &str = "migrated";
/// The property of a migrated flowchart's or sequence's root holding the node it is placed
/// at, until the continuation places it (ENG-55): `{node, started_at, input}`.
pub(crate) const MIGRATED_TO: &str = "migrated_to";
/// The callback a flowchart's nodes report to (ENG-12).
pub(crate) const ON_NODE: &str = "node_settled";
/// The callback of a `wf.retry` bookmark: run the task again.
pub(crate) const ON_RETRY: &str = "retry_due";
/// The callback of a `wf.slot` bookmark: ask for the slot again, then run the attempt.
pub(crate) const ON_SLOT: &str = "slot_due";
/// The timer kind of a `wf.slot` bookmark (QU-11).
pub(crate) const SLOT_TIMER: &str = crate::store::slots::SLOT_TIMER;
