//! The memory store's flow-control slots (QU-5): each queue's rows in one map entry, changed
//! under the store's lock.
//!
//! The line is kept indexed in serving order (QU-8: priority, the key's turn, arrival) and by
//! lease end, so an ask reads only the waiters [`plan_acquire`] decides on: those served
//! before the asking holder (counted, not copied, when the queue has no per-key limit), its
//! own row and those whose place ran out. The waiters behind it change nothing of its
//! answer, so an ask near the head of a long line costs little.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::MemoryStore;
use crate::base::{BoxFuture, Micros};
use crate::store::error::{StoreError, StoreResult};
use crate::store::slots::{
    FlowControl, QueueSnapshot, QueueUsage, SlotLease, SlotLimits, SlotOutcome, SlotPlan,
    SlotRelease, SlotRequest, SlotRow, WaiterRow, next_waiter, plan_acquire, slot_fenced, usage_of,
};

/// A waiter's place in serving order: priority (higher first), its key's turn, arrival.
type Place = (Reverse<u8>, u64, u64);

/// One queue's rows.
#[derive(Debug, Default)]
pub(crate) struct MemQueue {
    limits: SlotLimits,
    last_token: u64,
    last_seq: u64,
    last_turn: u64,
    slots: BTreeMap<String, SlotRow>,
    /// Each waiter with its place in `line`.
    waiters: HashMap<String, (WaiterRow, Place)>,
    /// The waiters in serving order (QU-8).
    line: BTreeMap<Place, String>,
    /// The waiters by the end of their place's lease.
    expiry: BTreeSet<(Micros, String)>,
    /// The waiters of each partition key (a key's turn moves them all in `line`).
    by_key: HashMap<String, HashSet<String>>,
    turns: BTreeMap<String, u64>,
    /// Grants in the rate window, oldest first.
    starts: VecDeque<Micros>,
}

impl MemQueue {
    /// The turn a key is served at (`serving_order`: none for no key, the current turn for
    /// a key without one).
    fn turn_of(&self, key: Option<&str>) -> u64 {
        key.map_or(0, |k| self.turns.get(k).copied().unwrap_or(self.last_turn))
    }

    fn place(&self, priority: u8, key: Option<&str>, seq: u64) -> Place {
        (Reverse(priority), self.turn_of(key), seq)
    }

    fn remove_waiter(&mut self, holder: &str) -> bool {
        let Some((row, place)) = self.waiters.remove(holder) else {
            return false;
        };
        self.line.remove(&place);
        self.expiry.remove(&(row.expires_at, row.holder));
        if let Some(key) = &row.key
            && let Some(holders) = self.by_key.get_mut(key)
        {
            holders.remove(holder);
            if holders.is_empty() {
                self.by_key.remove(key);
            }
        }
        true
    }

    fn insert_waiter(&mut self, row: WaiterRow) {
        self.remove_waiter(&row.holder);
        let place = self.place(row.priority, row.key.as_deref(), row.seq);
        self.line.insert(place, row.holder.clone());
        self.expiry.insert((row.expires_at, row.holder.clone()));
        if let Some(key) = &row.key {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(row.holder.clone());
        }
        self.waiters.insert(row.holder.clone(), (row, place));
    }

    /// Gives `key` its turn and moves its waiters to their new places.
    fn set_turn(&mut self, key: String, turn: u64) {
        let holders: Vec<String> = self
            .by_key
            .get(&key)
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default();
        self.turns.insert(key, turn);
        for holder in holders {
            if let Some((row, _)) = self.waiters.get(&holder) {
                let row = row.clone();
                self.insert_waiter(row);
            }
        }
    }

    /// The grants in the window of `period` ending at `now`, oldest first.
    fn window(&self, now: Micros, period: Option<Micros>) -> Vec<Micros> {
        period.map_or_else(Vec::new, |p| {
            let from = self.starts.partition_point(|t| *t <= now - p);
            self.starts.range(from..).copied().collect()
        })
    }

    fn snapshot_with(
        &self,
        waiters: Vec<WaiterRow>,
        turns: Vec<(String, u64)>,
        window: Vec<Micros>,
    ) -> QueueSnapshot {
        QueueSnapshot {
            last_token: self.last_token,
            last_seq: self.last_seq,
            last_turn: self.last_turn,
            slots: self.slots.values().cloned().collect(),
            waiters,
            turns,
            starts_in_window: u32::try_from(window.len()).unwrap_or(u32::MAX),
            oldest_start: window.first().copied(),
            window,
            unlisted_ahead: 0,
        }
    }

    /// Every row of the queue.
    fn snapshot(&self, now: Micros, period: Option<Micros>) -> QueueSnapshot {
        self.snapshot_with(
            self.line
                .values()
                .filter_map(|h| self.waiters.get(h).map(|(w, _)| w.clone()))
                .collect(),
            self.turns.iter().map(|(k, t)| (k.clone(), *t)).collect(),
            self.window(now, period),
        )
    }

    /// The rows `plan_acquire` decides `request` on: every slot, the waiters served before
    /// the holder (at the place its ask gives it; only their number without a per-key
    /// limit), its own row, the waiters whose place ran
    /// out, and the turns of every key but those with a waiter behind it and none ahead (their
    /// turn orders none of the rows read, and a key with a live waiter keeps its turn).
    fn snapshot_for(&self, request: &SlotRequest) -> QueueSnapshot {
        let now = request.now;
        let own = self.waiters.get(&request.holder).map(|(w, _)| w);
        let seq = own.map_or(self.last_seq + 1, |w| w.seq);
        let mine = self.place(request.priority, request.key.as_deref(), seq);
        let ahead = self
            .line
            .range(..mine)
            .filter_map(|(_, h)| self.waiters.get(h).map(|(w, _)| w))
            .filter(|w| w.holder != request.holder && w.expires_at > now);
        // Without a per-key limit only their number counts (QueueSnapshot::unlisted_ahead).
        let (mut waiters, unlisted_ahead): (Vec<WaiterRow>, u32) =
            if request.limits.per_key.is_some() {
                (ahead.cloned().collect(), 0)
            } else {
                (Vec::new(), self.count_ahead(request, mine))
            };
        waiters.extend(
            self.expiry
                .range(..(now.saturating_add(1), String::new()))
                .filter(|(_, h)| *h != request.holder)
                .filter_map(|(_, h)| self.waiters.get(h).map(|(w, _)| w.clone())),
        );
        waiters.extend(own.cloned());
        // Per key: the waiters read, and whether one of them is another live waiter (its turn
        // orders it; the asking holder's own row takes the key of its ask).
        let mut read: HashMap<&str, (usize, bool)> = HashMap::new();
        for w in &waiters {
            if let Some(key) = w.key.as_deref() {
                let entry = read.entry(key).or_default();
                entry.0 += 1;
                entry.1 |= w.expires_at > now && w.holder != request.holder;
            }
        }
        let turns = self
            .turns
            .iter()
            .filter(|(k, _)| {
                let (read, live) = read.get(k.as_str()).copied().unwrap_or_default();
                live || request.key.as_deref() == Some(k.as_str())
                    || self
                        .by_key
                        .get(k.as_str())
                        .is_none_or(|all| all.len() == read)
            })
            .map(|(k, t)| (k.clone(), *t))
            .collect();
        QueueSnapshot {
            unlisted_ahead,
            ..self.snapshot_with(
                waiters,
                turns,
                self.window(now, request.limits.rate.map(|(_, p)| p)),
            )
        }
    }

    /// How many live waiters other than the asking holder are served before `mine`, counted
    /// from whichever end of the line is nearer: the line, less those behind (walked side by
    /// side with those ahead until one side ends), less the asking holder's own row and the
    /// rows whose place ran out among those ahead. An arrival at the back of a long line, or a
    /// waiter at its head, costs a few steps, not one per waiter.
    fn count_ahead(&self, request: &SlotRequest, mine: Place) -> u32 {
        let now = request.now;
        let (mut before, mut after) = (self.line.range(..mine), self.line.range(mine..));
        let mut counted = 0usize;
        let listed_before = loop {
            match (before.next(), after.next()) {
                (None, _) => break counted,
                (Some(_), None) => break self.line.len().saturating_sub(counted),
                (Some(_), Some(_)) => counted += 1,
            }
        };
        let place_of = |holder: &str| self.waiters.get(holder).map(|(_, place)| *place);
        let own = place_of(&request.holder).is_some_and(|p| p < mine);
        let dead = self
            .expiry
            .range(..(now.saturating_add(1), String::new()))
            .filter(|(_, h)| *h != request.holder)
            .filter(|(_, h)| place_of(h).is_some_and(|p| p < mine))
            .count();
        u32::try_from(
            listed_before
                .saturating_sub(usize::from(own))
                .saturating_sub(dead),
        )
        .unwrap_or(u32::MAX)
    }

    /// The rows `next_waiter` reads at a release: every slot and, in serving order, as many
    /// live waiters as the queue has slots (the one named is among them), with their keys'
    /// turns.
    fn snapshot_for_release(&self, now: Micros) -> QueueSnapshot {
        let wanted = self
            .limits
            .concurrency
            .map_or(1, |limit| usize::try_from(limit).unwrap_or(usize::MAX));
        let waiters: Vec<WaiterRow> = self
            .line
            .values()
            .filter_map(|h| self.waiters.get(h).map(|(w, _)| w))
            .filter(|w| w.expires_at > now)
            .take(wanted)
            .cloned()
            .collect();
        let keys: HashSet<&str> = waiters.iter().filter_map(|w| w.key.as_deref()).collect();
        let turns = keys
            .into_iter()
            .filter_map(|k| self.turns.get(k).map(|t| (k.to_owned(), *t)))
            .collect();
        self.snapshot_with(waiters, turns, Vec::new())
    }

    fn apply(&mut self, request: &SlotRequest, plan: SlotPlan) -> SlotOutcome {
        for slot in &plan.expired_slots {
            self.slots.remove(&slot.holder);
        }
        for holder in &plan.expired_waiters {
            self.remove_waiter(holder);
        }
        if plan.remove_waiter {
            self.remove_waiter(&request.holder);
        }
        (self.last_token, self.last_seq, self.last_turn) = plan.counters;
        for key in &plan.dropped_turns {
            self.turns.remove(key);
        }
        if let Some((key, turn)) = plan.turn {
            self.set_turn(key, turn);
        }
        if let Some(waiter) = plan.waiter {
            self.insert_waiter(waiter);
        }
        if let Some(slot) = plan.slot {
            self.slots.insert(slot.holder.clone(), slot);
        }
        if let Some(before) = plan.starts_before {
            while self.starts.front().is_some_and(|t| *t <= before) {
                self.starts.pop_front();
            }
        }
        if let Some((_, at)) = plan.start {
            self.starts.push_back(at);
        }
        plan.outcome
    }
}

impl FlowControl for MemoryStore {
    fn acquire_slot(&self, request: SlotRequest) -> BoxFuture<'_, StoreResult<SlotOutcome>> {
        self.write(move |inner| {
            // The name is copied only the first time the queue is asked for.
            if !inner.flow.contains_key(&request.queue) {
                inner
                    .flow
                    .insert(request.queue.clone(), MemQueue::default());
            }
            let Some(queue) = inner.flow.get_mut(&request.queue) else {
                return Err(StoreError::unavailable("the queue's rows went missing"));
            };
            queue.limits = request.limits;
            let plan = plan_acquire(&request, queue.snapshot_for(&request));
            Ok(queue.apply(&request, plan))
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
        self.write(move |inner| {
            let queue_name = queue;
            let Some(queue) = inner.flow.get_mut(queue_name) else {
                return Ok(SlotRelease::default());
            };
            let released = match token {
                Some(token) => match queue.slots.get(holder) {
                    Some(slot) if slot.token == token => queue.slots.remove(holder).is_some(),
                    Some(slot) => {
                        return Err(slot_fenced(queue_name, holder, token, slot.token));
                    }
                    None => false,
                },
                None => queue.remove_waiter(holder),
            };
            // An empty line names nobody: no rows to read.
            let next = if queue.line.is_empty() {
                None
            } else {
                next_waiter(&queue.snapshot_for_release(now), now, &queue.limits)
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (the sequence is the same on every run).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    fn sorted(mut plan: SlotPlan) -> SlotPlan {
        plan.expired_waiters.sort();
        plan.dropped_turns.sort();
        plan
    }

    /// Every ask of a long random run of asks, re-asks and releases (priorities, keys, leases
    /// running out, several limits) is decided on the indexed line exactly as on every row:
    /// the same plan, so the same answer and the same writes; a release names the same
    /// waiter; the index stays in serving order.
    #[test]
    fn the_indexed_line_decides_as_every_row_does() {
        let limit_sets = [
            SlotLimits {
                concurrency: Some(3),
                ..SlotLimits::default()
            },
            SlotLimits {
                concurrency: Some(4),
                per_key: Some(1),
                ..SlotLimits::default()
            },
            SlotLimits {
                rate: Some((3, 50)),
                ..SlotLimits::default()
            },
            SlotLimits {
                concurrency: Some(5),
                per_process: Some(2),
                per_key: Some(2),
                rate: Some((4, 40)),
            },
        ];
        let mut rng = Lcg(7);
        let mut compared = 0;
        let mut waited = 0;
        for limits in limit_sets {
            let mut queue = MemQueue::default();
            let mut now: Micros = 1_000;
            for _ in 0..3_000 {
                now += i64::try_from(rng.below(4)).unwrap();
                let holder = format!("h{}", rng.below(40));
                // A holder releases its slot now and then.
                if rng.below(4) == 0 && queue.slots.remove(&holder).is_some() {
                    continue;
                }
                let key = match rng.below(4) {
                    0 => None,
                    k => Some(format!("k{k}")),
                };
                let ttl = 30 + i64::try_from(rng.below(60)).unwrap();
                // A suspended waiter asks with a longer place lease now and then.
                let place_ttl = (rng.below(3) == 0).then_some(2 * ttl);
                let request = SlotRequest {
                    queue: "q".to_owned(),
                    limits,
                    holder,
                    owner: format!("p{}", rng.below(2)),
                    key,
                    priority: u8::try_from(rng.below(3)).unwrap(),
                    now,
                    ttl,
                    place_ttl,
                };
                queue.limits = limits;
                let period = limits.rate.map(|(_, p)| p);
                let full = plan_acquire(&request, queue.snapshot(now, period));
                let indexed = plan_acquire(&request, queue.snapshot_for(&request));
                assert_eq!(sorted(indexed), sorted(full.clone()), "{request:?}");
                compared += 1;
                if matches!(full.outcome, SlotOutcome::Waiting { .. }) {
                    waited += 1;
                }
                queue.apply(&request, full);
                // A release names the same waiter from the head of the line.
                assert_eq!(
                    next_waiter(&queue.snapshot_for_release(now), now, &limits),
                    next_waiter(&queue.snapshot(now, period), now, &limits)
                );
                // The index keeps every waiter in serving order.
                let snapshot = queue.snapshot(now, period);
                let turns = snapshot
                    .turns
                    .iter()
                    .map(|(k, t)| (k.as_str(), *t))
                    .collect();
                let order: Vec<&str> = crate::store::slots::serving_order(
                    snapshot.waiters.iter(),
                    &turns,
                    snapshot.last_turn,
                )
                .into_iter()
                .map(|w| w.holder.as_str())
                .collect();
                let line: Vec<&str> = queue.line.values().map(String::as_str).collect();
                assert_eq!(line, order);
            }
        }
        assert!(compared > 8_000, "too few asks compared: {compared}");
        assert!(
            waited > 1_000,
            "the run made too few waiters to test the line: {waited}"
        );
    }

    /// 3,000 holders asking at once on a queue of 1,000 starts a second, on a simulated clock
    /// (`SlotRequest::now`): each asks again when its answer says or, with `early`, now and
    /// then sooner (as a waiter woken for nothing does). The grant instants, in order, the
    /// number of asks and how many of them came sooner than told.
    fn rate_run(early: bool) -> (Vec<Micros>, usize, usize) {
        const PERIOD: Micros = 1_000_000;
        let limits = SlotLimits {
            rate: Some((1_000, PERIOD)),
            ..SlotLimits::default()
        };
        let mut queue = MemQueue {
            limits,
            ..MemQueue::default()
        };
        let mut rng = Lcg(11);
        // (when, holder): every holder asks first within the first millisecond.
        let mut asks: BTreeSet<(Micros, u32)> =
            (0..3_000u32).map(|h| (Micros::from(h) / 3, h)).collect();
        let mut granted: Vec<Micros> = Vec::new();
        let (mut asked, mut sooner) = (0, 0);
        while let Some((now, holder)) = asks.pop_first() {
            asked += 1;
            let request = SlotRequest {
                queue: "rated".to_owned(),
                limits,
                holder: format!("h{holder}"),
                owner: "p".to_owned(),
                key: None,
                priority: 0,
                now,
                ttl: 30_000_000,
                place_ttl: None,
            };
            let plan = plan_acquire(&request, queue.snapshot_for(&request));
            match queue.apply(&request, plan) {
                SlotOutcome::Granted { .. } => granted.push(now),
                SlotOutcome::Waiting { wait, .. } => {
                    let at = wait.retry_at.expect("a rate wait says when to ask again");
                    assert!(at > now, "asked again at {at}, not after {now}");
                    let wait_for = u64::try_from(at - now).unwrap();
                    let at = if early && wait_for > 1 && rng.below(2) == 0 {
                        sooner += 1;
                        now + i64::try_from(1 + rng.below(wait_for - 1)).unwrap()
                    } else {
                        at
                    };
                    asks.insert((at, holder));
                }
            }
        }
        assert_eq!(granted.len(), 3_000);
        (granted, asked, sooner)
    }

    /// No window (t - 1 s, t] holds grant i and grant i + 1,000 (grants are in time order).
    fn assert_no_window_over_the_limit(granted: &[Micros]) {
        for (i, later) in granted.iter().enumerate().skip(1_000) {
            let earlier = granted[i - 1_000];
            assert!(
                later - earlier >= 1_000_000,
                "grants {} at {earlier} and {i} at {later} share a window",
                i - 1_000
            );
        }
    }

    /// A rate limit is kept in every window and reached: asking when told, every start after
    /// the first window's is granted the instant the start a window before it leaves the
    /// window (so the 3,000 take two periods), and a waiter asks at most three times (on
    /// arrival, at the earliest its turn can come, at its turn); asking sooner as well changes
    /// nothing of the limit.
    #[test]
    fn a_rate_limit_is_kept_in_every_window_and_reached() {
        let (granted, asked, _) = rate_run(false);
        assert_no_window_over_the_limit(&granted);
        for (i, later) in granted.iter().enumerate().skip(1_000) {
            assert_eq!(*later, granted[i - 1_000] + 1_000_000, "grant {i} late");
        }
        assert!(asked <= 3 * 3_000, "{asked} asks for 3,000 grants");

        let (granted, _, sooner) = rate_run(true);
        assert_no_window_over_the_limit(&granted);
        assert!(
            sooner > 1_000,
            "too few asks sooner than told to test: {sooner}"
        );
    }
}
