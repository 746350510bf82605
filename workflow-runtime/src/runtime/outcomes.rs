//! What the runtime's calls return besides errors: start options, snapshots, completions,
//! control outcomes and recovery reports.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::executor::RunError;
use crate::engine::state::{JournalEntry, SubStatus, WorkflowState, WorkflowStatus};
use crate::status::Started;

/// Options of a start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// A caller-chosen instance id (a ULID otherwise).
    pub instance_id: Option<String>,
    /// A correlation id.
    pub correlation_id: Option<String>,
    /// The W3C trace context the instance's runs continue (ENG-61); without it, the one of
    /// the caller's task ([`TraceParent::current`](crate::trace::TraceParent::current)), if any.
    pub traceparent: Option<crate::trace::TraceParent>,
}

/// A read-only snapshot of an instance (ENG-51).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSnapshot {
    /// The whole persisted state: status, contexts, bookmarks, queue, data...
    pub state: WorkflowState,
    /// The journal, stored apart from the state (ENG-41), oldest first.
    pub journal: Vec<JournalEntry>,
    /// The journal rows that did not decode (ST-22), each named with its error: their
    /// entries are missing from `journal`, the rest is there. Empty for a sound journal.
    pub journal_damage: Vec<String>,
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

    /// The version of its definition the instance is pinned to (ENG-44, ENG-45): the
    /// fingerprint it runs on, which a migration changes (ENG-54).
    pub fn version(&self) -> &str {
        &self.state.definition.version
    }

    /// The current state name of a root state machine.
    pub fn current_state(&self) -> Option<&str> {
        let root = self.state.context(self.state.root?)?;
        root.properties
            .get(crate::engine::names::CURRENT_STATE)?
            .as_str()
    }

    /// The data, decoded as `D`.
    ///
    /// # Errors
    ///
    /// A `serde_json::Error` when the stored data does not decode as `D`.
    pub fn data<D: DeserializeOwned>(&self) -> Result<D, serde_json::Error> {
        serde_json::from_value(self.state.data.clone())
    }

    /// The journal entries, oldest first.
    pub fn journal(&self) -> &[JournalEntry] {
        &self.journal
    }
}

/// How an instance ended, from [`Runtime::await_completion`](crate::Runtime::await_completion).
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The root completed; the output (the final data unless an activity set one).
    Finished(Value),
    /// Cancelled, with the reason given.
    Cancelled(Option<String>),
}

/// What a control call did: applied by this runtime, or recorded for the runtime that owns
/// the instance (ENG-50). Either way it returned once the outcome is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Applied by this call; the instance's status after it.
    Applied(Started),
    /// Recorded as a durable control request: the instance runs in another process (its
    /// lease is held there) or on a definition version this runtime does not run. The
    /// runtime owning it applies it at the instance's next step.
    Requested,
}

impl Control {
    /// The status after the call, when it was applied here.
    pub fn applied(&self) -> Option<&Started> {
        match self {
            Self::Applied(started) => Some(started),
            Self::Requested => None,
        }
    }

    /// Whether the call was only recorded, for the owning runtime to apply.
    pub fn is_requested(&self) -> bool {
        matches!(self, Self::Requested)
    }
}

impl std::fmt::Display for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Applied(started) => match started.sub_status {
                Some(sub) => write!(
                    f,
                    "instance `{}` is now {}/{sub}",
                    started.instance_id, started.status
                ),
                None => write!(
                    f,
                    "instance `{}` is now {}",
                    started.instance_id, started.status
                ),
            },
            Self::Requested => f.write_str(
                "requested: the runtime that owns the instance applies it at its next step",
            ),
        }
    }
}

/// What [`Runtime::recover`](crate::Runtime::recover) did (ENG-25, ENG-26).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Instances run again (interrupted ones and ones never run), with their status after.
    pub recovered: Vec<Started>,
    /// Instances that could not run: `VersionNotRegistered` (left untouched, ENG-46), corrupt
    /// state, store errors.
    pub failed: Vec<RunError>,
    /// Parents resumed with the result of a child that had finished before the crash
    /// (ACT-24).
    pub parents_resumed: Vec<String>,
}
