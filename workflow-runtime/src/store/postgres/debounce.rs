//! Debounced sends on PostgreSQL (RT-35, C-44): the rows of `wf_debounce`. A send is one
//! upsert; due rows are claimed with `FOR UPDATE SKIP LOCKED`, so several processes never
//! claim one row at once, and the claim expires if its process dies.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::schema::Schema;
use crate::base::Micros;
use crate::store::convert::{limit_i64, to_i64, to_u64};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::DebounceRow;

const COLS: &str = "debounce_id, burst_id, name, hash, stimulus, first_sent_at, last_sent_at, \
                    due_at, sends";

fn from_row(row: &PgRow) -> StoreResult<DebounceRow> {
    let get = |i: usize| -> StoreResult<String> { row.try_get(i).map_err(StoreError::from) };
    let time = |i: usize| -> StoreResult<i64> { row.try_get(i).map_err(StoreError::from) };
    Ok(DebounceRow {
        debounce_id: get(0)?,
        burst_id: get(1)?,
        name: get(2)?,
        hash: get(3)?,
        stimulus: get(4)?,
        first_sent_at: time(5)?,
        last_sent_at: time(6)?,
        due_at: time(7)?,
        sends: to_u64(time(8)?),
    })
}

/// Inserts the row, or updates the one with its id (see `Store::put_debounce`).
pub(super) async fn put(
    c: &mut PgConnection,
    s: &Schema,
    row: &DebounceRow,
) -> StoreResult<DebounceRow> {
    let stored = sqlx::query(&s.sql(&format!(
        "INSERT INTO @wf_debounce AS d ({COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1)
         ON CONFLICT (debounce_id) DO UPDATE SET
             name = excluded.name, hash = excluded.hash, stimulus = excluded.stimulus,
             last_sent_at = excluded.last_sent_at, due_at = excluded.due_at,
             sends = d.sends + 1
         RETURNING {COLS}"
    )))
    .bind(&row.debounce_id)
    .bind(&row.burst_id)
    .bind(&row.name)
    .bind(&row.hash)
    .bind(&row.stimulus)
    .bind(row.first_sent_at)
    .bind(row.last_sent_at)
    .bind(row.due_at)
    .fetch_one(&mut *c)
    .await?;
    from_row(&stored)
}

/// The earliest due time among rows not under a live claim at `now`.
pub(super) async fn earliest(
    c: &mut PgConnection,
    s: &Schema,
    now: Micros,
) -> StoreResult<Option<Micros>> {
    Ok(sqlx::query_scalar(&s.sql(
        "SELECT MIN(due_at) FROM @wf_debounce
          WHERE claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1",
    ))
    .bind(now)
    .fetch_one(&mut *c)
    .await?)
}

/// Claims the due rows (see `Store::claim_due_debounces`).
pub(super) async fn claim(
    c: &mut PgConnection,
    s: &Schema,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<DebounceRow>> {
    let columns = COLS
        .split(", ")
        .map(|col| format!("d.{col}"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::query(&s.sql(&format!(
        "WITH picked AS (
            SELECT debounce_id FROM @wf_debounce
            WHERE due_at <= $1
              AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1)
            ORDER BY due_at, debounce_id LIMIT $2
            FOR UPDATE SKIP LOCKED)
         UPDATE @wf_debounce d SET claim_owner = $3, claim_expires_at = $4
         FROM picked WHERE d.debounce_id = picked.debounce_id
         RETURNING {columns}"
    )))
    .bind(now)
    .bind(limit_i64(limit))
    .bind(owner)
    .bind(now.saturating_add(claim_ttl))
    .fetch_all(&mut *c)
    .await?;
    let mut claimed = rows.iter().map(from_row).collect::<StoreResult<Vec<_>>>()?;
    claimed.sort_by(|a, b| (a.due_at, &a.debounce_id).cmp(&(b.due_at, &b.debounce_id)));
    Ok(claimed)
}

/// Deletes the row if it is still the given version, else releases its claim (see
/// `Store::finish_debounce`).
pub(super) async fn finish(
    c: &mut PgConnection,
    s: &Schema,
    debounce_id: &str,
    burst_id: &str,
    sends: u64,
) -> StoreResult<bool> {
    let deleted = sqlx::query(
        &s.sql("DELETE FROM @wf_debounce WHERE debounce_id = $1 AND burst_id = $2 AND sends = $3"),
    )
    .bind(debounce_id)
    .bind(burst_id)
    .bind(to_i64(sends))
    .execute(&mut *c)
    .await?
    .rows_affected()
        > 0;
    if !deleted {
        sqlx::query(&s.sql(
            "UPDATE @wf_debounce SET claim_owner = NULL, claim_expires_at = NULL
              WHERE debounce_id = $1",
        ))
        .bind(debounce_id)
        .execute(&mut *c)
        .await?;
    }
    Ok(deleted)
}
