//! Connections kept between the store's single statements, not given back to the pool.
//!
//! sqlx pings every connection given back to its pool (a `Sync` message and the server's
//! answer: a round trip that wakes the server's backend) from a task it spawns for the
//! purpose. The store's one-statement operations (the routing read, the claim, the commit
//! function's call) gave their connection back after every statement, so a transition
//! cost three such pings on top of its three statements. A connection whose statement
//! completed is in a known state (the driver waits for the server's `ReadyForQuery` before
//! its next statement), so the store keeps it here for its next operation instead. A
//! connection whose operation failed, or whose future was dropped half way, is never kept:
//! it goes back through the pool's own checks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

use super::IDLE_BEFORE_PING;
use crate::store::error::StoreResult;

/// A kept connection idle for longer than this goes back to the pool (which closes
/// connections idle past its own timeout and past their lifetime) instead of being used.
const KEEP_IDLE: Duration = Duration::from_secs(5);

/// The connections kept, the most recently used last.
#[derive(Debug)]
pub(super) struct Kept {
    connections: Mutex<VecDeque<(PoolConnection<Postgres>, Instant)>>,
    /// At most this many are kept: three fewer than the pool's size, so that the listener's
    /// connection, and the transactions and the notifier taking theirs from the pool, always
    /// find one there (of the connections in use outside this list, at least two go back
    /// to the pool when they are done).
    limit: usize,
    /// Wakes [`give_back_idle`] when a connection is kept while none was.
    wake: Arc<Notify>,
}

impl Kept {
    pub(super) fn new(pool: &PgPool) -> Self {
        let size = usize::try_from(pool.options().get_max_connections()).unwrap_or(0);
        Self {
            connections: Mutex::new(VecDeque::new()),
            limit: size.saturating_sub(3),
            wake: Arc::new(Notify::new()),
        }
    }

    fn connections(&self) -> MutexGuard<'_, VecDeque<(PoolConnection<Postgres>, Instant)>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Gives back to the pool the kept connections idle for over `KEEP_IDLE`, and tells
    /// when the oldest of those left will be (`None`: none is kept).
    fn give_back_expired(&self) -> Option<Instant> {
        let (expired, next) = {
            let mut connections = self.connections();
            let expired = take_expired(&mut connections);
            (
                expired,
                connections.front().map(|(_, since)| *since + KEEP_IDLE),
            )
        };
        // Dropped outside the lock: each goes back to the pool through its checks.
        drop(expired);
        next
    }

    /// A kept connection, or one from the pool. One that sat idle for a while is pinged
    /// first (as the pool pings its own), and one idle for long goes back to the pool.
    pub(super) async fn take(&self, pool: &PgPool) -> StoreResult<PoolConnection<Postgres>> {
        loop {
            let (kept, expired) = {
                let mut connections = self.connections();
                let expired = take_expired(&mut connections);
                (connections.pop_back(), expired)
            };
            drop(expired);
            let Some((mut conn, since)) = kept else {
                return Ok(pool.acquire().await?);
            };
            if pool.is_closed() {
                drop(conn);
                continue;
            }
            if since.elapsed() <= IDLE_BEFORE_PING
                || sqlx::Connection::ping(&mut *conn).await.is_ok()
            {
                return Ok(conn);
            }
            conn.close_on_drop();
        }
    }

    /// Keeps `conn`, whose operation completed, for the next one (or gives it back to the
    /// pool when enough are kept).
    pub(super) fn keep(&self, conn: PoolConnection<Postgres>) {
        let mut connections = self.connections();
        if connections.len() < self.limit {
            connections.push_back((conn, Instant::now()));
            if connections.len() == 1 {
                self.wake.notify_one();
            }
        }
    }

    /// Gives every kept connection back to the pool.
    pub(super) fn clear(&self) {
        let drained: Vec<_> = self.connections().drain(..).collect();
        drop(drained);
    }
}

/// Takes out of `connections` (the most recently used last) those idle for over `KEEP_IDLE`,
/// for the caller to drop outside the lock.
fn take_expired(
    connections: &mut VecDeque<(PoolConnection<Postgres>, Instant)>,
) -> Vec<(PoolConnection<Postgres>, Instant)> {
    let fresh = connections
        .iter()
        .position(|(_, since)| since.elapsed() <= KEEP_IDLE)
        .unwrap_or(connections.len());
    connections.drain(..fresh).collect()
}

/// Gives kept connections idle for over `KEEP_IDLE` back to the pool while the store lives,
/// so that a store gone idle holds none of them (a pool shared with the application gets
/// them back) and the pool's idle timeout and lifetime apply to them again. It sleeps while
/// nothing is kept, and ends with the store.
pub(super) async fn give_back_idle(kept: Weak<Kept>) {
    let Some(wake) = kept.upgrade().map(|k| Arc::clone(&k.wake)) else {
        return;
    };
    loop {
        let next = match kept.upgrade() {
            Some(kept) => kept.give_back_expired(),
            None => return,
        };
        match next {
            Some(at) => tokio::time::sleep_until((at + Duration::from_millis(10)).into()).await,
            None => wake.notified().await,
        }
    }
}
