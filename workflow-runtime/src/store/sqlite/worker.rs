//! The writer thread (one transaction per batch, a savepoint per request: group commit,
//! ST-26) and the reader threads.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, mpsc};

use rusqlite::Connection;

use super::{Counters, ReadJob, WriteJob, WriteRequest};
use crate::store::StoreError;

/// Takes every pending request up to the batch limits, without waiting for more (ST-26).
pub(super) fn writer_loop(
    conn: &Connection,
    rx: &mpsc::Receiver<WriteRequest>,
    (max_batch, max_bytes): (usize, usize),
    counters: &Counters,
) {
    while let Ok((mut bytes, first)) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch && bytes < max_bytes {
            match rx.try_recv() {
                Ok((size, job)) => {
                    bytes = bytes.saturating_add(size);
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        run_batch(conn, batch, counters);
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
