//! Liveness of the processes sharing a schema (ST-36): a dead process is noticed in about a
//! second, not after its leases and claims lapse.
//!
//! Each owner a store claims for (a runtime's [`owner`](crate::RuntimeBuilder::owner)) holds a
//! session-level advisory lock, keyed by the schema and the owner, on a connection of its own
//! that does nothing else, and is registered in `wf_processes`. The server releases the lock
//! the moment that connection ends: the process exited, was killed or lost the network. Every
//! [`CHECK_EVERY`], each store tries the locks of the registered owners within one transaction
//! (`pg_try_advisory_xact_lock`): a lock it gets belongs to a dead owner, whose instance
//! leases, timer and queue claims, named leases and flow-control slots it expires at once, and whose registration
//! it deletes, in that one transaction, which also notifies the other processes
//! ([`WakeUp::OwnerGone`], a `QueueChanged` and a `TimersChanged`): their recovery sweep,
//! queue worker and timer driver take the work over at once. The lease TTL stays the bound
//! for a process that lives but is cut off or frozen (its liveness connection still open), and
//! for an owner that is not registered (a store of an older version). A process whose
//! liveness connection dies while the process lives takes its locks again once it reconnects;
//! meanwhile its instances may be taken over, and fencing (ST-14) and receipts keep that safe.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::{broadcast, mpsc};

use super::notify;
use super::schema::Schema;
use crate::base::now_micros;
use crate::store::backend::WakeUp;
use crate::store::error::StoreResult;

/// How often a store looks for dead owners.
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(500);

/// How often the liveness connection is pinged (a dead one is replaced and its locks taken
/// again).
const PING_EVERY: Duration = Duration::from_secs(1);

/// The owners this store holds a liveness lock for, and the task that holds them.
#[derive(Debug)]
pub(super) struct Liveness {
    held: Mutex<HashSet<String>>,
    hold: mpsc::UnboundedSender<String>,
}

impl Liveness {
    /// Starts the task holding the locks on a connection detached from `pool`.
    pub(super) fn start(
        pool: &PgPool,
        schema: &Schema,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let (hold, owners) = mpsc::unbounded_channel();
        let task = tokio::spawn(keep(pool.clone(), schema.clone(), owners));
        (
            Arc::new(Self {
                held: Mutex::new(HashSet::new()),
                hold,
            }),
            task,
        )
    }

    /// Makes `owner` one this process holds the liveness lock of (once per owner; not an
    /// empty name, which a claim that only refreshes a lease may carry).
    pub(super) fn hold(&self, owner: &str) {
        if owner.is_empty() {
            return;
        }
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.insert(owner.to_owned()) {
            // The task ends only with the store: a closed channel loses nothing.
            let _ = self.hold.send(owner.to_owned());
        }
    }
}

/// The advisory lock's key: the schema (its namespace) and the owner, each hashed by the
/// server (`hashtext`).
fn namespace(schema: &Schema) -> String {
    format!("workflow-liveness:{}", schema.name())
}

/// Holds the liveness locks of the owners sent on `owners`, on a connection of its own,
/// taking them all again on a new connection when it breaks.
async fn keep(pool: PgPool, schema: Schema, mut owners: mpsc::UnboundedReceiver<String>) {
    let mut all: Vec<String> = Vec::new();
    let mut conn: Option<PgConnection> = None;
    let mut ping = tokio::time::interval(PING_EVERY);
    loop {
        let mut fresh = Vec::new();
        tokio::select! {
            owner = owners.recv() => match owner {
                Some(owner) => fresh.push(owner),
                None => return,
            },
            _ = ping.tick() => {}
        }
        while let Ok(owner) = owners.try_recv() {
            fresh.push(owner);
        }
        if let Some(c) = conn.as_mut()
            && fresh.is_empty()
            && c.ping().await.is_err()
        {
            tracing::warn!(
                schema = schema.name(),
                "postgres store: the liveness connection broke; taking the locks again"
            );
            conn = None;
        }
        let relock = conn.is_none();
        if conn.is_none() {
            match pool.acquire().await {
                Ok(c) => conn = Some(c.detach()),
                Err(error) => {
                    tracing::warn!(%error, "postgres store: no liveness connection; other processes notice this one's death only by its leases lapsing");
                    all.extend(fresh);
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let to_lock: Vec<String> = if relock {
            all.iter().chain(fresh.iter()).cloned().collect()
        } else {
            fresh.clone()
        };
        all.extend(fresh);
        for owner in &to_lock {
            if let Err(error) = lock(c, &schema, owner).await {
                tracing::warn!(%error, owner, "postgres store: taking a liveness lock failed; trying again");
                conn = None;
                break;
            }
        }
    }
}

/// Takes `owner`'s liveness lock on `conn` and registers it. Another live session holding
/// it (two processes with one owner name) leaves the registration as it is: the owner is
/// alive while either lives.
async fn lock(conn: &mut PgConnection, schema: &Schema, owner: &str) -> StoreResult<()> {
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))")
        .bind(namespace(schema))
        .bind(owner)
        .fetch_one(&mut *conn)
        .await?;
    if !got {
        tracing::warn!(
            owner,
            "postgres store: another live process holds this owner's liveness lock; owner names should be unique"
        );
        return Ok(());
    }
    sqlx::query(&schema.sql(
        "INSERT INTO @wf_processes (owner, since) VALUES ($1, $2)
         ON CONFLICT (owner) DO UPDATE SET since = EXCLUDED.since",
    ))
    .bind(owner)
    .bind(now_micros())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The dead owners found by one check, and what of theirs was expired.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Reaped {
    /// The owners found dead.
    pub(super) owners: Vec<String>,
    /// Instance leases, timer claims, queue claims, named leases and slots expired.
    pub(super) expired: i64,
    /// A `SlotFree` hint for each queue that had slots of theirs.
    pub(super) freed: Vec<WakeUp>,
}

/// One check (see the module): expires what the dead owners held, deletes their
/// registrations and notifies the other processes, in one transaction.
pub(super) async fn reap(pool: &PgPool, schema: &Schema, origin: &str) -> StoreResult<Reaped> {
    let mut tx = pool.begin().await?;
    let now = now_micros();
    let owners: Vec<String> = sqlx::query_scalar(&schema.sql(
        "DELETE FROM @wf_processes
         WHERE pg_try_advisory_xact_lock(hashtext($1), hashtext(owner))
         RETURNING owner",
    ))
    .bind(namespace(schema))
    .fetch_all(&mut *tx)
    .await?;
    if owners.is_empty() {
        tx.commit().await?;
        return Ok(Reaped::default());
    }
    let mut expired = 0i64;
    for sql in [
        "UPDATE @wf_instances SET lease_expires_at = $2
         WHERE lease_owner = ANY($1) AND lease_expires_at > $2",
        "UPDATE @wf_timers SET claim_expires_at = $2
         WHERE claim_owner = ANY($1) AND claim_expires_at > $2",
        "UPDATE @wf_queue SET claim_expires_at = $2
         WHERE claim_owner = ANY($1) AND claim_expires_at > $2",
        "UPDATE @wf_named_leases SET expires_at = $2
         WHERE owner = ANY($1) AND expires_at > $2",
    ] {
        let done = sqlx::query(&schema.sql(sql))
            .bind(&owners)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        expired = expired.saturating_add(i64::try_from(done.rows_affected()).unwrap_or(i64::MAX));
    }
    // QU-12: a dead process's flow-control slots go back to their queues; the next ask on
    // each reclaims them (reported as expired), and the waiters of each are told to ask.
    let queues: Vec<String> = sqlx::query_scalar(&schema.sql(
        "UPDATE @wf_flow_slots SET expires_at = $2
         WHERE owner = ANY($1) AND expires_at > $2
         RETURNING queue",
    ))
    .bind(&owners)
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    expired = expired.saturating_add(i64::try_from(queues.len()).unwrap_or(i64::MAX));
    // Their places in line too: a waiter's holder is its instance, context and attempt
    // (QU-11); an instance they ran asks again, at the back, once taken over.
    let left: Vec<String> = sqlx::query_scalar(&schema.sql(
        "DELETE FROM @wf_flow_waiters
         WHERE regexp_replace(holder, '/[^/]*/[^/]*$', '') IN
             (SELECT instance_id FROM @wf_instances WHERE lease_owner = ANY($1))
         RETURNING queue",
    ))
    .bind(&owners)
    .fetch_all(&mut *tx)
    .await?;
    let queues: Vec<String> = queues.into_iter().chain(left).collect();
    let mut freed: Vec<WakeUp> = Vec::new();
    for queue in queues {
        let hint = WakeUp::SlotFree {
            queue,
            holder: None,
        };
        if !freed.contains(&hint) {
            freed.push(hint);
        }
    }
    let mut hints: Vec<WakeUp> = owners
        .iter()
        .map(|owner| WakeUp::OwnerGone {
            owner: owner.clone(),
        })
        .collect();
    hints.push(WakeUp::QueueChanged);
    hints.push(WakeUp::TimersChanged { earliest: None });
    hints.extend(freed.iter().cloned());
    notify::notify_in(&mut tx, &schema.channel(), origin, &hints).await?;
    tx.commit().await?;
    Ok(Reaped {
        owners,
        expired,
        freed,
    })
}

/// The checks of one store, every [`CHECK_EVERY`], until it is dropped; the hints of what it
/// reaped go to this process's runtimes too (`hints`).
pub(super) async fn check(
    pool: PgPool,
    schema: Schema,
    origin: String,
    hints: broadcast::Sender<WakeUp>,
) {
    let mut every = tokio::time::interval(CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match reap(&pool, &schema, &origin).await {
            Ok(reaped) if reaped.owners.is_empty() => {}
            Ok(reaped) => {
                tracing::warn!(
                    owners = ?reaped.owners,
                    expired = reaped.expired,
                    "postgres store: processes found dead; their leases and claims are taken over"
                );
                for owner in reaped.owners {
                    let _ = hints.send(WakeUp::OwnerGone { owner });
                }
                let _ = hints.send(WakeUp::QueueChanged);
                let _ = hints.send(WakeUp::TimersChanged { earliest: None });
                for hint in reaped.freed {
                    let _ = hints.send(hint);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "postgres store: looking for dead processes failed");
            }
        }
    }
}
