//! The error that aborts a run (ENG-38), below the executor that raises it and the
//! activities that report it through their scope.

use crate::engine::state::{ContextId, WorkflowStatus};

/// An engine failure that aborts a run: nothing of the run is committed (ENG-38).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The persisted state breaks an invariant of ENG-3.
    #[error("state of instance `{instance}` is corrupt: {reason}")]
    StateCorrupt {
        /// The instance.
        instance: String,
        /// Which invariant.
        reason: String,
    },
    /// The stored data no longer decodes into the workflow's data type (ENG-43).
    #[error("data of instance `{instance}` does not decode: {message}")]
    DataDecode {
        /// The instance.
        instance: String,
        /// The decoder's message.
        message: String,
    },
    /// A persisted callback name is not in its kind's table (ENG-12).
    #[error("unknown callback `{callback}` for node `{node}` of kind `{kind}`")]
    UnknownCallback {
        /// The owner's node.
        node: String,
        /// The owner's kind.
        kind: &'static str,
        /// The callback name.
        callback: String,
    },
    /// None of the targeted bookmarks exists any more (ENG-25).
    #[error("no targeted bookmark exists in instance `{instance}`")]
    BookmarkNotFound {
        /// The instance.
        instance: String,
    },
    /// A bookmark's owning context is missing (ENG-25).
    #[error("bookmark `{bookmark}` belongs to missing context {context}")]
    BookmarkOrphaned {
        /// The bookmark.
        bookmark: String,
        /// The missing context.
        context: ContextId,
    },
    /// The run was abandoned because the instance is being cancelled while a task ran
    /// (FLT-15, FLT-16): nothing of it was committed; the cancel follows.
    #[error("the run of instance `{instance}` was interrupted by its cancellation")]
    Interrupted {
        /// The instance.
        instance: String,
    },
    /// The instance is final or faulted: nothing runs (ENG-2). Its stimuli are not delivered.
    #[error("instance `{instance}` is {status:?}: nothing runs")]
    NotRunnable {
        /// The instance.
        instance: String,
        /// Its status.
        status: WorkflowStatus,
    },
    /// The instance is paused by an operator (`Suspended/Paused`, ENG-50): nothing runs until
    /// it is resumed. A stimulus for it stays queued, held, and is delivered after the resume.
    #[error("instance `{instance}` is paused: nothing runs until it is resumed")]
    Paused {
        /// The instance.
        instance: String,
    },
    /// The targeted context does not exist (ENG-25).
    #[error("context {context} not found")]
    ContextNotFound {
        /// The context.
        context: ContextId,
    },
    /// A context names a node the pinned graph does not have (ENG-3).
    #[error("node `{node}` is not in the definition")]
    NodeNotFound {
        /// The node id.
        node: String,
    },
    /// The instance is pinned to a definition version this runtime does not hold (ENG-46):
    /// nothing was modified and no other version was substituted.
    #[error(
        "instance `{instance}` runs `{name}` version `{version}`, which is not registered (registered: {})",
        registered.as_deref().unwrap_or("none")
    )]
    VersionNotRegistered {
        /// The instance.
        instance: String,
        /// The definition name.
        name: String,
        /// The fingerprint the instance is pinned to.
        version: String,
        /// The fingerprint registered under `name`, if any.
        registered: Option<String>,
    },
    /// The store refused or failed the run's load, lease or commit (ENG-29): the in-memory
    /// state of the run was discarded and the instance continues from its last commit.
    /// [`RunError::is_conflict`] tells another run moved the instance on.
    #[error("instance `{instance}`: {error}")]
    Store {
        /// The instance.
        instance: String,
        /// The store's error (`Conflict`, `Fenced`, `LeaseHeld`, `Unavailable`, ...).
        error: crate::store::StoreError,
    },
    /// The payload resuming a bookmark does not decode into the type the waiting activity
    /// reads (its outcome mapping, a condition over the payload, or a task of the run reading
    /// it with `ctx.payload()` or `ctx.input()` before the run committed) (RT-22): the
    /// run was discarded, the bookmark and the instance are unchanged; routing dead-letters
    /// the stimulus as `Rejected`.
    #[error(
        "instance `{instance}`: the payload for bookmark `{bookmark}` of node `{node}` does not decode into `{payload_type}`: {message}"
    )]
    PayloadDecode {
        /// The instance.
        instance: String,
        /// The bookmark the stimulus resumed.
        bookmark: String,
        /// The waiting node.
        node: String,
        /// The type the payload should decode into.
        payload_type: String,
        /// The decoder's message.
        message: String,
    },
    /// The run's state document exceeded the store's size limit (ST-24). Nothing of the run
    /// was committed past its last commit; the instance was faulted from that commit with an
    /// incident of kind `state_too_large`.
    #[error(
        "state of instance `{instance}` is too large: {size} bytes, limit {limit}; the instance is faulted (incident `{incident}`)"
    )]
    StateTooLarge {
        /// The instance.
        instance: String,
        /// The size of the refused document, in bytes.
        size: usize,
        /// The store's limit, in bytes.
        limit: usize,
        /// The incident recorded.
        incident: String,
        /// The stimulus the run was delivering, when it was not consumed (no earlier commit
        /// of the run wrote its receipt): the caller dead-letters it.
        stimulus_id: Option<String>,
    },
}

impl RunError {
    /// Whether another run moved the instance on: a commit answered `Conflict`,
    /// `ReceiptExists` or `Fenced` (ENG-29).
    pub fn is_conflict(&self) -> bool {
        matches!(self, RunError::Store { error, .. }
            if error.is_conflict() || matches!(error, crate::store::StoreError::Fenced { .. }))
    }
}
