//! Decoding rows; any failure is a `Decode` naming the row (ST-22).

use rusqlite::Row;
use serde_json::Value;

use super::{decode_json, to_u64};
use crate::store::{
    BookmarkRow, ControlRequest, InstanceRecord, InstanceStatus, InstanceSubStatus,
    InstanceSummary, JournalRecord, LeaseState, QueueItem, StoreError, StoreResult, TimerRow,
};

// ----- row decoding -----

pub(super) const INSTANCE_COLS: &str = "instance_id, definition_name, definition_version, status, \
    sub_status, correlation_id, version, lease_owner, lease_token, lease_expires_at, \
    control_request, origin_at, created_at, updated_at, finished_at";

/// Decodes one instance row with its state (column 15) as stored (ST-22).
pub(super) fn instance_from_row(id: &str, row: &Row<'_>) -> StoreResult<InstanceRecord<String>> {
    let summary = summary_from_row(id, row)?;
    let state: String = row.get(15).map_err(|e| StoreError::Decode {
        what: "instance",
        id: id.to_owned(),
        path: "state".to_owned(),
        message: e.to_string(),
    })?;
    Ok(InstanceRecord {
        instance_id: summary.instance_id,
        definition_name: summary.definition_name,
        definition_version: summary.definition_version,
        status: summary.status,
        sub_status: summary.sub_status,
        correlation_id: summary.correlation_id,
        version: summary.version,
        lease: summary.lease,
        control_request: summary.control_request,
        origin_at: summary.origin_at,
        created_at: summary.created_at,
        updated_at: summary.updated_at,
        finished_at: summary.finished_at,
        state,
    })
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
    let status: String = row.get(3).map_err(col)?;
    let status = InstanceStatus::parse(&status).ok_or_else(|| StoreError::Decode {
        what: "instance",
        id: id.to_owned(),
        path: "status".to_owned(),
        message: format!("unknown status {status:?}"),
    })?;
    let sub_status: Option<String> = row.get(4).map_err(col)?;
    let sub_status = match sub_status {
        None => None,
        Some(s) => Some(
            InstanceSubStatus::parse(&s).ok_or_else(|| StoreError::Decode {
                what: "instance",
                id: id.to_owned(),
                path: "sub_status".to_owned(),
                message: format!("unknown sub-status {s:?}"),
            })?,
        ),
    };
    let lease_owner: Option<String> = row.get(7).map_err(col)?;
    let lease_token: i64 = row.get(8).map_err(col)?;
    let lease_expires_at: Option<i64> = row.get(9).map_err(col)?;
    let control: Option<String> = row.get(10).map_err(col)?;
    let control_request =
        match control {
            None => None,
            Some(text) => Some(serde_json::from_str::<ControlRequest>(&text).map_err(|e| {
                StoreError::Decode {
                    what: "instance",
                    id: id.to_owned(),
                    path: "control_request".to_owned(),
                    message: e.to_string(),
                }
            })?),
        };
    Ok(InstanceSummary {
        instance_id: id.to_owned(),
        definition_name: row.get(1).map_err(col)?,
        definition_version: row.get(2).map_err(col)?,
        status,
        sub_status,
        correlation_id: row.get(5).map_err(col)?,
        version: to_u64(row.get(6).map_err(col)?),
        lease: match (lease_owner, lease_expires_at) {
            (Some(owner), Some(expires_at)) => Some(LeaseState {
                owner,
                token: to_u64(lease_token),
                expires_at,
            }),
            _ => None,
        },
        control_request,
        origin_at: row.get(11).map_err(col)?,
        created_at: row.get(12).map_err(col)?,
        updated_at: row.get(13).map_err(col)?,
        finished_at: row.get(14).map_err(col)?,
    })
}

pub(super) const BOOKMARK_COLS: &str = "bookmark_id, instance_id, hash, name, node_id, context_id, \
    correlation_id, definition_name, definition_version, look_back, created_at";

pub(super) fn bookmark_from_row(row: &Row<'_>) -> rusqlite::Result<BookmarkRow> {
    Ok(BookmarkRow {
        bookmark_id: row.get(0)?,
        instance_id: row.get(1)?,
        hash: row.get(2)?,
        name: row.get(3)?,
        node_id: row.get(4)?,
        context_id: to_u64(row.get(5)?),
        correlation_id: row.get(6)?,
        definition_name: row.get(7)?,
        definition_version: row.get(8)?,
        look_back: row.get(9)?,
        created_at: row.get(10)?,
    })
}

pub(super) const TIMER_COLS: &str =
    "timer_id, instance_id, kind, due_at, parked, definition_name, node_id";

pub(super) fn timer_from_row(row: &Row<'_>) -> rusqlite::Result<TimerRow> {
    Ok(TimerRow {
        timer_id: row.get(0)?,
        instance_id: row.get(1)?,
        kind: row.get(2)?,
        due_at: row.get(3)?,
        parked: row.get::<_, i64>(4)? != 0,
        definition_name: row.get(5)?,
        node_id: row.get(6)?,
    })
}

/// The queue columns after the id, shared by `wf_queue` and `wf_dead_letters`.
pub(super) const QUEUE_COLS: &str = "stimulus_id, name, hash, key_display, payload, correlation_id, \
    targets, sent_at, enqueued_at, expires_at, attempts, last_error, last_attempt_at, held, \
    idempotency_key";

/// Raw queue row: JSON columns still encoded.
pub(super) struct RawQueue {
    pub(super) item: QueueItem,
    pub(super) payload: String,
    pub(super) targets: String,
}

/// Reads `id, QUEUE_COLS...` starting at column 0.
pub(super) fn queue_from_row(row: &Row<'_>) -> rusqlite::Result<RawQueue> {
    Ok(RawQueue {
        item: QueueItem {
            item_id: row.get(0)?,
            stimulus_id: row.get(1)?,
            name: row.get(2)?,
            hash: row.get(3)?,
            key_display: row.get(4)?,
            payload: Value::Null,
            correlation_id: row.get(6)?,
            targets: Value::Null,
            sent_at: row.get(8)?,
            enqueued_at: row.get(9)?,
            expires_at: row.get(10)?,
            attempts: u32::try_from(row.get::<_, i64>(11)?).unwrap_or(u32::MAX),
            last_error: row.get(12)?,
            last_attempt_at: row.get(13)?,
            held: row.get::<_, i64>(14)? != 0,
            idempotency_key: row.get(15)?,
        },
        payload: row.get(5)?,
        targets: row.get(7)?,
    })
}

impl RawQueue {
    pub(super) fn decode(self, what: &'static str) -> StoreResult<QueueItem> {
        let mut item = self.item;
        item.payload = decode_json(what, &item.item_id, "payload", &self.payload)?;
        item.targets = decode_json(what, &item.item_id, "targets", &self.targets)?;
        Ok(item)
    }
}

/// One journal row, its detail as stored.
pub(super) fn journal_from_row(r: &Row<'_>) -> rusqlite::Result<JournalRecord<String>> {
    Ok(JournalRecord {
        seq: to_u64(r.get::<_, i64>(0)?),
        at: r.get(1)?,
        kind: r.get(2)?,
        context_id: r.get::<_, Option<i64>>(3)?.map(to_u64),
        node_id: r.get(4)?,
        detail: r.get(5)?,
    })
}
