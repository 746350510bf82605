//! The one error type of every store operation (ST-4).

use std::fmt;

use crate::base::Micros;
use crate::status::WorkflowStatus as InstanceStatus;

/// The result of every store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything a store operation can fail with (ST-4). Each variant names what it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The commit named a version the instance no longer has (ST-13). Nothing was written.
    #[error("instance {instance}: version conflict (expected {expected}, found {actual})")]
    Conflict {
        /// The instance.
        instance: String,
        /// The version the caller read.
        expected: u64,
        /// The version stored now.
        actual: u64,
    },
    /// The commit carried a receipt the instance already has (ST-16, RT-19): the stimulus was
    /// applied by another run. Nothing was written. Treated like a [`StoreError::Conflict`] by
    /// [`StoreError::is_conflict`].
    #[error("instance {instance}: stimulus {stimulus_id} already applied (receipt exists)")]
    ReceiptExists {
        /// The instance.
        instance: String,
        /// The stimulus whose receipt exists.
        stimulus_id: String,
    },
    /// The lease token presented is not the current one (ST-14). Nothing was written.
    #[error("{resource}: lease token {token} is fenced (current token {current})")]
    Fenced {
        /// `instance:<id>` or `lease:<name>`.
        resource: String,
        /// The token presented.
        token: u64,
        /// The current token (0 when none was ever issued).
        current: u64,
    },
    /// The row does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// The kind of row (`instance`, `queue item`, ...).
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// A row with this id exists already (C-2). Nothing was written.
    #[error("{what} {id} already exists")]
    AlreadyExists {
        /// The kind of row.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// A non-final instance already occupies the activation scope (ST-17, RT-15). Nothing
    /// was written.
    #[error("activation scope {scope} is taken by instance {existing}")]
    ActivationConflict {
        /// The scope.
        scope: String,
        /// The non-final instance holding it.
        existing: String,
    },
    /// A live lease is held by someone else (ST-14). Transient.
    #[error("{resource}: lease held by {holder} until {until}")]
    LeaseHeld {
        /// `instance:<id>` or `lease:<name>`.
        resource: String,
        /// The current holder.
        holder: String,
        /// When the lease expires (µs since the epoch).
        until: Micros,
    },
    /// A stored row could not be decoded (ST-22). Only that row is affected.
    #[error("{what} {id}: cannot decode {path}: {message}")]
    Decode {
        /// The kind of row.
        what: &'static str,
        /// Its id.
        id: String,
        /// The column or JSON path that failed.
        path: String,
        /// The decoder's message.
        message: String,
    },
    /// A state document written by a newer library (ST-19); the row is left untouched.
    #[error("{what} {id}: format {found} is newer than the supported {supported}")]
    FormatTooNew {
        /// The kind of row.
        what: &'static str,
        /// Its id.
        id: String,
        /// The format found.
        found: u64,
        /// The newest format this library reads.
        supported: u64,
    },
    /// The database schema is newer than this library (ST-28); the store does not open.
    #[error("schema version {found} is newer than the supported {supported}")]
    SchemaTooNew {
        /// The schema version found.
        found: u32,
        /// The newest version this library knows.
        supported: u32,
    },
    /// Migrations are pending and the store was opened with `CheckOnly` (ST-28).
    #[error("schema version {found} is older than the required {required}")]
    SchemaOutdated {
        /// The schema version found.
        found: u32,
        /// The version this library requires.
        required: u32,
    },
    /// An applied migration differs from the one embedded in this library (ST-28).
    #[error("migration {version}: checksum differs from the embedded migration")]
    MigrationChecksumMismatch {
        /// The migration's version.
        version: u32,
    },
    /// A value exceeds its limit (ST-24). Nothing was written.
    #[error("{what} is too large: {size} bytes, limit {limit}")]
    TooLarge {
        /// What was too large (`state`).
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// Another store holds the SQLite file for writing (ST-26, C-33).
    #[error("the store is in use by {holder} ({})", in_use_until(*until))]
    InUse {
        /// Who holds it (`pid <n>` or the configured owner name).
        holder: String,
        /// Until when (µs since the epoch); `i64::MAX` means until that store is closed or
        /// its process exits.
        until: Micros,
    },
    /// The operation needs a final instance (ST-32). Nothing was removed.
    #[error("instance {instance} is {status}, not final")]
    NotTerminal {
        /// The instance.
        instance: String,
        /// Its status.
        status: InstanceStatus,
    },
    /// A caller-supplied value is invalid (ST-23).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid (`instance_id`, `state`, ...).
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The backend failed (I/O, connection, closed store). Transient; nothing partial was
    /// written (ST-16).
    #[error("store unavailable: {message}")]
    Unavailable {
        /// The underlying error's message.
        message: String,
    },
}

/// How long an `InUse` lasts, as an operator reads it.
fn in_use_until(until: Micros) -> String {
    if until == Micros::MAX {
        "until that store is closed or its process exits".to_owned()
    } else {
        format!("until {until} µs since the epoch")
    }
}

impl StoreError {
    /// Whether retrying the same operation later may succeed (ST-4): only
    /// [`StoreError::Unavailable`] and [`StoreError::LeaseHeld`].
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::LeaseHeld { .. })
    }

    /// Whether another run has moved the instance on ([`StoreError::Conflict`] or
    /// [`StoreError::ReceiptExists`]): the caller discards its state (ENG-29).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. } | Self::ReceiptExists { .. })
    }

    pub(crate) fn unavailable(message: impl fmt::Display) -> Self {
        Self::Unavailable {
            message: message.to_string(),
        }
    }
}
