//! The SQLite store's flow-control slots (QU-5): a queue's rows read, decided on by
//! [`plan_acquire`] and written back in one request of the writer thread (one transaction),
//! answered before the commit unless the queue has a rate (see [`SqliteStore`]'s
//! `FlowControl`).

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use crate::base::{BoxFuture, Micros};
use crate::store::convert::{to_i64, to_u64};
use crate::store::error::StoreResult;
use crate::store::slots::{
    FlowControl, QueueSnapshot, QueueUsage, SlotLease, SlotLimits, SlotOutcome, SlotPlan,
    SlotRelease, SlotRequest, SlotRow, WaiterRow, next_waiter, plan_acquire, slot_fenced, usage_of,
};

fn opt_u32(value: Option<i64>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

fn limits(c: &Connection, queue: &str) -> StoreResult<Option<SlotLimits>> {
    Ok(c.prepare_cached(
        "SELECT concurrency, per_process, per_key, rate_starts, rate_period
           FROM wf_flow_queues WHERE name = ?1",
    )?
    .query_row([queue], |r| {
        Ok(SlotLimits {
            concurrency: opt_u32(r.get(0)?),
            per_process: opt_u32(r.get(1)?),
            per_key: opt_u32(r.get(2)?),
            rate: opt_u32(r.get(3)?).zip(r.get::<_, Option<i64>>(4)?),
        })
    })
    .optional()?)
}

/// A queue's rows; the counters are 0 for a queue without a row.
fn snapshot(
    c: &Connection,
    queue: &str,
    now: Micros,
    period: Option<Micros>,
) -> StoreResult<QueueSnapshot> {
    // The queue row, and whether the queue has waiters and key turns at all: an uncontended
    // queue has neither, and their tables are then not read.
    let (counters, has_waiters, has_turns) = c
        .prepare_cached(
            "SELECT last_token, last_seq, last_turn,
                    EXISTS (SELECT 1 FROM wf_flow_waiters WHERE queue = ?1),
                    EXISTS (SELECT 1 FROM wf_flow_turns WHERE queue = ?1)
               FROM wf_flow_queues WHERE name = ?1",
        )?
        .query_row([queue], |r| {
            Ok((
                (to_u64(r.get(0)?), to_u64(r.get(1)?), to_u64(r.get(2)?)),
                r.get::<_, bool>(3)?,
                r.get::<_, bool>(4)?,
            ))
        })
        .optional()?
        .unwrap_or(((0, 0, 0), true, true));
    let slots = c
        .prepare_cached(
            "SELECT holder, owner, partition_key, token, acquired_at, expires_at
               FROM wf_flow_slots WHERE queue = ?1",
        )?
        .query_map([queue], |r| {
            Ok(SlotRow {
                holder: r.get(0)?,
                owner: r.get(1)?,
                key: r.get(2)?,
                token: to_u64(r.get(3)?),
                acquired_at: r.get(4)?,
                expires_at: r.get(5)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let waiters = if !has_waiters {
        Vec::new()
    } else {
        c.prepare_cached(
            "SELECT holder, partition_key, priority, seq, enqueued_at, expires_at
               FROM wf_flow_waiters WHERE queue = ?1",
        )?
        .query_map([queue], |r| {
            Ok(WaiterRow {
                holder: r.get(0)?,
                key: r.get(1)?,
                priority: u8::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                seq: to_u64(r.get(3)?),
                enqueued_at: r.get(4)?,
                expires_at: r.get(5)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?
    };
    let turns = if !has_turns {
        Vec::new()
    } else {
        c.prepare_cached("SELECT partition_key, turn FROM wf_flow_turns WHERE queue = ?1")?
            .query_map([queue], |r| Ok((r.get(0)?, to_u64(r.get(1)?))))?
            .collect::<Result<Vec<_>, _>>()?
    };
    let window: Vec<Micros> = match period {
        Some(period) => c
            .prepare_cached(
                "SELECT at FROM wf_flow_starts WHERE queue = ?1 AND at > ?2 ORDER BY at",
            )?
            .query_map(params![queue, now.saturating_sub(period)], |r| r.get(0))?
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(QueueSnapshot {
        last_token: counters.0,
        last_seq: counters.1,
        last_turn: counters.2,
        slots,
        waiters,
        turns,
        starts_in_window: u32::try_from(window.len()).unwrap_or(u32::MAX),
        oldest_start: window.first().copied(),
        window,
        unlisted_ahead: 0,
    })
}

fn apply(c: &Connection, request: &SlotRequest, plan: &SlotPlan) -> StoreResult<()> {
    let queue = request.queue.as_str();
    let limits = request.limits;
    c.prepare_cached(
        "INSERT INTO wf_flow_queues (name, last_token, last_seq, last_turn, concurrency,
             per_process, per_key, rate_starts, rate_period)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (name) DO UPDATE SET last_token = ?2, last_seq = ?3, last_turn = ?4,
             concurrency = ?5, per_process = ?6, per_key = ?7, rate_starts = ?8,
             rate_period = ?9",
    )?
    .execute(params![
        queue,
        to_i64(plan.counters.0),
        to_i64(plan.counters.1),
        to_i64(plan.counters.2),
        limits.concurrency,
        limits.per_process,
        limits.per_key,
        limits.rate.map(|(starts, _)| starts),
        limits.rate.map(|(_, period)| period),
    ])?;
    // Statements are prepared (looked up in the cache) only when they run.
    if !plan.expired_slots.is_empty() {
        let mut delete_slot =
            c.prepare_cached("DELETE FROM wf_flow_slots WHERE queue = ?1 AND holder = ?2")?;
        for slot in &plan.expired_slots {
            delete_slot.execute(params![queue, slot.holder])?;
        }
    }
    if !plan.expired_waiters.is_empty() || plan.remove_waiter {
        let mut delete_waiter =
            c.prepare_cached("DELETE FROM wf_flow_waiters WHERE queue = ?1 AND holder = ?2")?;
        for holder in &plan.expired_waiters {
            delete_waiter.execute(params![queue, holder])?;
        }
        if plan.remove_waiter {
            delete_waiter.execute(params![queue, request.holder])?;
        }
    }
    if let Some(w) = &plan.waiter {
        c.prepare_cached(
            "INSERT OR REPLACE INTO wf_flow_waiters
                 (queue, holder, partition_key, priority, seq, enqueued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            queue,
            w.holder,
            w.key,
            i64::from(w.priority),
            to_i64(w.seq),
            w.enqueued_at,
            w.expires_at
        ])?;
    }
    if let Some(s) = &plan.slot {
        c.prepare_cached(
            "INSERT OR REPLACE INTO wf_flow_slots
                 (queue, holder, owner, partition_key, token, acquired_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            queue,
            s.holder,
            s.owner,
            s.key,
            to_i64(s.token),
            s.acquired_at,
            s.expires_at
        ])?;
    }
    if let Some(before) = plan.starts_before {
        c.prepare_cached("DELETE FROM wf_flow_starts WHERE queue = ?1 AND at <= ?2")?
            .execute(params![queue, before])?;
    }
    if let Some((token, at)) = plan.start {
        c.prepare_cached("INSERT INTO wf_flow_starts (queue, token, at) VALUES (?1, ?2, ?3)")?
            .execute(params![queue, to_i64(token), at])?;
    }
    if let Some((key, turn)) = &plan.turn {
        c.prepare_cached(
            "INSERT OR REPLACE INTO wf_flow_turns (queue, partition_key, turn) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![queue, key, to_i64(*turn)])?;
    }
    if !plan.dropped_turns.is_empty() {
        let mut drop_turn =
            c.prepare_cached("DELETE FROM wf_flow_turns WHERE queue = ?1 AND partition_key = ?2")?;
        for key in &plan.dropped_turns {
            drop_turn.execute(params![queue, key])?;
        }
    }
    Ok(())
}

/// Slot operations promise no durability, like lease claims (ST-26): a slot's holder, and a
/// waiter, is an attempt of the one process that owns the file and dies with it; a slot whose
/// release is lost in a crash comes back when its lease ends, as if the process had died
/// holding it. So they are answered as soon as they have run, and an uncontended task's
/// acquire and release share the sync of the commit its attempt makes anyway. An ask on a
/// queue with a rate is the exception: the grants it records are the starts the rate window
/// counts, which must outlive the process (QU-3), so it is answered after its commit.
impl FlowControl for SqliteStore {
    fn acquire_slot(&self, request: SlotRequest) -> BoxFuture<'_, StoreResult<SlotOutcome>> {
        let rated = request.limits.rate.is_some();
        let run = move |c: &Connection| {
            let period = request.limits.rate.map(|(_, p)| p);
            let plan = plan_acquire(&request, snapshot(c, &request.queue, request.now, period)?);
            apply(c, &request, &plan)?;
            Ok(plan.outcome)
        };
        if rated {
            self.write(run)
        } else {
            self.write_volatile(run)
        }
    }

    fn renew_slot(
        &self,
        lease: &SlotLease,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotLease>> {
        let lease = lease.clone();
        self.write_volatile(move |c| {
            let expires_at = now.saturating_add(ttl);
            let renewed = c
                .prepare_cached(
                    "UPDATE wf_flow_slots SET expires_at = ?4
                      WHERE queue = ?1 AND holder = ?2 AND token = ?3 AND expires_at > ?5",
                )?
                .execute(params![
                    lease.queue,
                    lease.holder,
                    to_i64(lease.token),
                    expires_at,
                    now
                ])?;
            if renewed == 1 {
                return Ok(SlotLease {
                    expires_at,
                    ..lease
                });
            }
            let current: Option<i64> = c
                .prepare_cached(
                    "SELECT token FROM wf_flow_slots WHERE queue = ?1 AND holder = ?2
                        AND expires_at > ?3",
                )?
                .query_row(params![lease.queue, lease.holder, now], |r| r.get(0))
                .optional()?;
            Err(slot_fenced(
                &lease.queue,
                &lease.holder,
                lease.token,
                current.map_or(0, to_u64),
            ))
        })
    }

    fn release_slot(
        &self,
        queue: &str,
        holder: &str,
        token: Option<u64>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotRelease>> {
        let (queue, holder) = (queue.to_owned(), holder.to_owned());
        self.write_volatile(move |c| {
            let released = match token {
                Some(token) => {
                    let deleted = c
                        .prepare_cached(
                            "DELETE FROM wf_flow_slots WHERE queue = ?1 AND holder = ?2
                                AND token = ?3",
                        )?
                        .execute(params![queue, holder, to_i64(token)])?;
                    if deleted == 1 {
                        true
                    } else {
                        // Not deleted: held under another token (fenced), or not held.
                        let current: Option<i64> = c
                            .prepare_cached(
                                "SELECT token FROM wf_flow_slots WHERE queue = ?1 AND holder = ?2",
                            )?
                            .query_row(params![queue, holder], |r| r.get(0))
                            .optional()?;
                        if let Some(current) = current.map(to_u64) {
                            return Err(slot_fenced(&queue, &holder, token, current));
                        }
                        false
                    }
                }
                None => {
                    c.prepare_cached(
                        "DELETE FROM wf_flow_waiters WHERE queue = ?1 AND holder = ?2",
                    )?
                    .execute(params![queue, holder])?
                        > 0
                }
            };
            // Without a live waiter `next_waiter` names nobody: the queue's rows are read only
            // when someone waits.
            let anyone_waits: bool = c
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM wf_flow_waiters
                                     WHERE queue = ?1 AND expires_at > ?2)",
                )?
                .query_row(params![queue, now], |r| r.get(0))?;
            let next = if anyone_waits {
                let limits = limits(c, &queue)?.unwrap_or_default();
                next_waiter(&snapshot(c, &queue, now, None)?, now, &limits)
            } else {
                None
            };
            Ok(SlotRelease { released, next })
        })
    }

    fn queue_usage(&self, now: Micros) -> BoxFuture<'_, StoreResult<Vec<QueueUsage>>> {
        // Through the writer when this store has one: it sees the slot operations answered
        // before their commit (a read connection would see them a moment later).
        let run = move |c: &Connection| {
            let names = c
                .prepare_cached("SELECT name FROM wf_flow_queues ORDER BY name")?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut usage = Vec::with_capacity(names.len());
            for name in names {
                let limits = limits(c, &name)?.unwrap_or_default();
                let snapshot = snapshot(c, &name, now, limits.rate.map(|(_, p)| p))?;
                usage.push(usage_of(name, limits, &snapshot, now));
            }
            Ok(usage)
        };
        if self.writer.is_some() {
            self.write(run)
        } else {
            self.read(run)
        }
    }
}
