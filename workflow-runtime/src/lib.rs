//! Durable, compile-time checked workflows.
//!
//! This crate is the one users depend on: it re-exports the definition model
//! ([`model`]) and, behind the default feature `macros`, the `#[state_machine]` and
//! `workflow!` macros.
//!
//! The engine is made of one module per component:
//! [`instance`] (the persisted [`WorkflowState`]), the executor (run loop, scheduling,
//! completion, cancellation, faults, middleware), the built-in activities (Sequence, Task,
//! Event, Delay, StateMachine), the Flowchart (routing, implicit and explicit
//! joins, skips, loops with deferred exits, fork, end), the structured activities (If, Switch,
//! While, ForEach, ParallelForEach, Parallel, Finish, Fault, Break, Correlate, SetVariable)
//! and SubWorkflow, [`routing`] (stimulus hashes) and [`Runtime`], which keeps instances in a
//! [`Store`]: [`MemoryStore`] by default, [`SqliteStore`] for durability across restarts and
//! crashes ([`Runtime::recover`], at-least-once activities).
//!
//! Time comes from a [`Clock`] (TM-1): [`SystemClock`] by default, a
//! [`ManualClock`] in tests, where [`testing::TestRuntime`] steps through due timers
//! deterministically (TM-2). A Delay (and a state machine's `after(..)` transition) is a
//! durable timer: its `wf.delay` bookmark and timer row are written in one commit (TM-3), and
//! an in-process driver waits precisely for the earliest due time (TM-4). A Delay `until` a
//! value fn's instant (ms since the epoch) and Event and SubWorkflow deadlines (`timeout`,
//! TM-14) are timers too, and so are the repeating Timer (`wf.timer`, ACT-21, TM-11),
//! StartAt (`wf.start_at`, ACT-22) and Cron not as trigger (`wf.cron`, ACT-23; UTC or a
//! fixed offset). As triggers (TM-11 to TM-13) they start instances from schedules in the
//! store ([`Runtime::schedule_triggers`]); a StartAt trigger needs a constant instant, and is
//! refused at build with [`BuildError::UnsupportedActivity`] otherwise; node commit settings
//! and a workflow commit strategy with [`BuildError::UnsupportedSetting`].
//!
//! Saga scopes (FLT-10 to FLT-13) compensate the completed tasks that declare a
//! compensation, newest first, when something inside fails for good, then continue through
//! `compensated` or fault (see the `saga` module's notes for what is simplified).
//!
//! A task's [`TaskContext`] carries a [`CancellationToken`] (`ctx.cancelled()`,
//! `ctx.is_cancelled()`), fired when the instance is cancelled while the task runs
//! ([`Runtime::cancel`] is not refused then, FLT-16) and when the attempt's timeout expires
//! (FLT-17: a retryable failure that counts), and at [`Runtime::shutdown`] (the run is then
//! interrupted: not committed, no attempt counted); a task that ignores it is dropped after
//! [`RuntimeBuilder::cancel_grace`] (ENG-52).
//!
//! Retry policies (FLT-2) on a task or the workflow are honoured: a retryable error with
//! attempts left waits durably on a `wf.retry` bookmark and timer (FLT-3), the failed
//! attempt's data changes dropped (FLT-4); after the last attempt the instance is `Faulted`
//! with an incident ([`Runtime::incidents`]), and [`Runtime::retry`] runs it again (FLT-8). A
//! task without a declared policy has one attempt.
//!
//! User code beyond tasks and conditions is registered by name on the [`Registry`]: items fns
//! for the loops over items ([`Registry::items`]), value fns for SetVariable, Finish outputs,
//! Correlate keys and SubWorkflow inputs ([`Registry::value`]), and assign fns that fold a
//! child workflow's output into the data ([`Registry::assign`]). An event that declares its
//! outcome ports completes with the one its payload chooses: the payload type implements
//! [`ChooseOutcome`] and its mapping is registered under the event's `payload` name
//! ([`Registry::outcome`], ACT-19; `workflow!` does it, and a missing one is refused at build
//! with [`BuildError::EventWithoutOutcome`], ACT-V8).

mod base;
mod cancel;
pub mod clock;
mod engine;
mod events;
pub mod routing;
mod runtime;
mod status;
pub mod store;
pub mod testing;
mod workflow;

/// The persisted instance ([`WorkflowState`] and what it holds).
pub use engine::state as instance;

#[cfg(test)]
mod tests;

/// The definition model and its validator (the `workflow-model` crate).
pub use workflow_model as model;

pub use base::BoxFuture;
pub use cancel::CancellationToken;
pub use clock::{Clock, ClockError, ManualClock, SystemClock};
pub use engine::executor::{
    ActivityInfo, ActivityMiddleware, CommitStrategy, DEFAULT_MAX_STEPS_PER_RUN, Flow, RunError,
    RunInfo, WorkflowMiddleware,
};
pub use engine::names::{CURRENT_STATE, TAG_CONTINUING, TAG_ENTERING};
pub use engine::registry::{ChooseOutcome, Registry};
pub use engine::state::{
    ActivityStatus, Bookmark, ContextId, Incident, JournalEntry, JournalKind, JournalLevel,
    SubStatus, WorkflowState, WorkflowStatus,
};
pub use engine::task::{IntoTaskResult, Outcome, TaskContext, TaskError, TaskResult};
pub use events::{ActivityRef, EventKind, EventStream, LifecycleEvent, RecvError};
pub use routing::RoutingError;
pub use runtime::{
    AwaitError, BuildError, CancelError, Completion, InstanceSnapshot, PurgeError, RecoveryReport,
    Refusal, Rejection, ResumeError, RetryError, Runtime, RuntimeBuilder, SendError, SendReport,
    StartError, StartOptions, Started, StateError, Stimulus, TimerFiring,
};
pub use workflow::{StateMachineWorkflow, Workflow};

/// Declares a state machine on an enum: see the macro's documentation.
#[cfg(feature = "macros")]
pub use workflow_macros::state_machine;

/// Declares a flowchart or sequence workflow: see the macro's documentation.
#[cfg(feature = "macros")]
pub use workflow_macros::workflow;

#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{MemoryStore, Store, StoreError};

/// What a typical program needs, in one import.
///
/// ```
/// use workflow_runtime::prelude::*;
///
/// #[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
/// pub struct Ticket {
///     id: String,
/// }
///
/// #[state_machine(data = Ticket, initial = Open)]
/// pub enum Support {
///     #[on(answer: event("answered").key(id) => Closed)]
///     Open,
///     Closed,
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::builder().register::<Support>().build()?;
/// let started = runtime.start::<Support>(Ticket { id: "t-1".into() }).await?;
/// runtime.send(Stimulus::new("answered").key("t-1")).await?;
/// let state = runtime.current_state::<Support>(&started.instance_id).await?;
/// assert_eq!(state, Some(Support::Closed));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub mod prelude {
    #[cfg(feature = "sqlite")]
    pub use crate::store::SqliteStore;
    pub use crate::store::{MemoryStore, Store};
    pub use crate::{
        Completion, Outcome, Runtime, RuntimeBuilder, SendReport, StartOptions, Started,
        StateMachineWorkflow, Stimulus, TaskContext, TaskError, Workflow, WorkflowStatus,
    };
    #[cfg(feature = "macros")]
    pub use crate::{state_machine, workflow};
}

/// What code generated by the macros refers to. Not a public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use ::serde;
    pub use ::serde_json;
    pub use ::workflow_model as model;

    pub use crate::base::BoxFuture;
    pub use crate::engine::registry::{ChooseOutcome, Registry};
    pub use crate::engine::task::{IntoTaskResult, Outcome, TaskContext, TaskError, TaskResult};
    pub use crate::runtime::Stimulus;
    pub use crate::workflow::{IsPayload, StateMachineWorkflow, Workflow};
}
