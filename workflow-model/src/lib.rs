//! Workflow definitions as data, and the one validator.
//!
//! This crate has no I/O and no async: it is used by the `workflow-macros` crate at compile
//! time, on the definition it lowers from the DSL, and by the runtime for definitions loaded
//! from JSON. One set of rules, one set of messages (FC-24).
//!
//! - [`Definition`]: a workflow's name and its root [`Activity`]: a [`StateMachine`], a
//!   [`Flowchart`], a [`Sequence`], or any other activity kind.
//! - [`validate`]: every rule of the state-machine (SM-C1..SM-C9) and flowchart (FC-V1..FC-V17)
//!   contracts; all violations at once, each a [`Diagnostic`] with its rule id, a rustc-style
//!   message, the [`Location`] it points at, related locations, and a "did you mean".
//! - [`Definition::from_json`]: load and validate; one [`LoadError`] listing every problem
//!   with its JSON Pointer, never a panic.
//! - [`limits`]: the sizes a definition may have (DEF-3), checked before any other rule.
//! - [`Definition::fingerprint`]: the version fingerprint (ENG-44), a SHA-256 of the canonical
//!   graph.
//!
//! # The JSON format
//!
//! A definition is an object with `name`, optional `description`, and `root`, an activity.
//! Every activity is an object with `kind` (one of [`Activity::KINDS`]) and `id` (a letter or
//! `_` followed by letters, digits or `_`), plus the fields of its kind, named as the fields of
//! the Rust structs in snake case. User code (tasks, conditions, key and value fns) is named
//! by the string it is registered under; the data it works on is the workflow's. Durations are
//! integers in milliseconds. Unknown fields are errors.
//!
//! A state machine (SM-1 to SM-8): `initial`, `states` (each with `name` and
//! optional `entry` and `exit` activities) and ordered `transitions` (`from`, `to`, optional
//! `name`, `trigger`, `condition`, `action`):
//!
//! ```json
#![doc = include_str!("../docs/order.json")]
//! ```
//!
//! A flowchart (FC-1 to FC-6): `start`, `nodes` and `connections` from a node's
//! outcome `port` (default `done`) to a `target` node:
//!
//! ```json
#![doc = include_str!("../docs/expense.json")]
//! ```
//!
//! Loading both:
//!
//! ```
//! use workflow_model::{Activity, Definition};
//!
//! let order = Definition::from_json(include_str!("../docs/order.json")).unwrap();
//! let Activity::StateMachine(machine) = &order.root else { unreachable!() };
//! assert_eq!(machine.initial, "New");
//! assert_eq!(machine.transitions.len(), 4);
//!
//! let expense = Definition::from_json(include_str!("../docs/expense.json")).unwrap();
//! assert_eq!(expense.root.kind_name(), "flowchart");
//! // Round trip: what it writes, it reads back as the same definition.
//! assert_eq!(Definition::from_json(&expense.to_json_pretty()).unwrap(), expense);
//! ```
//!
//! Flow control (QU-10): a `task` may name a `queue` (a [`Queue`] the runtime declares) and a
//! `priority` in it, 0 to 9; a task without them is written as before.
//!
//! Timers and faults (FLT-2, FLT-10, TM-14): a `task` may carry `retry` (a [`RetryPolicy`]:
//! `max_attempts`, `initial_delay_ms`, `max_delay_ms`, `multiplier` and `jitter` as plain
//! numbers, `retry_on` error codes; every field optional), `attempt_timeout_ms`,
//! `compensation` (a registered task fn) and `commit` ([`NodeCommit`]); the definition may carry
//! a default `retry` and a `commit_strategy` ([`CommitStrategy`]). A saga scope is an activity
//! of kind `saga` with `on_failure` (`compensate_then_fault` or `compensate_then_continue`, which
//! adds the port `compensated`) and a `body` (a sequence or flowchart); a saga as the root
//! makes the whole workflow one scope. A `cron` expression is parsed by [`cron::Schedule`].
//! Absent settings are not written, so they leave existing fingerprints unchanged:
//!
//! ```
//! use workflow_model::Definition;
//!
//! let json = r#"{"name": "Checkout", "retry": {"max_attempts": 5, "jitter": 0.2},
//!   "root": {"kind": "saga", "id": "root", "on_failure": "compensate_then_fault",
//!     "body": {"kind": "sequence", "id": "body", "steps": [
//!       {"kind": "task", "id": "charge", "function": "charge", "compensation": "refund",
//!        "retry": {"initial_delay_ms": 500, "multiplier": 1.5}, "attempt_timeout_ms": 30000}
//!     ]}}}"#;
//! let checkout = Definition::from_json(json).unwrap();
//! assert_eq!(checkout.root.kind_name(), "saga");
//! let problems = Definition::from_json(&json.replace("\"max_attempts\": 5", "\"max_attempts\": 0"))
//!     .unwrap_err()
//!     .to_string();
//! assert!(problems.contains("retry policy needs at least 1 attempt"), "{problems}");
//! ```

pub mod cron;
mod definition;
mod diagnostics;
pub mod diagram;
mod duration;
pub mod fingerprint;
mod json;
pub mod queue;
mod validate;

pub use definition::{
    Activation, Activity, Break, COMPENSATED, CommitStrategy, Connection, Correlate, Cron, DONE,
    Decimal, Definition, Delay, End, Event, Fault, Finish, Flowchart, ForEach, Fork, If, Join,
    JoinMode, LookBack, Missed, NodeCommit, Parallel, ParallelForEach, ParallelMode, PayloadAssign,
    Ports, RetryPolicy, Saga, SagaOnFailure, Sequence, SetVariable, Start, StartAt, State,
    StateMachine, SubWorkflow, SubWorkflowMode, Switch, SwitchCase, SwitchMode, Task, Timer,
    Transition, While,
};
pub use diagnostics::{
    Diagnostic, Diagnostics, Location, MAX_SUGGESTED_CHARS, Related, Segment, backticked,
    did_you_mean, suggest,
};
pub use json::{LoadError, SHAPE_RULE};
pub use queue::{Priority, Queue, QueueError, Rate};
pub use validate::limits;
pub use validate::{
    FlowchartAnalysis, FlowchartLoop, KNOWN_TIME_ZONES, analyze_flowchart, is_known_time_zone,
    is_valid_id, validate,
};
