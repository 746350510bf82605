//! The rows and arguments of store operations: part of the backend author's kit (ST-5 to
//! ST-12). Types generic over `S` carry the state document: a [`serde_json::Value`] above the
//! policy layer ([`Storage`](super::Storage)), its encoded JSON text (`String`) in a backend.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{StoreError, StoreResult};
use crate::base::Micros;

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

impl LeaseState {
    /// The lease an instance row's lease columns record: one only with both an owner and an
    /// expiry (a released lease leaves its last token behind, without an owner).
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::store::LeaseState;
    ///
    /// let held = LeaseState::from_columns(Some("worker-1".to_owned()), 3, Some(1_000));
    /// assert_eq!(held.map(|lease| lease.token), Some(3));
    /// assert_eq!(LeaseState::from_columns(None, 3, Some(1_000)), None);
    /// ```
    pub fn from_columns(
        owner: Option<String>,
        token: u64,
        expires_at: Option<Micros>,
    ) -> Option<Self> {
        match (owner, expires_at) {
            (Some(owner), Some(expires_at)) => Some(Self {
                owner,
                token,
                expires_at,
            }),
            _ => None,
        }
    }
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
pub struct NewInstance<S = Value> {
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
    /// The opaque state document, a JSON object with a top-level `"format"` (ST-19); its
    /// encoded text in a backend.
    pub state: S,
    /// A receipt `(instance_id, stimulus_id)` to write in the same operation (RT-19).
    pub receipt: Option<String>,
    /// A queue item consumed by this creation, deleted in the same operation (ST-17).
    pub consumed_queue_item: Option<String>,
    /// Activation guard (ST-17, RT-15): creation fails with `ActivationConflict` while a
    /// non-final instance has the same scope. The scope is an opaque key chosen by the
    /// runtime (`singleton:<definition>`, `correlation:<id>` to span definitions, ...).
    pub activation_scope: Option<String>,
    /// What a listing shows of the instance (where it is, what it waits for), as opaque
    /// JSON text kept in the instance row beside the state, so a listing reads no state
    /// document (ENG-51). `None` when the writer has none.
    pub listing: Option<String>,
    /// The idempotency record of the send that starts this instance, written in the same
    /// operation unless its key has one already (the first writer's record stays, RT-19): a
    /// send retried after a crash that followed the creation finds it instead of starting the
    /// instance's run again or queueing a copy.
    pub idempotency: Option<IdempotencyRecord>,
}

/// An instance row (ST-5): its columns and, as `S`, its state document, read from one
/// snapshot (ST-13). The state is a [`Value`] above the policy layer, its encoded text in a
/// backend, and `()` where the row is read without it ([`InstanceSummary`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord<S = Value> {
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
    /// The listing text the last commit or the creation stored ([`Commit::listing`]);
    /// `None` for a row written without one.
    pub listing: Option<String>,
    /// The state document (its encoded text in a backend; `()` when not read).
    pub state: S,
}

impl<S> InstanceRecord<S> {
    /// The record with its state document mapped by `f` (decoding or encoding it).
    ///
    /// # Errors
    ///
    /// Whatever `f` returns.
    pub fn try_map_state<T, E>(
        self,
        f: impl FnOnce(&str, S) -> Result<T, E>,
    ) -> Result<InstanceRecord<T>, E> {
        let state = f(&self.instance_id, self.state)?;
        Ok(InstanceRecord {
            instance_id: self.instance_id,
            definition_name: self.definition_name,
            definition_version: self.definition_version,
            status: self.status,
            sub_status: self.sub_status,
            correlation_id: self.correlation_id,
            version: self.version,
            lease: self.lease,
            control_request: self.control_request,
            origin_at: self.origin_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
            listing: self.listing,
            state,
        })
    }

    /// The record with the state document `state` in place of its own: a listed row
    /// ([`InstanceSummary`], no document) made a loaded one, or the reverse with `()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::store::{InstanceRecord, InstanceStatus, InstanceSummary};
    ///
    /// let row: InstanceSummary = InstanceRecord {
    ///     instance_id: "order-1".to_owned(),
    ///     definition_name: "Order".to_owned(),
    ///     definition_version: "v1".to_owned(),
    ///     status: InstanceStatus::Running,
    ///     sub_status: None,
    ///     correlation_id: None,
    ///     version: 1,
    ///     lease: None,
    ///     control_request: None,
    ///     origin_at: 0,
    ///     created_at: 0,
    ///     updated_at: 0,
    ///     finished_at: None,
    ///     listing: None,
    ///     state: (),
    /// };
    /// let loaded = row.clone().with_state(serde_json::json!({"format": 2}));
    /// assert_eq!(loaded.state["format"], 2);
    /// assert_eq!(loaded.summary(), row);
    /// ```
    pub fn with_state<T>(self, state: T) -> InstanceRecord<T> {
        let mapped = self.try_map_state(|_, _| Ok::<T, std::convert::Infallible>(state));
        match mapped {
            Ok(record) => record,
            Err(never) => match never {},
        }
    }

    /// The record's columns, without its state document.
    pub fn summary(&self) -> InstanceSummary {
        InstanceSummary {
            instance_id: self.instance_id.clone(),
            definition_name: self.definition_name.clone(),
            definition_version: self.definition_version.clone(),
            status: self.status,
            sub_status: self.sub_status,
            correlation_id: self.correlation_id.clone(),
            version: self.version,
            lease: self.lease.clone(),
            control_request: self.control_request.clone(),
            origin_at: self.origin_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
            listing: self.listing.clone(),
            state: (),
        }
    }
}

/// An instance's columns without its state document: one row of
/// [`Storage::list_instances`](super::Storage::list_instances) (ST-5).
pub type InstanceSummary = InstanceRecord<()>;

/// What a listing shows of an instance that only its state document knows, stored as JSON
/// text in the instance row ([`Commit::listing`], [`NewInstance::listing`],
/// [`InstanceRecord::listing`]) so a listing reads no document (ENG-51). Backends store the
/// text as is.
///
/// # Examples
///
/// ```
/// use workflow_runtime::store::InstanceListing;
///
/// let listing = InstanceListing {
///     at: vec!["Review".to_owned()],
///     waiting_for: vec!["approve".to_owned()],
///     open_incidents: 0,
/// };
/// assert_eq!(InstanceListing::decode(&listing.encode()), Some(listing));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct InstanceListing {
    /// Where it is: the current state of a root state machine, else the innermost nodes
    /// still running (empty once final).
    pub at: Vec<String>,
    /// The names of the events and timers it waits for.
    pub waiting_for: Vec<String>,
    /// Its open incidents.
    pub open_incidents: usize,
}

impl InstanceListing {
    /// The stored text.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The listing of a stored text; `None` when it is not one.
    pub fn decode(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
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

/// What [`Storage::fire_schedule`](super::Storage::fire_schedule) did.
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
    /// No instance was given: the occurrences were skipped (TM-19) and the schedule advanced.
    Skipped,
}

/// A journal entry to append with a commit (ST-10).
#[derive(Debug, Clone, PartialEq)]
pub struct NewJournalRecord<D = Value> {
    /// When it happened.
    pub at: Micros,
    /// Its kind.
    pub kind: String,
    /// The context concerned.
    pub context_id: Option<u64>,
    /// The node concerned.
    pub node_id: Option<String>,
    /// Details; more than 64 KiB of JSON is replaced by a truncation marker (the encoded,
    /// already truncated JSON text in a backend).
    pub detail: D,
}

/// A stored journal entry.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRecord<D = Value> {
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
    /// Details (the stored JSON text in a backend).
    pub detail: D,
}

/// One commit of one instance (ST-16, ENG-28): applied entirely or not at all. `S` is the
/// state document's type (a [`Value`] or its encoded text), `D` the journal details' (a
/// [`Value`] above a backend, text in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Commit<S = Value, D = S> {
    /// The instance.
    pub instance_id: String,
    /// The version the caller loaded (ST-13).
    pub expected_version: u64,
    /// The caller's lease token (ST-14).
    pub lease_token: u64,
    /// Commit time: the new `updated_at` (and `finished_at` for a final status).
    pub now: Micros,
    /// The new state document (its encoded text in a backend).
    pub state: S,
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
    pub journal: Vec<NewJournalRecord<D>>,
    /// Receipts (stimulus ids) to write; an existing one fails the commit (RT-19).
    pub receipts: Vec<String>,
    /// Queue items consumed by this run, deleted in the commit (RT-19).
    pub consumed_queue_items: Vec<String>,
    /// Compaction of the journal: delete a range and insert its summary (ENG-42, C-22).
    pub journal_compaction: Option<JournalCompaction<D>>,
    /// Instances this run started (sub-workflows, dispatches), created in the same commit
    /// with their receipts and activation guards; an existing id fails the commit.
    pub instances_created: Vec<NewInstance<S>>,
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
    /// The most journal entries the instance keeps (ENG-42): after appending, the backend
    /// deletes the oldest rows beyond this count inside the commit. `None` keeps them all.
    /// [`Storage`](super::Storage) sets it from its journal cap when the caller did not.
    pub max_journal_entries: Option<u64>,
    /// Delete every bookmark and timer row of the instance (ENG-22: a final instance waits
    /// for nothing). Set by [`Storage`](super::Storage) for a final status; a backend only
    /// executes it.
    pub clear_waits: bool,
    /// The idempotency record of the send this commit delivers (RT-19), written in the same
    /// transaction unless its key has one (the first writer's stays): a commit refused by
    /// its version or fencing token writes no record, and a send retried after a crash
    /// finds the record of the delivery it made.
    pub idempotency: Option<IdempotencyRecord>,
    /// What a listing shows of the instance after this commit (where it is, what it waits
    /// for), opaque JSON text stored in the instance row so a listing reads no state
    /// document (ENG-51); `None` stores none (a listing then reads the document).
    pub listing: Option<String>,
    /// Re-pins the instance to this version of its definition (a migration, ENG-54): the
    /// instance row and its bookmark rows, those this commit adds included, carry it from
    /// this commit on. `None` keeps the version.
    pub definition_version: Option<String>,
    /// The keys of the instance's waits that this commit carries first: each a
    /// [`key_digest`](crate::routing::key_digest), indexed with the instance so a send by key
    /// can find it once it no longer waits (RT-36). Rows already indexed are kept.
    pub keys_added: Vec<String>,
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
pub struct JournalCompaction<D = Value> {
    /// The last sequence number compacted.
    pub through_seq: u64,
    /// The entry that replaces them (kind `Compacted`, say).
    pub summary: NewJournalRecord<D>,
}

impl<S, D> Commit<S, D> {
    /// A commit writing `state` with the given status and nothing else; fill in the diffs.
    /// The correlation id starts as `None`: set it to the instance's.
    pub fn new(
        instance_id: impl Into<String>,
        expected_version: u64,
        lease_token: u64,
        now: Micros,
        state: S,
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
            max_journal_entries: None,
            clear_waits: false,
            idempotency: None,
            listing: None,
            definition_version: None,
            keys_added: Vec::new(),
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
    /// When it was registered. Not compared by [`Storage::replace_triggers`](super::Storage::replace_triggers).
    pub registered_at: Micros,
}

/// What [`Storage::replace_triggers`](super::Storage::replace_triggers) changed.
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

/// Filters and keyset page of [`Storage::list_dead_letters`](super::Storage::list_dead_letters) (C-18).
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

/// What [`Storage::record_queue_failure`](super::Storage::record_queue_failure) did.
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

/// An instance claimed by [`Storage::claim_runnable`](super::Storage::claim_runnable), with the lease acquired for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedInstance {
    /// The instance.
    pub instance_id: String,
    /// Its sub-status (`Executing` means interrupted, ENG-2).
    pub sub_status: Option<InstanceSubStatus>,
    /// The lease acquired.
    pub lease: Lease,
}

/// Filters and keyset page of [`Storage::list_instances`](super::Storage::list_instances) (C-23), in `instance_id` order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceFilter {
    /// Only this status.
    pub status: Option<InstanceStatus>,
    /// Only this definition.
    pub definition_name: Option<String>,
    /// Only this correlation id.
    pub correlation_id: Option<String>,
    /// Only instances that are not final (`Running`, `Suspended`, `Faulted`).
    pub live_only: bool,
    /// Keyset: only ids greater than this.
    pub after: Option<String>,
    /// Page size (0 means 100).
    pub limit: usize,
    /// Only instances with a pending control request (C-29): what the owning runtime
    /// honours.
    pub control_requested: bool,
}

/// One row of [`Storage::list_instances`](super::Storage::list_instances): an undecodable row is an error item, never skipped
/// and never failing the page (ST-22).
#[derive(Debug, Clone, PartialEq)]
pub struct ListedInstance {
    /// The instance id (use it as the next page's `after`).
    pub instance_id: String,
    /// The instance's columns, or why they could not be decoded.
    pub summary: StoreResult<InstanceSummary>,
}

/// What [`Storage::purge`](super::Storage::purge) removes (ST-31, ST-32).
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

/// What is in a store, counted at one moment by [`Storage::census`](super::Storage::census):
/// instances by definition and status, the stimuli waiting in the queue and the dead
/// letters. Counts only, each from an index where the backend has one, so a dashboard or a
/// metrics scrape reads no instance row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Census {
    /// One entry per definition and status that has instances.
    pub instances: Vec<InstanceCount>,
    /// The stimuli in the queue (claimed or not), or `None` when the backend cannot count
    /// them.
    pub queued: Option<u64>,
    /// The dead letters.
    pub dead_letters: u64,
}

/// How many instances of one definition are in one status: an entry of
/// [`Census::instances`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceCount {
    /// The definition's name.
    pub definition_name: String,
    /// The status.
    pub status: InstanceStatus,
    /// How many.
    pub count: u64,
}

impl InstanceCount {
    /// Decodes a counted group of stored columns; `Decode` for a status no instance can
    /// have.
    ///
    /// # Errors
    ///
    /// `Decode` naming the definition and the status.
    pub fn decode(definition_name: String, status: &str, count: u64) -> StoreResult<Self> {
        let Some(status) = InstanceStatus::parse(status) else {
            return Err(decode_error(
                "instance count",
                &definition_name,
                "status",
                format!("unknown status {status:?}"),
            ));
        };
        Ok(Self {
            definition_name,
            status,
            count,
        })
    }
}

// ----- decoding stored columns (the backend kit) -----

/// A `Decode` error naming the row, the column and why (ST-22).
fn decode_error(what: &'static str, id: &str, path: &str, message: String) -> StoreError {
    StoreError::Decode {
        what,
        id: id.to_owned(),
        path: path.to_owned(),
        message,
    }
}

/// Decodes a stored instance status; an unknown name is a `Decode` naming the instance
/// (ST-22).
///
/// # Errors
///
/// `Decode` for a name no status has.
pub fn decode_instance_status(instance_id: &str, text: &str) -> StoreResult<InstanceStatus> {
    InstanceStatus::parse(text).ok_or_else(|| {
        decode_error(
            "instance",
            instance_id,
            "status",
            format!("unknown status {text:?}"),
        )
    })
}

/// Decodes the columns of an instance row that a SQL backend stores as text: its status, its
/// sub-status and its pending control request (ST-22).
///
/// # Errors
///
/// `Decode` naming the instance and the column (`status`, `sub_status`, `control_request`)
/// that does not decode.
///
/// # Examples
///
/// ```
/// use workflow_runtime::store::{InstanceStatus, decode_instance_text_columns};
///
/// let (status, sub_status, control) =
///     decode_instance_text_columns("order-1", "running".to_owned(), None, None).unwrap();
/// assert_eq!((status, sub_status, control), (InstanceStatus::Running, None, None));
/// assert!(decode_instance_text_columns("order-1", "runing".to_owned(), None, None).is_err());
/// ```
#[allow(clippy::needless_pass_by_value)] // each column as a driver reads it, owned
pub fn decode_instance_text_columns(
    instance_id: &str,
    status: String,
    sub_status: Option<String>,
    control_request: Option<String>,
) -> StoreResult<(
    InstanceStatus,
    Option<InstanceSubStatus>,
    Option<ControlRequest>,
)> {
    let status = decode_instance_status(instance_id, &status)?;
    let sub_status = sub_status
        .map(|text| {
            InstanceSubStatus::parse(&text).ok_or_else(|| {
                decode_error(
                    "instance",
                    instance_id,
                    "sub_status",
                    format!("unknown sub-status {text:?}"),
                )
            })
        })
        .transpose()?;
    let control_request = control_request
        .map(|text| decode_control_request(instance_id, &text))
        .transpose()?;
    Ok((status, sub_status, control_request))
}

/// Decodes a stored control request (its JSON text) of instance `instance_id`.
///
/// # Errors
///
/// `Decode` naming the instance (ST-22).
pub fn decode_control_request(instance_id: &str, text: &str) -> StoreResult<ControlRequest> {
    serde_json::from_str(text)
        .map_err(|e| decode_error("instance", instance_id, "control_request", e.to_string()))
}

impl DeadLetterReason {
    /// Decodes the stored reason of dead letter `item_id`.
    ///
    /// # Errors
    ///
    /// `Decode` naming the dead letter for an unknown reason (ST-22).
    pub fn decode(item_id: &str, text: &str) -> StoreResult<Self> {
        Self::parse(text).ok_or_else(|| {
            decode_error(
                "dead letter",
                item_id,
                "reason",
                format!("unknown reason {text:?}"),
            )
        })
    }
}

/// A queue (or dead-letter) row with its JSON columns still encoded: `item` carries
/// `Value::Null` in `payload` and `targets` until [`EncodedQueueItem::decode`].
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedQueueItem {
    /// The item, its JSON columns not yet filled in.
    pub item: QueueItem,
    /// The payload as stored.
    pub payload: String,
    /// The targets as stored.
    pub targets: String,
}

impl EncodedQueueItem {
    /// The item with its JSON columns decoded; `what` names the row in errors (`"queue
    /// item"`, `"dead letter"`).
    ///
    /// # Errors
    ///
    /// `Decode` naming the item and the column (ST-22).
    pub fn decode(self, what: &'static str) -> StoreResult<QueueItem> {
        let mut item = self.item;
        item.payload = serde_json::from_str(&self.payload)
            .map_err(|e| decode_error(what, &item.item_id, "payload", e.to_string()))?;
        item.targets = serde_json::from_str(&self.targets)
            .map_err(|e| decode_error(what, &item.item_id, "targets", e.to_string()))?;
        Ok(item)
    }

    /// A stored JSON column as a quarantined dead letter keeps it (ST-22): valid JSON as it
    /// is, anything else wrapped as `{"undecodable": "<text>"}`, so the dead letter decodes.
    pub fn quarantined_json(raw: &str) -> String {
        match serde_json::from_str::<Value>(raw) {
            Ok(_) => raw.to_owned(),
            Err(_) => serde_json::json!({ "undecodable": raw }).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column named by a `Decode` error.
    fn column(error: StoreError) -> String {
        match error {
            StoreError::Decode { what, id, path, .. } => {
                assert_eq!((what, id.as_str()), ("instance", "wf-1"));
                path
            }
            other => panic!("not a decode error: {other:?}"),
        }
    }

    #[test]
    fn st22_each_text_column_of_an_instance_row_that_does_not_decode_is_named() {
        let decode = |status: &str, sub_status: Option<&str>, control_request: Option<&str>| {
            decode_instance_text_columns(
                "wf-1",
                status.to_owned(),
                sub_status.map(str::to_owned),
                control_request.map(str::to_owned),
            )
        };
        assert_eq!(
            decode("suspended", Some("executing"), Some(r#"{"kind":"resume"}"#)).unwrap(),
            (
                InstanceStatus::Suspended,
                Some(InstanceSubStatus::Executing),
                Some(ControlRequest {
                    kind: ControlKind::Resume,
                    reason: None,
                }),
            )
        );
        assert_eq!(column(decode("paused", None, None).unwrap_err()), "status");
        assert_eq!(
            column(decode("running", Some("asleep"), None).unwrap_err()),
            "sub_status"
        );
        assert_eq!(
            column(decode("running", None, Some("{")).unwrap_err()),
            "control_request"
        );
    }

    #[test]
    fn a_lease_is_read_from_its_columns_only_while_it_has_an_owner_and_an_expiry() {
        let held = LeaseState::from_columns(Some("node-a".to_owned()), 4, Some(10));
        assert_eq!(
            held,
            Some(LeaseState {
                owner: "node-a".to_owned(),
                token: 4,
                expires_at: 10,
            })
        );
        assert_eq!(LeaseState::from_columns(None, 4, Some(10)), None);
        assert_eq!(
            LeaseState::from_columns(Some("node-a".to_owned()), 4, None),
            None
        );
    }
}

/// A debounced send waiting for its window to be quiet (RT-35, C-44): one row per debounce
/// id (the name, key and target of the sends it collapses), holding the last send's stimulus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceRow {
    /// The debounce id: the sends with this id collapse into one delivery.
    pub debounce_id: String,
    /// The id of this burst of sends, kept by the sends that update the row: a new row (after
    /// a delivery) gets a new one.
    pub burst_id: String,
    /// The stimulus name, for display.
    pub name: String,
    /// The stimulus hash (RT-5), for display.
    pub hash: String,
    /// The last send's stimulus (name, key, payload and send options), as JSON text.
    pub stimulus: String,
    /// When the burst's first send was made.
    pub first_sent_at: Micros,
    /// When its last send was made.
    pub last_sent_at: Micros,
    /// When it is delivered, unless another send pushes it back.
    pub due_at: Micros,
    /// How many sends the row collapses (1 for a new row); it identifies the row's version.
    pub sends: u64,
}
