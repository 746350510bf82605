//! The writer thread (one transaction per batch, a savepoint per request: group commit,
//! ST-26) and the reader threads.
//!
//! A batch takes every pending request up to the batch limits, without waiting for more. A
//! *volatile* request (a named lease's claim or renewal: see `SqliteStore::write_volatile`)
//! promises no durability, so it is answered as soon as it has run, while its transaction is
//! still open, as long as no durable request ran before it in that transaction (what it read
//! is then committed state). A transaction holding only volatile requests stays open for a
//! moment (`LINGER`) for the next request, which then shares its sync. Durable requests are
//! answered only after the transaction has committed; a transaction is never kept open once
//! it holds one. (An instance's lease never comes here: it is kept in memory, `leases.rs`,
//! so a transition is one write request, its commit.)

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::changes::Watch;
use super::checkpoint::Checkpoints;
use super::{Counters, Kind, ReadJob, Responder, WriteRequest};
use crate::store::error::StoreError;

/// The longest a transaction holding only volatile requests waits for more before it
/// commits: short enough that the lease rows reach the other connections (and processes) at
/// once for a person.
const LINGER: Duration = Duration::from_millis(5);

/// Runs transactions until the store is dropped (ST-26).
/// Between transactions, and when idle at least every [`POLL`](super::changes::POLL), it
/// looks for other processes' commits (`watch`). After each transaction it hands the WAL's
/// checkpoints on (`checkpoints`, `checkpoint.rs`); without them SQLite checkpoints inside
/// the writer's commits.
///
/// The connection is locked for each transaction and unlocked between them, and the requests
/// of a transaction are answered once it is unlocked: a point read finds it free then
/// (`SqliteStore::read_point`), outside any transaction, and reads committed rows only.
pub(super) fn writer_loop(
    conn: &Mutex<Connection>,
    rx: &mpsc::Receiver<WriteRequest>,
    limits: (usize, usize),
    counters: &Counters,
    watch: &mut Watch,
    mut checkpoints: Option<Checkpoints>,
) {
    watch.check(&lock(conn));
    loop {
        match rx.recv_timeout(watch.due_in()) {
            Ok(first) => {
                let guard = lock(conn);
                let done = run_transaction(&guard, rx, first, limits, counters);
                drop(guard);
                let connected = done.answer();
                if let Some(checkpoints) = &mut checkpoints
                    && checkpoints.after_commit()
                {
                    Checkpoints::checkpoint(&lock(conn));
                }
                if !connected {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if watch.due_in().is_zero() {
            watch.check(&lock(conn));
        }
    }
}

/// Locks the writer's connection. A poisoned lock (a panic inside a read on it) leaves the
/// connection usable: every statement is reset when it is dropped.
fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A finished transaction: the requests still to answer, with its failure if any.
struct Done {
    /// `false` when the channel closed meanwhile (the store is being dropped).
    connected: bool,
    waiting: Vec<Responder>,
    failure: Option<StoreError>,
}

impl Done {
    /// Answers every request; returns whether the channel is still connected.
    fn answer(self) -> bool {
        for responder in self.waiting {
            responder(self.failure.clone());
        }
        self.connected
    }
}

/// The state of one open transaction.
struct Open {
    count: usize,
    bytes: usize,
    /// A durable request ran in it: it commits as soon as the pending requests are in.
    durable: bool,
    /// A volatile request ran in it (and was answered).
    volatile: bool,
    /// Answered once the transaction has committed (or failed).
    waiting: Vec<Responder>,
    failure: Option<StoreError>,
}

impl Open {
    /// Runs a request after the first in the transaction, in its own savepoint, and answers
    /// it at once when it may be (no durable request ran before it), else after the commit.
    fn admit(&mut self, conn: &Connection, request: WriteRequest, counters: &Counters) {
        self.count += 1;
        count_request(counters);
        self.bytes = self.bytes.saturating_add(request.bytes);
        let answer_now = !self.durable && request.kind != Kind::Durable;
        let kind = request.kind;
        self.durable |= kind == Kind::Durable;
        let Some(responder) = apply_in_savepoint(conn, request, &mut self.failure) else {
            return;
        };
        if answer_now && self.failure.is_none() {
            self.answer_now(responder);
        } else {
            self.waiting.push(responder);
        }
    }

    /// Answers a volatile request before the commit.
    fn answer_now(&mut self, responder: Responder) {
        self.volatile = true;
        responder(None);
    }
}

/// One transaction: `first`, then what arrives while it is open, each request after the first
/// in its own savepoint, so a refused request rolls back only itself. Returns the requests
/// still to answer.
fn run_transaction(
    conn: &Connection,
    rx: &mpsc::Receiver<WriteRequest>,
    first: WriteRequest,
    (max_batch, max_bytes): (usize, usize),
    counters: &Counters,
) -> Done {
    let began = Instant::now();
    count_request(counters);
    if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
        let (_, responder) = (first.job)(None);
        counters.transactions.fetch_add(1, Ordering::Relaxed);
        return Done {
            connected: true,
            waiting: vec![responder],
            failure: Some(e.into()),
        };
    }
    // The first request runs without a savepoint: if it fails, the transaction holds nothing
    // else and is rolled back whole.
    let kind = first.kind;
    let (ok, responder) = (first.job)(Some(conn));
    if !ok {
        // Nothing of this transaction was written: the rollback error, if any, changes
        // nothing for the request, which answers with its own error.
        let _ = exec(conn, "ROLLBACK");
        counters.transactions.fetch_add(1, Ordering::Relaxed);
        return Done {
            connected: true,
            waiting: vec![responder],
            failure: None,
        };
    }
    let mut open = Open {
        count: 1,
        bytes: first.bytes,
        durable: kind == Kind::Durable,
        volatile: false,
        waiting: Vec::new(),
        failure: None,
    };
    if open.durable {
        open.waiting.push(responder);
    } else {
        open.answer_now(responder);
    }
    let mut connected = true;
    loop {
        // Every pending request, up to the limits.
        while open.failure.is_none() && open.count < max_batch && open.bytes < max_bytes {
            let Ok(request) = rx.try_recv() else { break };
            open.admit(conn, request, counters);
        }
        let full = open.count >= max_batch || open.bytes >= max_bytes;
        if open.durable || !open.volatile || full || open.failure.is_some() || !connected {
            break;
        }
        // Only volatile writes so far: wait a moment for the next request (the commit of the
        // run that just took its lease, typically) to share this transaction.
        let Some(left) = LINGER.checked_sub(began.elapsed()) else {
            break;
        };
        match rx.recv_timeout(left) {
            Ok(request) => open.admit(conn, request, counters),
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => connected = false,
        }
    }
    let mut failure = open.failure;
    if failure.is_none()
        && let Err(e) = exec(conn, "COMMIT")
    {
        failure = Some(e.into());
    }
    if failure.is_some() {
        // Nothing of this transaction was written; the rollback error, if any, changes
        // nothing: the requests still waiting answer with `failure`. (Volatile requests
        // answered already promised no durability: a lease they took is simply not held,
        // and fencing refuses whatever its holder commits.)
        let _ = exec(conn, "ROLLBACK");
    }
    counters.transactions.fetch_add(1, Ordering::Relaxed);
    Done {
        connected,
        waiting: open.waiting,
        failure,
    }
}

/// Counts a write request as it is taken, before it is answered.
fn count_request(counters: &Counters) {
    counters.write_requests.fetch_add(1, Ordering::Relaxed);
}

/// Runs one request inside its own savepoint, released when it succeeded and rolled back
/// when it failed. Returns its responder, or `None` when the savepoint statements failed: the
/// transaction is then broken, `failure` says why, and the request was answered with it.
fn apply_in_savepoint(
    conn: &Connection,
    request: WriteRequest,
    failure: &mut Option<StoreError>,
) -> Option<Responder> {
    if failure.is_some() {
        // An earlier savepoint statement failed: nothing more runs in this transaction.
        let (_, responder) = (request.job)(None);
        return Some(responder);
    }
    if let Err(e) = exec(conn, "SAVEPOINT request") {
        let error: StoreError = e.into();
        *failure = Some(error.clone());
        let (_, responder) = (request.job)(None);
        responder(Some(error));
        return None;
    }
    let (ok, responder) = (request.job)(Some(conn));
    let end = if ok {
        exec(conn, "RELEASE request")
    } else {
        exec(conn, "ROLLBACK TO request").and_then(|()| exec(conn, "RELEASE request"))
    };
    if let Err(e) = end {
        *failure = Some(e.into());
    }
    Some(responder)
}

/// Runs one statement that returns no rows from the connection's statement cache: the
/// transaction statements of every batch are parsed once, not per batch.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.raw_execute().map(drop)
}

pub(super) fn reader_loop(conn: &Connection, rx: &Mutex<mpsc::Receiver<ReadJob>>) {
    loop {
        let job = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(conn),
            Err(_) => return,
        }
    }
}
