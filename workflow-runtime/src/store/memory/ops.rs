//! The memory store's [`Store`] operations, each one atomic under the lock.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::tables::{
    bookmark_row, incident, lease_live, not_found, record, record_with, sort_incidents,
};
use super::{Claimed, Inner, MemInstance, MemoryStore};
use crate::base::BoxFuture;
use crate::base::Micros;
use crate::store::backend::{
    BookmarkSelect, Capabilities, CensusCount, ChangeCount, ChildWaitIndex, ClaimKnown,
    ClaimedRecord, DefinitionRecord, DefinitionStore, DueDebounces, DueTimers, Enqueue,
    IncidentQuery, LeaseClaim, LeaseKey, PurgeTarget, Settled, Settlement, Store, TimerScope,
    TriggerSelect, TriggerWrite,
};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::DebounceRow;
use crate::store::rows::{
    BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter, DeadLetterFilter,
    DeadLetterReason, IdempotencyRecord, IncidentRecord, InstanceCount, InstanceFilter,
    InstanceRecord, InstanceStatus, JournalRecord, Lease, ListedInstance, NewIncident, NewInstance,
    QueueItem, Renewal, Schedule, ScheduleFiring, StoreStats, TimerRow, TriggerRow,
};

impl Inner {
    /// Takes `id`'s lease for `claim` (or renews the one it holds) and finds its row: the
    /// claim of [`Store::claim_instance`] and of [`ClaimKnown`].
    fn claim(&mut self, id: &str, claim: &LeaseClaim) -> StoreResult<(Lease, &MemInstance)> {
        let key = LeaseKey::Instance(id.to_owned());
        let lease = match claim.token {
            None => self.acquire(&key, &claim.owner, claim.now, claim.ttl)?,
            Some(token) => self.renew(&key, token, claim.now, claim.ttl)?.lease,
        };
        let row = self
            .instances
            .get(id)
            .ok_or_else(|| not_found("instance", id))?;
        Ok((lease, row))
    }

    fn acquire(
        &mut self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Lease> {
        let expires_at = now.saturating_add(ttl);
        match key {
            LeaseKey::Instance(id) => {
                let row = self
                    .instances
                    .get_mut(id)
                    .ok_or_else(|| not_found("instance", id))?;
                if lease_live(row, now) {
                    return Err(StoreError::LeaseHeld {
                        resource: key.resource(),
                        holder: row.lease_owner.clone().unwrap_or_default(),
                        until: row.lease_expires_at.unwrap_or_default(),
                    });
                }
                row.lease_token += 1;
                row.lease_owner = Some(owner.to_owned());
                row.lease_expires_at = Some(expires_at);
                Ok(Lease {
                    token: row.lease_token,
                    expires_at,
                })
            }
            LeaseKey::Named(name) => {
                let lease = self.named_leases.entry(name.clone()).or_default();
                if let Some(holder) = &lease.owner
                    && lease.expires_at > now
                {
                    return Err(StoreError::LeaseHeld {
                        resource: key.resource(),
                        holder: holder.clone(),
                        until: lease.expires_at,
                    });
                }
                lease.token += 1;
                lease.owner = Some(owner.to_owned());
                lease.expires_at = expires_at;
                Ok(Lease {
                    token: lease.token,
                    expires_at,
                })
            }
        }
    }

    fn renew(
        &mut self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Renewal> {
        let expires_at = now.saturating_add(ttl);
        let fenced = |current: u64| StoreError::Fenced {
            resource: key.resource(),
            token,
            current,
        };
        match key {
            LeaseKey::Instance(id) => {
                let row = self
                    .instances
                    .get_mut(id)
                    .ok_or_else(|| not_found("instance", id))?;
                if row.lease_owner.is_none() || row.lease_token != token {
                    return Err(fenced(row.lease_token));
                }
                row.lease_expires_at = Some(expires_at);
                Ok(Renewal {
                    lease: Lease { token, expires_at },
                    control_request: row.control_request.clone(),
                })
            }
            LeaseKey::Named(name) => match self.named_leases.get_mut(name) {
                Some(lease) if lease.owner.is_some() && lease.token == token => {
                    lease.expires_at = expires_at;
                    Ok(Renewal {
                        lease: Lease { token, expires_at },
                        control_request: None,
                    })
                }
                other => Err(fenced(other.map_or(0, |l| l.token))),
            },
        }
    }

    fn release(&mut self, key: &LeaseKey, token: u64) -> StoreResult<()> {
        let fenced = |current: u64| StoreError::Fenced {
            resource: key.resource(),
            token,
            current,
        };
        match key {
            LeaseKey::Instance(id) => {
                let row = self
                    .instances
                    .get_mut(id)
                    .ok_or_else(|| not_found("instance", id))?;
                if row.lease_owner.is_none() || row.lease_token != token {
                    return Err(fenced(row.lease_token));
                }
                row.lease_owner = None;
                row.lease_expires_at = None;
                Ok(())
            }
            LeaseKey::Named(name) => match self.named_leases.get_mut(name) {
                Some(lease) if lease.owner.is_some() && lease.token == token => {
                    lease.owner = None;
                    Ok(())
                }
                other => Err(fenced(other.map_or(0, |l| l.token))),
            },
        }
    }

    fn remove_instances(&mut self, ids: &[String]) {
        for id in ids {
            // The instance's bookmarks are found from its row: removed before it.
            self.remove_dependents(id, false);
            self.instances.remove(id);
        }
    }

    fn purge(&mut self, target: PurgeTarget) -> StoreResult<u64> {
        match target {
            PurgeTarget::Instance(id) => {
                let row = self
                    .instances
                    .get(&id)
                    .ok_or_else(|| not_found("instance", &id))?;
                if !row.status.is_final() {
                    return Err(StoreError::NotTerminal {
                        instance: id,
                        status: row.status,
                    });
                }
                self.remove_instances(&[id]);
                Ok(1)
            }
            PurgeTarget::Finished(filter) => {
                let doomed: Vec<String> = self
                    .instances
                    .iter()
                    .filter(|(_, row)| {
                        filter.statuses.contains(&row.status)
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
                self.remove_instances(&doomed);
                Ok(doomed.len() as u64)
            }
            PurgeTarget::DeadLetter(id) => Ok(u64::from(self.dead_letters.remove(&id).is_some())),
            PurgeTarget::DeadLettersBefore { before, limit } => {
                let doomed: Vec<String> = self
                    .dead_letters
                    .values()
                    .filter(|d| d.dead_at < before)
                    .take(limit)
                    .map(|d| d.item.item_id.clone())
                    .collect();
                for id in &doomed {
                    self.dead_letters.remove(id);
                }
                Ok(doomed.len() as u64)
            }
            PurgeTarget::ReceiptsBefore { before, limit } => {
                let doomed: Vec<(String, String)> = self
                    .receipts
                    .iter()
                    .flat_map(|(instance, receipts)| {
                        receipts
                            .iter()
                            .filter(|(_, at)| **at < before)
                            .map(move |(stimulus, _)| (instance.clone(), stimulus.clone()))
                    })
                    .take(limit)
                    .collect();
                for (instance, stimulus) in &doomed {
                    if let Some(receipts) = self.receipts.get_mut(instance) {
                        receipts.remove(stimulus);
                        if receipts.is_empty() {
                            self.receipts.remove(instance);
                        }
                    }
                }
                Ok(doomed.len() as u64)
            }
            PurgeTarget::IdempotencyRecordsBefore { before, limit } => {
                let doomed: Vec<String> = self
                    .idempotency
                    .values()
                    .filter(|r| r.created_at < before)
                    .take(limit)
                    .map(|r| r.key.clone())
                    .collect();
                for key in &doomed {
                    self.idempotency.remove(key);
                }
                Ok(doomed.len() as u64)
            }
            PurgeTarget::ExpiredQueueItems { now, limit } => {
                let mut expired: Vec<(Micros, String)> = self
                    .queue
                    .values()
                    .filter(|q| !q.row.held && q.row.expires_at <= now)
                    .map(|q| (q.row.expires_at, q.row.item_id.clone()))
                    .collect();
                expired.sort();
                expired.truncate(limit);
                let mut moved = 0;
                for (_, id) in expired {
                    if self.move_to_dead(&id, DeadLetterReason::Expired, None, now) {
                        moved += 1;
                    }
                }
                Ok(moved)
            }
            PurgeTarget::Schedule(id) => {
                let is_schedule = self
                    .timers
                    .get(&id)
                    .is_some_and(|t| t.row.instance_id.is_none());
                if is_schedule {
                    self.timers.remove(&id);
                }
                Ok(u64::from(is_schedule))
            }
        }
    }

    fn settle(&mut self, id: &str, settlement: Settlement) -> StoreResult<Settled> {
        match settlement {
            Settlement::Release { owner, .. } => {
                if let Some(q) = self.queue.get_mut(id)
                    && q.claim_owner.as_deref() == Some(owner.as_str())
                {
                    q.claim_owner = None;
                    q.claim_expires_at = None;
                }
                Ok(Settled::Released)
            }
            Settlement::Renew { owner, now, until } => {
                Ok(Settled::Renewed(match self.queue.get_mut(id) {
                    Some(q)
                        if q.claim_owner.as_deref() == Some(owner.as_str())
                            || !q.claim_live(now) =>
                    {
                        q.claim_owner = Some(owner);
                        q.claim_expires_at = Some(until);
                        true
                    }
                    _ => false,
                }))
            }
            Settlement::Ack => Ok(Settled::Acked(self.queue.remove(id).is_some())),
            Settlement::Fail {
                error,
                now,
                max_attempts,
            } => {
                let q = self
                    .queue
                    .get_mut(id)
                    .ok_or_else(|| not_found("queue item", id))?;
                q.row.attempts = q.row.attempts.saturating_add(1);
                q.row.last_error = Some(error.clone());
                q.row.last_attempt_at = Some(now);
                q.claim_owner = None;
                q.claim_expires_at = None;
                let attempts = q.row.attempts;
                if attempts >= max_attempts {
                    self.move_to_dead(id, DeadLetterReason::Failed, Some(error), now);
                    Ok(Settled::DeadLettered(true))
                } else {
                    Ok(Settled::Retry { attempts })
                }
            }
            Settlement::DeadLetter { reason, error, now } => Ok(Settled::DeadLettered(
                self.move_to_dead(id, reason, error, now),
            )),
        }
    }

    fn earliest_timer(&self, now: Micros) -> Option<Micros> {
        self.timers
            .values()
            .filter(|t| !t.row.parked && !t.claim_live(now))
            .map(|t| t.row.due_at)
            .min()
    }
}

impl Store for MemoryStore {
    fn create_instance(&self, instance: NewInstance<String>) -> BoxFuture<'_, StoreResult<u64>> {
        self.write_changing(always, move |inner| {
            inner.insert_instance(instance)?;
            Ok(1)
        })
    }

    fn load_instance(
        &self,
        instance_id: &str,
    ) -> BoxFuture<'_, StoreResult<InstanceRecord<String>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let row = inner
                .instances
                .get(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            Ok(record(&id, row))
        })
    }

    fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> BoxFuture<'_, StoreResult<ClaimedRecord<String>>> {
        self.write(move |inner| {
            let (lease, row) = inner.claim(instance_id, &claim)?;
            Ok(ClaimedRecord {
                lease,
                record: record(instance_id, row),
            })
        })
    }

    fn commit(&self, commit: Commit<String>) -> BoxFuture<'_, StoreResult<u64>> {
        self.write_changing(always, move |inner| {
            if inner.fail_commits > 0 {
                inner.fail_commits -= 1;
                return Err(StoreError::unavailable(
                    "injected failure (fail_next_commits)",
                ));
            }
            inner.commit(commit)
        })
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<InstanceStatus>> {
        let id = instance_id.to_owned();
        self.write_changing(always, move |inner| {
            let row = inner
                .instances
                .get_mut(&id)
                .ok_or_else(|| not_found("instance", &id))?;
            if !row.status.is_final() {
                row.control_request = Some(request);
            }
            Ok(row.status)
        })
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        self.read(move |inner| {
            let start = match &filter.after {
                Some(after) => Bound::Excluded(after.clone()),
                None => Bound::Unbounded,
            };
            Ok(inner
                .instances
                .range((start, Bound::Unbounded))
                .filter(|(_, row)| {
                    filter.status.is_none_or(|s| s == row.status)
                        && (!filter.live_only || !row.status.is_final())
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
                .take(filter.limit)
                .map(|(id, row)| ListedInstance {
                    instance_id: id.clone(),
                    summary: Ok(record_with(id, row, ())),
                })
                .collect())
        })
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        let owner = owner.to_owned();
        self.write(move |inner| {
            let mut candidates: Vec<(Micros, String)> = inner
                .instances
                .iter()
                .filter(|(_, row)| row.status == InstanceStatus::Running && !lease_live(row, now))
                .map(|(id, row)| (row.updated_at, id.clone()))
                .collect();
            candidates.sort();
            candidates.truncate(limit);
            let mut claimed = Vec::with_capacity(candidates.len());
            for (_, id) in candidates {
                let lease = inner.acquire(&LeaseKey::Instance(id.clone()), &owner, now, ttl)?;
                let sub_status = inner.instances.get(&id).and_then(|row| row.sub_status);
                claimed.push(ClaimedInstance {
                    instance_id: id,
                    sub_status,
                    lease,
                });
            }
            Ok(claimed)
        })
    }

    fn purge(&self, target: PurgeTarget) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |inner| inner.purge(target))
    }

    fn acquire_lease(
        &self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.write(move |inner| inner.acquire(&key, &owner, now, ttl))
    }

    fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let key = key.clone();
        self.write(move |inner| inner.renew(&key, token, now, ttl))
    }

    fn release_lease(&self, key: &LeaseKey, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let key = key.clone();
        // Not a change (RT-27): an item left because its instance was busy is looked at
        // again by every sweep anyway, and the queue worker's own deliveries claim and
        // release instances that cannot take an item (paused, say).
        self.write(move |inner| inner.release(&key, token))
    }

    fn find_bookmarks(
        &self,
        select: BookmarkSelect,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read(move |inner| match select {
            BookmarkSelect::Hash(query) => {
                let Some(ids) = inner.bookmark_index.get(&query.hash) else {
                    return Ok(Vec::new());
                };
                let start = match &query.after {
                    Some((at, id)) => Bound::Excluded((*at, id.clone())),
                    None => Bound::Unbounded,
                };
                Ok(ids
                    .range((start, Bound::Unbounded))
                    .filter_map(|(_, id)| inner.bookmarks.get_key_value(id))
                    .filter(|(id, b)| {
                        query
                            .instance_id
                            .as_ref()
                            .is_none_or(|i| *i == b.instance_id)
                            && query.bookmark_id.as_ref().is_none_or(|i| i == *id)
                    })
                    .filter(|(_, b)| {
                        query
                            .correlation_id
                            .as_ref()
                            .is_none_or(|c| b.correlation_id.as_ref() == Some(c))
                    })
                    .take(query.limit)
                    .map(|(id, b)| bookmark_row(id, b))
                    .collect())
            }
            BookmarkSelect::Instance(id) => {
                let mut rows: Vec<BookmarkRow> = inner
                    .bookmark_ids_of(&id)
                    .iter()
                    .filter_map(|b| inner.bookmarks.get_key_value(b))
                    .map(|(id, b)| bookmark_row(id, b))
                    .collect();
                rows.sort_by(|a, b| {
                    (a.created_at, &a.bookmark_id).cmp(&(b.created_at, &b.bookmark_id))
                });
                Ok(rows)
            }
        })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        self.read(move |inner| {
            Ok(inner
                .receipts
                .get(instance_id)
                .is_some_and(|receipts| receipts.contains_key(stimulus_id)))
        })
    }

    fn find_triggers(&self, select: TriggerSelect) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        self.read(move |inner| {
            Ok(match select {
                TriggerSelect::Hashes(hashes) => {
                    let hashes: BTreeSet<String> = hashes.into_iter().collect();
                    inner
                        .triggers
                        .values()
                        .filter(|t| hashes.contains(&t.hash))
                        .cloned()
                        .collect()
                }
                TriggerSelect::Definition(name) => inner
                    .triggers
                    .values()
                    .filter(|t| t.definition_name == name)
                    .cloned()
                    .collect(),
            })
        })
    }

    fn write_triggers(
        &self,
        definition_name: &str,
        write: TriggerWrite,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let name = definition_name.to_owned();
        self.write_changing(always, move |inner| {
            for (node, hash) in write.deletes {
                inner.triggers.remove(&(name.clone(), node, hash));
            }
            for row in write.upserts {
                let key = (name.clone(), row.node_id.clone(), row.hash.clone());
                inner.triggers.insert(key, row);
            }
            Ok(())
        })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueTimers>> {
        let owner = owner.to_owned();
        if limit == 0 {
            // Nothing to claim: a read.
            return self.read(move |inner| {
                Ok(DueTimers {
                    claimed: Vec::new(),
                    next_due: inner.earliest_timer(now),
                    damaged: Vec::new(),
                })
            });
        }
        self.write(move |inner| {
            let mut due: Vec<(Micros, String)> = inner
                .timers
                .values()
                .filter(|t| !t.row.parked && t.row.due_at <= now && !t.claim_live(now))
                .map(|t| (t.row.due_at, t.row.timer_id.clone()))
                .collect();
            due.sort();
            due.truncate(limit);
            let mut claimed = Vec::with_capacity(due.len());
            for (_, id) in due {
                if let Some(t) = inner.timers.get_mut(&id) {
                    t.claim_owner = Some(owner.clone());
                    t.claim_expires_at = Some(now.saturating_add(claim_ttl));
                    claimed.push(t.row.clone());
                }
            }
            // Typed rows: a memory store holds no damaged timer.
            Ok(DueTimers {
                claimed,
                next_due: inner.earliest_timer(now),
                damaged: Vec::new(),
            })
        })
    }

    fn list_timers(&self, scope: TimerScope) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        self.read(move |inner| {
            let mut rows: Vec<TimerRow> = inner
                .timers
                .values()
                .filter(|t| match &scope {
                    TimerScope::Instance(id) => t.row.instance_id.as_deref() == Some(id.as_str()),
                    TimerScope::Schedules(name) => {
                        t.row.instance_id.is_none()
                            && t.row.definition_name.as_deref() == Some(name.as_str())
                    }
                })
                .map(|t| t.row.clone())
                .collect();
            if matches!(scope, TimerScope::Instance(_)) {
                rows.sort_by(|a, b| (a.due_at, &a.timer_id).cmp(&(b.due_at, &b.timer_id)));
            }
            Ok(rows)
        })
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        self.write(move |inner| {
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
        })
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<String>>,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        self.write_changing(
            |firing| *firing != ScheduleFiring::Stale,
            move |inner| {
                let current = inner
                    .timers
                    .get(&id)
                    .filter(|t| t.row.instance_id.is_none() && !t.row.parked)
                    .map(|t| t.row.due_at);
                if current != Some(expected_due_at) {
                    return Ok(ScheduleFiring::Stale);
                }
                let firing = match instance {
                    Some(instance) => ScheduleFiring::of_creation(inner.insert_instance(instance))?,
                    None => ScheduleFiring::Skipped,
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
        )
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord<String>>>> {
        let id = instance_id.to_owned();
        self.read(move |inner| {
            let Some(entries) = inner.instances.get(&id).map(|row| &row.journal) else {
                return Ok(Vec::new());
            };
            // Ascending `seq`: the first entry at or after `from_seq` by binary search.
            let start = entries.partition_point(|e| e.seq < from_seq);
            Ok(entries.range(start..).take(limit).cloned().collect())
        })
    }

    fn enqueue(&self, send: Enqueue) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let queues = !send.items.is_empty();
        self.write_changing(
            move |existing: &Option<IdempotencyRecord>| queues && existing.is_none(),
            move |inner| {
                if let Some(record) = &send.idempotency
                    && !send.replace_record
                    && let Some(existing) = inner.idempotency.get(&record.key)
                {
                    return Ok(Some(existing.clone()));
                }
                let mut ids = BTreeSet::new();
                for item in &send.items {
                    if inner.queue.contains_key(&item.item_id)
                        || inner.dead_letters.contains_key(&item.item_id)
                        || !ids.insert(&item.item_id)
                    {
                        return Err(StoreError::AlreadyExists {
                            what: "queue item",
                            id: item.item_id.clone(),
                        });
                    }
                }
                for item in send.items {
                    inner.queue.insert(item.item_id.clone(), Claimed::new(item));
                }
                if let Some(record) = send.idempotency {
                    inner.idempotency.insert(record.key.clone(), record);
                }
                Ok(None)
            },
        )
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        let owner = owner.to_owned();
        self.write(move |inner| {
            let mut ready: Vec<(Micros, String)> = inner
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

    fn settle_queue_item(
        &self,
        item_id: &str,
        settlement: Settlement,
    ) -> BoxFuture<'_, StoreResult<Settled>> {
        let id = item_id.to_owned();
        // RT-27: an item put back announced, or after a failed attempt, is one another
        // runtime may deliver; one put back silently, acknowledged or dead-lettered is not.
        let counts = matches!(
            settlement,
            Settlement::Release { announce: true, .. } | Settlement::Fail { .. }
        );
        self.write_changing(move |_| counts, move |inner| inner.settle(&id, settlement))
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        self.write_changing(always, move |inner| {
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
            let item = dead.item.replayed(now, ttl);
            inner.queue.insert(id, Claimed::new(item.clone()));
            Ok(item)
        })
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
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
            rows.truncate(filter.limit);
            Ok(rows)
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

    fn list_incidents(
        &self,
        query: IncidentQuery,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        self.read(move |inner| {
            let mut rows: Vec<IncidentRecord> = inner
                .incidents
                .values()
                .filter(|i| {
                    query
                        .instance_id
                        .as_ref()
                        .is_none_or(|id| *id == i.instance_id)
                        && (!query.unresolved_only || i.resolved_at.is_none())
                        && query
                            .after
                            .as_ref()
                            .is_none_or(|(at, id)| (i.created_at, &i.incident_id) > (*at, id))
                })
                .cloned()
                .collect();
            sort_incidents(&mut rows);
            rows.truncate(query.limit);
            Ok(rows)
        })
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        self.read(move |inner| Ok(inner.idempotency.get(&key).cloned()))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        self.read(|inner| Ok(inner.stats))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::default()
            .with_debounce(self)
            .with_definitions(self)
            .with_child_waits(self)
            .with_change_count(self)
            .with_claim_known(self)
            .with_census(self)
            .with_flow_control(self)
            .with_receipts(self)
            .with_keys(self)
    }
}

impl crate::store::ReceiptIndex for MemoryStore {
    fn consumed_anywhere(&self, stimulus_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        // Receipts are kept by instance: a scan, on the rare path that asks.
        self.read(move |inner| {
            Ok(inner
                .receipts
                .values()
                .any(|receipts| receipts.contains_key(stimulus_id)))
        })
    }
}

impl crate::store::KeyIndex for MemoryStore {
    fn instances_with_key(
        &self,
        key: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        let key = key.to_owned();
        self.read(move |inner| {
            Ok(inner
                .keys
                .range((key.clone(), String::new())..)
                .take_while(|(k, _)| *k == key)
                .take(limit)
                .map(|(_, instance)| instance.clone())
                .collect())
        })
    }
}

impl CensusCount for MemoryStore {
    fn census(&self) -> BoxFuture<'_, StoreResult<Census>> {
        self.read(|inner| {
            let mut instances: Vec<InstanceCount> = Vec::new();
            for row in inner.instances.values() {
                let group = instances
                    .iter_mut()
                    .find(|c| c.status == row.status && c.definition_name == row.definition_name);
                match group {
                    Some(group) => group.count += 1,
                    None => instances.push(InstanceCount {
                        definition_name: row.definition_name.clone(),
                        status: row.status,
                        count: 1,
                    }),
                }
            }
            Ok(Census {
                instances,
                queued: Some(inner.queue.len() as u64),
                dead_letters: inner.dead_letters.len() as u64,
            })
        })
    }

    fn version_census(&self) -> BoxFuture<'_, StoreResult<Vec<(String, String, u64)>>> {
        self.read(|inner| {
            let mut counts: std::collections::BTreeMap<(String, String), u64> =
                std::collections::BTreeMap::new();
            for row in inner.instances.values() {
                *counts
                    .entry((row.definition_name.clone(), row.definition_version.clone()))
                    .or_default() += 1;
            }
            Ok(counts
                .into_iter()
                .map(|((name, version), n)| (name, version, n))
                .collect())
        })
    }
}

/// ENG-53: the kept document compared with the row's in place, copied out only when they
/// differ.
impl ClaimKnown for MemoryStore {
    fn claim_instance_known<'a>(
        &'a self,
        instance_id: &'a str,
        claim: LeaseClaim,
        known_version: u64,
        known_text: &'a str,
    ) -> BoxFuture<'a, StoreResult<ClaimedRecord<Option<String>>>> {
        self.write(move |inner| {
            let (lease, row) = inner.claim(instance_id, &claim)?;
            // Compared in place: the document is copied out only when it is not the caller's.
            let unchanged = row.version == known_version && row.state == known_text;
            Ok(ClaimedRecord {
                lease,
                record: record_with(instance_id, row, (!unchanged).then(|| row.state.clone())),
            })
        })
    }
}

/// Every write that may make held work deliverable, by any runtime sharing the store (RT-27).
impl ChangeCount for MemoryStore {
    fn changes(&self) -> u64 {
        self.changes.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Every successful write of its kind counts as a change.
fn always<T>(_: &T) -> bool {
    true
}

impl ChildWaitIndex for MemoryStore {
    fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read(move |inner| {
            let start = match after {
                Some(id) => Bound::Excluded(id),
                None => Bound::Unbounded,
            };
            Ok(inner
                .bookmarks
                .range((start, Bound::Unbounded))
                .filter(|(_, b)| b.name == crate::store::backend::CHILD_WAIT)
                .take(limit)
                .map(|(id, b)| bookmark_row(id, b))
                .collect())
        })
    }
}

impl DefinitionStore for MemoryStore {
    fn put_definition(&self, definition: DefinitionRecord) -> BoxFuture<'_, StoreResult<bool>> {
        self.write(move |inner| {
            let key = (definition.name.clone(), definition.version.clone());
            if inner.definitions.contains_key(&key) {
                return Ok(false);
            }
            inner.definitions.insert(key, definition);
            Ok(true)
        })
    }

    fn list_definitions(
        &self,
        name: Option<&str>,
    ) -> BoxFuture<'_, StoreResult<Vec<DefinitionRecord>>> {
        let name = name.map(str::to_owned);
        self.read(move |inner| {
            let mut rows: Vec<DefinitionRecord> = inner
                .definitions
                .values()
                .filter(|d| name.as_ref().is_none_or(|n| *n == d.name))
                .cloned()
                .collect();
            rows.sort_by(|a, b| (&a.name, a.recorded_at).cmp(&(&b.name, b.recorded_at)));
            Ok(rows)
        })
    }
}

impl crate::store::backend::DebounceStore for MemoryStore {
    fn put_debounce(&self, row: DebounceRow) -> BoxFuture<'_, StoreResult<DebounceRow>> {
        self.write(move |inner| {
            let stored = match inner.debounces.get_mut(&row.debounce_id) {
                Some(existing) => {
                    let kept = &mut existing.row;
                    kept.name = row.name;
                    kept.hash = row.hash;
                    kept.stimulus = row.stimulus;
                    kept.last_sent_at = row.last_sent_at;
                    kept.due_at = row.due_at;
                    kept.sends = kept.sends.saturating_add(1);
                    kept.clone()
                }
                None => {
                    let row = DebounceRow { sends: 1, ..row };
                    inner
                        .debounces
                        .insert(row.debounce_id.clone(), Claimed::new(row.clone()));
                    row
                }
            };
            Ok(stored)
        })
    }

    fn claim_due_debounces(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueDebounces>> {
        let owner = owner.to_owned();
        let earliest = move |inner: &Inner| {
            inner
                .debounces
                .values()
                .filter(|d| !d.claim_live(now))
                .map(|d| d.row.due_at)
                .min()
        };
        if limit == 0 {
            return self.read(move |inner| {
                Ok(DueDebounces {
                    claimed: Vec::new(),
                    next_due: earliest(inner),
                })
            });
        }
        self.write(move |inner| {
            let mut due: Vec<(Micros, String)> = inner
                .debounces
                .values()
                .filter(|d| d.row.due_at <= now && !d.claim_live(now))
                .map(|d| (d.row.due_at, d.row.debounce_id.clone()))
                .collect();
            due.sort();
            due.truncate(limit);
            let mut claimed = Vec::with_capacity(due.len());
            for (_, id) in due {
                if let Some(d) = inner.debounces.get_mut(&id) {
                    d.claim_owner = Some(owner.clone());
                    d.claim_expires_at = Some(now.saturating_add(claim_ttl));
                    claimed.push(d.row.clone());
                }
            }
            Ok(DueDebounces {
                claimed,
                next_due: earliest(inner),
            })
        })
    }

    fn finish_debounce(
        &self,
        debounce_id: &str,
        burst_id: &str,
        sends: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (debounce_id, burst_id) = (debounce_id.to_owned(), burst_id.to_owned());
        self.write(move |inner| {
            let Some(row) = inner.debounces.get_mut(&debounce_id) else {
                return Ok(false);
            };
            if row.row.burst_id == burst_id && row.row.sends == sends {
                inner.debounces.remove(&debounce_id);
                return Ok(true);
            }
            row.claim_owner = None;
            row.claim_expires_at = None;
            Ok(false)
        })
    }
}
