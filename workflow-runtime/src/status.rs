//! The one status enum of an instance (ENG-2), shared by the engine and the store: the
//! state document stores it by its serde name (`"Running"`, ...), the store's rows by
//! [`WorkflowStatus::as_str`] (`"running"`, ...). The store's `InstanceStatus` and
//! `InstanceSubStatus` are these types under their store names.

use serde::{Deserialize, Serialize};

/// The instance status (ENG-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WorkflowStatus {
    /// Created or running.
    Running,
    /// Waiting on a stimulus, paused, or stalled.
    Suspended,
    /// An activity failed for good (not final: FLT-7).
    Faulted,
    /// The root activity completed. Final.
    Finished,
    /// Cancelled through the API. Final.
    Cancelled,
}

impl WorkflowStatus {
    /// Whether nothing can change the instance any more (ENG-2, ST-32).
    pub fn is_final(self) -> bool {
        matches!(self, WorkflowStatus::Finished | WorkflowStatus::Cancelled)
    }

    /// The stored name (`"running"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Faulted => "faulted",
            Self::Finished => "finished",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "running" => Self::Running,
            "suspended" => Self::Suspended,
            "faulted" => Self::Faulted,
            "finished" => Self::Finished,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

impl SubStatus {
    /// The stored name (`"pending"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Executing => "executing",
            Self::Waiting => "waiting",
            Self::Paused => "paused",
            Self::Stalled => "stalled",
            Self::WaitingForSlot => "waiting_for_slot",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => Self::Pending,
            "executing" => Self::Executing,
            "waiting" => Self::Waiting,
            "paused" => Self::Paused,
            "stalled" => Self::Stalled,
            "waiting_for_slot" => Self::WaitingForSlot,
            _ => return None,
        })
    }
}

impl std::fmt::Display for WorkflowStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::fmt::Display for SubStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The sub-status of a `Running` or `Suspended` instance (ENG-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SubStatus {
    /// Created, never executed.
    Pending,
    /// A run is in progress, or a run stopped at its step budget with work queued (ENG-10).
    Executing,
    /// Waiting on at least one bookmark.
    Waiting,
    /// Paused by an operator.
    Paused,
    /// Unfinished activities, no bookmark, no queued work: no stimulus can wake it.
    Stalled,
    /// Waiting for a slot of a flow-control queue (QU-11, QU-14): a task attempt, or the
    /// whole run of a definition with a queue, is in the queue's line. The queue is named in
    /// the listing's `waiting_for` (`wf.slot:payments`); `why` says where in line. It runs
    /// when a slot is free, resumed by the release that frees it or, at the latest, by its
    /// timer.
    WaitingForSlot,
}

/// What [`Runtime::start`](crate::Runtime::start) returns once the first run committed, and
/// what a send reports for each instance it started, resumed or found finished: an instance
/// id and the status it was left in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The new instance's id.
    pub instance_id: String,
    /// Its status after the first run.
    pub status: WorkflowStatus,
    /// Its sub-status.
    pub sub_status: Option<SubStatus>,
}
