//! Decoding rows; any failure is a `Decode` naming the row (ST-22).

use rusqlite::Row;
use serde_json::Value;

use super::to_u64;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{
    BookmarkRow, EncodedQueueItem, InstanceRecord, InstanceSummary, LeaseState, QueueItem,
    TimerRow, decode_instance_text_columns,
};

// ----- row decoding -----

pub(super) const INSTANCE_COLS: &str = "instance_id, definition_name, definition_version, status, \
    sub_status, correlation_id, version, lease_owner, lease_token, lease_expires_at, \
    control_request, origin_at, created_at, updated_at, finished_at, listing";

/// The column of [`INSTANCE_COLS`] holding the lease token the row carries.
pub(super) const INSTANCE_TOKEN_COL: usize = 8;

/// Decodes one instance row with its state (column 16) as stored (ST-22).
pub(super) fn instance_from_row(id: &str, row: &Row<'_>) -> StoreResult<InstanceRecord<String>> {
    let summary = summary_from_row(id, row)?;
    let state: String = row.get(16).map_err(|e| StoreError::Decode {
        what: "instance",
        id: id.to_owned(),
        path: "state".to_owned(),
        message: e.to_string(),
    })?;
    Ok(summary.with_state(state))
}

/// Decodes one instance row's columns ([`INSTANCE_COLS`]); any failure is a `Decode` naming
/// the instance (ST-22).
pub(super) fn summary_from_row(id: &str, row: &Row<'_>) -> StoreResult<InstanceSummary> {
    let col = |e: rusqlite::Error| StoreError::Decode {
        what: "instance",
        id: id.to_owned(),
        path: "row".to_owned(),
        message: e.to_string(),
    };
    let (status, sub_status, control_request) = decode_instance_text_columns(
        id,
        row.get(3).map_err(col)?,
        row.get(4).map_err(col)?,
        row.get(10).map_err(col)?,
    )?;
    Ok(InstanceRecord {
        instance_id: id.to_owned(),
        definition_name: row.get(1).map_err(col)?,
        definition_version: row.get(2).map_err(col)?,
        correlation_id: row.get(5).map_err(col)?,
        version: to_u64(row.get(6).map_err(col)?),
        lease: LeaseState::from_columns(
            row.get(7).map_err(col)?,
            to_u64(row.get(8).map_err(col)?),
            row.get(9).map_err(col)?,
        ),
        origin_at: row.get(11).map_err(col)?,
        created_at: row.get(12).map_err(col)?,
        updated_at: row.get(13).map_err(col)?,
        finished_at: row.get(14).map_err(col)?,
        listing: row.get(15).map_err(col)?,
        status,
        sub_status,
        control_request,
        state: (),
    })
}

pub(super) const BOOKMARK_COLS: &str = "bookmark_id, instance_id, hash, name, node_id, context_id, \
    correlation_id, definition_name, definition_version, look_back, created_at";

pub(super) fn bookmark_from_row(row: &Row<'_>) -> rusqlite::Result<StoreResult<BookmarkRow>> {
    let c = Cols::new(row, "bookmark", 0, Some(1));
    Ok((|| {
        Ok(BookmarkRow {
            bookmark_id: c.get(0)?,
            instance_id: c.get(1)?,
            hash: c.get(2)?,
            name: c.get(3)?,
            node_id: c.get(4)?,
            context_id: to_u64(c.get(5)?),
            correlation_id: c.get(6)?,
            definition_name: c.get(7)?,
            definition_version: c.get(8)?,
            look_back: c.get(9)?,
            created_at: c.get(10)?,
        })
    })())
}

pub(super) const TIMER_COLS: &str =
    "timer_id, instance_id, kind, due_at, parked, definition_name, node_id";

pub(super) fn timer_from_row(row: &Row<'_>) -> rusqlite::Result<StoreResult<TimerRow>> {
    let c = Cols::new(row, "timer", 0, Some(1));
    Ok((|| {
        Ok(TimerRow {
            timer_id: c.get(0)?,
            instance_id: c.get(1)?,
            kind: c.get(2)?,
            due_at: c.get(3)?,
            parked: c.get::<i64>(4)? != 0,
            definition_name: c.get(5)?,
            node_id: c.get(6)?,
        })
    })())
}

/// Reads the columns of one row; a column of the wrong type is a `Decode` naming the row (its
/// id, and its instance when it has one) and the column (ST-22), not a transient failure.
struct Cols<'a, 'r> {
    row: &'a Row<'r>,
    what: &'static str,
    id: String,
}

impl<'a, 'r> Cols<'a, 'r> {
    /// `id` is the column of the row's id, `instance` that of its instance, if any.
    fn new(row: &'a Row<'r>, what: &'static str, id: usize, instance: Option<usize>) -> Self {
        let mut name = rendered(row, id);
        if let Some(instance) = instance.map(|i| rendered(row, i))
            && instance != "NULL"
        {
            name = format!("{name} (instance {instance})");
        }
        Self {
            row,
            what,
            id: name,
        }
    }

    fn get<T: rusqlite::types::FromSql>(&self, idx: usize) -> StoreResult<T> {
        self.row.get(idx).map_err(|e| {
            let column = self.row.as_ref().column_name(idx).unwrap_or("row");
            decode_error(self.what, &self.id, column, &e)
        })
    }
}

/// A column's value as text whatever its type, to name a row whose columns do not decode.
fn rendered(row: &Row<'_>, idx: usize) -> String {
    use rusqlite::types::ValueRef;
    match row.get_ref(idx) {
        Ok(ValueRef::Text(text)) => String::from_utf8_lossy(text).into_owned(),
        Ok(ValueRef::Integer(n)) => n.to_string(),
        Ok(ValueRef::Real(x)) => x.to_string(),
        Ok(ValueRef::Null) => "NULL".to_owned(),
        Ok(ValueRef::Blob(bytes)) => format!("<{} bytes>", bytes.len()),
        Err(_) => "?".to_owned(),
    }
}

/// A `Decode` for a row error that is about the data (a column of the wrong type, a value out
/// of range), else the I/O failure it is.
pub(super) fn decode_error(
    what: &'static str,
    id: &str,
    path: &str,
    error: &rusqlite::Error,
) -> StoreError {
    match error {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Decode {
            what,
            id: id.to_owned(),
            path: path.to_owned(),
            message: error.to_string(),
        },
        other => StoreError::unavailable(other),
    }
}

/// The queue columns after the id, shared by `wf_queue` and `wf_dead_letters`.
pub(super) const QUEUE_COLS: &str = "stimulus_id, name, hash, key_display, payload, correlation_id, \
    targets, sent_at, enqueued_at, expires_at, attempts, last_error, last_attempt_at, held, \
    idempotency_key";

/// Reads `id, QUEUE_COLS...` starting at column 0; `what` names the row in errors.
pub(super) fn queue_from_row(
    row: &Row<'_>,
    what: &'static str,
) -> rusqlite::Result<StoreResult<EncodedQueueItem>> {
    let c = Cols::new(row, what, 0, None);
    Ok((|| {
        Ok(EncodedQueueItem {
            item: QueueItem {
                item_id: c.get(0)?,
                stimulus_id: c.get(1)?,
                name: c.get(2)?,
                hash: c.get(3)?,
                key_display: c.get(4)?,
                payload: Value::Null,
                correlation_id: c.get(6)?,
                targets: Value::Null,
                sent_at: c.get(8)?,
                enqueued_at: c.get(9)?,
                expires_at: c.get(10)?,
                attempts: u32::try_from(c.get::<i64>(11)?).unwrap_or(u32::MAX),
                last_error: c.get(12)?,
                last_attempt_at: c.get(13)?,
                held: c.get::<i64>(14)? != 0,
                idempotency_key: c.get(15)?,
            },
            payload: c.get(5)?,
            targets: c.get(7)?,
        })
    })())
}
