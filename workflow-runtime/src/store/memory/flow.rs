//! The memory store's flow-control slots (QU-5): each queue's rows in one map entry, changed
//! under the store's lock.

use std::collections::{BTreeMap, VecDeque};

use super::MemoryStore;
use crate::base::{BoxFuture, Micros};
use crate::store::error::StoreResult;
use crate::store::slots::{
    FlowControl, QueueSnapshot, QueueUsage, SlotLease, SlotLimits, SlotOutcome, SlotRelease,
    SlotRequest, SlotRow, WaiterRow, next_waiter, plan_acquire, slot_fenced, usage_of,
};

/// One queue's rows.
#[derive(Debug, Default)]
pub(crate) struct MemQueue {
    limits: SlotLimits,
    last_token: u64,
    last_seq: u64,
    last_turn: u64,
    slots: BTreeMap<String, SlotRow>,
    waiters: BTreeMap<String, WaiterRow>,
    turns: BTreeMap<String, u64>,
    /// Grants in the rate window, oldest first.
    starts: VecDeque<Micros>,
}

impl MemQueue {
    fn snapshot(&self, now: Micros, period: Option<Micros>) -> QueueSnapshot {
        let mut in_window: Vec<Micros> = period
            .map(|p| {
                self.starts
                    .iter()
                    .copied()
                    .filter(|t| *t > now - p)
                    .collect()
            })
            .unwrap_or_default();
        in_window.sort_unstable();
        QueueSnapshot {
            last_token: self.last_token,
            last_seq: self.last_seq,
            last_turn: self.last_turn,
            slots: self.slots.values().cloned().collect(),
            waiters: self.waiters.values().cloned().collect(),
            turns: self.turns.iter().map(|(k, t)| (k.clone(), *t)).collect(),
            starts_in_window: u32::try_from(in_window.len()).unwrap_or(u32::MAX),
            oldest_start: in_window.first().copied(),
            window: in_window,
        }
    }
}

impl FlowControl for MemoryStore {
    fn acquire_slot(&self, request: SlotRequest) -> BoxFuture<'_, StoreResult<SlotOutcome>> {
        self.write(move |inner| {
            let queue = inner.flow.entry(request.queue.clone()).or_default();
            queue.limits = request.limits;
            let period = request.limits.rate.map(|(_, p)| p);
            let plan = plan_acquire(&request, queue.snapshot(request.now, period));
            for slot in &plan.expired_slots {
                queue.slots.remove(&slot.holder);
            }
            for holder in &plan.expired_waiters {
                queue.waiters.remove(holder);
            }
            if plan.remove_waiter {
                queue.waiters.remove(&request.holder);
            }
            if let Some(waiter) = plan.waiter {
                queue.waiters.insert(waiter.holder.clone(), waiter);
            }
            if let Some(slot) = plan.slot {
                queue.slots.insert(slot.holder.clone(), slot);
            }
            if let Some(before) = plan.starts_before {
                while queue.starts.front().is_some_and(|t| *t <= before) {
                    queue.starts.pop_front();
                }
            }
            if let Some((_, at)) = plan.start {
                queue.starts.push_back(at);
            }
            if let Some((key, turn)) = plan.turn {
                queue.turns.insert(key, turn);
            }
            for key in &plan.dropped_turns {
                queue.turns.remove(key);
            }
            (queue.last_token, queue.last_seq, queue.last_turn) = plan.counters;
            Ok(plan.outcome)
        })
    }

    fn renew_slot(
        &self,
        lease: &SlotLease,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotLease>> {
        let lease = lease.clone();
        self.write(move |inner| {
            let slot = inner
                .flow
                .get_mut(&lease.queue)
                .and_then(|q| q.slots.get_mut(&lease.holder));
            match slot {
                Some(slot) if slot.token == lease.token && slot.expires_at > now => {
                    slot.expires_at = now.saturating_add(ttl);
                    Ok(SlotLease {
                        expires_at: slot.expires_at,
                        ..lease
                    })
                }
                Some(slot) if slot.token != lease.token => Err(slot_fenced(
                    &lease.queue,
                    &lease.holder,
                    lease.token,
                    slot.token,
                )),
                _ => Err(slot_fenced(&lease.queue, &lease.holder, lease.token, 0)),
            }
        })
    }

    fn release_slot(
        &self,
        queue: &str,
        holder: &str,
        token: Option<u64>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotRelease>> {
        let (queue_name, holder) = (queue.to_owned(), holder.to_owned());
        self.write(move |inner| {
            let Some(queue) = inner.flow.get_mut(&queue_name) else {
                return Ok(SlotRelease::default());
            };
            let released = match token {
                Some(token) => match queue.slots.get(&holder) {
                    Some(slot) if slot.token == token => queue.slots.remove(&holder).is_some(),
                    Some(slot) => {
                        return Err(slot_fenced(&queue_name, &holder, token, slot.token));
                    }
                    None => false,
                },
                None => queue.waiters.remove(&holder).is_some(),
            };
            let period = queue.limits.rate.map(|(_, p)| p);
            let next = next_waiter(&queue.snapshot(now, period), now, queue.limits.concurrency);
            Ok(SlotRelease { released, next })
        })
    }

    fn queue_usage(&self, now: Micros) -> BoxFuture<'_, StoreResult<Vec<QueueUsage>>> {
        self.read(move |inner| {
            Ok(inner
                .flow
                .iter()
                .map(|(name, q)| {
                    let snapshot = q.snapshot(now, q.limits.rate.map(|(_, p)| p));
                    usage_of(name.clone(), q.limits, &snapshot, now)
                })
                .collect())
        })
    }
}
