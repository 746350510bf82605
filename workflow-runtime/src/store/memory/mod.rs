//! `MemoryStore`: every rule of the store contract except durability (ST-25).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::ready;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::base::BoxFuture;
use crate::base::Micros;
use crate::store::backend::DefinitionRecord;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{
    ControlRequest, DeadLetter, DebounceRow, IdempotencyRecord, IncidentRecord, InstanceStatus,
    InstanceSubStatus, JournalRecord, QueueItem, StoreStats, TimerRow, TriggerRow,
};

mod flow;
mod ops;
mod tables;

/// An in-process store for tests and quick starts (ST-25).
///
/// It implements every rule of the contract (versions, leases, fencing, claims, TTLs, purge)
/// except durability. State documents are kept encoded as JSON text, so loads exercise
/// decoding and cannot alias engine memory. Purge frees everything it removes, so a
/// long-running process does not grow without bound.
///
/// Several runtimes of one process may share one store, each through its own
/// [`Storage`](super::Storage): the store counts every write that may make held work
/// deliverable, whoever made it ([`ChangeCount`](super::ChangeCount)), so each runtime's
/// queue worker hears the others' writes (RT-27).
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// The store-wide change count ([`ChangeCount`](super::ChangeCount)).
    changes: AtomicU64,
}

#[derive(Debug, Clone)]
pub(super) struct MemInstance {
    pub(super) definition_name: String,
    pub(super) definition_version: String,
    pub(super) status: InstanceStatus,
    pub(super) sub_status: Option<InstanceSubStatus>,
    pub(super) correlation_id: Option<String>,
    pub(super) version: u64,
    pub(super) lease_owner: Option<String>,
    pub(super) lease_token: u64,
    pub(super) lease_expires_at: Option<Micros>,
    pub(super) control_request: Option<ControlRequest>,
    pub(super) origin_at: Micros,
    pub(super) created_at: Micros,
    pub(super) updated_at: Micros,
    pub(super) finished_at: Option<Micros>,
    pub(super) activation_scope: Option<String>,
    pub(super) state: String,
    pub(super) listing: Option<String>,
    /// The instance's journal, oldest first (ascending `seq`): a commit appends its entries
    /// at the back and the cap (ENG-42) drops the excess from the front, without a B-tree
    /// insert per entry. It goes with the instance when that is purged.
    pub(super) journal: VecDeque<JournalRecord<String>>,
    /// The ids of the instance's bookmarks: its rows without scanning them all, and without
    /// a second copy of its id per bookmark.
    pub(super) bookmarks: Vec<String>,
}

/// A bookmark as the memory store keeps it: a [`BookmarkRow`](super::BookmarkRow) without
/// its id, which is its key.
#[derive(Debug, Clone)]
pub(super) struct MemBookmark {
    pub(super) instance_id: String,
    pub(super) hash: String,
    pub(super) name: String,
    pub(super) node_id: String,
    pub(super) context_id: u64,
    pub(super) correlation_id: Option<String>,
    pub(super) definition_name: String,
    pub(super) definition_version: String,
    pub(super) look_back: Option<Micros>,
    pub(super) created_at: Micros,
}

#[derive(Debug, Clone)]
pub(super) struct Claimed<T> {
    pub(super) row: T,
    pub(super) claim_owner: Option<String>,
    pub(super) claim_expires_at: Option<Micros>,
}

impl<T> Claimed<T> {
    pub(super) fn new(row: T) -> Self {
        Self {
            row,
            claim_owner: None,
            claim_expires_at: None,
        }
    }

    fn claim_live(&self, now: Micros) -> bool {
        self.claim_owner.is_some() && self.claim_expires_at.is_some_and(|at| at > now)
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct NamedLease {
    pub(super) owner: Option<String>,
    pub(super) token: u64,
    pub(super) expires_at: Micros,
}

#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) instances: BTreeMap<String, MemInstance>,
    pub(super) bookmarks: BTreeMap<String, MemBookmark>,
    /// hash to `(created_at, bookmark_id)`: the lookup index of ST-6. Keyed by the hash
    /// alone, so a lookup borrows the query's hash and a bookmark added under a hash that
    /// has others copies only its id.
    pub(super) bookmark_index: BTreeMap<String, BTreeSet<(Micros, String)>>,
    pub(super) triggers: BTreeMap<(String, String, String), TriggerRow>,
    pub(super) queue: BTreeMap<String, Claimed<QueueItem>>,
    pub(super) dead_letters: BTreeMap<String, DeadLetter>,
    pub(super) timers: BTreeMap<String, Claimed<TimerRow>>,
    /// Debounced sends (RT-35), by debounce id.
    pub(super) debounces: BTreeMap<String, Claimed<DebounceRow>>,
    /// Each instance's receipts: stimulus id to the receipt's time. Nested by instance, so a
    /// commit checks and writes them without building an owned `(instance, stimulus)` key.
    pub(super) receipts: BTreeMap<String, BTreeMap<String, Micros>>,
    /// The key index (RT-36): `(key digest, instance id)`, and each instance's keys, so a
    /// purge removes its rows without a scan.
    pub(super) keys: BTreeSet<(String, String)>,
    pub(super) instance_keys: BTreeMap<String, Vec<String>>,
    pub(super) named_leases: BTreeMap<String, NamedLease>,
    pub(super) idempotency: BTreeMap<String, IdempotencyRecord>,
    pub(super) incidents: BTreeMap<String, IncidentRecord>,
    pub(super) definitions: BTreeMap<(String, String), DefinitionRecord>,
    /// Flow-control queues by name (QU-5).
    pub(super) flow: BTreeMap<String, flow::MemQueue>,
    pub(super) stats: StoreStats,
    /// Injected failures (ST-25): the next write operations fail with `Unavailable`.
    pub(super) fail_writes: u32,
    /// Injected failures: the next commits fail with `Unavailable`.
    pub(super) fail_commits: u32,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store. Wrap it in a [`Storage`](super::Storage) (the runtime does) for the
    /// state size limit and every other policy.
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            changes: AtomicU64::new(0),
        }
    }

    /// Replaces an instance's stored state text as is: a test hook to simulate a corrupted
    /// or hand-edited row (C-25, C-26).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown instance.
    #[cfg(feature = "test-support")]
    pub fn write_raw_state(&self, instance_id: &str, raw: &str) -> StoreResult<()> {
        let mut inner = self.lock()?;
        let row = inner
            .instances
            .get_mut(instance_id)
            .ok_or_else(|| tables::not_found("instance", instance_id))?;
        raw.clone_into(&mut row.state);
        Ok(())
    }

    /// Makes the next `n` write operations (of any kind) fail with `Unavailable` and write
    /// nothing: a test hook to simulate an unreachable store or a crash (ST-25).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the store's lock is poisoned.
    #[cfg(feature = "test-support")]
    pub fn fail_next_writes(&self, n: u32) -> StoreResult<()> {
        self.lock()?.fail_writes = n;
        Ok(())
    }

    /// Makes the next `n` commits fail with `Unavailable` and write nothing (ST-25).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the store's lock is poisoned.
    #[cfg(feature = "test-support")]
    pub fn fail_next_commits(&self, n: u32) -> StoreResult<()> {
        self.lock()?.fail_commits = n;
        Ok(())
    }

    /// The stored state text of an instance, as is (test hook, C-26).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown instance.
    #[cfg(feature = "test-support")]
    pub fn read_raw_state(&self, instance_id: &str) -> StoreResult<String> {
        let inner = self.lock()?;
        inner
            .instances
            .get(instance_id)
            .map(|row| row.state.clone())
            .ok_or_else(|| tables::not_found("instance", instance_id))
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| StoreError::unavailable("memory store lock poisoned"))
    }

    /// Runs one write operation atomically under the lock.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Inner) -> StoreResult<T>,
    ) -> BoxFuture<'_, StoreResult<T>> {
        let result = self.lock().and_then(|mut inner| {
            inner.stats.write_requests += 1;
            inner.stats.transactions += 1;
            if inner.fail_writes > 0 {
                inner.fail_writes -= 1;
                return Err(StoreError::unavailable(
                    "injected failure (fail_next_writes)",
                ));
            }
            f(&mut inner)
        });
        Box::pin(ready(result))
    }

    /// [`MemoryStore::write`], counted as a change ([`ChangeCount`](super::ChangeCount))
    /// when it succeeds and `counts` says its result may make held work deliverable. The
    /// count moves before the lock is released, so a reader that saw it move sees the write.
    fn write_changing<T: Send + 'static>(
        &self,
        counts: impl FnOnce(&T) -> bool,
        f: impl FnOnce(&mut Inner) -> StoreResult<T>,
    ) -> BoxFuture<'_, StoreResult<T>> {
        self.write(|inner| {
            let result = f(inner)?;
            if counts(&result) {
                self.changes.fetch_add(1, Ordering::Release);
            }
            Ok(result)
        })
    }

    /// Runs one read operation under the lock.
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> StoreResult<T>,
    ) -> BoxFuture<'_, StoreResult<T>> {
        let result = self.lock().and_then(|inner| f(&inner));
        Box::pin(ready(result))
    }
}
