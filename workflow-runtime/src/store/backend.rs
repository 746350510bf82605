//! The backend trait: the thin storage operations a backend implements (ST-1, ST-2).
//!
//! # For backend authors
//!
//! A backend implements [`Store`] (and, optionally, the capability traits of
//! [`Capabilities`]: [`DefinitionStore`], [`ChildWaitIndex`], [`RemoteHints`]) and nothing
//! else; the runtime wraps it in [`Storage`](super::Storage), the policy layer that
//! validates ids and sizes, encodes and decodes state documents, truncates journal details, computes the
//! trigger diff, decides what a final commit removes, fills page defaults and sends wake-up
//! hints. A backend therefore only stores rows and keeps the **atomic guards** no layer
//! above it can keep: the optimistic version (ST-13), the fencing token (ST-14), uniqueness
//! (ids, receipts, one dead letter per item, one idempotency record per key) and the
//! activation scope (ST-17). Everything it needs is public in [`crate::store`]: the rows
//! ([`Commit<String>`](super::Commit), [`NewInstance<String>`](super::NewInstance),
//! [`InstanceRecord<String>`](super::InstanceRecord), ...), the argument types of this
//! module, [`StoreError`], and the conformance suite
//! (`store::conformance`, feature `test-support`) with its
//! `Harness`, so a backend can live outside this crate.
//!
//! Conventions:
//!
//! * State documents arrive and leave as **encoded JSON text** (`S = String`): store it as
//!   is, return it as is. Never parse it.
//! * Every time is passed in (ST-3) as [`Micros`]; a backend never reads a clock.
//! * Every method returns a [`BoxFuture`] borrowing `&self` only (object safety): copy what
//!   you need from the arguments before building the future.
//! * Limits of `0` never reach a backend: [`Storage`](super::Storage) replaces them by the
//!   defaults.
//! * Errors name their row (ST-4, ST-22): a row that cannot be decoded is
//!   [`StoreError::Decode`] for that row alone, never
//!   `Unavailable`.

use super::error::{StoreError, StoreResult};
use super::rows::DebounceRow;
use super::rows::{
    BookmarkQuery, BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter,
    DeadLetterFilter, DeadLetterReason, IdempotencyRecord, IncidentRecord, InstanceFilter,
    InstanceRecord, InstanceStatus, JournalRecord, Lease, ListedInstance, NewIncident, NewInstance,
    PurgeFilter, QueueItem, Renewal, Schedule, ScheduleFiring, StoreStats, TimerRow, TriggerRow,
};
use super::slots::FlowControl;
use crate::base::{BoxFuture, Micros};

/// The bookmark name of a parent waiting on a child workflow (ACT-24), the rows
/// [`ChildWaitIndex::find_child_waits`] returns.
pub const CHILD_WAIT: &str = "wf.sub_workflow";

/// What a lease is about (ST-11, ST-14): an instance's lease (on its row) or a named lease
/// (a singleton job, the owner lock of a file).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseKey {
    /// The lease of one instance.
    Instance(String),
    /// A named lease.
    Named(String),
}

impl LeaseKey {
    /// The lease of instance `id`.
    pub fn instance(id: impl Into<String>) -> Self {
        Self::Instance(id.into())
    }

    /// The named lease `name`.
    pub fn named(name: impl Into<String>) -> Self {
        Self::Named(name.into())
    }

    /// The resource name used in errors: `instance:<id>` or `lease:<name>`.
    pub fn resource(&self) -> String {
        match self {
            Self::Instance(id) => format!("instance:{id}"),
            Self::Named(name) => format!("lease:{name}"),
        }
    }
}

/// How [`Store::claim_instance`] takes the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseClaim {
    /// The owner taking (or holding) the lease.
    pub owner: String,
    /// `None`: acquire, failing with `LeaseHeld` while another live lease exists (a token one
    /// more than the last ever issued). `Some(token)`: the caller holds that lease already (a
    /// recovery claim): refresh it, or `Fenced` when it is not current.
    pub token: Option<u64>,
    /// Wall-clock now (ST-3).
    pub now: Micros,
    /// The lease duration.
    pub ttl: Micros,
}

/// An instance loaded under its lease by [`Store::claim_instance`].
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRecord<S = serde_json::Value> {
    /// The lease held now.
    pub lease: Lease,
    /// The instance, read in the same operation.
    pub record: InstanceRecord<S>,
}

/// What [`Store::purge`] removes (ST-30, ST-31): every deletion the runtime makes outside a
/// commit. Each returns how many rows (instances, dead letters, ...) it removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeTarget {
    /// One final instance with its dependent rows; a live one gives `NotTerminal`, an
    /// unknown one `NotFound` (ST-32).
    Instance(String),
    /// Final instances matching the filter, in atomic batches of `batch_size`. The filter
    /// reaching a backend names its statuses (only final ones) and a non-zero batch size.
    Finished(PurgeFilter),
    /// One dead letter, by its item id.
    DeadLetter(String),
    /// Up to `limit` dead letters that died before `before`.
    DeadLettersBefore {
        /// The cut-off.
        before: Micros,
        /// The most to remove.
        limit: usize,
    },
    /// Up to `limit` receipts written before `before`.
    ReceiptsBefore {
        /// The cut-off.
        before: Micros,
        /// The most to remove.
        limit: usize,
    },
    /// Up to `limit` idempotency records created before `before`.
    IdempotencyRecordsBefore {
        /// The cut-off.
        before: Micros,
        /// The most to remove.
        limit: usize,
    },
    /// Up to `limit` queue items whose `expires_at <= now` and that are not held: moved to
    /// the dead letters as `Expired` (C-15), not deleted.
    ExpiredQueueItems {
        /// The instant.
        now: Micros,
        /// The most to move.
        limit: usize,
    },
    /// One trigger schedule, by its id.
    Schedule(String),
}

/// Which bookmark rows [`Store::find_bookmarks`] returns, in `(created_at, bookmark_id)`
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookmarkSelect {
    /// By stimulus hash with filters and a keyset page (ST-6, C-8).
    Hash(BookmarkQuery),
    /// Every bookmark of one instance.
    Instance(String),
}

/// Which trigger rows [`Store::find_triggers`] returns, by `(definition_name, node_id,
/// hash)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerSelect {
    /// Triggers with any of these hashes.
    Hashes(Vec<String>),
    /// Every trigger of one definition.
    Definition(String),
}

/// The trigger rows [`Store::write_triggers`] changes for one definition (the diff is
/// computed by [`Storage`](super::Storage)).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TriggerWrite {
    /// Rows to insert or replace, keyed by `(definition_name, node_id, hash)`.
    pub upserts: Vec<TriggerRow>,
    /// Rows to delete: `(node_id, hash)` of the definition.
    pub deletes: Vec<(String, String)>,
}

/// Which timer rows [`Store::list_timers`] returns, in `(due_at, timer_id)` order (by id for
/// schedules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerScope {
    /// One instance's timers.
    Instance(String),
    /// A definition's trigger schedules (rows without an instance).
    Schedules(String),
}

/// What [`Store::claim_due_timers`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DueTimers {
    /// The timers claimed, in `(due_at, timer_id)` order.
    pub claimed: Vec<TimerRow>,
    /// After the claim: the earliest `due_at` among unparked timers not under a live claim
    /// at `now` (what the timer driver sleeps until); `now` while a damaged row waits to be
    /// claimed.
    pub next_due: Option<Micros>,
    /// Unparked rows whose due time does not decode as a time (ST-22: a value of another
    /// type, or past [`LATEST_DUE`]), claimed like due timers so that one process reports
    /// each. Without this, such a row is never due and its instance sleeps forever.
    pub damaged: Vec<DamagedTimer>,
}

/// The latest due time a timer row can hold: the last microsecond of the year 9999. A stored
/// due time past it (or not a number at all) is a damaged row, reported in
/// [`DueTimers::damaged`].
pub const LATEST_DUE: Micros = 253_402_300_799_999_999;

/// A timer row whose due time does not decode (see [`DueTimers::damaged`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedTimer {
    /// The timer's id.
    pub timer_id: String,
    /// Its instance (`None` for a trigger schedule).
    pub instance_id: Option<String>,
    /// A trigger schedule's definition (`None` for an instance's timer).
    pub definition_name: Option<String>,
    /// What the `due_at` column holds, as text.
    pub found: String,
}

impl DamagedTimer {
    /// The row's error: a [`StoreError::Decode`] naming the
    /// timer, its instance and the `due_at` column.
    pub fn error(&self) -> StoreError {
        let id = match &self.instance_id {
            Some(instance) => format!("{} of instance {instance}", self.timer_id),
            None => self.timer_id.clone(),
        };
        StoreError::Decode {
            what: "timer",
            id,
            path: "due_at".to_owned(),
            message: format!("`{}` is not a due time", self.found),
        }
    }
}

/// What [`DebounceStore::claim_due_debounces`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DueDebounces {
    /// The rows claimed, in `(due_at, debounce_id)` order.
    pub claimed: Vec<DebounceRow>,
    /// After the claim: the earliest `due_at` among rows not under a live claim at `now`.
    pub next_due: Option<Micros>,
}

/// A send's writes for [`Store::enqueue`]: queue items and the send's idempotency record,
/// in one atomic operation (RT-19).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Enqueue {
    /// Items to insert; an id already queued or dead gives `AlreadyExists`.
    pub items: Vec<QueueItem>,
    /// The idempotency record of the send. When a record with its key exists, nothing at all
    /// is written and the existing record is returned (unless `replace_record`).
    pub idempotency: Option<IdempotencyRecord>,
    /// The record replaces an existing one with its key, and the items are written: a send
    /// completing the record its delivery's commit wrote ([`Commit::idempotency`]).
    pub replace_record: bool,
}

/// How [`Store::settle_queue_item`] settles a claimed (or unclaimed) queue item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Release `owner`'s claim so the item can be claimed again (RT-27).
    Release {
        /// The claimer.
        owner: String,
        /// Tell the other processes the item is claimable again (a `QueueChanged` wake-up,
        /// ST-18). Off when this process put back an item it had already failed to deliver
        /// for a reason of its own (the instance pinned to a version it does not run, paused,
        /// or nothing eligible yet): announcing it again would only make the processes that
        /// cannot deliver it either pass it back and forth (RT-27).
        announce: bool,
    },
    /// Keep (or take back) `owner`'s claim until `until` (RT-29): it holds when the item is
    /// still queued and its claim is `owner`'s, lapsed or released; an item claimed anew by
    /// another owner, or gone, is not touched.
    Renew {
        /// The claimer.
        owner: String,
        /// The instant: a claim of another owner that expires at or before it has lapsed.
        now: Micros,
        /// The claim's new expiry.
        until: Micros,
    },
    /// Delete the item outside a commit (a stimulus nobody takes any more).
    Ack,
    /// A failed delivery: attempts + 1, the error recorded, the claim released; at
    /// `max_attempts` the item becomes a dead letter `Failed` (C-16).
    Fail {
        /// The error.
        error: String,
        /// The instant.
        now: Micros,
        /// The attempts allowed.
        max_attempts: u32,
    },
    /// Move the item to the dead letters, atomically and at most once (C-17).
    DeadLetter {
        /// Why.
        reason: DeadLetterReason,
        /// The error, if any.
        error: Option<String>,
        /// The instant.
        now: Micros,
    },
}

/// What [`Store::settle_queue_item`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The item was released (or was not claimed by that owner).
    Released,
    /// `Renew`: whether the claim is `owner`'s until the new expiry.
    Renewed(bool),
    /// `Ack`: whether the item existed.
    Acked(bool),
    /// `Fail`: the item stays queued with this many attempts.
    Retry {
        /// Attempts so far.
        attempts: u32,
    },
    /// `Fail` at the maximum, or `DeadLetter`: whether this call moved the item.
    DeadLettered(bool),
}

/// Which incidents [`Store::list_incidents`] returns, in `(created_at, incident_id)` order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IncidentQuery {
    /// Only this instance's.
    pub instance_id: Option<String>,
    /// Only unresolved ones.
    pub unresolved_only: bool,
    /// Keyset: only incidents after this `(created_at, incident_id)`.
    pub after: Option<(Micros, String)>,
    /// Page size (0 means 100; `Storage` fills it in).
    pub limit: usize,
}

/// A registered definition as recorded in the store: its JSON form and fingerprint, so
/// tools can show it without the application's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionRecord {
    /// The definition's name.
    pub name: String,
    /// Its version fingerprint.
    pub version: String,
    /// The definition's JSON form (the model's serialization), as text.
    pub json: String,
    /// When this version was first recorded.
    pub recorded_at: Micros,
}

/// The capability of keeping debounced sends (RT-35, C-44), offered through
/// [`Store::capabilities`]; every built-in backend has it. Without it a debounced send fails
/// with [`StoreError::Invalid`] and nothing is stored.
pub trait DebounceStore: Send + Sync {
    /// Records a debounced send atomically: inserts `row` (with `sends` 1) when no row has its
    /// debounce id; otherwise replaces that row's `name`, `hash`, `stimulus`, `last_sent_at`
    /// and `due_at` with `row`'s and adds one to its `sends`, keeping its `burst_id`,
    /// `first_sent_at` and claim. Returns the row as stored.
    fn put_debounce(&self, row: DebounceRow) -> BoxFuture<'_, StoreResult<DebounceRow>>;

    /// Claims up to `limit` (possibly 0) rows with `due_at <= now` and no live claim, in
    /// `(due_at, debounce_id)` order, for `owner` until `now + claim_ttl`.
    fn claim_due_debounces(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueDebounces>>;

    /// Settles a claimed row after its delivery: deletes it when its `burst_id` and `sends`
    /// are still the given ones (no send came since it was claimed); otherwise releases its
    /// claim, so the later sends are delivered when due. Returns whether it was deleted.
    fn finish_debounce(
        &self,
        debounce_id: &str,
        burst_id: &str,
        sends: u64,
    ) -> BoxFuture<'_, StoreResult<bool>>;
}

/// The optional capability of recording definitions (offered through
/// [`Store::capabilities`]).
pub trait DefinitionStore: Send + Sync {
    /// Records a definition version; an existing `(name, version)` is left as it is.
    /// Returns whether it was inserted.
    fn put_definition(&self, definition: DefinitionRecord) -> BoxFuture<'_, StoreResult<bool>>;

    /// Recorded definitions, by `(name, recorded_at)`: all of them, or only those named
    /// `name`.
    fn list_definitions(
        &self,
        name: Option<&str>,
    ) -> BoxFuture<'_, StoreResult<Vec<DefinitionRecord>>>;
}

/// The optional capability of finding the parents waiting on a child workflow from an index
/// (offered through [`Store::capabilities`]). Without it, [`Storage`](super::Storage) pages
/// through the suspended instances and their bookmarks instead: correct, but
/// O(suspended instances).
pub trait ChildWaitIndex: Send + Sync {
    /// Bookmarks named [`CHILD_WAIT`] (ACT-24), in bookmark-id order after `after`, at most
    /// `limit`: what start-up reads to resume a parent whose child finished before a crash,
    /// so it need not read every suspended instance.
    fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>>;
}

/// The optional capability of answering a send's routing reads in one round trip (offered
/// through [`Store::capabilities`]): the trigger rows with any of `hashes` (none when it is
/// empty) and the first page of bookmark rows matching `bookmarks`, exactly as
/// [`Store::find_triggers`] and [`Store::find_bookmarks`] return them (RT-15, RT-17).
/// Without it, [`Storage`](super::Storage) runs the two reads at once; a backend whose reads
/// are round trips to a server offers it to save one.
pub trait RouteReads: Send + Sync {
    /// The trigger rows and the first bookmark page a send routes by, read together.
    fn find_routes(
        &self,
        hashes: Vec<String>,
        bookmarks: BookmarkQuery,
    ) -> BoxFuture<'_, StoreResult<(Vec<TriggerRow>, Vec<BookmarkRow>)>>;
}

/// The optional capability of finding receipts by their stimulus (offered through
/// [`Store::capabilities`]): whether any instance has consumed a stimulus (RT-19, C-46). A
/// queued stimulus routed again after its process stopped between the delivery and the
/// acknowledgement asks it when it reaches nobody; without it, such a stimulus is queued
/// again and waits to expire.
pub trait ReceiptIndex: Send + Sync {
    /// Whether a receipt for `stimulus_id` exists, for any instance.
    fn consumed_anywhere(&self, stimulus_id: &str) -> BoxFuture<'_, StoreResult<bool>>;
}

/// The optional capability of finding instances by the keys of their waits (offered through
/// [`Store::capabilities`]): a commit's [`Commit::keys_added`](super::Commit::keys_added) are
/// indexed with its instance and kept until the instance is purged (RT-36, C-47). A send by
/// name and key that no instance waits for asks it, to say which instances with that key
/// exist and how they are; without it, such a send says only that none waits.
pub trait KeyIndex: Send + Sync {
    /// The instances indexed with `key` (a [`key_digest`](crate::routing::key_digest)), at
    /// most `limit`, in instance-id order.
    fn instances_with_key(
        &self,
        key: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<String>>>;
}

/// The optional capability of hearing of changes made by other processes (a database
/// notification, say; offered through [`Store::capabilities`]). [`Storage`](super::Storage)
/// forwards the hints to its own subscribers (ST-18) and counts each as a change (RT-27). A
/// backend only this process writes does not need it.
pub trait RemoteHints: Send + Sync {
    /// A new subscription to the hints heard from other processes.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp>;

    /// Whether every change another process makes that could make queued work deliverable
    /// is heard now (RT-27): then the queue worker's sweep passes only when something
    /// changed. `false` (the default) while a hint can be missed unnoticed (no listener, or
    /// one that is not connected): the sweep then passes every time. A backend whose
    /// listener lost its connection says so with a hint once it listens again (the sweep
    /// hints, counted as a change), so hints missed meanwhile cost one pass, not a stuck
    /// item.
    fn hears_every_change(&self) -> bool {
        false
    }

    /// Whether a change can go unheard even while [`RemoteHints::hears_every_change`] holds:
    /// a hint sent after its commit, lost to a crash of its process in between, or a claim
    /// of a process that died lapsing unannounced. The queue worker then still passes at
    /// least once per lease TTL (RT-27). `true` by default; a backend that compares states
    /// rather than relaying messages (SQLite's `data_version`, with one claiming process per
    /// file) says `false`.
    fn can_miss_a_crash(&self) -> bool {
        true
    }

    /// Sends the hints of this store's committed writes that still wait to be sent, and
    /// returns once they are (or failed: hints are advisory). A process about to exit awaits
    /// it (see [`Storage::flush_hints`](super::Storage::flush_hints)); by default there is
    /// nothing to send.
    fn flush(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// The optional capability of claiming an instance for a caller that kept the document it
/// committed last (ENG-53, offered through [`Store::capabilities`]): the comparison is made
/// where the text is held, so it need not be copied out. Without it,
/// [`Storage`](super::Storage) claims with [`Store::claim_instance`] and compares the text it
/// read.
pub trait ClaimKnown: Send + Sync {
    /// [`Store::claim_instance`], the record's state `None` when the stored row has
    /// `known_version` and, byte for byte, `known_text`; the stored text otherwise.
    fn claim_instance_known<'a>(
        &'a self,
        instance_id: &'a str,
        claim: LeaseClaim,
        known_version: u64,
        known_text: &'a str,
    ) -> BoxFuture<'a, StoreResult<ClaimedRecord<Option<String>>>>;
}

/// The optional capability of counting every change made to the store, by whoever shares it
/// (offered through [`Store::capabilities`]): the in-process store, which several runtimes
/// of one process may share, each with its own [`Storage`](super::Storage). The count moves
/// with every write that may make held work deliverable (a commit, a creation, an enqueue,
/// a control request, an item put back with an announcement or after a failed attempt, a
/// replayed dead letter, a registration's triggers), and with nothing the queue worker's own
/// pass does to an item it cannot deliver: claims, renewals, lease releases (an item left
/// for a busy instance is looked at by every sweep anyway) and an item put back silently
/// leave it as it is. `Storage` adds it
/// to its own count ([`Storage::changes`](super::Storage::changes)), so a runtime's queue
/// worker hears the writes of the others sharing the store (RT-27).
pub trait ChangeCount: Send + Sync {
    /// The count: it only grows.
    fn changes(&self) -> u64;
}

/// The optional capability of counting what a store holds in aggregate queries
/// ([`Storage::census`](super::Storage::census) pages through the instances and dead letters
/// of a backend without it, and cannot count its queue).
pub trait CensusCount: Send + Sync {
    /// Instances by definition and status, the queued stimuli and the dead letters.
    fn census(&self) -> BoxFuture<'_, StoreResult<Census>>;

    /// Instances by definition and version: `(name, version, count)`, sorted.
    fn version_census(&self) -> BoxFuture<'_, StoreResult<Vec<(String, String, u64)>>>;
}

/// The optional capabilities of a backend, returned by [`Store::capabilities`]: each is a
/// separate trait the backend may implement (usually on itself), so the [`Store`] trait
/// stays the thin operations every backend needs.
///
/// # Examples
///
/// ```
/// use workflow_runtime::store::{Capabilities, MemoryStore, Store};
///
/// let store = MemoryStore::new();
/// let capabilities = store.capabilities();
/// assert!(capabilities.definitions.is_some());
/// assert!(capabilities.remote_hints.is_none());
/// // A backend author builds its own from the default:
/// let none = Capabilities::default();
/// assert!(none.child_waits.is_none());
/// ```
#[derive(Clone, Copy, Default)]
#[non_exhaustive]
pub struct Capabilities<'a> {
    /// Recording definitions.
    pub definitions: Option<&'a dyn DefinitionStore>,
    /// Finding child waits from an index.
    pub child_waits: Option<&'a dyn ChildWaitIndex>,
    /// Hearing of other processes' changes.
    pub remote_hints: Option<&'a dyn RemoteHints>,
    /// Reading a send's routes in one round trip.
    pub routes: Option<&'a dyn RouteReads>,
    /// Counting the changes of everyone sharing the store.
    pub change_count: Option<&'a dyn ChangeCount>,
    /// Claiming with a kept document, compared where it is held.
    pub claim_known: Option<&'a dyn ClaimKnown>,
    /// Counting instances, queued stimuli and dead letters in aggregate queries.
    pub census: Option<&'a dyn CensusCount>,
    /// Keeping flow-control slots (QU-5).
    pub flow_control: Option<&'a dyn FlowControl>,
    /// Writing work inside an application's own PostgreSQL transaction (ST-37).
    #[cfg(feature = "postgres")]
    pub postgres: Option<&'a super::PostgresStore>,
    /// Keeping debounced sends (RT-35).
    pub debounce: Option<&'a dyn DebounceStore>,
    /// Finding receipts by their stimulus (RT-19).
    pub receipts: Option<&'a dyn ReceiptIndex>,
    /// Finding instances by the keys of their waits (RT-36).
    pub keys: Option<&'a dyn KeyIndex>,
}

impl<'a> Capabilities<'a> {
    /// With the PostgreSQL store itself: work written in an application's transaction
    /// (ST-37).
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn with_postgres(mut self, postgres: &'a super::PostgresStore) -> Self {
        self.postgres = Some(postgres);
        self
    }

    /// With the debounced-sends capability.
    #[must_use]
    pub fn with_debounce(mut self, debounce: &'a dyn DebounceStore) -> Self {
        self.debounce = Some(debounce);
        self
    }

    /// With the definitions capability.
    #[must_use]
    pub fn with_definitions(mut self, definitions: &'a dyn DefinitionStore) -> Self {
        self.definitions = Some(definitions);
        self
    }

    /// With the child-wait index capability.
    #[must_use]
    pub fn with_child_waits(mut self, child_waits: &'a dyn ChildWaitIndex) -> Self {
        self.child_waits = Some(child_waits);
        self
    }

    /// With the receipts found by their stimulus.
    #[must_use]
    pub fn with_receipts(mut self, receipts: &'a dyn ReceiptIndex) -> Self {
        self.receipts = Some(receipts);
        self
    }

    /// With instances found by the keys of their waits.
    #[must_use]
    pub fn with_keys(mut self, keys: &'a dyn KeyIndex) -> Self {
        self.keys = Some(keys);
        self
    }

    /// With the combined routing reads.
    #[must_use]
    pub fn with_routes(mut self, routes: &'a dyn RouteReads) -> Self {
        self.routes = Some(routes);
        self
    }

    /// With the remote-hints capability.
    #[must_use]
    pub fn with_remote_hints(mut self, remote_hints: &'a dyn RemoteHints) -> Self {
        self.remote_hints = Some(remote_hints);
        self
    }

    /// With the store-wide change count.
    #[must_use]
    pub fn with_change_count(mut self, change_count: &'a dyn ChangeCount) -> Self {
        self.change_count = Some(change_count);
        self
    }

    /// With claims compared against a kept document where it is held.
    #[must_use]
    pub fn with_claim_known(mut self, claim_known: &'a dyn ClaimKnown) -> Self {
        self.claim_known = Some(claim_known);
        self
    }

    /// With counts from aggregate queries.
    #[must_use]
    pub fn with_census(mut self, census: &'a dyn CensusCount) -> Self {
        self.census = Some(census);
        self
    }

    /// With flow-control slots.
    #[must_use]
    pub fn with_flow_control(mut self, flow_control: &'a dyn FlowControl) -> Self {
        self.flow_control = Some(flow_control);
        self
    }
}

impl std::fmt::Debug for Capabilities<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("definitions", &self.definitions.is_some())
            .field("child_waits", &self.child_waits.is_some())
            .field("remote_hints", &self.remote_hints.is_some())
            .field("routes", &self.routes.is_some())
            .field("change_count", &self.change_count.is_some())
            .field("claim_known", &self.claim_known.is_some())
            .field("census", &self.census.is_some())
            .field("flow_control", &self.flow_control.is_some())
            .finish()
    }
}

/// The backend trait (ST-1): thin, atomic storage operations with the guards only a backend
/// can keep. Hold it as `Arc<dyn Store>` and use it through [`Storage`](super::Storage);
/// calling it directly skips every policy (no validation, no hints, encoded state).
///
/// Every method is one atomic logical operation. Times are passed in (ST-3): due times, TTLs
/// and ages on the workflow clock, lease and claim expiry on the wall clock. `ttl`
/// parameters are durations in microseconds.
pub trait Store: Send + Sync + 'static {
    // ----- instances -----

    /// Creates an instance at version 1, with its receipt and consumed queue item, under its
    /// activation guard (ST-17). An existing id gives `AlreadyExists`, a non-final instance
    /// in the same scope `ActivationConflict`; both change nothing (C-2, C-21).
    fn create_instance(&self, instance: NewInstance<String>) -> BoxFuture<'_, StoreResult<u64>>;

    /// Loads an instance: columns, version and state from one snapshot (ST-13).
    fn load_instance(
        &self,
        instance_id: &str,
    ) -> BoxFuture<'_, StoreResult<InstanceRecord<String>>>;

    /// Takes (or refreshes, see [`LeaseClaim::token`]) the instance's lease and loads it, in
    /// one operation: the first call of a run (ST-14). `NotFound`, `LeaseHeld` or `Fenced`
    /// otherwise, writing nothing.
    fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> BoxFuture<'_, StoreResult<ClaimedRecord<String>>>;

    /// Applies a commit atomically (ST-16) and returns the new version: the instance row,
    /// bookmark diff (and the commit's correlation id on all the instance's bookmark rows),
    /// timers, journal (with [`Commit::max_journal_entries`] enforced), receipts, the
    /// consumed queue items (deleted), created instances, queue items, control requests and
    /// incidents. A stale version gives `Conflict`, a superseded token `Fenced`, an existing
    /// receipt `ReceiptExists`; in every failure nothing is written.
    fn commit(&self, commit: Commit<String>) -> BoxFuture<'_, StoreResult<u64>>;

    /// Records a control request (cancel, suspend, resume, retry) without changing the
    /// version (ST-13, C-29), replacing one not yet honoured, unless the instance is final;
    /// returns the instance's status read in the same operation (the request was recorded
    /// if and only if it is not final: [`Storage`](super::Storage) refuses the rest).
    /// Unknown instances give `NotFound`.
    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<InstanceStatus>>;

    /// Instance summaries (no state documents) with filters, in `instance_id` keyset order
    /// (C-23, ST-22). `limit` is at least 1.
    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>>;

    /// Claims up to `limit` `Running` instances whose lease is absent or expired at `now`,
    /// oldest `updated_at` first, acquiring their leases for `owner` (ST-15, C-13).
    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>>;

    /// Removes what `target` names (ST-30, ST-31) and returns how many rows.
    fn purge(&self, target: PurgeTarget) -> BoxFuture<'_, StoreResult<u64>>;

    // ----- leases -----

    /// Acquires a lease if none is live at `now` (ST-14): the token is one more than the last
    /// ever issued for the key. A live lease gives `LeaseHeld`; an unknown instance
    /// `NotFound`.
    fn acquire_lease(
        &self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>>;

    /// Extends the lease to `now + ttl` if `token` is current, else `Fenced`; for an instance
    /// also returns its pending control request (ST-14).
    fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>>;

    /// Releases the lease if `token` is current, else `Fenced`. Tokens are never reused.
    fn release_lease(&self, key: &LeaseKey, token: u64) -> BoxFuture<'_, StoreResult<()>>;

    // ----- bookmarks, receipts, triggers -----

    /// Bookmark rows, in `(created_at, bookmark_id)` order (ST-6, C-8).
    fn find_bookmarks(
        &self,
        select: BookmarkSelect,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>>;

    /// Whether the instance has consumed the stimulus (RT-19).
    fn has_receipt(&self, instance_id: &str, stimulus_id: &str)
    -> BoxFuture<'_, StoreResult<bool>>;

    /// Trigger rows (ST-7).
    fn find_triggers(&self, select: TriggerSelect) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>>;

    /// Upserts and deletes trigger rows of one definition in one transaction (ST-7, ST-17).
    fn write_triggers(
        &self,
        definition_name: &str,
        write: TriggerWrite,
    ) -> BoxFuture<'_, StoreResult<()>>;

    // ----- timers and schedules -----

    /// Claims up to `limit` (possibly 0) unparked timers with `due_at <= now` and no live
    /// claim, in `(due_at, timer_id)` order, for `owner` until `now + claim_ttl` (ST-15,
    /// C-12), and reports the next due time.
    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueTimers>>;

    /// Timer rows of an instance or a definition's schedules.
    fn list_timers(&self, scope: TimerScope) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>>;

    /// Registers a trigger schedule if no timer has its id; returns whether it was inserted
    /// (an existing one is left as it is, TM-12, TM-13).
    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>>;

    /// Fires one occurrence of a schedule atomically (ST-17, TM-11 to TM-13): if it is still
    /// due at `expected_due_at`, creates `instance` (with its activation guard; the outcome
    /// is [`ScheduleFiring::of_creation`]) and advances the schedule to `next_due`, or marks
    /// it fired when `None`. Without an instance it only advances the schedule
    /// ([`ScheduleFiring::Skipped`], TM-19).
    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<String>>,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>>;

    // ----- journal -----

    /// Journal entries with `seq >= from_seq`, at most `limit`, in order (ST-10), details as
    /// stored text: [`Storage`](super::Storage) decodes them, so one bad detail never hides
    /// the other entries.
    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord<String>>>>;

    // ----- queue and dead letters -----

    /// Writes a send's queue items and idempotency record atomically (RT-19, RT-25); returns
    /// the existing record (having written nothing) when its key is taken.
    fn enqueue(&self, send: Enqueue) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>>;

    /// Claims up to `limit` items in `(sent_at, item_id)` order that are not expired (or are
    /// held) and not under a live claim, until `now + claim_ttl` (ST-15, C-14).
    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>>;

    /// Releases, acknowledges, fails or dead-letters one queue item.
    fn settle_queue_item(
        &self,
        item_id: &str,
        settlement: Settlement,
    ) -> BoxFuture<'_, StoreResult<Settled>>;

    /// Moves a dead letter back into the queue, unclaimed, as
    /// [`QueueItem::replayed`](super::QueueItem::replayed) makes its item (C-18); `NotFound`
    /// without it, `AlreadyExists` when the id is queued.
    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>>;

    /// Dead letters matching the filter, in `(dead_at, item_id)` keyset order (C-18).
    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>>;

    // ----- incidents and idempotency records -----

    /// Records an incident alone, leaving the instance row untouched (FLT-9). An existing id
    /// gives `AlreadyExists`.
    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>>;

    /// Incidents of one instance or of all (FLT-6, ST-12).
    fn list_incidents(
        &self,
        query: IncidentQuery,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>>;

    /// Looks up an idempotency record (C-20).
    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>>;

    // ----- maintenance and capabilities -----

    /// Operation counters.
    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>>;

    /// The optional capabilities the backend offers (none by default): see
    /// [`Capabilities`].
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::default()
    }
}

// ----- change hints and the decisions every backend makes alike (the backend kit) -----

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
    /// A process was found dead (ST-36): what its owner held (instance leases, timer and
    /// queue claims) was released at once, for the recovery sweep to take over.
    OwnerGone {
        /// The dead process's owner name.
        owner: String,
    },
    /// A `Running` instance was created that no process is about to run (written in an
    /// application's transaction, ST-37): a recovery pass runs it at once.
    InstanceUnclaimed {
        /// The instance.
        id: String,
    },
    /// A slot of a flow-control queue may be free for a waiter (QU-12): a release named
    /// `holder` as served next, or (`holder` is `None`) slots of a dead process went back to
    /// the queue and every waiter of it may ask again.
    SlotFree {
        /// The queue.
        queue: String,
        /// The waiter served next, if one is named.
        holder: Option<String>,
    },
}

/// Waits until `hints` bring one that `wanted` picks, or hints were lost (whatever was
/// missed may have been it): the caller then looks again. Never returns without hints (`None`)
/// or once they are closed; callers race it with a pause of their own, as hints may be lost.
pub(crate) async fn hint_heard(
    hints: Option<&mut tokio::sync::broadcast::Receiver<WakeUp>>,
    wanted: impl Fn(&WakeUp) -> bool,
) {
    use tokio::sync::broadcast::error::RecvError;
    let Some(hints) = hints else {
        return std::future::pending().await;
    };
    loop {
        match hints.recv().await {
            Ok(hint) if wanted(&hint) => return,
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => return std::future::pending().await,
            Ok(_) => {}
        }
    }
}

impl WakeUp {
    /// The hints a successful commit produces (ST-18, C-28). [`Storage`](super::Storage) sends them to its
    /// subscribers; a backend that tells other processes of its changes (a database
    /// notification, see [`RemoteHints`]) sends the same ones.
    pub fn of_commit<S, D>(c: &Commit<S, D>) -> Vec<Self> {
        let mut hints = Vec::new();
        if !c.bookmarks_added.is_empty() || !c.queue_items.is_empty() {
            hints.push(Self::QueueChanged);
        }
        if !c.timers_added.is_empty() || c.timers_parked == Some(false) {
            hints.push(Self::TimersChanged {
                earliest: c.timers_added.iter().map(|t| t.due_at).min(),
            });
        }
        if c.status.is_final() {
            hints.push(Self::InstanceTerminal {
                id: c.instance_id.clone(),
            });
        } else if c.status == InstanceStatus::Running && c.release_lease {
            hints.push(Self::InstanceRunnable {
                id: c.instance_id.clone(),
            });
        }
        hints.extend(c.instances_created.iter().filter_map(Self::of_creation));
        for (id, _) in &c.control_requests {
            hints.push(Self::ControlRequested { id: id.clone() });
        }
        hints
    }

    /// The hint of a creation: a `Running` instance is runnable.
    pub fn of_creation<S>(instance: &NewInstance<S>) -> Option<Self> {
        (instance.status == InstanceStatus::Running).then(|| Self::InstanceRunnable {
            id: instance.instance_id.clone(),
        })
    }
}

impl QueueItem {
    /// What a replayed dead letter's item becomes (C-18), for a backend's
    /// [`Store::replay_dead_letter`]: the same item and stimulus ids, enqueued at `now` with
    /// a fresh TTL (`expires_at = now + ttl`), no attempts, no error. (A backend inserts it
    /// unclaimed.)
    #[must_use]
    pub fn replayed(mut self, now: Micros, ttl: Micros) -> Self {
        self.enqueued_at = now;
        self.expires_at = now.saturating_add(ttl);
        self.attempts = 0;
        self.last_error = None;
        self.last_attempt_at = None;
        self
    }
}

impl ScheduleFiring {
    /// What a firing did, from the backend's attempt to create its instance inside
    /// [`Store::fire_schedule`] (TM-11, RT-16): created is `Started`; a refusal by the
    /// activation guard is `Refused` (the schedule advances anyway, the backend carries on);
    /// any other error is the firing's error (the backend writes nothing).
    ///
    /// # Errors
    ///
    /// `created`'s error, unless it is `ActivationConflict`.
    pub fn of_creation(created: StoreResult<()>) -> StoreResult<Self> {
        match created {
            Ok(()) => Ok(Self::Started),
            Err(StoreError::ActivationConflict { existing, .. }) => Ok(Self::Refused { existing }),
            Err(e) => Err(e),
        }
    }
}
