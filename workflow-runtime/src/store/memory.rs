//! `MemoryStore`: every rule of the store contract except durability (ST-25).

use std::collections::{BTreeMap, BTreeSet};
use std::future::ready;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::broadcast;

use super::{
    BookmarkQuery, BookmarkRow, BoxFuture, ClaimedInstance, Commit, ControlRequest,
    DEFAULT_MAX_STATE_BYTES, DeadLetter, DeadLetterReason, IdempotencyRecord, InstanceFilter,
    InstanceRecord, InstanceStatus, InstanceSubStatus, JournalRecord, Lease, LeaseState,
    ListedInstance, NewInstance, PurgeFilter, QueueFailure, QueueItem, Renewal, Store, StoreError,
    StoreResult, StoreStats, TimerRow, TriggerDiff, TriggerRow, WAKE_UP_CAPACITY, WakeUp,
    commit_hints, create_hint, decode_state, encode_commit, encode_state, instance_resource,
    journal_detail, named_resource, page, purge_statuses, send_hints, validate_instance_id,
};
use super::{DeadLetterFilter, IncidentRecord, NewIncident, Schedule, ScheduleFiring};

/// An in-process store for tests and quick starts (ST-25).
///
/// It implements every rule of the contract (versions, leases, fencing, claims, TTLs, purge)
/// except durability. State documents are kept encoded as JSON text, so loads exercise
/// decoding and cannot alias engine memory. Purge frees everything it removes, so a
/// long-running process does not grow without bound.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_state_bytes: usize,
    hints: broadcast::Sender<WakeUp>,
}

#[derive(Debug, Clone)]
struct MemInstance {
    definition_name: String,
    definition_version: String,
    status: InstanceStatus,
    sub_status: Option<InstanceSubStatus>,
    correlation_id: Option<String>,
    version: u64,
    lease_owner: Option<String>,
    lease_token: u64,
    lease_expires_at: Option<i64>,
    control_request: Option<ControlRequest>,
    origin_at: i64,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
    activation_scope: Option<String>,
    state: String,
}

#[derive(Debug, Clone)]
struct Claimed<T> {
    row: T,
    claim_owner: Option<String>,
    claim_expires_at: Option<i64>,
}

impl<T> Claimed<T> {
    fn new(row: T) -> Self {
        Self {
            row,
            claim_owner: None,
            claim_expires_at: None,
        }
    }

    fn claim_live(&self, now: i64) -> bool {
        self.claim_owner.is_some() && self.claim_expires_at.is_some_and(|at| at > now)
    }
}

#[derive(Debug, Clone, Default)]
struct NamedLease {
    owner: Option<String>,
    token: u64,
    expires_at: i64,
}

#[derive(Debug, Default)]
struct Inner {
    instances: BTreeMap<String, MemInstance>,
    bookmarks: BTreeMap<String, BookmarkRow>,
    /// `(hash, created_at, bookmark_id)`: the lookup index of ST-6.
    bookmark_index: BTreeSet<(String, i64, String)>,
    triggers: BTreeMap<(String, String, String), TriggerRow>,
    queue: BTreeMap<String, Claimed<QueueItem>>,
    dead_letters: BTreeMap<String, DeadLetter>,
    timers: BTreeMap<String, Claimed<TimerRow>>,
    journal: BTreeMap<(String, u64), JournalRecord>,
    /// `(instance_id, stimulus_id)` to the receipt's time.
    receipts: BTreeMap<(String, String), i64>,
    named_leases: BTreeMap<String, NamedLease>,
    idempotency: BTreeMap<String, IdempotencyRecord>,
    incidents: BTreeMap<String, IncidentRecord>,
    stats: StoreStats,
    /// Injected failures (ST-25): the next write operations fail with `Unavailable`.
    fail_writes: u32,
    /// Injected failures: the next commits fail with `Unavailable`.
    fail_commits: u32,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store with the default state size limit.
    pub fn new() -> Self {
        Self::with_max_state_bytes(DEFAULT_MAX_STATE_BYTES)
    }

    /// An empty store refusing state documents larger than `max_state_bytes` (ST-24).
    pub fn with_max_state_bytes(max_state_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_state_bytes,
            hints: broadcast::Sender::new(WAKE_UP_CAPACITY),
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
            .ok_or_else(|| not_found("instance", instance_id))?;
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
            .ok_or_else(|| not_found("instance", instance_id))
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
        self.write_hinting(f, Vec::new())
    }

    /// Runs one write operation and, if it succeeds, sends `hints` after it (ST-18).
    fn write_hinting<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Inner) -> StoreResult<T>,
        hints: Vec<WakeUp>,
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
        if result.is_ok() {
            send_hints(&self.hints, hints);
        }
        Box::pin(ready(result))
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

fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_owned(),
    }
}

fn record(id: &str, row: &MemInstance) -> StoreResult<InstanceRecord> {
    let state = decode_state(id, &row.state)?;
    Ok(InstanceRecord {
        instance_id: id.to_owned(),
        definition_name: row.definition_name.clone(),
        definition_version: row.definition_version.clone(),
        status: row.status,
        sub_status: row.sub_status,
        correlation_id: row.correlation_id.clone(),
        version: row.version,
        lease: match (&row.lease_owner, row.lease_expires_at) {
            (Some(owner), Some(expires_at)) => Some(LeaseState {
                owner: owner.clone(),
                token: row.lease_token,
                expires_at,
            }),
            _ => None,
        },
        control_request: row.control_request.clone(),
        origin_at: row.origin_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
        finished_at: row.finished_at,
        state,
    })
}

fn incident(instance_id: &str, definition_name: &str, new: NewIncident) -> IncidentRecord {
    IncidentRecord {
        incident_id: new.incident_id,
        instance_id: instance_id.to_owned(),
        definition_name: definition_name.to_owned(),
        kind: new.kind,
        created_at: new.created_at,
        resolved_at: None,
        resolution: None,
        record: new.record,
    }
}

fn sort_incidents(rows: &mut [IncidentRecord]) {
    rows.sort_by(|a, b| (a.created_at, &a.incident_id).cmp(&(b.created_at, &b.incident_id)));
}

/// The schedule a timer row without instance describes.
fn schedule_of(row: &TimerRow) -> Option<Schedule> {
    Some(Schedule {
        schedule_id: row.timer_id.clone(),
        definition_name: row.definition_name.clone()?,
        node_id: row.node_id.clone()?,
        kind: row.kind.clone(),
        due_at: row.due_at,
        fired: row.parked,
    })
}

fn lease_live(row: &MemInstance, now: i64) -> bool {
    row.lease_owner.is_some() && row.lease_expires_at.is_some_and(|at| at > now)
}

impl Inner {
    /// Inserts a new instance at version 1 with its receipt and consumed queue item; an
    /// existing id gives `AlreadyExists` and changes nothing.
    fn insert_instance(&mut self, instance: NewInstance, state: String) -> StoreResult<()> {
        if self.instances.contains_key(&instance.instance_id) {
            return Err(StoreError::AlreadyExists {
                what: "instance",
                id: instance.instance_id,
            });
        }
        if let Some(scope) = &instance.activation_scope
            && let Some((existing, _)) = self.instances.iter().find(|(_, row)| {
                row.activation_scope.as_ref() == Some(scope) && !row.status.is_final()
            })
        {
            return Err(StoreError::ActivationConflict {
                scope: scope.clone(),
                existing: existing.clone(),
            });
        }
        let id = instance.instance_id;
        if let Some(stimulus) = instance.receipt {
            self.receipts
                .insert((id.clone(), stimulus), instance.created_at);
        }
        if let Some(item) = instance.consumed_queue_item {
            self.queue.remove(&item);
        }
        self.instances.insert(
            id,
            MemInstance {
                definition_name: instance.definition_name,
                definition_version: instance.definition_version,
                status: instance.status,
                sub_status: instance.sub_status,
                correlation_id: instance.correlation_id,
                version: 1,
                lease_owner: None,
                lease_token: 0,
                lease_expires_at: None,
                control_request: None,
                origin_at: instance.origin_at,
                created_at: instance.created_at,
                updated_at: instance.created_at,
                finished_at: instance.status.is_final().then_some(instance.created_at),
                activation_scope: instance.activation_scope,
                state,
            },
        );
        Ok(())
    }

    fn remove_bookmark(&mut self, bookmark_id: &str) {
        if let Some(row) = self.bookmarks.remove(bookmark_id) {
            self.bookmark_index
                .remove(&(row.hash, row.created_at, row.bookmark_id));
        }
    }

    fn remove_dependents(&mut self, instance_id: &str, keep_journal: bool) {
        let bookmarks: Vec<String> = self
            .bookmarks
            .values()
            .filter(|b| b.instance_id == instance_id)
            .map(|b| b.bookmark_id.clone())
            .collect();
        for id in bookmarks {
            self.remove_bookmark(&id);
        }
        self.timers
            .retain(|_, t| t.row.instance_id.as_deref() != Some(instance_id));
        if !keep_journal {
            self.journal.retain(|(id, _), _| id != instance_id);
            self.receipts.retain(|(id, _), _| id != instance_id);
            self.incidents.retain(|_, i| i.instance_id != instance_id);
        }
    }

    fn move_to_dead(
        &mut self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<String>,
        now: i64,
    ) -> bool {
        let Some(claimed) = self.queue.remove(item_id) else {
            return false;
        };
        if self.dead_letters.contains_key(item_id) {
            return false;
        }
        self.dead_letters.insert(
            item_id.to_owned(),
            DeadLetter {
                item: claimed.row,
                reason,
                error,
                dead_at: now,
            },
        );
        true
    }

    fn commit(&mut self, c: Commit, state: String, created: Vec<String>) -> StoreResult<u64> {
        let row = self
            .instances
            .get(&c.instance_id)
            .ok_or_else(|| not_found("instance", &c.instance_id))?;
        if row.version != c.expected_version {
            return Err(StoreError::Conflict {
                instance: c.instance_id,
                expected: c.expected_version,
                actual: row.version,
            });
        }
        if row.lease_owner.is_none() || row.lease_token != c.lease_token {
            return Err(StoreError::Fenced {
                resource: instance_resource(&c.instance_id),
                token: c.lease_token,
                current: row.lease_token,
            });
        }
        let mut seen = BTreeSet::new();
        for stimulus in &c.receipts {
            if !seen.insert(stimulus)
                || self
                    .receipts
                    .contains_key(&(c.instance_id.clone(), stimulus.clone()))
            {
                return Err(StoreError::ReceiptExists {
                    instance: c.instance_id,
                    stimulus_id: stimulus.clone(),
                });
            }
        }
        let removed_bookmarks: BTreeSet<&String> = c.bookmarks_removed.iter().collect();
        let mut new_ids = BTreeSet::new();
        for b in &c.bookmarks_added {
            let exists = self.bookmarks.get(&b.bookmark_id).is_some_and(|old| {
                old.instance_id != c.instance_id || !removed_bookmarks.contains(&b.bookmark_id)
            });
            if exists || !new_ids.insert(&b.bookmark_id) {
                return Err(StoreError::AlreadyExists {
                    what: "bookmark",
                    id: b.bookmark_id.clone(),
                });
            }
        }
        let mut new_instances = BTreeSet::new();
        let mut new_scopes: BTreeMap<&String, &String> = BTreeMap::new();
        for i in &c.instances_created {
            if self.instances.contains_key(&i.instance_id) || !new_instances.insert(&i.instance_id)
            {
                return Err(StoreError::AlreadyExists {
                    what: "instance",
                    id: i.instance_id.clone(),
                });
            }
            if let Some(scope) = &i.activation_scope {
                let taken = self
                    .instances
                    .iter()
                    .find(|(_, row)| {
                        row.activation_scope.as_ref() == Some(scope) && !row.status.is_final()
                    })
                    .map(|(id, _)| id)
                    .or_else(|| new_scopes.get(scope).copied());
                if let Some(existing) = taken {
                    return Err(StoreError::ActivationConflict {
                        scope: scope.clone(),
                        existing: existing.clone(),
                    });
                }
                new_scopes.insert(scope, &i.instance_id);
            }
        }
        let mut new_incidents = BTreeSet::new();
        for i in &c.incidents_opened {
            if self.incidents.contains_key(&i.incident_id) || !new_incidents.insert(&i.incident_id)
            {
                return Err(StoreError::AlreadyExists {
                    what: "incident",
                    id: i.incident_id.clone(),
                });
            }
        }
        let mut new_items = BTreeSet::new();
        for q in &c.queue_items {
            if self.queue.contains_key(&q.item_id)
                || self.dead_letters.contains_key(&q.item_id)
                || !new_items.insert(&q.item_id)
            {
                return Err(StoreError::AlreadyExists {
                    what: "queue item",
                    id: q.item_id.clone(),
                });
            }
        }
        let removed_timers: BTreeSet<&String> = c.timers_removed.iter().collect();
        let mut new_timers = BTreeSet::new();
        for t in &c.timers_added {
            let exists = self.timers.get(&t.timer_id).is_some_and(|old| {
                old.row.instance_id.as_deref() != Some(c.instance_id.as_str())
                    || !removed_timers.contains(&t.timer_id)
            });
            if exists || !new_timers.insert(&t.timer_id) {
                return Err(StoreError::AlreadyExists {
                    what: "timer",
                    id: t.timer_id.clone(),
                });
            }
        }

        // Every check passed: apply everything (ST-16).
        let id = c.instance_id.clone();
        let (definition_name, definition_version, new_version) = {
            let row = self
                .instances
                .get_mut(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            row.version += 1;
            row.state = state;
            row.status = c.status;
            row.sub_status = c.sub_status;
            row.correlation_id.clone_from(&c.correlation_id);
            row.updated_at = c.now;
            row.finished_at = c.status.is_final().then_some(c.now);
            if c.clear_control_request {
                row.control_request = None;
            }
            if c.release_lease {
                row.lease_owner = None;
                row.lease_expires_at = None;
            }
            (
                row.definition_name.clone(),
                row.definition_version.clone(),
                row.version,
            )
        };
        for bookmark_id in &c.bookmarks_removed {
            if self
                .bookmarks
                .get(bookmark_id)
                .is_some_and(|b| b.instance_id == id)
            {
                self.remove_bookmark(bookmark_id);
            }
        }
        for b in c.bookmarks_added {
            self.bookmark_index
                .insert((b.hash.clone(), b.created_at, b.bookmark_id.clone()));
            self.bookmarks.insert(
                b.bookmark_id.clone(),
                BookmarkRow {
                    bookmark_id: b.bookmark_id,
                    instance_id: id.clone(),
                    hash: b.hash,
                    name: b.name,
                    node_id: b.node_id,
                    context_id: b.context_id,
                    correlation_id: c.correlation_id.clone(),
                    definition_name: definition_name.clone(),
                    definition_version: definition_version.clone(),
                    look_back: b.look_back,
                    created_at: b.created_at,
                },
            );
        }
        for b in self.bookmarks.values_mut() {
            if b.instance_id == id {
                b.correlation_id.clone_from(&c.correlation_id);
            }
        }
        self.timers.retain(|timer_id, t| {
            !(t.row.instance_id.as_deref() == Some(id.as_str())
                && removed_timers.contains(timer_id))
        });
        for t in c.timers_added {
            self.timers.insert(
                t.timer_id.clone(),
                Claimed::new(TimerRow {
                    timer_id: t.timer_id,
                    instance_id: Some(id.clone()),
                    kind: t.kind,
                    due_at: t.due_at,
                    parked: false,
                    definition_name: None,
                    node_id: None,
                }),
            );
        }
        if let Some(parked) = c.timers_parked {
            for t in self.timers.values_mut() {
                if t.row.instance_id.as_deref() == Some(id.as_str()) {
                    t.row.parked = parked;
                }
            }
        }
        if c.status.is_final() {
            // ENG-22: a final instance has no bookmarks or timers.
            self.remove_dependents(&id, true);
        }
        if let Some(compaction) = c.journal_compaction {
            let through = compaction.through_seq;
            self.journal
                .retain(|(entry_id, seq), _| !(*entry_id == id && *seq <= through));
            self.journal.insert(
                (id.clone(), through),
                JournalRecord {
                    seq: through,
                    at: compaction.summary.at,
                    kind: compaction.summary.kind,
                    context_id: compaction.summary.context_id,
                    node_id: compaction.summary.node_id,
                    detail: journal_detail(&compaction.summary.detail),
                },
            );
        }
        let mut seq = self
            .journal
            .range((id.clone(), 0)..=(id.clone(), u64::MAX))
            .next_back()
            .map_or(0, |((_, seq), _)| *seq);
        for entry in c.journal {
            seq += 1;
            self.journal.insert(
                (id.clone(), seq),
                JournalRecord {
                    seq,
                    at: entry.at,
                    kind: entry.kind,
                    context_id: entry.context_id,
                    node_id: entry.node_id,
                    detail: journal_detail(&entry.detail),
                },
            );
        }
        for stimulus in c.receipts {
            self.receipts.insert((id.clone(), stimulus), c.now);
        }
        for item in &c.consumed_queue_items {
            self.queue.remove(item);
        }
        for (instance, state) in c.instances_created.into_iter().zip(created) {
            self.insert_instance(instance, state)?;
        }
        for item in c.queue_items {
            self.queue.insert(item.item_id.clone(), Claimed::new(item));
        }
        for opened in c.incidents_opened {
            self.incidents.insert(
                opened.incident_id.clone(),
                incident(&id, &definition_name, opened),
            );
        }
        for (incident_id, resolution) in c.incidents_resolved {
            if let Some(incident) = self.incidents.get_mut(&incident_id)
                && incident.instance_id == id
                && incident.resolved_at.is_none()
            {
                incident.resolved_at = Some(c.now);
                incident.resolution = Some(resolution);
            }
        }
        for (target, request) in c.control_requests {
            if let Some(row) = self.instances.get_mut(&target)
                && !row.status.is_final()
            {
                row.control_request = Some(request);
            }
        }
        Ok(new_version)
    }
}

impl Store for MemoryStore {
    fn create_instance(&self, instance: NewInstance) -> BoxFuture<'_, StoreResult<u64>> {
        let encoded = validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes));
        let hints = create_hint(&instance).into_iter().collect();
        self.write_hinting(
            move |inner| {
                inner.insert_instance(instance, encoded?)?;
                Ok(1)
            },
            hints,
        )
    }

    fn load_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<InstanceRecord>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let row = inner
                .instances
                .get(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            record(&id, row)
        })
    }

    fn commit(&self, commit: Commit) -> BoxFuture<'_, StoreResult<u64>> {
        let encoded = encode_commit(&commit, self.max_state_bytes);
        let hints = commit_hints(&commit);
        self.write_hinting(
            move |inner| {
                if inner.fail_commits > 0 {
                    inner.fail_commits -= 1;
                    return Err(StoreError::unavailable(
                        "injected failure (fail_next_commits)",
                    ));
                }
                let (state, created) = encoded?;
                inner.commit(commit, state, created)
            },
            hints,
        )
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write_hinting(
            move |inner| {
                let row = inner
                    .instances
                    .get_mut(&id)
                    .ok_or_else(|| not_found("instance", &id))?;
                if row.status.is_final() {
                    return Err(StoreError::Invalid {
                        what: "control request",
                        reason: format!("instance {id} is {}", row.status),
                    });
                }
                row.control_request = Some(request);
                Ok(())
            },
            vec![WakeUp::ControlRequested {
                id: instance_id.to_owned(),
            }],
        )
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        self.read(move |inner| {
            let limit = page(filter.limit, 100);
            let start = match &filter.after {
                Some(after) => std::ops::Bound::Excluded(after.clone()),
                None => std::ops::Bound::Unbounded,
            };
            Ok(inner
                .instances
                .range((start, std::ops::Bound::Unbounded))
                .filter(|(_, row)| {
                    filter.status.is_none_or(|s| s == row.status)
                        && filter
                            .definition_name
                            .as_ref()
                            .is_none_or(|d| *d == row.definition_name)
                        && filter
                            .correlation_id
                            .as_ref()
                            .is_none_or(|c| row.correlation_id.as_ref() == Some(c))
                        && (!filter.control_requested || row.control_request.is_some())
                })
                .take(limit)
                .map(|(id, row)| ListedInstance {
                    instance_id: id.clone(),
                    record: record(id, row),
                })
                .collect())
        })
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: i64,
        ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        let owner = owner.to_owned();
        self.write(move |inner| {
            let mut candidates: Vec<(i64, String)> = inner
                .instances
                .iter()
                .filter(|(_, row)| row.status == InstanceStatus::Running && !lease_live(row, now))
                .map(|(id, row)| (row.updated_at, id.clone()))
                .collect();
            candidates.sort();
            candidates.truncate(limit);
            let mut claimed = Vec::with_capacity(candidates.len());
            for (_, id) in candidates {
                if let Some(row) = inner.instances.get_mut(&id) {
                    row.lease_token += 1;
                    row.lease_owner = Some(owner.clone());
                    row.lease_expires_at = Some(now.saturating_add(ttl));
                    claimed.push(ClaimedInstance {
                        instance_id: id,
                        sub_status: row.sub_status,
                        lease: Lease {
                            token: row.lease_token,
                            expires_at: now.saturating_add(ttl),
                        },
                    });
                }
            }
            Ok(claimed)
        })
    }

    fn delete_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write(move |inner| {
            let row = inner
                .instances
                .get(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            if !row.status.is_final() {
                return Err(StoreError::NotTerminal {
                    instance: id,
                    status: row.status,
                });
            }
            inner.instances.remove(&id);
            inner.remove_dependents(&id, false);
            Ok(())
        })
    }

    fn purge(&self, filter: PurgeFilter) -> BoxFuture<'_, StoreResult<u64>> {
        let statuses = purge_statuses(&filter);
        self.write(move |inner| {
            let statuses = statuses?;
            let doomed: Vec<String> = inner
                .instances
                .iter()
                .filter(|(_, row)| {
                    statuses.contains(&row.status)
                        && row
                            .finished_at
                            .is_some_and(|at| at < filter.finished_before)
                        && filter
                            .definition_name
                            .as_ref()
                            .is_none_or(|d| *d == row.definition_name)
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &doomed {
                inner.instances.remove(id);
                inner.remove_dependents(id, false);
            }
            Ok(doomed.len() as u64)
        })
    }

    fn acquire_lease(
        &self,
        instance_id: &str,
        owner: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (id, owner) = (instance_id.to_owned(), owner.to_owned());
        self.write(move |inner| {
            let row = inner
                .instances
                .get_mut(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            if lease_live(row, now) {
                return Err(StoreError::LeaseHeld {
                    resource: instance_resource(&id),
                    holder: row.lease_owner.clone().unwrap_or_default(),
                    until: row.lease_expires_at.unwrap_or_default(),
                });
            }
            row.lease_token += 1;
            row.lease_owner = Some(owner);
            row.lease_expires_at = Some(now.saturating_add(ttl));
            Ok(Lease {
                token: row.lease_token,
                expires_at: now.saturating_add(ttl),
            })
        })
    }

    fn renew_lease(
        &self,
        instance_id: &str,
        token: u64,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let id = instance_id.to_owned();
        self.write(move |inner| {
            let row = inner
                .instances
                .get_mut(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            if row.lease_owner.is_none() || row.lease_token != token {
                return Err(StoreError::Fenced {
                    resource: instance_resource(&id),
                    token,
                    current: row.lease_token,
                });
            }
            row.lease_expires_at = Some(now.saturating_add(ttl));
            Ok(Renewal {
                lease: Lease {
                    token,
                    expires_at: now.saturating_add(ttl),
                },
                control_request: row.control_request.clone(),
            })
        })
    }

    fn release_lease(&self, instance_id: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write_hinting(
            move |inner| {
                let row = inner
                    .instances
                    .get_mut(&id)
                    .ok_or_else(|| not_found("instance", &id))?;
                if row.lease_owner.is_none() || row.lease_token != token {
                    return Err(StoreError::Fenced {
                        resource: instance_resource(&id),
                        token,
                        current: row.lease_token,
                    });
                }
                row.lease_owner = None;
                row.lease_expires_at = None;
                Ok(())
            },
            vec![WakeUp::InstanceRunnable {
                id: instance_id.to_owned(),
            }],
        )
    }

    fn acquire_named_lease(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.write(move |inner| {
            let lease = inner.named_leases.entry(name.clone()).or_default();
            if let Some(holder) = &lease.owner
                && lease.expires_at > now
            {
                return Err(StoreError::LeaseHeld {
                    resource: named_resource(&name),
                    holder: holder.clone(),
                    until: lease.expires_at,
                });
            }
            lease.token += 1;
            lease.owner = Some(owner);
            lease.expires_at = now.saturating_add(ttl);
            Ok(Lease {
                token: lease.token,
                expires_at: lease.expires_at,
            })
        })
    }

    fn renew_named_lease(
        &self,
        name: &str,
        token: u64,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let name = name.to_owned();
        self.write(move |inner| match inner.named_leases.get_mut(&name) {
            Some(lease) if lease.owner.is_some() && lease.token == token => {
                lease.expires_at = now.saturating_add(ttl);
                Ok(Lease {
                    token,
                    expires_at: lease.expires_at,
                })
            }
            other => Err(StoreError::Fenced {
                resource: named_resource(&name),
                token,
                current: other.map_or(0, |l| l.token),
            }),
        })
    }

    fn release_named_lease(&self, name: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let name = name.to_owned();
        self.write(move |inner| match inner.named_leases.get_mut(&name) {
            Some(lease) if lease.owner.is_some() && lease.token == token => {
                lease.owner = None;
                Ok(())
            }
            other => Err(StoreError::Fenced {
                resource: named_resource(&name),
                token,
                current: other.map_or(0, |l| l.token),
            }),
        })
    }

    fn find_bookmarks(&self, query: BookmarkQuery) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read(move |inner| {
            let start = match &query.after {
                Some((at, id)) => std::ops::Bound::Excluded((query.hash.clone(), *at, id.clone())),
                None => std::ops::Bound::Included((query.hash.clone(), i64::MIN, String::new())),
            };
            Ok(inner
                .bookmark_index
                .range((start, std::ops::Bound::Unbounded))
                .take_while(|(hash, _, _)| *hash == query.hash)
                .filter_map(|(_, _, id)| inner.bookmarks.get(id))
                .filter(|b| {
                    query
                        .instance_id
                        .as_ref()
                        .is_none_or(|i| *i == b.instance_id)
                        && query
                            .correlation_id
                            .as_ref()
                            .is_none_or(|c| b.correlation_id.as_ref() == Some(c))
                        && query
                            .bookmark_id
                            .as_ref()
                            .is_none_or(|i| *i == b.bookmark_id)
                })
                .take(page(query.limit, 100))
                .cloned()
                .collect())
        })
    }

    fn list_bookmarks(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let mut rows: Vec<BookmarkRow> = inner
                .bookmarks
                .values()
                .filter(|b| b.instance_id == id)
                .cloned()
                .collect();
            rows.sort_by(|a, b| {
                (a.created_at, &a.bookmark_id).cmp(&(b.created_at, &b.bookmark_id))
            });
            Ok(rows)
        })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let key = (instance_id.to_owned(), stimulus_id.to_owned());
        self.read(move |inner| Ok(inner.receipts.contains_key(&key)))
    }

    fn replace_triggers(
        &self,
        definition_name: &str,
        triggers: Vec<TriggerRow>,
    ) -> BoxFuture<'_, StoreResult<TriggerDiff>> {
        let name = definition_name.to_owned();
        self.write(move |inner| {
            let mut diff = TriggerDiff::default();
            let mut wanted = BTreeMap::new();
            for t in triggers {
                if t.definition_name != name {
                    return Err(StoreError::Invalid {
                        what: "trigger",
                        reason: format!("belongs to {}, not {name}", t.definition_name),
                    });
                }
                wanted.insert((name.clone(), t.node_id.clone(), t.hash.clone()), t);
            }
            let existing: Vec<_> = inner
                .triggers
                .keys()
                .filter(|(d, _, _)| *d == name)
                .cloned()
                .collect();
            for key in existing {
                if !wanted.contains_key(&key) {
                    inner.triggers.remove(&key);
                    diff.removed += 1;
                }
            }
            for (key, t) in wanted {
                match inner.triggers.get(&key) {
                    Some(old) if same_trigger(old, &t) => diff.unchanged += 1,
                    _ => {
                        inner.triggers.insert(key, t);
                        diff.added += 1;
                    }
                }
            }
            Ok(diff)
        })
    }

    fn find_triggers(&self, hashes: &[String]) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        let hashes: BTreeSet<String> = hashes.iter().cloned().collect();
        self.read(move |inner| {
            Ok(inner
                .triggers
                .values()
                .filter(|t| hashes.contains(&t.hash))
                .cloned()
                .collect())
        })
    }

    fn earliest_timer(&self, now: i64) -> BoxFuture<'_, StoreResult<Option<i64>>> {
        self.read(move |inner| {
            Ok(inner
                .timers
                .values()
                .filter(|t| !t.row.parked && !t.claim_live(now))
                .map(|t| t.row.due_at)
                .min())
        })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: i64,
        claim_ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let owner = owner.to_owned();
        self.write(move |inner| {
            let mut due: Vec<(i64, String)> = inner
                .timers
                .values()
                .filter(|t| !t.row.parked && t.row.due_at <= now && !t.claim_live(now))
                .map(|t| (t.row.due_at, t.row.timer_id.clone()))
                .collect();
            due.sort();
            due.truncate(limit);
            let mut rows = Vec::with_capacity(due.len());
            for (_, id) in due {
                if let Some(t) = inner.timers.get_mut(&id) {
                    t.claim_owner = Some(owner.clone());
                    t.claim_expires_at = Some(now.saturating_add(claim_ttl));
                    rows.push(t.row.clone());
                }
            }
            Ok(rows)
        })
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        self.write_hinting(
            move |inner| {
                if inner.timers.contains_key(&schedule.schedule_id) {
                    return Ok(false);
                }
                inner.timers.insert(
                    schedule.schedule_id.clone(),
                    Claimed::new(TimerRow {
                        timer_id: schedule.schedule_id,
                        instance_id: None,
                        kind: schedule.kind,
                        due_at: schedule.due_at,
                        parked: schedule.fired,
                        definition_name: Some(schedule.definition_name),
                        node_id: Some(schedule.node_id),
                    }),
                );
                Ok(true)
            },
            vec![WakeUp::TimersChanged { earliest: None }],
        )
    }

    fn delete_schedule(&self, schedule_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = schedule_id.to_owned();
        self.write(move |inner| {
            let is_schedule = inner
                .timers
                .get(&id)
                .is_some_and(|t| t.row.instance_id.is_none());
            if is_schedule {
                inner.timers.remove(&id);
            }
            Ok(is_schedule)
        })
    }

    fn list_schedules(&self, definition_name: &str) -> BoxFuture<'_, StoreResult<Vec<Schedule>>> {
        let name = definition_name.to_owned();
        self.read(move |inner| {
            Ok(inner
                .timers
                .values()
                .filter(|t| {
                    t.row.instance_id.is_none()
                        && t.row.definition_name.as_deref() == Some(name.as_str())
                })
                .filter_map(|t| schedule_of(&t.row))
                .collect())
        })
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: i64,
        instance: NewInstance,
        next_due: Option<i64>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        let encoded = validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes));
        let mut hints: Vec<WakeUp> = create_hint(&instance).into_iter().collect();
        hints.push(WakeUp::TimersChanged { earliest: next_due });
        self.write_hinting(
            move |inner| {
                let state = encoded?;
                let current = inner
                    .timers
                    .get(&id)
                    .filter(|t| t.row.instance_id.is_none() && !t.row.parked)
                    .map(|t| t.row.due_at);
                if current != Some(expected_due_at) {
                    return Ok(ScheduleFiring::Stale);
                }
                let firing = match inner.insert_instance(instance, state) {
                    Ok(()) => ScheduleFiring::Started,
                    Err(StoreError::ActivationConflict { existing, .. }) => {
                        ScheduleFiring::Refused { existing }
                    }
                    Err(e) => return Err(e),
                };
                if let Some(t) = inner.timers.get_mut(&id) {
                    t.claim_owner = None;
                    t.claim_expires_at = None;
                    match next_due {
                        Some(due) => t.row.due_at = due,
                        None => t.row.parked = true,
                    }
                }
                Ok(firing)
            },
            hints,
        )
    }

    fn list_timers(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let mut rows: Vec<TimerRow> = inner
                .timers
                .values()
                .filter(|t| t.row.instance_id.as_deref() == Some(id.as_str()))
                .map(|t| t.row.clone())
                .collect();
            rows.sort_by(|a, b| (a.due_at, &a.timer_id).cmp(&(b.due_at, &b.timer_id)));
            Ok(rows)
        })
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            Ok(inner
                .journal
                .range((id.clone(), from_seq)..=(id.clone(), u64::MAX))
                .take(page(limit, 100))
                .map(|(_, e)| e.clone())
                .collect())
        })
    }

    fn enqueue(&self, item: QueueItem) -> BoxFuture<'_, StoreResult<()>> {
        self.write_hinting(
            move |inner| {
                if inner.queue.contains_key(&item.item_id)
                    || inner.dead_letters.contains_key(&item.item_id)
                {
                    return Err(StoreError::AlreadyExists {
                        what: "queue item",
                        id: item.item_id,
                    });
                }
                inner.queue.insert(item.item_id.clone(), Claimed::new(item));
                Ok(())
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: i64,
        claim_ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        let owner = owner.to_owned();
        self.write(move |inner| {
            let mut ready: Vec<(i64, String)> = inner
                .queue
                .values()
                .filter(|q| (q.row.held || q.row.expires_at > now) && !q.claim_live(now))
                .map(|q| (q.row.sent_at, q.row.item_id.clone()))
                .collect();
            ready.sort();
            ready.truncate(limit);
            let mut items = Vec::with_capacity(ready.len());
            for (_, id) in ready {
                if let Some(q) = inner.queue.get_mut(&id) {
                    q.claim_owner = Some(owner.clone());
                    q.claim_expires_at = Some(now.saturating_add(claim_ttl));
                    items.push(q.row.clone());
                }
            }
            Ok(items)
        })
    }

    fn release_queue_item(&self, item_id: &str, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let (id, owner) = (item_id.to_owned(), owner.to_owned());
        self.write_hinting(
            move |inner| {
                if let Some(q) = inner.queue.get_mut(&id)
                    && q.claim_owner.as_deref() == Some(owner.as_str())
                {
                    q.claim_owner = None;
                    q.claim_expires_at = None;
                }
                Ok(())
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn ack_queue_item(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        self.write(move |inner| Ok(inner.queue.remove(&id).is_some()))
    }

    fn record_queue_failure(
        &self,
        item_id: &str,
        error: &str,
        now: i64,
        max_attempts: u32,
    ) -> BoxFuture<'_, StoreResult<QueueFailure>> {
        let (id, error) = (item_id.to_owned(), error.to_owned());
        self.write_hinting(
            move |inner| {
                let q = inner
                    .queue
                    .get_mut(&id)
                    .ok_or_else(|| not_found("queue item", &id))?;
                q.row.attempts = q.row.attempts.saturating_add(1);
                q.row.last_error = Some(error.clone());
                q.row.last_attempt_at = Some(now);
                q.claim_owner = None;
                q.claim_expires_at = None;
                let attempts = q.row.attempts;
                if attempts >= max_attempts {
                    inner.move_to_dead(&id, DeadLetterReason::Failed, Some(error), now);
                    Ok(QueueFailure::DeadLettered)
                } else {
                    Ok(QueueFailure::Retry { attempts })
                }
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn dead_letter(
        &self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<&str>,
        now: i64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, error) = (item_id.to_owned(), error.map(str::to_owned));
        self.write(move |inner| Ok(inner.move_to_dead(&id, reason, error, now)))
    }

    fn expire_queue(&self, now: i64, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |inner| {
            let mut expired: Vec<(i64, String)> = inner
                .queue
                .values()
                .filter(|q| !q.row.held && q.row.expires_at <= now)
                .map(|q| (q.row.expires_at, q.row.item_id.clone()))
                .collect();
            expired.sort();
            expired.truncate(limit);
            let mut moved = 0;
            for (_, id) in expired {
                if inner.move_to_dead(&id, DeadLetterReason::Expired, None, now) {
                    moved += 1;
                }
            }
            Ok(moved)
        })
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        self.write_hinting(
            move |inner| {
                if !inner.dead_letters.contains_key(&id) {
                    return Err(not_found("dead letter", &id));
                }
                if inner.queue.contains_key(&id) {
                    return Err(StoreError::AlreadyExists {
                        what: "queue item",
                        id,
                    });
                }
                let dead = inner
                    .dead_letters
                    .remove(&id)
                    .ok_or_else(|| not_found("dead letter", &id))?;
                let mut item = dead.item;
                item.enqueued_at = now;
                item.expires_at = now.saturating_add(ttl);
                item.attempts = 0;
                item.last_error = None;
                item.last_attempt_at = None;
                inner.queue.insert(id, Claimed::new(item.clone()));
                Ok(item)
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn delete_dead_letter(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        self.write(move |inner| Ok(inner.dead_letters.remove(&id).is_some()))
    }

    fn purge_dead_letters(
        &self,
        dead_before: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |inner| {
            let doomed: Vec<String> = inner
                .dead_letters
                .values()
                .filter(|d| d.dead_at < dead_before)
                .take(limit)
                .map(|d| d.item.item_id.clone())
                .collect();
            for id in &doomed {
                inner.dead_letters.remove(id);
            }
            Ok(doomed.len() as u64)
        })
    }

    fn purge_receipts(&self, before: i64, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |inner| {
            let doomed: Vec<(String, String)> = inner
                .receipts
                .iter()
                .filter(|(_, at)| **at < before)
                .take(limit)
                .map(|(key, _)| key.clone())
                .collect();
            for key in &doomed {
                inner.receipts.remove(key);
            }
            Ok(doomed.len() as u64)
        })
    }

    fn purge_idempotency_records(
        &self,
        before: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |inner| {
            let doomed: Vec<String> = inner
                .idempotency
                .values()
                .filter(|r| r.created_at < before)
                .take(limit)
                .map(|r| r.key.clone())
                .collect();
            for key in &doomed {
                inner.idempotency.remove(key);
            }
            Ok(doomed.len() as u64)
        })
    }

    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write(move |inner| {
            let definition = inner
                .instances
                .get(&id)
                .ok_or_else(|| not_found("instance", &id))?
                .definition_name
                .clone();
            if inner.incidents.contains_key(&incident.incident_id) {
                return Err(StoreError::AlreadyExists {
                    what: "incident",
                    id: incident.incident_id,
                });
            }
            inner.incidents.insert(
                incident.incident_id.clone(),
                self::incident(&id, &definition, incident),
            );
            Ok(())
        })
    }

    fn list_incidents(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let mut rows: Vec<IncidentRecord> = inner
                .incidents
                .values()
                .filter(|i| i.instance_id == id)
                .cloned()
                .collect();
            sort_incidents(&mut rows);
            Ok(rows)
        })
    }

    fn list_all_incidents(
        &self,
        unresolved_only: bool,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        self.read(move |inner| {
            let mut rows: Vec<IncidentRecord> = inner
                .incidents
                .values()
                .filter(|i| !unresolved_only || i.resolved_at.is_none())
                .filter(|i| {
                    after
                        .as_ref()
                        .is_none_or(|(at, id)| (i.created_at, &i.incident_id) > (*at, id))
                })
                .cloned()
                .collect();
            sort_incidents(&mut rows);
            rows.truncate(page(limit, 100));
            Ok(rows)
        })
    }

    fn put_idempotency_record(
        &self,
        record: IdempotencyRecord,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        self.write(move |inner| {
            if let Some(existing) = inner.idempotency.get(&record.key) {
                return Ok(Some(existing.clone()));
            }
            inner.idempotency.insert(record.key.clone(), record);
            Ok(None)
        })
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        self.read(move |inner| Ok(inner.idempotency.get(&key).cloned()))
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        let limit = filter.limit;
        self.read(move |inner| {
            let mut rows: Vec<DeadLetter> = inner
                .dead_letters
                .values()
                .filter(|d| {
                    filter.reason.is_none_or(|r| r == d.reason)
                        && filter.name.as_ref().is_none_or(|n| *n == d.item.name)
                        && filter.hash.as_ref().is_none_or(|h| *h == d.item.hash)
                        && filter
                            .after
                            .as_ref()
                            .is_none_or(|(at, id)| (d.dead_at, &d.item.item_id) > (*at, id))
                })
                .cloned()
                .collect();
            rows.sort_by(|a, b| (a.dead_at, &a.item.item_id).cmp(&(b.dead_at, &b.item.item_id)));
            rows.truncate(page(limit, 100));
            Ok(rows)
        })
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        self.read(|inner| Ok(inner.stats))
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.hints.subscribe()
    }
}

/// Trigger rows equal but for `registered_at` (C-11).
pub(crate) fn same_trigger(a: &TriggerRow, b: &TriggerRow) -> bool {
    a.definition_version == b.definition_version
        && a.name == b.name
        && a.key_display == b.key_display
        && a.payload == b.payload
        && a.activation == b.activation
}
