//! The memory store's tables and the atomic operations over several of them (a commit, a
//! creation with its activation guard, moving an item to the dead letters).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::{Claimed, Inner, MemBookmark, MemInstance};
use crate::base::Micros;
pub(super) use crate::store::convert::not_found;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{
    BookmarkRow, Commit, DeadLetter, DeadLetterReason, IncidentRecord, InstanceRecord,
    JournalCompaction, JournalRecord, LeaseState, NewIncident, NewInstance, NewJournalRecord,
    TimerRow,
};

pub(super) fn record(id: &str, row: &MemInstance) -> InstanceRecord<String> {
    record_with(id, row, row.state.clone())
}

/// An instance row as a record, with `state` for its document.
pub(super) fn record_with<S>(id: &str, row: &MemInstance, state: S) -> InstanceRecord<S> {
    InstanceRecord {
        instance_id: id.to_owned(),
        definition_name: row.definition_name.clone(),
        definition_version: row.definition_version.clone(),
        status: row.status,
        sub_status: row.sub_status,
        correlation_id: row.correlation_id.clone(),
        version: row.version,
        lease: LeaseState::from_columns(
            row.lease_owner.clone(),
            row.lease_token,
            row.lease_expires_at,
        ),
        control_request: row.control_request.clone(),
        origin_at: row.origin_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
        finished_at: row.finished_at,
        listing: row.listing.clone(),
        state,
    }
}

pub(super) fn incident(
    instance_id: &str,
    definition_name: &str,
    new: NewIncident,
) -> IncidentRecord {
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

pub(super) fn sort_incidents(rows: &mut [IncidentRecord]) {
    rows.sort_by(|a, b| (a.created_at, &a.incident_id).cmp(&(b.created_at, &b.incident_id)));
}

pub(super) fn lease_live(row: &MemInstance, now: Micros) -> bool {
    row.lease_owner.is_some() && row.lease_expires_at.is_some_and(|at| at > now)
}

impl Inner {
    /// Inserts a new instance at version 1 with its receipt, consumed queue item and
    /// idempotency record; an existing id gives `AlreadyExists` and changes nothing.
    pub(super) fn insert_instance(&mut self, instance: NewInstance<String>) -> StoreResult<()> {
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
            self.add_receipt(&id, stimulus, instance.created_at);
        }
        if let Some(item) = instance.consumed_queue_item {
            self.queue.remove(&item);
        }
        if let Some(record) = instance.idempotency {
            // The first writer's record stays (RT-19).
            self.idempotency.entry(record.key.clone()).or_insert(record);
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
                state: instance.state,
                listing: instance.listing,
                journal: VecDeque::new(),
                bookmarks: Vec::new(),
            },
        );
        Ok(())
    }

    /// Records that `instance_id` consumed `stimulus_id` at `at` (RT-19).
    pub(super) fn add_receipt(&mut self, instance_id: &str, stimulus_id: String, at: Micros) {
        match self.receipts.get_mut(instance_id) {
            Some(receipts) => {
                receipts.insert(stimulus_id, at);
            }
            None => {
                self.receipts
                    .insert(instance_id.to_owned(), BTreeMap::from([(stimulus_id, at)]));
            }
        }
    }

    /// The ids of an instance's bookmarks.
    pub(super) fn bookmark_ids_of(&self, instance_id: &str) -> &[String] {
        self.instances
            .get(instance_id)
            .map_or(&[], |row| row.bookmarks.as_slice())
    }

    pub(super) fn remove_dependents(&mut self, instance_id: &str, keep_journal: bool) {
        let waits = self
            .instances
            .get_mut(instance_id)
            .map(|row| std::mem::take(&mut row.bookmarks))
            .unwrap_or_default();
        self.remove_waits(instance_id, waits);
        if !keep_journal {
            self.receipts.remove(instance_id);
            for key in self.instance_keys.remove(instance_id).unwrap_or_default() {
                self.keys.remove(&(key, instance_id.to_owned()));
            }
            self.incidents.retain(|_, i| i.instance_id != instance_id);
        }
    }

    /// Removes an instance's bookmarks (`bookmark_ids`, taken out of its row) and timers.
    fn remove_waits(&mut self, instance_id: &str, bookmark_ids: Vec<String>) {
        for bookmark_id in bookmark_ids {
            unindex(
                &mut self.bookmarks,
                &mut self.bookmark_index,
                &bookmark_id,
                false,
            );
        }
        self.timers
            .retain(|_, t| t.row.instance_id.as_deref() != Some(instance_id));
    }

    pub(super) fn move_to_dead(
        &mut self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<String>,
        now: Micros,
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

    pub(super) fn commit(&mut self, c: Commit<String>) -> StoreResult<u64> {
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
                resource: crate::store::backend::LeaseKey::instance(c.instance_id.as_str())
                    .resource(),
                token: c.lease_token,
                current: row.lease_token,
            });
        }
        // A commit's lists are short (a receipt, a bookmark or two): the duplicate checks
        // scan the entries before each one instead of building a set per commit.
        let receipts = self.receipts.get(&c.instance_id);
        for (i, stimulus) in c.receipts.iter().enumerate() {
            if c.receipts.iter().take(i).any(|earlier| earlier == stimulus)
                || receipts.is_some_and(|r| r.contains_key(stimulus))
            {
                return Err(StoreError::ReceiptExists {
                    instance: c.instance_id,
                    stimulus_id: stimulus.clone(),
                });
            }
        }
        for (i, b) in c.bookmarks_added.iter().enumerate() {
            let exists = self.bookmarks.get(&b.bookmark_id).is_some_and(|old| {
                old.instance_id != c.instance_id || !c.bookmarks_removed.contains(&b.bookmark_id)
            });
            let doubled = c
                .bookmarks_added
                .iter()
                .take(i)
                .any(|other| other.bookmark_id == b.bookmark_id);
            if exists || doubled {
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
        let id = c.instance_id;
        let (definition_name, new_version, waits) = {
            let row = self
                .instances
                .get_mut(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            let correlation_changed = row.correlation_id != c.correlation_id;
            row.version += 1;
            row.state = c.state;
            row.listing = c.listing;
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
            append_journal(
                &mut row.journal,
                c.journal_compaction,
                c.journal,
                c.max_journal_entries,
            );
            // The bookmark lists are updated with the instance row at hand: no second
            // lookup of it. A hash whose last bookmark goes while this commit adds some
            // keeps its entry until the adds are done, so one removed and added again (a
            // wait taken and set again) is not copied.
            let keep_hashes = !c.bookmarks_added.is_empty();
            let mut emptied = Vec::new();
            for bookmark_id in &c.bookmarks_removed {
                if let Some(at) = row.bookmarks.iter().position(|b| b == bookmark_id)
                    && let Some(b) = unindex(
                        &mut self.bookmarks,
                        &mut self.bookmark_index,
                        bookmark_id,
                        keep_hashes,
                    )
                {
                    row.bookmarks.swap_remove(at);
                    if keep_hashes {
                        emptied.push(b.hash);
                    }
                }
            }
            if correlation_changed {
                // C-10: the bookmark rows carry the instance's correlation id.
                for bookmark_id in &row.bookmarks {
                    if let Some(b) = self.bookmarks.get_mut(bookmark_id) {
                        b.correlation_id.clone_from(&c.correlation_id);
                    }
                }
            }
            // ENG-54: a migration re-pins the instance and its bookmark rows.
            if let Some(repinned) = c.definition_version {
                for bookmark_id in &row.bookmarks {
                    if let Some(b) = self.bookmarks.get_mut(bookmark_id) {
                        b.definition_version.clone_from(&repinned);
                    }
                }
                row.definition_version = repinned;
            }
            for b in c.bookmarks_added {
                match self.bookmark_index.get_mut(&b.hash) {
                    Some(ids) => {
                        ids.insert((b.created_at, b.bookmark_id.clone()));
                    }
                    None => {
                        self.bookmark_index.insert(
                            b.hash.clone(),
                            BTreeSet::from([(b.created_at, b.bookmark_id.clone())]),
                        );
                    }
                }
                row.bookmarks.push(b.bookmark_id.clone());
                self.bookmarks.insert(
                    b.bookmark_id,
                    MemBookmark {
                        instance_id: id.clone(),
                        hash: b.hash,
                        name: b.name,
                        node_id: b.node_id,
                        context_id: b.context_id,
                        correlation_id: c.correlation_id.clone(),
                        definition_name: row.definition_name.clone(),
                        definition_version: row.definition_version.clone(),
                        look_back: b.look_back,
                        created_at: b.created_at,
                    },
                );
            }
            for hash in emptied {
                if self
                    .bookmark_index
                    .get(&hash)
                    .is_some_and(BTreeSet::is_empty)
                {
                    self.bookmark_index.remove(&hash);
                }
            }
            // The name goes into the incident rows this commit opens (none, in most
            // commits: no copy then).
            let definition_name = if c.incidents_opened.is_empty() {
                String::new()
            } else {
                row.definition_name.clone()
            };
            // Cleared below, after the timers, as every wait of the instance is.
            let waits = if c.clear_waits {
                std::mem::take(&mut row.bookmarks)
            } else {
                Vec::new()
            };
            (definition_name, row.version, waits)
        };
        for timer_id in removed_timers {
            if self
                .timers
                .get(timer_id)
                .is_some_and(|t| t.row.instance_id.as_deref() == Some(id.as_str()))
            {
                self.timers.remove(timer_id);
            }
        }
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
        if c.clear_waits {
            self.remove_waits(&id, waits);
        }
        for stimulus in c.receipts {
            self.add_receipt(&id, stimulus, c.now);
        }
        for key in c.keys_added {
            if self.keys.insert((key.clone(), id.clone())) {
                self.instance_keys.entry(id.clone()).or_default().push(key);
            }
        }
        for item in &c.consumed_queue_items {
            self.queue.remove(item);
        }
        for instance in c.instances_created {
            self.insert_instance(instance)?;
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
        if let Some(record) = c.idempotency {
            self.idempotency.entry(record.key.clone()).or_insert(record);
        }
        Ok(new_version)
    }
}

/// Appends a commit's journal entries to an instance's journal, after its compaction, and
/// drops the oldest rows over the cap (ENG-42).
fn append_journal(
    entries: &mut VecDeque<JournalRecord<String>>,
    compaction: Option<JournalCompaction<String>>,
    journal: Vec<NewJournalRecord<String>>,
    max_entries: Option<u64>,
) {
    if let Some(compaction) = compaction {
        let through = compaction.through_seq;
        entries.retain(|entry| entry.seq > through);
        // Every entry left is newer than `through`: the summary goes first.
        entries.push_front(journal_row(through, compaction.summary));
    }
    let mut seq = entries.back().map_or(0, |entry| entry.seq);
    entries.reserve(journal.len());
    for entry in journal {
        seq += 1;
        entries.push_back(journal_row(seq, entry));
    }
    if let Some(max) = max_entries {
        let excess = entries
            .len()
            .saturating_sub(usize::try_from(max).unwrap_or(usize::MAX));
        entries.drain(..excess);
    }
}

fn journal_row(seq: u64, entry: NewJournalRecord<String>) -> JournalRecord<String> {
    JournalRecord {
        seq,
        at: entry.at,
        kind: entry.kind,
        context_id: entry.context_id,
        node_id: entry.node_id,
        detail: entry.detail,
    }
}

/// Removes a bookmark row and its entry of the hash index, whose entry for the hash goes
/// with its last bookmark unless `keep_hash`; the instance's list is the caller's to update.
fn unindex(
    bookmarks: &mut BTreeMap<String, MemBookmark>,
    index: &mut BTreeMap<String, BTreeSet<(Micros, String)>>,
    bookmark_id: &str,
    keep_hash: bool,
) -> Option<MemBookmark> {
    let (id, row) = bookmarks.remove_entry(bookmark_id)?;
    if let Some(ids) = index.get_mut(&row.hash) {
        ids.remove(&(row.created_at, id));
        if ids.is_empty() && !keep_hash {
            index.remove(&row.hash);
        }
    }
    Some(row)
}

/// A kept bookmark as its row.
pub(super) fn bookmark_row(bookmark_id: &str, b: &MemBookmark) -> BookmarkRow {
    BookmarkRow {
        bookmark_id: bookmark_id.to_owned(),
        instance_id: b.instance_id.clone(),
        hash: b.hash.clone(),
        name: b.name.clone(),
        node_id: b.node_id.clone(),
        context_id: b.context_id,
        correlation_id: b.correlation_id.clone(),
        definition_name: b.definition_name.clone(),
        definition_version: b.definition_version.clone(),
        look_back: b.look_back,
        created_at: b.created_at,
    }
}
