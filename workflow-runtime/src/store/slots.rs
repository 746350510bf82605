//! Flow-control slots (QU-5 to QU-9): the rows a queue's limits are kept with, and the one
//! decision every backend applies to them.
//!
//! A backend implementing [`FlowControl`] keeps, per queue, a queue row (the last fencing
//! token, waiter sequence and round-robin turn issued, and the limits last asked with),
//! slot rows (one per holder, leased, with a fencing token), waiter rows (who asks, in which
//! order), key turns (round robin across partition keys) and the starts of the rate window.
//! In one atomic operation it loads a queue's rows into a [`QueueSnapshot`], calls
//! [`plan_acquire`] and writes the [`SlotPlan`] back, so the rules are written once.
//! PostgreSQL locks the queue row for that operation only: no lock is held while the task
//! runs, and two processes asking at once are serialized on the row, so the concurrency count
//! and the rate window they read are exact (QU-6).

/// The kind of the timer row of an instance suspended waiting for a slot (QU-11): a
/// store that keeps leases across commits gives such an instance's lease back at once.
pub(crate) const SLOT_TIMER: &str = "slot";

use std::collections::HashMap;

use super::error::{StoreError, StoreResult};
use crate::base::{BoxFuture, Micros};

/// The limits of a queue as a backend receives them: every number at least 1
/// ([`Storage`](super::Storage) checks the declaration first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotLimits {
    /// The most slots held at once, across processes.
    pub concurrency: Option<u32>,
    /// The most slots one owner (process) holds at once.
    pub per_process: Option<u32>,
    /// The most slots held at once per partition key.
    pub per_key: Option<u32>,
    /// The most grants in any window of `period` µs: `(starts, period)`.
    pub rate: Option<(u32, Micros)>,
}

/// What [`FlowControl::acquire_slot`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRequest {
    /// The queue's name.
    pub queue: String,
    /// Its limits.
    pub limits: SlotLimits,
    /// Who asks: one task attempt or one run (stable across retries of the same ask).
    pub holder: String,
    /// The process asking (the per-process limit counts its slots).
    pub owner: String,
    /// The partition key, if the queue's use has one.
    pub key: Option<String>,
    /// 0 to 9, higher first.
    pub priority: u8,
    /// Wall-clock now.
    pub now: Micros,
    /// The lease of the slot, and of the place in line unless `place_ttl` is given: a waiter
    /// that has not asked again within it loses its place.
    pub ttl: Micros,
    /// The lease of the place in line when it differs from the slot's: a waiter that asks
    /// again later than a slot's lease (its instance suspended until a timer, QU-11) keeps
    /// its place that long. `None`: `ttl`.
    pub place_ttl: Option<Micros>,
}

/// A slot held: present its token to renew or release it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotLease {
    /// The queue.
    pub queue: String,
    /// The holder.
    pub holder: String,
    /// The fencing token: one more than the last issued for the queue.
    pub token: u64,
    /// When the slot goes back to the queue unless renewed.
    pub expires_at: Micros,
}

/// Why an ask waits (QU-7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Every slot of the queue is held.
    Concurrency {
        /// Slots held.
        running: u32,
        /// The limit.
        limit: u32,
    },
    /// This process holds its share.
    PerProcess {
        /// Slots this process holds.
        running: u32,
        /// The limit.
        limit: u32,
    },
    /// The key holds its share.
    PerKey {
        /// Slots the key holds.
        running: u32,
        /// The limit.
        limit: u32,
    },
    /// The rate window is full until `next_at`.
    Rate {
        /// When the oldest start leaves the window.
        next_at: Micros,
    },
    /// Others are served first (by priority, key turn, then arrival).
    Behind,
}

/// An ask that waits, with what `why` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotWait {
    /// Why.
    pub reason: WaitReason,
    /// Slots of the queue held now.
    pub running: u32,
    /// Waiters served before this one.
    pub ahead: u32,
    /// When asking again can succeed without any release (a rate window or a lease
    /// ending), if known; otherwise wait for a release.
    pub retry_at: Option<Micros>,
}

/// What [`FlowControl::acquire_slot`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcome {
    /// The slot is held (a holder asking again while holding gets its slot back, renewed).
    Granted {
        /// The slot.
        lease: SlotLease,
        /// Slots of other holders whose lease ended, reclaimed by this operation.
        expired: Vec<SlotRow>,
    },
    /// The holder is in line (its place kept while it asks within its lease).
    Waiting {
        /// Why, and where.
        wait: SlotWait,
        /// Slots whose lease ended, reclaimed by this operation.
        expired: Vec<SlotRow>,
    },
}

/// What [`FlowControl::release_slot`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotRelease {
    /// Whether a slot (or, without a token, a place in line) was removed.
    pub released: bool,
    /// The holder served next, to wake.
    pub next: Option<String>,
}

/// A stored slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    /// The holder.
    pub holder: String,
    /// The process holding it.
    pub owner: String,
    /// The partition key.
    pub key: Option<String>,
    /// The fencing token.
    pub token: u64,
    /// When it was granted.
    pub acquired_at: Micros,
    /// When its lease ends.
    pub expires_at: Micros,
}

/// A stored place in line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterRow {
    /// The holder waiting.
    pub holder: String,
    /// The partition key.
    pub key: Option<String>,
    /// 0 to 9, higher first.
    pub priority: u8,
    /// Arrival order within the queue.
    pub seq: u64,
    /// When it first asked.
    pub enqueued_at: Micros,
    /// When it loses its place unless it asks again.
    pub expires_at: Micros,
}

/// A queue's rows as [`plan_acquire`] reads them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueSnapshot {
    /// The last fencing token issued (0: none).
    pub last_token: u64,
    /// The last waiter sequence issued.
    pub last_seq: u64,
    /// The last round-robin turn issued.
    pub last_turn: u64,
    /// Every slot row, live or not.
    pub slots: Vec<SlotRow>,
    /// Every waiter row, live or not.
    pub waiters: Vec<WaiterRow>,
    /// The turn each partition key was last served at.
    pub turns: Vec<(String, u64)>,
    /// Grants in the rate window `(now - period, now]` (0 without a rate).
    pub starts_in_window: u32,
    /// The oldest of them.
    pub oldest_start: Option<Micros>,
    /// When each of them was granted, oldest first: a waiter is told when the start its turn
    /// waits for leaves the window (QU-12). Empty, the oldest stands for all of them.
    pub window: Vec<Micros>,
    /// Live waiters served before the asking holder that `waiters` leaves out: on a queue
    /// without a per-key limit only their number counts, so a backend that keeps its line in
    /// serving order may count them instead of reading them (0: every waiter is listed).
    pub unlisted_ahead: u32,
}

/// What a backend writes after [`plan_acquire`], in the same operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotPlan {
    /// Slot rows to delete (their lease ended).
    pub expired_slots: Vec<SlotRow>,
    /// Waiter rows to delete (they stopped asking).
    pub expired_waiters: Vec<String>,
    /// The slot row to insert or replace (by holder).
    pub slot: Option<SlotRow>,
    /// The waiter row to insert or replace (by holder).
    pub waiter: Option<WaiterRow>,
    /// Whether the holder's waiter row is deleted (it was granted).
    pub remove_waiter: bool,
    /// A grant to record in the rate window: `(token, at)`.
    pub start: Option<(u64, Micros)>,
    /// The key turn to insert or replace.
    pub turn: Option<(String, u64)>,
    /// Key turns to delete (no waiter and no slot left with the key).
    pub dropped_turns: Vec<String>,
    /// The queue row's counters after the operation: `(last_token, last_seq, last_turn)`.
    pub counters: (u64, u64, u64),
    /// Rate-window starts at or before this instant can be deleted.
    pub starts_before: Option<Micros>,
    /// The answer.
    pub outcome: SlotOutcome,
}

/// The waiters in the order they are served (QU-8): higher priority first; within a
/// priority, the key served longest ago first (round robin: a key is given the current turn
/// when it arrives, the back of the round; one without a turn counts as arriving now); then
/// arrival. Waiters without a key count as served at turn 0.
pub fn serving_order<'a>(
    waiters: impl IntoIterator<Item = &'a WaiterRow>,
    turns: &HashMap<&str, u64>,
    last_turn: u64,
) -> Vec<&'a WaiterRow> {
    let mut ordered: Vec<&WaiterRow> = waiters.into_iter().collect();
    let turn_of = |w: &WaiterRow| {
        w.key
            .as_deref()
            .map_or(0, |k| turns.get(k).copied().unwrap_or(last_turn))
    };
    ordered.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(turn_of(a).cmp(&turn_of(b)))
            .then(a.seq.cmp(&b.seq))
    });
    ordered
}

/// `Fenced` for a slot: `slot:<queue>/<holder>`; `current` is 0 when no slot is held.
pub(crate) fn slot_fenced(queue: &str, holder: &str, token: u64, current: u64) -> StoreError {
    StoreError::Fenced {
        resource: format!("slot:{queue}/{holder}"),
        token,
        current,
    }
}

/// How soon a waiter that is behind others who have room now asks again (QU-8), µs.
pub const BEHIND_RETRY: Micros = 20_000;

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The one decision of [`FlowControl::acquire_slot`] (QU-5 to QU-8), over the queue's rows
/// read in the same atomic operation.
#[must_use]
#[allow(clippy::too_many_lines)]
pub fn plan_acquire(request: &SlotRequest, snapshot: QueueSnapshot) -> SlotPlan {
    let now = request.now;
    let (mut live_slots, expired_slots): (Vec<SlotRow>, Vec<SlotRow>) = snapshot
        .slots
        .into_iter()
        .partition(|s| s.expires_at > now || s.holder == request.holder);
    // The holder's own slot counts as live only while its lease runs.
    let own_slot = live_slots
        .iter()
        .position(|s| s.holder == request.holder && s.expires_at > now);
    let mut expired_slots = expired_slots;
    if own_slot.is_none()
        && let Some(i) = live_slots.iter().position(|s| s.holder == request.holder)
    {
        expired_slots.push(live_slots.swap_remove(i));
    }
    let (live_waiters, expired): (Vec<WaiterRow>, Vec<WaiterRow>) = snapshot
        .waiters
        .into_iter()
        .partition(|w| w.expires_at > now || w.holder == request.holder);
    let expired_waiters: Vec<String> = expired.into_iter().map(|w| w.holder).collect();
    // The rate window is read at the newest grant when an ask arrives after it with an
    // older clock (it waited on the queue's lock), and the grant is recorded there: grants are
    // recorded in order, each checked against the window ending at it. Starts are kept a
    // window longer than they count, for such asks.
    let rate_now = snapshot.window.last().map_or(now, |t| now.max(*t));
    let starts_before = request
        .limits
        .rate
        .map(|(_, period)| now.saturating_sub(period.saturating_mul(2)));
    let (starts_in_window, oldest_start, window_grants) = match request.limits.rate {
        Some((_, period))
            if u32::try_from(snapshot.window.len()).ok() == Some(snapshot.starts_in_window) =>
        {
            let from = snapshot
                .window
                .partition_point(|t| *t <= rate_now.saturating_sub(period));
            let grants = snapshot.window.get(from..).unwrap_or_default();
            (count(grants.len()), grants.first().copied(), grants)
        }
        _ => (snapshot.starts_in_window, snapshot.oldest_start, &[][..]),
    };
    let mut counters = (snapshot.last_token, snapshot.last_seq, snapshot.last_turn);

    if let Some(i) = own_slot {
        // Asking again while holding: the same slot, renewed, now of the asking process (a
        // run taken over after a crash asks as the same holder from another process).
        let slot = live_slots.swap_remove(i);
        let lease = SlotLease {
            queue: request.queue.clone(),
            holder: slot.holder.clone(),
            token: slot.token,
            expires_at: now.saturating_add(request.ttl),
        };
        let remove_waiter = live_waiters.iter().any(|w| w.holder == request.holder);
        return SlotPlan {
            expired_slots: expired_slots.clone(),
            expired_waiters,
            slot: Some(SlotRow {
                expires_at: lease.expires_at,
                owner: request.owner.clone(),
                ..slot
            }),
            waiter: None,
            remove_waiter,
            start: None,
            turn: None,
            dropped_turns: Vec::new(),
            counters,
            starts_before,
            outcome: SlotOutcome::Granted {
                lease,
                expired: expired_slots,
            },
        };
    }

    // The holder's place in line: kept (refreshed), or taken at the back.
    let place_ttl = request.place_ttl.unwrap_or(request.ttl);
    let me = match live_waiters.iter().find(|w| w.holder == request.holder) {
        Some(w) => WaiterRow {
            priority: request.priority,
            key: request.key.clone(),
            expires_at: now.saturating_add(place_ttl),
            ..w.clone()
        },
        None => {
            counters.1 += 1;
            WaiterRow {
                holder: request.holder.clone(),
                key: request.key.clone(),
                priority: request.priority,
                seq: counters.1,
                enqueued_at: now,
                expires_at: now.saturating_add(place_ttl),
            }
        }
    };
    let others: Vec<&WaiterRow> = live_waiters
        .iter()
        .filter(|w| w.holder != request.holder)
        .collect();
    let mut turns: HashMap<&str, u64> = snapshot
        .turns
        .iter()
        .map(|(k, t)| (k.as_str(), *t))
        .collect();
    // A key arriving joins the back of the round: served after every key already waiting.
    let new_turn = me
        .key
        .as_deref()
        .filter(|k| !turns.contains_key(k))
        .map(|k| (k.to_owned(), counters.2));
    if let Some((key, turn)) = &new_turn {
        turns.insert(key.as_str(), *turn);
    }
    let held_by_key = |key: &str| {
        count(
            live_slots
                .iter()
                .filter(|s| s.key.as_deref() == Some(key))
                .count(),
        )
    };
    // Alone in the rows read (the uncontended ask): first, nothing to sort.
    let order = if others.is_empty() {
        Vec::new()
    } else {
        serving_order(others.iter().copied().chain([&me]), &turns, counters.2)
    };
    let position = order
        .iter()
        .position(|w| w.holder == me.holder)
        .unwrap_or(0);
    let ahead = count(position).saturating_add(snapshot.unlisted_ahead);
    // Those ahead whose key holds its share are passed over (their key is not served now).
    // One not listed is never passed over (only a queue without a per-key limit has them).
    let blocked_ahead = snapshot.unlisted_ahead == 0
        && order
            .iter()
            .take(position)
            .all(|w| match (request.limits.per_key, &w.key) {
                (Some(limit), Some(key)) => held_by_key(key) >= limit,
                _ => false,
            });
    let running = count(live_slots.len());
    let lease_end = live_slots.iter().map(|s| s.expires_at).min();
    let window_full = request
        .limits
        .rate
        .filter(|(starts, _)| starts_in_window >= *starts)
        .map(|(_, period)| oldest_start.map_or(now, |t| t + period));

    // QU-12: a waiter asks again when the start its turn waits for leaves the rate window.
    let window = RateWindow {
        grants: window_grants,
        count: starts_in_window,
        oldest: oldest_start,
    };
    let rate_turn = |ahead: u32| {
        request
            .limits
            .rate
            .and_then(|(starts, period)| window.turn_at(starts, period, ahead, now))
    };
    let reason = if let Some(limit) = request.limits.concurrency.filter(|l| running >= *l) {
        Some((WaitReason::Concurrency { running, limit }, lease_end))
    } else if let Some(next_at) = window_full {
        Some((WaitReason::Rate { next_at }, rate_turn(ahead)))
    } else if let Some((limit, mine)) = request.limits.per_process.and_then(|limit| {
        let mine = count(
            live_slots
                .iter()
                .filter(|s| s.owner == request.owner)
                .count(),
        );
        (mine >= limit).then_some((limit, mine))
    }) {
        Some((
            WaitReason::PerProcess {
                running: mine,
                limit,
            },
            lease_end,
        ))
    } else if let Some((limit, held)) = request
        .limits
        .per_key
        .zip(request.key.as_deref())
        .map(|(limit, key)| (limit, held_by_key(key)))
        .filter(|(limit, held)| held >= limit)
    {
        Some((
            WaitReason::PerKey {
                running: held,
                limit,
            },
            lease_end,
        ))
    } else if !blocked_ahead {
        // QU-8: those ahead have the room now and only need to ask. When the room is enough
        // for them and this one too, and none of them can be held back by this grant (no
        // per-process limit; per key, none of them with this key), it is granted: nobody
        // ahead waits longer for it. Otherwise a waiter within the room asks again shortly;
        // one behind it when its start leaves the rate window, if it has a rate.
        let room = request
            .limits
            .concurrency
            .map_or(u32::MAX, |limit| limit.saturating_sub(running))
            .min(request.limits.rate.map_or(u32::MAX, |(starts, _)| {
                starts.saturating_sub(starts_in_window)
            }));
        let same_key_ahead =
            || request.key.is_some() && order.iter().take(position).any(|w| w.key == request.key);
        let backfill = ahead < room
            && request.limits.per_process.is_none()
            && (request.limits.per_key.is_none() || !same_key_ahead());
        if backfill {
            None
        } else {
            let retry_at = if ahead < room {
                Some(now.saturating_add(BEHIND_RETRY))
            } else {
                rate_turn(ahead)
            };
            Some((WaitReason::Behind, retry_at))
        }
    } else {
        None
    };

    let mut plan = SlotPlan {
        expired_slots: expired_slots.clone(),
        expired_waiters,
        slot: None,
        waiter: None,
        remove_waiter: false,
        start: None,
        turn: None,
        dropped_turns: Vec::new(),
        counters,
        starts_before,
        outcome: SlotOutcome::Waiting {
            wait: SlotWait {
                reason: WaitReason::Behind,
                running,
                ahead,
                retry_at: None,
            },
            expired: Vec::new(),
        },
    };
    if let Some((reason, retry_at)) = reason {
        plan.waiter = Some(me);
        plan.turn = new_turn;
        plan.outcome = SlotOutcome::Waiting {
            wait: SlotWait {
                reason,
                running,
                ahead,
                retry_at,
            },
            expired: expired_slots,
        };
        return plan;
    }

    // Granted.
    plan.counters.0 += 1;
    let token = plan.counters.0;
    let lease = SlotLease {
        queue: request.queue.clone(),
        holder: request.holder.clone(),
        token,
        expires_at: now.saturating_add(request.ttl),
    };
    plan.slot = Some(SlotRow {
        holder: request.holder.clone(),
        owner: request.owner.clone(),
        key: request.key.clone(),
        token,
        acquired_at: now,
        expires_at: lease.expires_at,
    });
    plan.remove_waiter = live_waiters.iter().any(|w| w.holder == request.holder);
    if request.limits.rate.is_some() {
        plan.start = Some((token, rate_now));
    }
    if let Some(key) = &request.key {
        plan.counters.2 += 1;
        plan.turn = Some((key.clone(), plan.counters.2));
    }
    // Keys left without a waiter or a slot forget their turn (a returning key joins the back
    // of the round).
    let in_use = |key: &str| {
        request.key.as_deref() == Some(key)
            || live_slots.iter().any(|s| s.key.as_deref() == Some(key))
            || others.iter().any(|w| w.key.as_deref() == Some(key))
    };
    plan.dropped_turns = snapshot
        .turns
        .iter()
        .filter(|(k, _)| !in_use(k))
        .map(|(k, _)| k.clone())
        .collect();
    plan.outcome = SlotOutcome::Granted {
        lease,
        expired: expired_slots,
    };
    plan
}

/// The grants in a queue's rate window, as [`plan_acquire`] reads them.
struct RateWindow<'a> {
    /// Oldest first (empty when the backend does not list them).
    grants: &'a [Micros],
    count: u32,
    oldest: Option<Micros>,
}

impl RateWindow<'_> {
    /// When the start the waiter with `ahead` others before it waits for leaves the window of
    /// `starts` per `period` µs (QU-12); `None` when the rate has room for it now. The
    /// window's grants leave one by one a period after they were made; those ahead take the
    /// room there is now and the first grants to leave; past a window's worth, a period later
    /// per window's worth (the grants made then are not known yet: this is the earliest they
    /// can leave).
    fn turn_at(&self, starts: u32, period: Micros, ahead: u32, now: Micros) -> Option<Micros> {
        let starts = usize::try_from(starts).unwrap_or(usize::MAX).max(1);
        let ahead = usize::try_from(ahead).unwrap_or(usize::MAX);
        let generations = i64::try_from(ahead / starts).unwrap_or(i64::MAX);
        let turn = ahead % starts;
        let count = usize::try_from(self.count).unwrap_or(usize::MAX);
        // The grant whose leaving makes room for this turn, if the window has no room for it.
        let base = match (turn.saturating_add(count)).checked_sub(starts) {
            None if generations == 0 => return None,
            None => now,
            Some(i) if self.grants.len() == count => self.grants.get(i).map_or(now, |t| t + period),
            Some(_) => self.oldest.map_or(now, |t| t + period),
        };
        Some(
            base.max(now)
                .saturating_add(period.saturating_mul(generations)),
        )
    }
}

/// The waiter a release wakes (QU-8, QU-12): with a concurrency limit, the one the freed
/// slot is for, the n-th in serving order when n slots are free (the releases that freed the
/// others woke those before it, whether or not they have asked yet); with only a per-process
/// or per-key limit, the first; none for a queue limited by its rate alone, whose waiters
/// wait for a start to leave the window, not for a slot (each is told when its turn comes).
#[must_use]
pub fn next_waiter(snapshot: &QueueSnapshot, now: Micros, limits: &SlotLimits) -> Option<String> {
    if limits.concurrency.is_none() && limits.per_process.is_none() && limits.per_key.is_none() {
        return None;
    }
    let concurrency = limits.concurrency;
    let turns: HashMap<&str, u64> = snapshot
        .turns
        .iter()
        .map(|(k, t)| (k.as_str(), *t))
        .collect();
    let order = serving_order(
        snapshot.waiters.iter().filter(|w| w.expires_at > now),
        &turns,
        snapshot.last_turn,
    );
    let running = snapshot.slots.iter().filter(|s| s.expires_at > now).count();
    let free = concurrency.map_or(1, |limit| {
        usize::try_from(limit).map_or(1, |limit| limit.saturating_sub(running).max(1))
    });
    order
        .get(free - 1)
        .or_else(|| order.last())
        .map(|w| w.holder.clone())
}

/// What `workflow queues` shows of one queue's rows ([`FlowControl::queue_usage`]).
#[must_use]
pub fn usage_of(
    queue: String,
    limits: SlotLimits,
    snapshot: &QueueSnapshot,
    now: Micros,
) -> QueueUsage {
    let live = snapshot.waiters.iter().filter(|w| w.expires_at > now);
    let turns: HashMap<&str, u64> = snapshot
        .turns
        .iter()
        .map(|(k, t)| (k.as_str(), *t))
        .collect();
    let line = serving_order(live.clone(), &turns, snapshot.last_turn)
        .into_iter()
        .map(|w| w.holder.clone())
        .collect();
    let next_start_at = limits
        .rate
        .filter(|(starts, _)| snapshot.starts_in_window >= *starts)
        .map(|(_, period)| {
            snapshot
                .oldest_start
                .map_or(now, |t| t.saturating_add(period))
        });
    QueueUsage {
        queue,
        limits,
        running: count(snapshot.slots.iter().filter(|s| s.expires_at > now).count()),
        waiting: count(live.clone().count()),
        oldest_wait: live.map(|w| w.enqueued_at).min(),
        rate_used: snapshot.starts_in_window,
        line,
        next_start_at,
    }
}

/// One queue as [`FlowControl::queue_usage`] reports it (`workflow queues`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueUsage {
    /// The queue.
    pub queue: String,
    /// The limits it was last asked with.
    pub limits: SlotLimits,
    /// Slots held (live leases).
    pub running: u32,
    /// Places in line (live).
    pub waiting: u32,
    /// When the longest waiter first asked.
    pub oldest_wait: Option<Micros>,
    /// Grants in the current rate window (0 without a rate).
    pub rate_used: u32,
    /// The holders in line, in the order they are served (QU-8).
    pub line: Vec<String>,
    /// When the full rate window frees a start; `None` when it has room or there is no rate.
    pub next_start_at: Option<Micros>,
}

impl QueueUsage {
    /// What `workflow why` says of an instance waiting in line for this queue (QU-13):
    /// "waiting for `payments`: 25 of 25 running, 3 ahead of it", "waiting for `payments`:
    /// rate limit: next slot in 140 ms", or "waiting for `payments`: in line, 2 ahead of
    /// it"; `None` when no attempt or run of `instance` is in line. A task's holder is the
    /// instance id, the context and the attempt (QU-11); a run's is the instance id and `run`
    /// (QU-14).
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_runtime::store::{QueueUsage, SlotLimits};
    ///
    /// let usage = QueueUsage {
    ///     queue: "payments".into(),
    ///     limits: SlotLimits { concurrency: Some(25), ..SlotLimits::default() },
    ///     running: 25,
    ///     waiting: 4,
    ///     oldest_wait: None,
    ///     rate_used: 0,
    ///     line: ["a/1/1", "b/1/1", "c/1/1", "order-7/4/1"].map(String::from).to_vec(),
    ///     next_start_at: None,
    /// };
    /// assert_eq!(
    ///     usage.waiting_words("order-7", 0).as_deref(),
    ///     Some("waiting for `payments`: 25 of 25 running, 3 ahead of it")
    /// );
    /// assert_eq!(usage.waiting_words("order", 0), None);
    ///
    /// // A run of a definition-level queue waits as `{instance}/run`.
    /// let usage = QueueUsage { line: vec!["import-3/run".into()], ..usage };
    /// assert_eq!(
    ///     usage.waiting_words("import-3", 0).as_deref(),
    ///     Some("waiting for `payments`: 25 of 25 running")
    /// );
    /// ```
    #[must_use]
    pub fn waiting_words(&self, instance: &str, now: Micros) -> Option<String> {
        let of_instance = |holder: &str| {
            if holder.strip_suffix("/run") == Some(instance) {
                return true;
            }
            let mut parts = holder.rsplitn(3, '/');
            let (_attempt, _context) = (parts.next(), parts.next());
            parts.next() == Some(instance)
        };
        let ahead = self.line.iter().position(|h| of_instance(h))?;
        let queue = &self.queue;
        let ahead_words = match ahead {
            0 => String::new(),
            1 => ", 1 ahead of it".to_owned(),
            n => format!(", {n} ahead of it"),
        };
        Some(match (self.limits.concurrency, self.next_start_at) {
            (Some(limit), _) if self.running >= limit => format!(
                "waiting for `{queue}`: {} of {limit} running{ahead_words}",
                self.running
            ),
            (_, Some(at)) => format!(
                "waiting for `{queue}`: rate limit: next slot in {} ms{ahead_words}",
                (at - now).max(0) / 1_000
            ),
            _ => format!("waiting for `{queue}`: in line{ahead_words}"),
        })
    }
}

/// The optional capability of keeping flow-control slots (QU-5): shipped by every backend of
/// this crate. Each method is one atomic operation; no lock outlives it.
pub trait FlowControl: Send + Sync {
    /// Asks for a slot: reclaims the queue's slots whose lease ended, then grants one when
    /// every limit has room and no waiter is served before the holder (or the room is enough
    /// for those served before it too, QU-12), else keeps (or takes) the holder's place in
    /// line, with when to ask again.
    fn acquire_slot(&self, request: SlotRequest) -> BoxFuture<'_, StoreResult<SlotOutcome>>;

    /// Extends a held slot to `now + ttl`: `Fenced` when the token is not the slot's, or the
    /// slot's lease already ended.
    fn renew_slot(
        &self,
        lease: &SlotLease,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotLease>>;

    /// Gives a slot back (`token: Some`; `Fenced` when another token holds it), or leaves the
    /// line (`token: None`), and names the holder served next.
    fn release_slot(
        &self,
        queue: &str,
        holder: &str,
        token: Option<u64>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotRelease>>;

    /// Every queue known to the store, by name, with what it holds at `now`.
    fn queue_usage(&self, now: Micros) -> BoxFuture<'_, StoreResult<Vec<QueueUsage>>>;
}

/// One ask for a slot, as [`Storage::acquire_slot`](super::Storage::acquire_slot) takes it
/// beside the queue's declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAsk {
    /// Who asks: one task attempt or one run (1 to 256 bytes, stable across asks).
    pub holder: String,
    /// The process asking (1 to 256 bytes).
    pub owner: String,
    /// The partition key (at most 256 bytes), if the queue's use has one.
    pub key: Option<String>,
    /// Higher first.
    pub priority: workflow_model::Priority,
    /// Wall-clock now.
    pub now: Micros,
    /// The slot's lease (more than 0).
    pub ttl: Micros,
    /// How long the place in line is kept without another ask (more than 0), when it
    /// differs from `ttl`: an instance suspended until its timer asks again keeps it to
    /// then (QU-11). `None`: `ttl`.
    pub place_ttl: Option<Micros>,
}

/// The limits of a declaration, in the store's units.
#[must_use]
pub fn limits_of(queue: &workflow_model::Queue) -> SlotLimits {
    SlotLimits {
        concurrency: queue.concurrency_limit(),
        per_process: queue.per_process_limit(),
        per_key: queue.per_key_limit(),
        rate: queue.rate_limit().map(|rate| {
            (
                rate.starts,
                Micros::try_from(rate.period.as_micros()).unwrap_or(Micros::MAX),
            )
        }),
    }
}
