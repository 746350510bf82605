//! The engine: one run of one instance over its graph (ENG-9).
//!
//! - [`executor`]: the run loop, contexts and scheduling, completion, cancellation, the
//!   journal and the lifecycle events it emits, and the activity and workflow middleware
//!   chains (ENG-34, ENG-38);
//! - [`events`]: those lifecycle events and the stream that delivers them (ENG-40);
//! - [`task`] and [`attempt`]: what a task sees, and how one attempt runs (timeouts,
//!   cancellation); [`guard`]: the panic guard around user code (ENG-17);
//! - [`observer`]: what an observer of task attempts is told (the runtime's metrics);
//! - [`faults`]: retry policies (FLT-2 to FLT-4); [`saga`]: compensation (FLT-10 to FLT-13);
//! - [`graph`]: the indexed definition; [`state`]: the persisted instance;
//!   [`names`]: the callback, reserved bookmark and property names it persists;
//!   [`registry`]: the user code registered by name; [`data`]: properties, variables and
//!   the value functions activities call;
//! - [`activities`]: the built-in activities, one family per file, written against the narrow
//!   [`activities::scope::Scope`] the executor implements, never against the executor;
//! - [`error`]: the error that aborts a run.

pub(crate) mod activities;
pub(crate) mod attempt;
pub(crate) mod data;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod executor;
pub(crate) mod faults;
pub(crate) mod graph;
pub(crate) mod guard;
pub(crate) mod names;
pub(crate) mod observer;
pub(crate) mod registry;
pub(crate) mod saga;
pub(crate) mod slots;
pub mod state;
pub(crate) mod task;
