//! The writer thread (one transaction per batch, a savepoint per request: group commit,
//! ST-26) and the reader threads.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, mpsc};

use rusqlite::Connection;

use super::{Counters, ReadJob, WriteJob, WriteRequest};
use crate::store::StoreError;

/// Takes every pending request up to the batch limits, without waiting for more (ST-26).
/// `full`: the file's `synchronous` is FULL; a batch of volatile requests only (lease claims)
/// then commits at NORMAL, without its fsync (see `SqliteStore::write_volatile`).
pub(super) fn writer_loop(
    conn: &Connection,
    rx: &mpsc::Receiver<WriteRequest>,
    (max_batch, max_bytes): (usize, usize),
    full: bool,
    counters: &Counters,
) {
    while let Ok(first) = rx.recv() {
        let mut bytes = first.bytes;
        let mut durable = first.durable;
        let mut batch = vec![first.job];
        while batch.len() < max_batch && bytes < max_bytes {
            match rx.try_recv() {
                Ok(request) => {
                    bytes = bytes.saturating_add(request.bytes);
                    durable |= request.durable;
                    batch.push(request.job);
                }
                Err(_) => break,
            }
        }
        // WAL frames are written in order, so the next synced commit syncs this one too.
        let relax = full && !durable && conn.execute_batch("PRAGMA synchronous = NORMAL").is_ok();
        run_batch(conn, batch, counters);
        if relax && let Err(error) = conn.execute_batch("PRAGMA synchronous = FULL") {
            // Never leave the file at NORMAL: stop writing rather than commit unsynced.
            tracing::error!(%error, "could not restore synchronous = FULL; the writer stops");
            return;
        }
    }
}

/// One transaction for a batch: each request in its own savepoint (ST-26).
pub(super) fn run_batch(conn: &Connection, batch: Vec<WriteJob>, counters: &Counters) {
    let count = batch.len() as u64;
    // A lone request needs no savepoint: if it fails, the whole transaction is rolled back.
    let lone = batch.len() == 1;
    let mut responders = Vec::with_capacity(batch.len());
    let mut failure: Option<StoreError> =
        conn.execute_batch("BEGIN IMMEDIATE").err().map(Into::into);
    let began = failure.is_none();
    let mut lone_failed = false;
    for job in batch {
        if failure.is_some() {
            responders.push(job(None).1);
            continue;
        }
        if !lone && let Err(e) = conn.execute_batch("SAVEPOINT request") {
            failure = Some(e.into());
            responders.push(job(None).1);
            continue;
        }
        let (ok, responder) = job(Some(conn));
        responders.push(responder);
        if lone {
            lone_failed = !ok;
            continue;
        }
        let end = if ok {
            "RELEASE request"
        } else {
            "ROLLBACK TO request; RELEASE request"
        };
        if let Err(e) = conn.execute_batch(end) {
            failure = Some(e.into());
        }
    }
    if failure.is_none()
        && !lone_failed
        && let Err(e) = conn.execute_batch("COMMIT")
    {
        failure = Some(e.into());
    }
    if began && (failure.is_some() || lone_failed) {
        // Nothing of this batch was written; the rollback error, if any, changes nothing:
        // the failed request answers with its own error, the others with `failure`.
        let _ = conn.execute_batch("ROLLBACK");
    }
    counters.transactions.fetch_add(1, Ordering::Relaxed);
    counters.write_requests.fetch_add(count, Ordering::Relaxed);
    for responder in responders {
        responder(failure.clone());
    }
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
