//! Debounced sends on SQLite (RT-35, C-44): the rows of `wf_debounce`, written by one
//! statement each on the writer.

use rusqlite::{Connection, OptionalExtension};

use super::rows::decode_error;
use super::{limit_i64, to_i64, to_u64};
use crate::base::Micros;
use crate::store::backend::DueDebounces;
use crate::store::error::StoreResult;
use crate::store::rows::DebounceRow;

const COLS: &str = "debounce_id, burst_id, name, hash, stimulus, first_sent_at, last_sent_at, \
                    due_at, sends";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<DebounceRow> {
    Ok(DebounceRow {
        debounce_id: r.get(0)?,
        burst_id: r.get(1)?,
        name: r.get(2)?,
        hash: r.get(3)?,
        stimulus: r.get(4)?,
        first_sent_at: r.get(5)?,
        last_sent_at: r.get(6)?,
        due_at: r.get(7)?,
        sends: to_u64(r.get::<_, i64>(8)?),
    })
}

/// Inserts the row, or updates the one with its id (see `Store::put_debounce`).
pub(super) fn put(c: &Connection, row: &DebounceRow) -> StoreResult<DebounceRow> {
    let stored = c
        .prepare_cached(&format!(
            "INSERT INTO wf_debounce ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1)
             ON CONFLICT (debounce_id) DO UPDATE SET
                 name = excluded.name, hash = excluded.hash, stimulus = excluded.stimulus,
                 last_sent_at = excluded.last_sent_at, due_at = excluded.due_at,
                 sends = wf_debounce.sends + 1
             RETURNING {COLS}"
        ))?
        .query_row(
            rusqlite::params![
                row.debounce_id,
                row.burst_id,
                row.name,
                row.hash,
                row.stimulus,
                row.first_sent_at,
                row.last_sent_at,
                row.due_at,
            ],
            from_row,
        )
        .map_err(|e| decode_error("debounce", &row.debounce_id, "*", &e))?;
    Ok(stored)
}

/// The earliest due time among rows not under a live claim at `now`.
fn earliest(c: &Connection, now: Micros) -> StoreResult<Option<Micros>> {
    c.prepare_cached(
        "SELECT MIN(due_at) FROM wf_debounce
          WHERE claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= ?1",
    )?
    .query_row([now], |r| r.get(0))
    .map_err(|e| decode_error("debounce", "*", "due_at", &e))
}

/// Reads the next due time without claiming (a read).
pub(super) fn next_due(c: &Connection, now: Micros) -> StoreResult<DueDebounces> {
    Ok(DueDebounces {
        claimed: Vec::new(),
        next_due: earliest(c, now)?,
    })
}

/// Claims the due rows (see `Store::claim_due_debounces`).
pub(super) fn claim(
    c: &Connection,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<DueDebounces> {
    let claimed: Vec<DebounceRow> = {
        let mut stmt = c.prepare_cached(&format!(
            "SELECT {COLS} FROM wf_debounce
              WHERE due_at <= ?1
                AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= ?1)
              ORDER BY due_at, debounce_id LIMIT ?2"
        ))?;
        let rows = stmt.query_map(rusqlite::params![now, limit_i64(limit)], from_row)?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| decode_error("debounce", "*", "*", &e))?
    };
    let mut stmt = c.prepare_cached(
        "UPDATE wf_debounce SET claim_owner = ?2, claim_expires_at = ?3 WHERE debounce_id = ?1",
    )?;
    for row in &claimed {
        stmt.execute(rusqlite::params![
            row.debounce_id,
            owner,
            now.saturating_add(claim_ttl)
        ])?;
    }
    Ok(DueDebounces {
        claimed,
        next_due: earliest(c, now)?,
    })
}

/// Deletes the row if it is still the given version, else releases its claim (see
/// `Store::finish_debounce`).
pub(super) fn finish(
    c: &Connection,
    debounce_id: &str,
    burst_id: &str,
    sends: u64,
) -> StoreResult<bool> {
    let deleted = c
        .prepare_cached(
            "DELETE FROM wf_debounce WHERE debounce_id = ?1 AND burst_id = ?2 AND sends = ?3
             RETURNING debounce_id",
        )?
        .query_row(
            rusqlite::params![debounce_id, burst_id, to_i64(sends)],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .is_some();
    if !deleted {
        c.prepare_cached(
            "UPDATE wf_debounce SET claim_owner = NULL, claim_expires_at = NULL
              WHERE debounce_id = ?1",
        )?
        .execute([debounce_id])?;
    }
    Ok(deleted)
}
