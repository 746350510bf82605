//! The PostgreSQL store's flow-control slots (QU-5, QU-6): each operation is one short
//! transaction that locks the queue's row (`FOR UPDATE`) first, so the operations of every
//! process on one queue are serialized on that row while they run, and on nothing once they
//! commit: no lock is held while a task runs. The counts and the rate window an ask reads
//! under the lock are therefore exact across processes.

use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::ops::Conn;
use super::schema::Schema;
use crate::base::{BoxFuture, Micros};
use crate::store::backend::WakeUp;
use crate::store::convert::{to_i64, to_u64};
use crate::store::error::{StoreError, StoreResult};
use crate::store::slots::{
    FlowControl, QueueSnapshot, QueueUsage, SlotLease, SlotLimits, SlotOutcome, SlotPlan,
    SlotRelease, SlotRequest, SlotRow, WaiterRow, next_waiter, plan_acquire, slot_fenced, usage_of,
};

fn opt_u32(value: Option<i64>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

/// Creates the queue's row if missing and locks it; returns its limits.
async fn lock_queue(c: &mut Conn, s: &Schema, queue: &str) -> StoreResult<SlotLimits> {
    sqlx::query(&s.sql(
        "INSERT INTO @wf_flow_queues (name, last_token, last_seq, last_turn)
         VALUES ($1, 0, 0, 0) ON CONFLICT (name) DO NOTHING",
    ))
    .bind(queue)
    .execute(&mut *c)
    .await?;
    let row = sqlx::query(&s.sql(
        "SELECT concurrency, per_process, per_key, rate_starts, rate_period
           FROM @wf_flow_queues WHERE name = $1 FOR UPDATE",
    ))
    .bind(queue)
    .fetch_one(&mut *c)
    .await?;
    Ok(SlotLimits {
        concurrency: opt_u32(row.try_get(0)?),
        per_process: opt_u32(row.try_get(1)?),
        per_key: opt_u32(row.try_get(2)?),
        rate: opt_u32(row.try_get(3)?).zip(row.try_get::<Option<i64>, _>(4)?),
    })
}

async fn snapshot(
    c: &mut Conn,
    s: &Schema,
    queue: &str,
    now: Micros,
    period: Option<Micros>,
) -> StoreResult<QueueSnapshot> {
    let counters = sqlx::query(
        &s.sql("SELECT last_token, last_seq, last_turn FROM @wf_flow_queues WHERE name = $1"),
    )
    .bind(queue)
    .fetch_optional(&mut *c)
    .await?
    .map(|r| -> StoreResult<(u64, u64, u64)> {
        Ok((
            to_u64(r.try_get(0)?),
            to_u64(r.try_get(1)?),
            to_u64(r.try_get(2)?),
        ))
    })
    .transpose()?
    .unwrap_or_default();
    let slots = sqlx::query(&s.sql(
        "SELECT holder, owner, partition_key, token, acquired_at, expires_at
           FROM @wf_flow_slots WHERE queue = $1",
    ))
    .bind(queue)
    .fetch_all(&mut *c)
    .await?
    .iter()
    .map(|r| {
        Ok(SlotRow {
            holder: r.try_get(0)?,
            owner: r.try_get(1)?,
            key: r.try_get(2)?,
            token: to_u64(r.try_get(3)?),
            acquired_at: r.try_get(4)?,
            expires_at: r.try_get(5)?,
        })
    })
    .collect::<StoreResult<Vec<_>>>()?;
    let waiters = sqlx::query(&s.sql(
        "SELECT holder, partition_key, priority, seq, enqueued_at, expires_at
           FROM @wf_flow_waiters WHERE queue = $1",
    ))
    .bind(queue)
    .fetch_all(&mut *c)
    .await?
    .iter()
    .map(|r| {
        Ok(WaiterRow {
            holder: r.try_get(0)?,
            key: r.try_get(1)?,
            priority: u8::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
            seq: to_u64(r.try_get(3)?),
            enqueued_at: r.try_get(4)?,
            expires_at: r.try_get(5)?,
        })
    })
    .collect::<StoreResult<Vec<_>>>()?;
    let turns =
        sqlx::query(&s.sql("SELECT partition_key, turn FROM @wf_flow_turns WHERE queue = $1"))
            .bind(queue)
            .fetch_all(&mut *c)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, to_u64(r.try_get(1)?))))
            .collect::<StoreResult<Vec<_>>>()?;
    let window: Vec<Micros> = match period {
        Some(period) => sqlx::query(
            &s.sql("SELECT at FROM @wf_flow_starts WHERE queue = $1 AND at > $2 ORDER BY at"),
        )
        .bind(queue)
        .bind(now.saturating_sub(period))
        .fetch_all(&mut *c)
        .await?
        .iter()
        .map(|r| Ok(r.try_get(0)?))
        .collect::<StoreResult<_>>()?,
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

#[allow(clippy::too_many_lines)]
async fn apply(
    c: &mut Conn,
    s: &Schema,
    request: &SlotRequest,
    plan: &SlotPlan,
) -> StoreResult<()> {
    let queue = request.queue.as_str();
    let limits = request.limits;
    sqlx::query(&s.sql(
        "UPDATE @wf_flow_queues SET last_token = $2, last_seq = $3, last_turn = $4,
             concurrency = $5, per_process = $6, per_key = $7, rate_starts = $8,
             rate_period = $9
         WHERE name = $1",
    ))
    .bind(queue)
    .bind(to_i64(plan.counters.0))
    .bind(to_i64(plan.counters.1))
    .bind(to_i64(plan.counters.2))
    .bind(limits.concurrency.map(i64::from))
    .bind(limits.per_process.map(i64::from))
    .bind(limits.per_key.map(i64::from))
    .bind(limits.rate.map(|(starts, _)| i64::from(starts)))
    .bind(limits.rate.map(|(_, period)| period))
    .execute(&mut *c)
    .await?;
    let expired: Vec<String> = plan
        .expired_slots
        .iter()
        .map(|s| s.holder.clone())
        .collect();
    if !expired.is_empty() {
        sqlx::query(&s.sql("DELETE FROM @wf_flow_slots WHERE queue = $1 AND holder = ANY($2)"))
            .bind(queue)
            .bind(&expired)
            .execute(&mut *c)
            .await?;
    }
    let mut gone = plan.expired_waiters.clone();
    if plan.remove_waiter {
        gone.push(request.holder.clone());
    }
    if !gone.is_empty() {
        sqlx::query(&s.sql("DELETE FROM @wf_flow_waiters WHERE queue = $1 AND holder = ANY($2)"))
            .bind(queue)
            .bind(&gone)
            .execute(&mut *c)
            .await?;
    }
    if let Some(w) = &plan.waiter {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_flow_waiters
                 (queue, holder, partition_key, priority, seq, enqueued_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (queue, holder) DO UPDATE SET partition_key = $3, priority = $4,
                 seq = $5, enqueued_at = $6, expires_at = $7",
        ))
        .bind(queue)
        .bind(&w.holder)
        .bind(&w.key)
        .bind(i64::from(w.priority))
        .bind(to_i64(w.seq))
        .bind(w.enqueued_at)
        .bind(w.expires_at)
        .execute(&mut *c)
        .await?;
    }
    if let Some(slot) = &plan.slot {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_flow_slots
                 (queue, holder, owner, partition_key, token, acquired_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (queue, holder) DO UPDATE SET owner = $3, partition_key = $4,
                 token = $5, acquired_at = $6, expires_at = $7",
        ))
        .bind(queue)
        .bind(&slot.holder)
        .bind(&slot.owner)
        .bind(&slot.key)
        .bind(to_i64(slot.token))
        .bind(slot.acquired_at)
        .bind(slot.expires_at)
        .execute(&mut *c)
        .await?;
    }
    if let Some(before) = plan.starts_before {
        sqlx::query(&s.sql("DELETE FROM @wf_flow_starts WHERE queue = $1 AND at <= $2"))
            .bind(queue)
            .bind(before)
            .execute(&mut *c)
            .await?;
    }
    if let Some((token, at)) = plan.start {
        sqlx::query(&s.sql("INSERT INTO @wf_flow_starts (queue, token, at) VALUES ($1, $2, $3)"))
            .bind(queue)
            .bind(to_i64(token))
            .bind(at)
            .execute(&mut *c)
            .await?;
    }
    if let Some((key, turn)) = &plan.turn {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_flow_turns (queue, partition_key, turn) VALUES ($1, $2, $3)
             ON CONFLICT (queue, partition_key) DO UPDATE SET turn = $3",
        ))
        .bind(queue)
        .bind(key)
        .bind(to_i64(*turn))
        .execute(&mut *c)
        .await?;
    }
    if !plan.dropped_turns.is_empty() {
        sqlx::query(
            &s.sql("DELETE FROM @wf_flow_turns WHERE queue = $1 AND partition_key = ANY($2)"),
        )
        .bind(queue)
        .bind(&plan.dropped_turns)
        .execute(&mut *c)
        .await?;
    }
    Ok(())
}

async fn acquire(c: &mut Conn, s: &Schema, request: &SlotRequest) -> StoreResult<SlotOutcome> {
    lock_queue(c, s, &request.queue).await?;
    let period = request.limits.rate.map(|(_, p)| p);
    let plan = plan_acquire(
        request,
        snapshot(c, s, &request.queue, request.now, period).await?,
    );
    apply(c, s, request, &plan).await?;
    Ok(plan.outcome)
}

async fn renew(
    c: &mut Conn,
    s: &Schema,
    lease: SlotLease,
    now: Micros,
    ttl: Micros,
) -> StoreResult<SlotLease> {
    lock_queue(c, s, &lease.queue).await?;
    let expires_at = now.saturating_add(ttl);
    let current: Option<i64> = sqlx::query_scalar(&s.sql(
        "SELECT token FROM @wf_flow_slots WHERE queue = $1 AND holder = $2 AND expires_at > $3",
    ))
    .bind(&lease.queue)
    .bind(&lease.holder)
    .bind(now)
    .fetch_optional(&mut *c)
    .await?;
    match current.map(to_u64) {
        Some(token) if token == lease.token => {
            sqlx::query(
                &s.sql(
                    "UPDATE @wf_flow_slots SET expires_at = $3 WHERE queue = $1 AND holder = $2",
                ),
            )
            .bind(&lease.queue)
            .bind(&lease.holder)
            .bind(expires_at)
            .execute(&mut *c)
            .await?;
            Ok(SlotLease {
                expires_at,
                ..lease
            })
        }
        other => Err(slot_fenced(
            &lease.queue,
            &lease.holder,
            lease.token,
            other.unwrap_or(0),
        )),
    }
}

async fn release(
    c: &mut Conn,
    s: &Schema,
    queue: &str,
    holder: &str,
    token: Option<u64>,
    now: Micros,
) -> StoreResult<SlotRelease> {
    let limits = lock_queue(c, s, queue).await?;
    let released = match token {
        Some(token) => {
            let current: Option<i64> = sqlx::query_scalar(
                &s.sql("SELECT token FROM @wf_flow_slots WHERE queue = $1 AND holder = $2"),
            )
            .bind(queue)
            .bind(holder)
            .fetch_optional(&mut *c)
            .await?;
            match current.map(to_u64) {
                Some(current) if current != token => {
                    return Err(slot_fenced(queue, holder, token, current));
                }
                Some(_) => {
                    sqlx::query(
                        &s.sql("DELETE FROM @wf_flow_slots WHERE queue = $1 AND holder = $2"),
                    )
                    .bind(queue)
                    .bind(holder)
                    .execute(&mut *c)
                    .await?;
                    true
                }
                None => false,
            }
        }
        None => {
            sqlx::query(&s.sql("DELETE FROM @wf_flow_waiters WHERE queue = $1 AND holder = $2"))
                .bind(queue)
                .bind(holder)
                .execute(&mut *c)
                .await?
                .rows_affected()
                > 0
        }
    };
    let next = next_waiter(&snapshot(c, s, queue, now, None).await?, now, &limits);
    Ok(SlotRelease { released, next })
}

async fn usage(c: &mut Conn, s: &Schema, now: Micros) -> StoreResult<Vec<QueueUsage>> {
    let rows = sqlx::query(&s.sql(
        "SELECT name, concurrency, per_process, per_key, rate_starts, rate_period
           FROM @wf_flow_queues ORDER BY name",
    ))
    .fetch_all(&mut *c)
    .await?;
    let mut usage = Vec::with_capacity(rows.len());
    for row in rows {
        let name: String = row.try_get(0)?;
        let limits = SlotLimits {
            concurrency: opt_u32(row.try_get(1)?),
            per_process: opt_u32(row.try_get(2)?),
            per_key: opt_u32(row.try_get(3)?),
            rate: opt_u32(row.try_get(4)?).zip(row.try_get::<Option<i64>, _>(5)?),
        };
        let snapshot = snapshot(c, s, &name, now, limits.rate.map(|(_, p)| p)).await?;
        usage.push(usage_of(name, limits, &snapshot, now));
    }
    Ok(usage)
}

impl FlowControl for PostgresStore {
    fn acquire_slot(&self, request: SlotRequest) -> BoxFuture<'_, StoreResult<SlotOutcome>> {
        Box::pin(async move { write_tx!(self, [], |c| acquire(c, &self.schema, &request)) })
    }

    fn renew_slot(
        &self,
        lease: &SlotLease,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotLease>> {
        let lease = lease.clone();
        Box::pin(async move { write_tx!(self, [], |c| renew(c, &self.schema, lease, now, ttl)) })
    }

    fn release_slot(
        &self,
        queue: &str,
        holder: &str,
        token: Option<u64>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<SlotRelease>> {
        let (queue, holder) = (queue.to_owned(), holder.to_owned());
        Box::pin(async move {
            let released = write_tx!(self, [], |c| release(
                c,
                &self.schema,
                &queue,
                &holder,
                token,
                now
            ))?;
            // QU-12: the waiter served next may wait in another process.
            if let Some(next) = &released.next {
                self.announce(&[WakeUp::SlotFree {
                    queue,
                    holder: Some(next.clone()),
                }]);
            }
            Ok(released)
        })
    }

    fn queue_usage(&self, now: Micros) -> BoxFuture<'_, StoreResult<Vec<QueueUsage>>> {
        Box::pin(async move { read!(self, |c| usage(c, &self.schema, now)) })
    }
}
