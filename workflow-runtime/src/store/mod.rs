//! Durable storage: one async [`Store`] trait and its backends (`docs/reference/store.md`).
//!
//! Everything durable goes through [`Store`]: instances guarded by an optimistic version and a
//! lease fencing token (ST-13, ST-14), bookmarks indexed by stimulus hash (ST-6), triggers
//! (ST-7), the stimulus queue and its dead letters (ST-8), timers by due time (ST-9), the
//! journal (ST-10), receipts (ST-12) and leases (ST-11).
//!
//! Two backends implement it: [`MemoryStore`] (always compiled, not durable) and, behind the
//! default feature `sqlite`, [`SqliteStore`] (one file, WAL, one writer thread with group
//! commit, library-owned migrations).
//!
//! # Design notes
//!
//! * **Object safety (ST-1).** Every method returns a [`BoxFuture`] whose lifetime is tied to
//!   `&self` only: arguments are borrowed for the call and copied by the backend before the
//!   future is built. The trait is therefore `dyn`-compatible without helper crates, and an
//!   `Arc<dyn Store>` can be cloned into any task. `async fn` in traits is not used because it
//!   is not object-safe.
//! * **Opaque state (ST-1, ST-19).** The store never interprets the instance state document
//!   beyond its top-level `"format"` integer: the engine passes a [`serde_json::Value`] and the
//!   indexed columns (status, sub-status, definition, correlation id, times) separately.
//!   Backends keep the document *encoded* (JSON text), so a load always exercises decoding
//!   (ST-25) and a corrupted row fails alone with [`StoreError::Decode`] (ST-22).
//! * **Time is passed in (ST-3).** Every time-dependent operation takes `now` as
//!   [`Micros`] (UTC microseconds since the Unix epoch, ST-23); no backend reads a clock.
//!   (The SQLite backend records `applied_at` of its migrations with SQLite's own clock;
//!   that is metadata no rule reads.)
//! * **Wake-ups (ST-18)** are an in-process `tokio::sync::broadcast` ([`Store::subscribe`]),
//!   sent after the operation succeeded; they may be lost and no rule depends on them.
//! * **Errors (ST-4).** One [`StoreError`]. Two details: a duplicate receipt is
//!   [`StoreError::ReceiptExists`] (a conflict for [`StoreError::is_conflict`]), and
//!   `Unavailable` carries a `message` string (a field named `source` would make `thiserror`
//!   treat it as the error source).
//!
//! # Not yet covered
//!
//! Enforcing the per-instance journal cap in the store (ENG-42: the engine compacts through
//! [`Commit::journal_compaction`]); store statistics beyond [`StoreStats`] (dead-tuple
//! counts, table sizes); `PostgresStore` (ST-27).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use crate::base::BoxFuture;

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "test-support")]
pub mod conformance;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};

/// What opening a SQL store does with pending migrations (ST-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrateMode {
    /// Apply pending migrations (the default).
    #[default]
    Apply,
    /// Refuse to open with `SchemaOutdated` when migrations are pending.
    CheckOnly,
}

pub use crate::base::Micros;

/// The state-document format this library writes and the newest it reads (ST-19).
pub const STATE_FORMAT: u64 = 1;

/// The default limit on an encoded state document: 16 MiB (ST-24).
pub const DEFAULT_MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

/// The largest journal detail kept as is; longer ones are replaced by a marker (ST-10).
pub const MAX_JOURNAL_DETAIL_BYTES: usize = 64 * 1024;

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

/// An instance's status (ENG-2): the engine's [`WorkflowStatus`](crate::WorkflowStatus), stored
/// as its lower-case name ([`InstanceStatus::as_str`]).
pub use crate::status::WorkflowStatus as InstanceStatus;

/// An instance's sub-status (ENG-2): the engine's [`SubStatus`](crate::SubStatus), stored as
/// its lower-case name ([`InstanceSubStatus::as_str`]).
pub use crate::status::SubStatus as InstanceSubStatus;

/// A pending operator action on an instance (ST-5, C-29).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// What is requested.
    pub kind: ControlKind,
    /// Why, for the journal and operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The kind of a [`ControlRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlKind {
    /// Cancel the instance.
    Cancel,
    /// Suspend (pause) the instance (ENG-50).
    Suspend,
    /// Resume a paused instance (ENG-50).
    Resume,
    /// Retry a faulted instance (FLT-8).
    Retry,
}

impl ControlKind {
    /// The lower-case name an operator types (`cancel`, `suspend`, `resume`, `retry`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Suspend => "suspend",
            Self::Resume => "resume",
            Self::Retry => "retry",
        }
    }
}

/// A lease granted to its holder (ST-14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: one more than the last token ever issued for the resource.
    pub token: u64,
    /// When the lease expires unless renewed (wall-clock µs).
    pub expires_at: Micros,
}

/// The lease currently recorded on an instance row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// Who holds it.
    pub owner: String,
    /// Its fencing token.
    pub token: u64,
    /// When it expires.
    pub expires_at: Micros,
}

/// The result of a lease renewal: the extended lease and any pending control request (ST-14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The extended lease (same token).
    pub lease: Lease,
    /// A pending control request, if any.
    pub control_request: Option<ControlRequest>,
}

/// An instance to create (ST-5, ST-17), at version 1.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInstance {
    /// Caller-supplied or generated id: 1 to 128 bytes of `[A-Za-z0-9._:-]` (ST-23).
    pub instance_id: String,
    /// The definition's name.
    pub definition_name: String,
    /// The definition's version fingerprint.
    pub definition_version: String,
    /// Initial status (usually `Running`).
    pub status: InstanceStatus,
    /// Initial sub-status (usually `Pending`).
    pub sub_status: Option<InstanceSubStatus>,
    /// Optional correlation id.
    pub correlation_id: Option<String>,
    /// Send time of the stimulus that started it, or of the start call.
    pub origin_at: Micros,
    /// Creation time; also the first `updated_at`.
    pub created_at: Micros,
    /// The opaque state document, a JSON object with a top-level `"format"` (ST-19).
    pub state: Value,
    /// A receipt `(instance_id, stimulus_id)` to write in the same operation (RT-19).
    pub receipt: Option<String>,
    /// A queue item consumed by this creation, deleted in the same operation (ST-17).
    pub consumed_queue_item: Option<String>,
    /// Activation guard (ST-17, RT-15): creation fails with `ActivationConflict` while a
    /// non-final instance has the same scope. The scope is an opaque key chosen by the
    /// runtime (`singleton:<definition>`, `correlation:<id>` to span definitions, ...).
    pub activation_scope: Option<String>,
}

/// An instance as loaded: its columns and its state document, from one snapshot (ST-13).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    /// The instance id.
    pub instance_id: String,
    /// The definition's name.
    pub definition_name: String,
    /// The definition's version fingerprint.
    pub definition_version: String,
    /// Status.
    pub status: InstanceStatus,
    /// Sub-status.
    pub sub_status: Option<InstanceSubStatus>,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Optimistic version: 1 at creation, +1 per commit.
    pub version: u64,
    /// The lease, if one is held (possibly expired).
    pub lease: Option<LeaseState>,
    /// A pending control request.
    pub control_request: Option<ControlRequest>,
    /// Origin time.
    pub origin_at: Micros,
    /// Creation time.
    pub created_at: Micros,
    /// Time of the last commit.
    pub updated_at: Micros,
    /// When it became final.
    pub finished_at: Option<Micros>,
    /// The state document.
    pub state: Value,
}

/// A bookmark to index, as carried by a commit (ENG-19, ST-6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBookmark {
    /// Bookmark id (a ULID).
    pub bookmark_id: String,
    /// Stimulus hash (RT-5).
    pub hash: String,
    /// Stimulus name.
    pub name: String,
    /// Owning node.
    pub node_id: String,
    /// Owning context.
    pub context_id: u64,
    /// Look-back instant (RT-30), if any.
    pub look_back: Option<Micros>,
    /// Creation time.
    pub created_at: Micros,
}

/// An indexed bookmark row (ST-6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookmarkRow {
    /// Bookmark id.
    pub bookmark_id: String,
    /// Its instance.
    pub instance_id: String,
    /// Stimulus hash.
    pub hash: String,
    /// Stimulus name.
    pub name: String,
    /// Owning node.
    pub node_id: String,
    /// Owning context.
    pub context_id: u64,
    /// The instance's correlation id (copied, kept in sync by commits, C-10).
    pub correlation_id: Option<String>,
    /// The instance's definition name.
    pub definition_name: String,
    /// The instance's definition version.
    pub definition_version: String,
    /// Look-back instant.
    pub look_back: Option<Micros>,
    /// Creation time.
    pub created_at: Micros,
}

/// A bookmark lookup by hash (C-8): rows in `(created_at, bookmark_id)` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookmarkQuery {
    /// The stimulus hash.
    pub hash: String,
    /// Only this instance's bookmarks.
    pub instance_id: Option<String>,
    /// Only bookmarks with this correlation id.
    pub correlation_id: Option<String>,
    /// Only this bookmark.
    pub bookmark_id: Option<String>,
    /// Keyset: only rows after this `(created_at, bookmark_id)`.
    pub after: Option<(Micros, String)>,
    /// Page size.
    pub limit: usize,
}

impl BookmarkQuery {
    /// All bookmarks with `hash`, first page of `limit`.
    pub fn by_hash(hash: impl Into<String>, limit: usize) -> Self {
        Self {
            hash: hash.into(),
            instance_id: None,
            correlation_id: None,
            bookmark_id: None,
            after: None,
            limit,
        }
    }
}

/// A timer to insert with a commit (ST-9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTimer {
    /// Timer id (the bookmark id of the delay).
    pub timer_id: String,
    /// Its kind (`"delay"`, `"retry"`, ...).
    pub kind: String,
    /// When it is due.
    pub due_at: Micros,
}

/// A timer row (ST-9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    /// Timer id.
    pub timer_id: String,
    /// Its instance (none for a trigger schedule).
    pub instance_id: Option<String>,
    /// Its kind.
    pub kind: String,
    /// When it is due.
    pub due_at: Micros,
    /// Parked timers are never claimed (TM-10); a fired StartAt schedule stays parked.
    pub parked: bool,
    /// For a trigger schedule: its definition.
    pub definition_name: Option<String>,
    /// For a trigger schedule: its trigger node.
    pub node_id: Option<String>,
}

/// A trigger's schedule: a timer row with no instance (ST-9, TM-11 to TM-13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Schedule id (a timer id; derive it from definition, node and, for StartAt, instant).
    pub schedule_id: String,
    /// The definition it starts.
    pub definition_name: String,
    /// The trigger node.
    pub node_id: String,
    /// Its kind (`"timer"`, `"cron"`, `"start_at"`).
    pub kind: String,
    /// The next occurrence (`next_due`).
    pub due_at: Micros,
    /// A StartAt schedule that fired: never claimed again (TM-13).
    pub fired: bool,
}

/// What [`Store::fire_schedule`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleFiring {
    /// The instance was created and the schedule advanced, in one transaction.
    Started,
    /// The activation guard refused the instance (RT-16); the schedule advanced anyway.
    Refused {
        /// The non-final instance holding the scope.
        existing: String,
    },
    /// The schedule had already moved past `expected_due_at` (or fired, or was removed):
    /// another process fired this occurrence; nothing was written.
    Stale,
}

/// A journal entry to append with a commit (ST-10).
#[derive(Debug, Clone, PartialEq)]
pub struct NewJournalRecord {
    /// When it happened.
    pub at: Micros,
    /// Its kind.
    pub kind: String,
    /// The context concerned.
    pub context_id: Option<u64>,
    /// The node concerned.
    pub node_id: Option<String>,
    /// Details; more than 64 KiB of JSON is replaced by a truncation marker.
    pub detail: Value,
}

/// A stored journal entry.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRecord {
    /// Sequence number within the instance, from 1.
    pub seq: u64,
    /// When it happened.
    pub at: Micros,
    /// Its kind.
    pub kind: String,
    /// The context concerned.
    pub context_id: Option<u64>,
    /// The node concerned.
    pub node_id: Option<String>,
    /// Details.
    pub detail: Value,
}

/// One commit of one instance (ST-16, ENG-28): applied entirely or not at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    /// The instance.
    pub instance_id: String,
    /// The version the caller loaded (ST-13).
    pub expected_version: u64,
    /// The caller's lease token (ST-14).
    pub lease_token: u64,
    /// Commit time: the new `updated_at` (and `finished_at` for a final status).
    pub now: Micros,
    /// The new state document.
    pub state: Value,
    /// The new status.
    pub status: InstanceStatus,
    /// The new sub-status.
    pub sub_status: Option<InstanceSubStatus>,
    /// The correlation id after this commit (rewritten on the bookmark rows if changed).
    pub correlation_id: Option<String>,
    /// Clear the honoured control request.
    pub clear_control_request: bool,
    /// Release the lease in the same operation.
    pub release_lease: bool,
    /// Bookmarks to index.
    pub bookmarks_added: Vec<NewBookmark>,
    /// Bookmark ids to remove.
    pub bookmarks_removed: Vec<String>,
    /// Timers to insert.
    pub timers_added: Vec<NewTimer>,
    /// Timer ids to delete.
    pub timers_removed: Vec<String>,
    /// `Some(true)` parks all the instance's timers, `Some(false)` unparks them (TM-10).
    pub timers_parked: Option<bool>,
    /// Journal entries to append.
    pub journal: Vec<NewJournalRecord>,
    /// Receipts (stimulus ids) to write; an existing one fails the commit (RT-19).
    pub receipts: Vec<String>,
    /// Queue items consumed by this run, deleted in the commit (RT-19).
    pub consumed_queue_items: Vec<String>,
    /// Compaction of the journal: delete a range and insert its summary (ENG-42, C-22).
    pub journal_compaction: Option<JournalCompaction>,
    /// Instances this run started (sub-workflows, dispatches), created in the same commit
    /// with their receipts and activation guards; an existing id fails the commit.
    pub instances_created: Vec<NewInstance>,
    /// Queue items this run addresses to other instances (a child's result for its parent,
    /// ACT-24), enqueued in the same commit.
    pub queue_items: Vec<QueueItem>,
    /// Control requests for other instances (a cascaded cancel). Missing or final targets
    /// are skipped.
    pub control_requests: Vec<(String, ControlRequest)>,
    /// Incidents this commit opens for the instance (FLT-6, ST-12).
    pub incidents_opened: Vec<NewIncident>,
    /// Incidents of the instance this commit resolves (FLT-8): `(incident_id, resolution)`.
    /// An unknown or already resolved id is skipped.
    pub incidents_resolved: Vec<(String, String)>,
}

/// An incident to record (FLT-6, ST-12).
#[derive(Debug, Clone, PartialEq)]
pub struct NewIncident {
    /// IncidentRecord id (a ULID).
    pub incident_id: String,
    /// Its kind (`activity_failed`, `state_too_large`, `unreadable_state`, ...).
    pub kind: String,
    /// When it happened.
    pub created_at: Micros,
    /// The rest of the record, opaque to the store.
    pub record: Value,
}

/// A stored incident.
#[derive(Debug, Clone, PartialEq)]
pub struct IncidentRecord {
    /// IncidentRecord id.
    pub incident_id: String,
    /// Its instance.
    pub instance_id: String,
    /// The instance's definition.
    pub definition_name: String,
    /// Its kind.
    pub kind: String,
    /// When it happened.
    pub created_at: Micros,
    /// When an operator action ended it.
    pub resolved_at: Option<Micros>,
    /// How it ended (`retried`, `cancelled`, ...).
    pub resolution: Option<String>,
    /// The rest of the record.
    pub record: Value,
}

/// A journal compaction carried by a commit: entries with `seq <= through_seq` are deleted
/// and `summary` takes the sequence number `through_seq`, so order is kept (ST-10, ST-16).
#[derive(Debug, Clone, PartialEq)]
pub struct JournalCompaction {
    /// The last sequence number compacted.
    pub through_seq: u64,
    /// The entry that replaces them (kind `Compacted`, say).
    pub summary: NewJournalRecord,
}

impl Commit {
    /// A commit writing `state` with the given status and nothing else; fill in the diffs.
    /// The correlation id starts as `None`: set it to the instance's.
    pub fn new(
        instance_id: impl Into<String>,
        expected_version: u64,
        lease_token: u64,
        now: Micros,
        state: Value,
        status: InstanceStatus,
        sub_status: Option<InstanceSubStatus>,
    ) -> Self {
        Self {
            instance_id: instance_id.into(),
            expected_version,
            lease_token,
            now,
            state,
            status,
            sub_status,
            correlation_id: None,
            clear_control_request: false,
            release_lease: false,
            bookmarks_added: Vec::new(),
            bookmarks_removed: Vec::new(),
            timers_added: Vec::new(),
            timers_removed: Vec::new(),
            timers_parked: None,
            journal: Vec::new(),
            receipts: Vec::new(),
            consumed_queue_items: Vec::new(),
            journal_compaction: None,
            instances_created: Vec::new(),
            queue_items: Vec::new(),
            control_requests: Vec::new(),
            incidents_opened: Vec::new(),
            incidents_resolved: Vec::new(),
        }
    }
}

/// An event trigger row of a definition (ST-7).
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerRow {
    /// The definition's name.
    pub definition_name: String,
    /// The definition's version.
    pub definition_version: String,
    /// The trigger node.
    pub node_id: String,
    /// Stimulus hash.
    pub hash: String,
    /// Stimulus name.
    pub name: String,
    /// Key, for display.
    pub key_display: Option<String>,
    /// Trigger settings.
    pub payload: Value,
    /// Activation strategy (RT-15), opaque to the store.
    pub activation: Value,
    /// When it was registered. Not compared by [`Store::replace_triggers`].
    pub registered_at: Micros,
}

/// What [`Store::replace_triggers`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerDiff {
    /// Rows inserted or changed.
    pub added: usize,
    /// Rows deleted.
    pub removed: usize,
    /// Rows left as they were.
    pub unchanged: usize,
}

/// A stimulus queue item (RT-25, ST-8).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueItem {
    /// Item id (a ULID).
    pub item_id: String,
    /// The stimulus id, kept across replays so receipts still apply.
    pub stimulus_id: String,
    /// Stimulus name.
    pub name: String,
    /// Stimulus hash.
    pub hash: String,
    /// Key, for display.
    pub key_display: Option<String>,
    /// Payload.
    pub payload: Value,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// The send's targets (instance id, bookmark ids, scope), opaque to the store.
    pub targets: Value,
    /// When it was sent.
    pub sent_at: Micros,
    /// When it was enqueued.
    pub enqueued_at: Micros,
    /// When it expires (unless held).
    pub expires_at: Micros,
    /// Failed delivery attempts.
    pub attempts: u32,
    /// The last delivery error.
    pub last_error: Option<String>,
    /// When delivery was last attempted.
    pub last_attempt_at: Option<Micros>,
    /// Held items do not expire (RT-28).
    pub held: bool,
    /// The send's idempotency key.
    pub idempotency_key: Option<String>,
}

/// Why an item became a dead letter (ST-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// Its TTL passed.
    Expired,
    /// Its attempts reached the maximum.
    Failed,
    /// It was rejected.
    Rejected,
}

impl DeadLetterReason {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "expired" => Self::Expired,
            "failed" => Self::Failed,
            "rejected" => Self::Rejected,
            _ => return None,
        })
    }
}

/// A dead letter: the item as it was, and why it died (ST-8). Keyed by the original item id,
/// so moving an item twice stores one dead letter (C-17).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The item, with its original id.
    pub item: QueueItem,
    /// Why it died.
    pub reason: DeadLetterReason,
    /// The error, for `Failed` and `Rejected`.
    pub error: Option<String>,
    /// When it died.
    pub dead_at: Micros,
}

/// Filters and keyset page of [`Store::list_dead_letters`] (C-18).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeadLetterFilter {
    /// Only this reason.
    pub reason: Option<DeadLetterReason>,
    /// Only this stimulus name.
    pub name: Option<String>,
    /// Only this stimulus hash.
    pub hash: Option<String>,
    /// Keyset: only dead letters after this `(dead_at, item_id)`.
    pub after: Option<(Micros, String)>,
    /// Page size (0 means 100).
    pub limit: usize,
}

impl DeadLetterFilter {
    /// All dead letters, first page of `limit`.
    pub fn all(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Dead letters of one reason, first page of `limit`.
    pub fn of_reason(reason: DeadLetterReason, limit: usize) -> Self {
        Self {
            reason: Some(reason),
            limit,
            ..Self::default()
        }
    }
}

/// What [`Store::record_queue_failure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueFailure {
    /// The item stays queued with this many attempts; its claim is released.
    Retry {
        /// Attempts so far.
        attempts: u32,
    },
    /// The attempts reached the maximum: the item is now a dead letter `Failed`.
    DeadLettered,
}

/// An instance claimed by [`Store::claim_runnable`], with the lease acquired for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedInstance {
    /// The instance.
    pub instance_id: String,
    /// Its sub-status (`Executing` means interrupted, ENG-2).
    pub sub_status: Option<InstanceSubStatus>,
    /// The lease acquired.
    pub lease: Lease,
}

/// Filters and keyset page of [`Store::list_instances`] (C-23), in `instance_id` order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceFilter {
    /// Only this status.
    pub status: Option<InstanceStatus>,
    /// Only this definition.
    pub definition_name: Option<String>,
    /// Only this correlation id.
    pub correlation_id: Option<String>,
    /// Keyset: only ids greater than this.
    pub after: Option<String>,
    /// Page size (0 means 100).
    pub limit: usize,
    /// Only instances with a pending control request (C-29): what the owning runtime
    /// honours.
    pub control_requested: bool,
}

/// One row of [`Store::list_instances`]: an undecodable row is an error item, never skipped
/// and never failing the page (ST-22).
#[derive(Debug, Clone, PartialEq)]
pub struct ListedInstance {
    /// The instance id (use it as the next page's `after`).
    pub instance_id: String,
    /// The record, or why it could not be decoded.
    pub record: StoreResult<InstanceRecord>,
}

/// What [`Store::purge`] removes (ST-31, ST-32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeFilter {
    /// Final instances whose `finished_at` is before this instant.
    pub finished_before: Micros,
    /// Statuses to purge: only `Finished` and `Cancelled` are allowed; empty means both.
    pub statuses: Vec<InstanceStatus>,
    /// Only this definition.
    pub definition_name: Option<String>,
    /// Instances per batch (each batch atomic); 0 means 500.
    pub batch_size: usize,
}

impl PurgeFilter {
    /// All final instances finished before `cut_off`.
    pub fn finished_before(cut_off: Micros) -> Self {
        Self {
            finished_before: cut_off,
            statuses: Vec::new(),
            definition_name: None,
            batch_size: 0,
        }
    }
}

/// A send's idempotency record (ST-12, RT-19, C-20).
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    /// The idempotency key.
    pub key: String,
    /// The stimulus hash of the send.
    pub hash: String,
    /// A digest of the payload, to detect a reuse with different content.
    pub payload_digest: String,
    /// The stored send report, returned to a retried send.
    pub report: Value,
    /// When it was recorded.
    pub created_at: Micros,
}

/// Operation counters (ST-2 statistics; C-32 uses them to show group commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// Write requests applied (commits, creates, claims, ...), successful or not.
    pub write_requests: u64,
    /// Backend transactions that carried them (equal for `MemoryStore`).
    pub transactions: u64,
}

/// A change hint sent after the operation that caused it (ST-18). Hints may be lost,
/// duplicated or coalesced; no rule may depend on them, every consumer also sweeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeUp {
    /// Queue items were added or became claimable, or bookmarks were added.
    QueueChanged,
    /// Timers were added or unparked; `earliest` is the earliest added due time, if known.
    TimersChanged {
        /// The earliest due time among the timers added.
        earliest: Option<Micros>,
    },
    /// An instance may be runnable (created `Running`, or its lease was released).
    InstanceRunnable {
        /// The instance.
        id: String,
    },
    /// An instance reached a final status.
    InstanceTerminal {
        /// The instance.
        id: String,
    },
    /// A control request was recorded for an instance.
    ControlRequested {
        /// The instance.
        id: String,
    },
}

/// The capacity of each backend's wake-up broadcast; a slow subscriber loses older hints.
pub(crate) const WAKE_UP_CAPACITY: usize = 1024;

/// The hints a successful commit produces (ST-18, C-28).
pub(crate) fn commit_hints(c: &Commit) -> Vec<WakeUp> {
    let mut hints = Vec::new();
    if !c.bookmarks_added.is_empty() || !c.queue_items.is_empty() {
        hints.push(WakeUp::QueueChanged);
    }
    if !c.timers_added.is_empty() || c.timers_parked == Some(false) {
        hints.push(WakeUp::TimersChanged {
            earliest: c.timers_added.iter().map(|t| t.due_at).min(),
        });
    }
    if c.status.is_final() {
        hints.push(WakeUp::InstanceTerminal {
            id: c.instance_id.clone(),
        });
    } else if c.status == InstanceStatus::Running && c.release_lease {
        hints.push(WakeUp::InstanceRunnable {
            id: c.instance_id.clone(),
        });
    }
    for created in &c.instances_created {
        hints.extend(create_hint(created));
    }
    for (id, _) in &c.control_requests {
        hints.push(WakeUp::ControlRequested { id: id.clone() });
    }
    hints
}

/// The hint of a creation: a `Running` instance is runnable.
pub(crate) fn create_hint(instance: &NewInstance) -> Option<WakeUp> {
    (instance.status == InstanceStatus::Running).then(|| WakeUp::InstanceRunnable {
        id: instance.instance_id.clone(),
    })
}

/// Sends hints, ignoring the absence of subscribers.
pub(crate) fn send_hints(sender: &tokio::sync::broadcast::Sender<WakeUp>, hints: Vec<WakeUp>) {
    for hint in hints {
        // No subscriber is not an error: hints are advisory (ST-18).
        let _ = sender.send(hint);
    }
}

/// The durable store (ST-1): one object-safe async trait every backend implements.
///
/// Every method is one atomic logical operation. Times are passed in (ST-3): due times, TTLs
/// and ages on the workflow clock, lease and claim expiry on the wall clock. `ttl` parameters
/// are durations in microseconds.
///
/// A run, as the engine drives it: create, take the lease, commit under version and token.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use workflow_runtime::store::{
///     Commit, InstanceStatus, InstanceSubStatus, MemoryStore, NewBookmark, NewInstance, Store,
///     StoreError,
/// };
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
/// let now = 1_700_000_000_000_000; // µs since the epoch, from the caller's clock
/// store.create_instance(NewInstance {
///     instance_id: "order-1".into(),
///     definition_name: "order".into(),
///     definition_version: "fingerprint".into(),
///     status: InstanceStatus::Running,
///     sub_status: Some(InstanceSubStatus::Pending),
///     correlation_id: None,
///     origin_at: now,
///     created_at: now,
///     state: json!({ "format": 1 }),
///     receipt: None,
///     consumed_queue_item: None,
///     activation_scope: None,
/// }).await?;
/// let lease = store.acquire_lease("order-1", "node-a", now, 30_000_000).await?;
/// let record = store.load_instance("order-1").await?;
///
/// let mut commit = Commit::new(
///     "order-1", record.version, lease.token, now, json!({ "format": 1, "step": 1 }),
///     InstanceStatus::Suspended, Some(InstanceSubStatus::Waiting),
/// );
/// commit.bookmarks_added.push(NewBookmark {
///     bookmark_id: "bm-1".into(), hash: "approved".into(), name: "approved".into(),
///     node_id: "root:wait".into(), context_id: 2, look_back: None, created_at: now,
/// });
/// commit.release_lease = true;
/// assert_eq!(store.commit(commit.clone()).await?, 2);
///
/// // The same commit again is stale: nothing is written.
/// assert!(matches!(store.commit(commit).await, Err(StoreError::Conflict { .. })));
/// # Ok::<(), StoreError>(())
/// # }).unwrap();
/// ```
pub trait Store: Send + Sync + 'static {
    // ----- instances -----

    /// Creates an instance at version 1, with its receipt and consumed queue item (ST-17).
    /// An existing id gives `AlreadyExists` and changes nothing (C-2).
    fn create_instance(&self, instance: NewInstance) -> BoxFuture<'_, StoreResult<u64>>;

    /// Loads an instance: columns, version and state from one snapshot (ST-13).
    fn load_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<InstanceRecord>>;

    /// Applies a commit atomically (ST-16) and returns the new version. A stale version gives
    /// `Conflict`, a superseded lease token `Fenced`, an existing receipt `ReceiptExists`, an
    /// oversized state `TooLarge`; in every failure nothing is written.
    fn commit(&self, commit: Commit) -> BoxFuture<'_, StoreResult<u64>>;

    /// Records a control request (cancel, suspend, resume, retry) without changing the
    /// version (ST-13, C-29); it replaces one not yet honoured. A final instance gives
    /// `Invalid`.
    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<()>>;

    /// Lists instances with filters, in `instance_id` keyset order (C-23, ST-22).
    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>>;

    /// Claims up to `limit` `Running` instances whose lease is absent or expired at `now`,
    /// oldest `updated_at` first, acquiring their leases for `owner` (ST-15, C-13). Recovery
    /// after a restart uses it: `Running/Executing` ones were interrupted.
    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>>;

    /// Removes one final instance with its dependent rows; a live one gives `NotTerminal`
    /// (ST-32).
    fn delete_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// Removes final instances finished before the cut-off with their bookmarks, timers,
    /// journal and receipts, in atomic batches; returns how many (ST-31). A non-final status
    /// in the filter gives `Invalid`.
    fn purge(&self, filter: PurgeFilter) -> BoxFuture<'_, StoreResult<u64>>;

    // ----- leases -----

    /// Acquires the instance lease if none is live at `now` (ST-14): the token is one more
    /// than the last ever issued. A live lease gives `LeaseHeld`.
    fn acquire_lease(
        &self,
        instance_id: &str,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>>;

    /// Extends the lease to `now + ttl` if `token` is current, else `Fenced`; returns any
    /// pending control request (ST-14).
    fn renew_lease(
        &self,
        instance_id: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>>;

    /// Releases the lease if `token` is current, else `Fenced`. Tokens are never reused.
    fn release_lease(&self, instance_id: &str, token: u64) -> BoxFuture<'_, StoreResult<()>>;

    /// Acquires a named lease (ST-11), as [`Store::acquire_lease`].
    fn acquire_named_lease(
        &self,
        name: &str,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>>;

    /// Renews a named lease, as [`Store::renew_lease`].
    fn renew_named_lease(
        &self,
        name: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>>;

    /// Releases a named lease, as [`Store::release_lease`].
    fn release_named_lease(&self, name: &str, token: u64) -> BoxFuture<'_, StoreResult<()>>;

    // ----- bookmarks and receipts -----

    /// Bookmarks with a hash, filtered, in `(created_at, bookmark_id)` order (ST-6, C-8).
    fn find_bookmarks(&self, query: BookmarkQuery) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>>;

    /// An instance's bookmark rows, in `(created_at, bookmark_id)` order.
    fn list_bookmarks(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>>;

    /// Whether the instance has consumed the stimulus (RT-19).
    fn has_receipt(&self, instance_id: &str, stimulus_id: &str)
    -> BoxFuture<'_, StoreResult<bool>>;

    // ----- triggers -----

    /// Replaces a definition's event triggers by difference (ST-7, ST-17, C-11): rows equal
    /// but for `registered_at` are left alone, so re-running it writes nothing.
    fn replace_triggers(
        &self,
        definition_name: &str,
        triggers: Vec<TriggerRow>,
    ) -> BoxFuture<'_, StoreResult<TriggerDiff>>;

    /// Triggers with any of these hashes, by `(definition_name, node_id, hash)`.
    fn find_triggers(&self, hashes: &[String]) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>>;

    // ----- timers -----

    /// The earliest `due_at` among unparked timers not under a live claim at `now` (ST-9).
    fn earliest_timer(&self, now: Micros) -> BoxFuture<'_, StoreResult<Option<Micros>>>;

    /// Claims up to `limit` unparked timers with `due_at <= now` and no live claim, in
    /// `(due_at, timer_id)` order, marking them claimed by `owner` until `now + claim_ttl`
    /// (ST-15, C-12). A commit that deletes the timer removes it.
    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>>;

    /// Registers a trigger schedule if no schedule has its id; returns whether it was
    /// inserted. An existing one is left as it is (an unchanged trigger keeps `next_due`,
    /// TM-12; a fired StartAt never fires again, TM-13): delete it first to change it.
    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>>;

    /// Deletes a trigger schedule; returns whether it existed.
    fn delete_schedule(&self, schedule_id: &str) -> BoxFuture<'_, StoreResult<bool>>;

    /// A definition's schedules, by id.
    fn list_schedules(&self, definition_name: &str) -> BoxFuture<'_, StoreResult<Vec<Schedule>>>;

    /// Fires one occurrence of a claimed schedule atomically (ST-17, TM-11 to TM-13): if the
    /// schedule is still due at `expected_due_at`, creates `instance` (with its activation
    /// guard) and advances the schedule to `next_due`, or marks it fired when `None`
    /// (StartAt). One instance per occurrence across all processes.
    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: NewInstance,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>>;

    /// An instance's timers, in `(due_at, timer_id)` order.
    fn list_timers(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>>;

    // ----- journal -----

    /// Journal entries with `seq >= from_seq`, at most `limit`, in order (ST-10).
    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord>>>;

    // ----- queue -----

    /// Enqueues an item; an existing item id gives `AlreadyExists` (RT-25).
    fn enqueue(&self, item: QueueItem) -> BoxFuture<'_, StoreResult<()>>;

    /// Claims up to `limit` items in `(sent_at, item_id)` order that are not expired (or are
    /// held) and not under a live claim, until `now + claim_ttl` (ST-15, C-14).
    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>>;

    /// Releases `owner`'s claim on an item so it can be claimed again (RT-27).
    fn release_queue_item(&self, item_id: &str, owner: &str) -> BoxFuture<'_, StoreResult<()>>;

    /// Deletes a delivered item outside a commit (acknowledgement); returns whether it existed.
    fn ack_queue_item(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>>;

    /// Records a failed delivery: attempts + 1 and the error; at `max_attempts` the item
    /// becomes a dead letter `Failed` (C-16).
    fn record_queue_failure(
        &self,
        item_id: &str,
        error: &str,
        now: Micros,
        max_attempts: u32,
    ) -> BoxFuture<'_, StoreResult<QueueFailure>>;

    /// Moves an item to the dead letters atomically and idempotently (C-17); returns whether
    /// this call moved it.
    fn dead_letter(
        &self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<&str>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<bool>>;

    /// Moves up to `limit` items whose `expires_at <= now` and that are not held to the dead
    /// letters as `Expired` (C-15); returns how many.
    fn expire_queue(&self, now: Micros, limit: usize) -> BoxFuture<'_, StoreResult<u64>>;

    /// Re-enqueues a dead letter with a fresh TTL (`expires_at = now + ttl`), zero attempts,
    /// no claim and the same item and stimulus ids, and deletes the dead letter (RT-28, C-18).
    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>>;

    /// Deletes a dead letter; returns whether it existed (C-18).
    fn delete_dead_letter(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>>;

    /// Deletes up to `limit` dead letters that died before `dead_before` (their TTL, ST-30);
    /// returns how many.
    fn purge_dead_letters(
        &self,
        dead_before: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>>;

    /// Deletes up to `limit` receipts written before `before` (their retention, ST-30);
    /// returns how many.
    fn purge_receipts(&self, before: Micros, limit: usize) -> BoxFuture<'_, StoreResult<u64>>;

    /// Deletes up to `limit` idempotency records created before `before` (ST-30); returns
    /// how many.
    fn purge_idempotency_records(
        &self,
        before: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>>;

    // ----- incidents -----

    /// Records an incident alone, leaving the instance row untouched: for an
    /// `unreadable_state` incident, whose state cannot be committed (FLT-9, ST-2). An
    /// existing id gives `AlreadyExists`.
    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>>;

    /// An instance's incidents, in `(created_at, incident_id)` order.
    fn list_incidents(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>>;

    /// Incidents across instances in `(created_at, incident_id)` order after the keyset
    /// `after`, optionally only unresolved ones.
    fn list_all_incidents(
        &self,
        unresolved_only: bool,
        after: Option<(Micros, String)>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>>;

    // ----- idempotency records -----

    /// Stores an idempotency record unless its key exists; returns the existing record in
    /// that case, unchanged, so the caller can compare hashes and digests (C-20).
    fn put_idempotency_record(
        &self,
        record: IdempotencyRecord,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>>;

    /// Looks up an idempotency record.
    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>>;

    /// Dead letters matching the filter, in `(dead_at, item_id)` keyset order (C-18).
    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>>;

    // ----- maintenance -----

    /// Operation counters.
    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>>;

    /// Subscribes to change hints (ST-18), sent in-process after each operation that caused
    /// them.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp>;
}

// ----- shared validation and encoding -----

/// Checks a caller-supplied instance id (ST-23).
pub(crate) fn validate_instance_id(id: &str) -> StoreResult<()> {
    if id.is_empty() || id.len() > 128 {
        return Err(StoreError::Invalid {
            what: "instance_id",
            reason: format!("must be 1 to 128 bytes, got {}", id.len()),
        });
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(StoreError::Invalid {
            what: "instance_id",
            reason: format!("character {bad:?} is not in [A-Za-z0-9._:-]"),
        });
    }
    Ok(())
}

/// Encodes a state document to write, checking its `"format"` and size (ST-19, ST-24).
pub(crate) fn encode_state(state: &Value, max_bytes: usize) -> StoreResult<String> {
    match state.get("format").and_then(Value::as_u64) {
        Some(format) if format <= STATE_FORMAT => {}
        Some(format) => {
            return Err(StoreError::Invalid {
                what: "state",
                reason: format!("format {format} is newer than {STATE_FORMAT}"),
            });
        }
        None => {
            return Err(StoreError::Invalid {
                what: "state",
                reason: "must be a JSON object with an integer \"format\"".to_owned(),
            });
        }
    }
    let text = serde_json::to_string(state).map_err(|e| StoreError::Invalid {
        what: "state",
        reason: e.to_string(),
    })?;
    if text.len() > max_bytes {
        return Err(StoreError::TooLarge {
            what: "state",
            size: text.len(),
            limit: max_bytes,
        });
    }
    Ok(text)
}

/// Encodes a commit's state and the states of the instances it creates (ST-19, ST-24),
/// validating the created ids (ST-23).
pub(crate) fn encode_commit(c: &Commit, max_bytes: usize) -> StoreResult<(String, Vec<String>)> {
    let state = encode_state(&c.state, max_bytes)?;
    let created = c
        .instances_created
        .iter()
        .map(|i| {
            validate_instance_id(&i.instance_id)?;
            encode_state(&i.state, max_bytes)
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok((state, created))
}

/// Decodes a stored state document (ST-19, ST-22).
pub(crate) fn decode_state(instance_id: &str, text: &str) -> StoreResult<Value> {
    let value: Value = serde_json::from_str(text).map_err(|e| StoreError::Decode {
        what: "instance",
        id: instance_id.to_owned(),
        path: "state".to_owned(),
        message: e.to_string(),
    })?;
    match value.get("format").map(Value::as_u64) {
        Some(Some(format)) if format <= STATE_FORMAT => Ok(value),
        Some(Some(format)) => Err(StoreError::FormatTooNew {
            what: "instance",
            id: instance_id.to_owned(),
            found: format,
            supported: STATE_FORMAT,
        }),
        Some(None) | None => Err(StoreError::Decode {
            what: "instance",
            id: instance_id.to_owned(),
            path: "state.format".to_owned(),
            message: "missing or not an unsigned integer".to_owned(),
        }),
    }
}

/// A journal detail as stored: at most 64 KiB of JSON, else a truncation marker (ST-10).
pub(crate) fn journal_detail(detail: &Value) -> Value {
    let size = serde_json::to_string(detail).map_or(usize::MAX, |t| t.len());
    if size <= MAX_JOURNAL_DETAIL_BYTES {
        detail.clone()
    } else {
        serde_json::json!({ "truncated": true, "original_bytes": size })
    }
}

/// Checks a purge filter's statuses (ST-32) and returns them (empty means both final ones).
pub(crate) fn purge_statuses(filter: &PurgeFilter) -> StoreResult<Vec<InstanceStatus>> {
    if let Some(live) = filter.statuses.iter().find(|s| !s.is_final()) {
        return Err(StoreError::Invalid {
            what: "purge filter",
            reason: format!("status {live} is not final; cancel live instances first"),
        });
    }
    if filter.statuses.is_empty() {
        Ok(vec![InstanceStatus::Finished, InstanceStatus::Cancelled])
    } else {
        Ok(filter.statuses.clone())
    }
}

/// `instance:<id>`, the resource name of an instance lease in errors.
pub(crate) fn instance_resource(id: &str) -> String {
    format!("instance:{id}")
}

/// `lease:<name>`, the resource name of a named lease in errors.
pub(crate) fn named_resource(name: &str) -> String {
    format!("lease:{name}")
}

/// Page sizes: 0 means the default.
pub(crate) fn page(limit: usize, default: usize) -> usize {
    if limit == 0 { default } else { limit }
}
