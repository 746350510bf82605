//! The SQLite operations: transactions run on the writer thread inside a savepoint, reads
//! on the reader pool.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension};

use crate::store::journal_rows;
use serde_json::Value;

use super::leases::{InstanceLeases, Known, fenced};
use super::rows::{
    BOOKMARK_COLS, INSTANCE_COLS, INSTANCE_TOKEN_COL, QUEUE_COLS, TIMER_COLS, bookmark_from_row,
    decode_error, instance_from_row, queue_from_row, summary_from_row, timer_from_row,
};
use super::{
    SqliteStore, decode_json, is_constraint, json_text, limit_i64, not_found, read_only, to_i64,
    to_u64,
};
use crate::base::BoxFuture;
use crate::base::Micros;
use crate::store::backend::WakeUp;
use crate::store::backend::{
    BookmarkSelect, Capabilities, CensusCount, ChildWaitIndex, ClaimedRecord, DamagedTimer,
    DefinitionRecord, DefinitionStore, DueTimers, Enqueue, IncidentQuery, LATEST_DUE, LeaseClaim,
    LeaseKey, PurgeTarget, RemoteHints, RouteReads, Settled, Settlement, Store, TimerScope,
    TriggerSelect, TriggerWrite,
};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{
    BookmarkQuery, BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter,
    DeadLetterFilter, DeadLetterReason, EncodedQueueItem, IdempotencyRecord, IncidentRecord,
    InstanceCount, InstanceFilter, InstanceRecord, InstanceStatus, InstanceSubStatus,
    JournalRecord, Lease, ListedInstance, NewIncident, NewInstance, NewJournalRecord, QueueItem,
    Renewal, Schedule, ScheduleFiring, StoreStats, TimerRow, TriggerRow, decode_control_request,
    decode_instance_status,
};

// ----- write operations (run on the writer thread, inside a savepoint) -----

/// What a commit reads first: version, lease owner and token, definition name and version,
/// correlation id, status, finish time, journal floor.
type CommitGuard = (
    i64,
    Option<String>,
    i64,
    String,
    String,
    Option<String>,
    String,
    Option<Micros>,
    i64,
);

/// Applies a commit; `leases` fences it (ST-14: its token must be the held one).
fn commit_tx(c: &Connection, commit: &Commit<String>, leases: &InstanceLeases) -> StoreResult<u64> {
    let state = commit.state.as_str();
    let id = commit.instance_id.as_str();
    let row: Option<CommitGuard> = c
        .prepare_cached(
            "SELECT version, lease_owner, lease_token, definition_name, definition_version,
                correlation_id, status, finished_at, journal_floor
             FROM wf_instances WHERE instance_id = ?1",
        )?
        .query_row([id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
            ))
        })
        .optional()?;
    let (
        version,
        _stored_owner,
        stored_token,
        definition_name,
        mut definition_version,
        correlation,
        stored_status,
        stored_finished_at,
        mut floor,
    ) = row.ok_or_else(|| not_found("instance", id))?;
    let version = to_u64(version);
    if version != commit.expected_version {
        return Err(StoreError::Conflict {
            instance: id.to_owned(),
            expected: commit.expected_version,
            actual: version,
        });
    }
    // The lease is held in memory (`leases.rs`); the row carries the last committed token.
    leases.check(id, commit.lease_token, to_u64(stored_token))?;
    // ENG-54: a migration re-pins the instance and its bookmark rows, in this transaction.
    if let Some(repinned) = &commit.definition_version {
        c.prepare_cached("UPDATE wf_instances SET definition_version = ?1 WHERE instance_id = ?2")?
            .execute(rusqlite::params![repinned, id])?;
        c.prepare_cached("UPDATE wf_bookmarks SET definition_version = ?1 WHERE instance_id = ?2")?
            .execute(rusqlite::params![repinned, id])?;
        definition_version.clone_from(repinned);
    }
    // A list left empty (most commits' receipts, timers and queue items) takes no statement
    // from the cache: each lookup and return hashes the statement's text.
    if !commit.receipts.is_empty() {
        let mut stmt = c.prepare_cached(
            "INSERT INTO wf_receipts (instance_id, stimulus_id, at) VALUES (?1, ?2, ?3)",
        )?;
        for stimulus in &commit.receipts {
            match stmt.execute(rusqlite::params![id, stimulus, commit.now]) {
                Ok(_) => {}
                Err(e) if is_constraint(&e) => {
                    return Err(StoreError::ReceiptExists {
                        instance: id.to_owned(),
                        stimulus_id: stimulus.clone(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    // RT-36: the keys the instance's waits carry first (rows already indexed are kept).
    if !commit.keys_added.is_empty() {
        let mut stmt =
            c.prepare_cached("INSERT OR IGNORE INTO wf_keys (key, instance_id) VALUES (?1, ?2)")?;
        for key in &commit.keys_added {
            stmt.execute(rusqlite::params![key, id])?;
        }
    }
    if !commit.bookmarks_removed.is_empty() {
        let mut stmt = c.prepare_cached(
            "DELETE FROM wf_bookmarks WHERE bookmark_id = ?1 AND instance_id = ?2",
        )?;
        for bookmark_id in &commit.bookmarks_removed {
            stmt.execute([bookmark_id, id])?;
        }
    }
    if !commit.bookmarks_added.is_empty() {
        let mut stmt = c.prepare_cached(
            "INSERT INTO wf_bookmarks (bookmark_id, instance_id, hash, name, node_id, context_id,
                correlation_id, definition_name, definition_version, look_back, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?;
        for b in &commit.bookmarks_added {
            match stmt.execute(rusqlite::params![
                b.bookmark_id,
                id,
                b.hash,
                b.name,
                b.node_id,
                to_i64(b.context_id),
                commit.correlation_id,
                definition_name,
                definition_version,
                b.look_back,
                b.created_at,
            ]) {
                Ok(_) => {}
                Err(e) if is_constraint(&e) => {
                    return Err(StoreError::AlreadyExists {
                        what: "bookmark",
                        id: b.bookmark_id.clone(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if correlation != commit.correlation_id {
        // C-10: the bookmark rows carry the instance's correlation id.
        c.prepare_cached(
            "UPDATE wf_bookmarks SET correlation_id = ?1
             WHERE instance_id = ?2 AND correlation_id IS NOT ?1",
        )?
        .execute(rusqlite::params![commit.correlation_id, id])?;
    }
    if !commit.timers_removed.is_empty() {
        let mut stmt =
            c.prepare_cached("DELETE FROM wf_timers WHERE timer_id = ?1 AND instance_id = ?2")?;
        for timer_id in &commit.timers_removed {
            stmt.execute([timer_id, id])?;
        }
    }
    if !commit.timers_added.is_empty() {
        let mut stmt = c.prepare_cached(
            "INSERT INTO wf_timers (timer_id, instance_id, kind, due_at, parked)
             VALUES (?1, ?2, ?3, ?4, 0)",
        )?;
        for t in &commit.timers_added {
            match stmt.execute(rusqlite::params![t.timer_id, id, t.kind, t.due_at]) {
                Ok(_) => {}
                Err(e) if is_constraint(&e) => {
                    return Err(StoreError::AlreadyExists {
                        what: "timer",
                        id: t.timer_id.clone(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if let Some(parked) = commit.timers_parked {
        c.prepare_cached("UPDATE wf_timers SET parked = ?1 WHERE instance_id = ?2")?
            .execute(rusqlite::params![i64::from(parked), id])?;
    }
    if commit.clear_waits {
        c.prepare_cached("DELETE FROM wf_bookmarks WHERE instance_id = ?1")?
            .execute([id])?;
        c.prepare_cached("DELETE FROM wf_timers WHERE instance_id = ?1")?
            .execute([id])?;
    }
    if let Some(compaction) = &commit.journal_compaction {
        // The entries the cap hid go first, so the summary is seen wherever it lands.
        if floor > 0 {
            drop_below_floor(c, id, floor)?;
            floor = 0;
        }
        compact_journal(c, id, to_i64(compaction.through_seq), &compaction.summary)?;
    }
    // The newest seq after this commit's entries, when it appends any.
    let mut newest = None;
    if !commit.journal.is_empty() {
        let last: i64 = c
            .prepare_cached(
                "SELECT COALESCE(MAX(last_seq), 0) FROM wf_journal WHERE instance_id = ?1",
            )?
            .query_row([id], |r| r.get(0))?;
        let count = i64::try_from(commit.journal.len()).unwrap_or(i64::MAX);
        let through = last.saturating_add(count);
        insert_journal_row(
            c,
            id,
            last + 1,
            through,
            &journal_rows::encode(&commit.journal)?,
        )?;
        newest = Some(through);
    }
    if let Some(max) = commit.max_journal_entries {
        floor = cap_journal(c, id, max, newest, floor)?;
    }
    if !commit.consumed_queue_items.is_empty() {
        let mut stmt = c.prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?;
        for item in &commit.consumed_queue_items {
            stmt.execute([item])?;
        }
    }
    for instance in &commit.instances_created {
        insert_instance_tx(c, instance)?;
    }
    for item in &commit.queue_items {
        enqueue_tx(c, item)?;
    }
    for opened in &commit.incidents_opened {
        insert_incident_tx(c, id, &definition_name, opened)?;
    }
    for (incident_id, resolution) in &commit.incidents_resolved {
        c.prepare_cached(
            "UPDATE wf_incidents SET resolved_at = ?1, resolution = ?2
             WHERE incident_id = ?3 AND instance_id = ?4 AND resolved_at IS NULL",
        )?
        .execute(rusqlite::params![commit.now, resolution, incident_id, id])?;
    }
    if let Some(record) = &commit.idempotency {
        // The first writer's record stays (RT-19).
        put_idempotency_tx(c, record, false)?;
    }
    for (target, request) in &commit.control_requests {
        let text = serde_json::to_string(request).map_err(StoreError::unavailable)?;
        c.prepare_cached(
            "UPDATE wf_instances SET control_request = ?1
             WHERE instance_id = ?2 AND status NOT IN ('finished', 'cancelled')",
        )?
        .execute([&text, target])?;
    }
    let finished_at = commit.status.is_final().then_some(commit.now);
    let changed = Changed {
        status: stored_status != commit.status.as_str(),
        correlation: correlation != commit.correlation_id,
        finished_at: stored_finished_at != finished_at,
    };
    c.prepare_cached(&changed.instance_update())?
        .execute(rusqlite::params![
            state,
            limit_i64(state.len()),
            commit.status.as_str(),
            commit.sub_status.map(InstanceSubStatus::as_str),
            commit.correlation_id,
            commit.now,
            finished_at,
            commit.clear_control_request,
            commit.release_lease,
            id,
            commit.listing,
            to_i64(commit.lease_token),
            floor,
        ])?;
    Ok(version + 1)
}

/// Which indexed columns of an instance row a commit changes. Its `UPDATE` sets only those
/// (and the unindexed ones, the lease token among them): SQLite rewrites the entries of every
/// index over a column an `UPDATE` sets, changed or not, and a transition usually changes
/// none of them. (The lease's owner and expiry are not written: the lease is kept in memory,
/// `leases.rs`.)
struct Changed {
    /// `status` (the recovery, definition and activation indexes).
    status: bool,
    /// `correlation_id` (its index).
    correlation: bool,
    /// `finished_at` (its index).
    finished_at: bool,
}

impl Changed {
    /// The statement, with the parameters of [`commit_tx`]'s final `UPDATE` (those of the
    /// columns it leaves alone bound but unused); one text per combination, so each is
    /// parsed once and kept in the statement cache.
    fn instance_update(&self) -> String {
        let mut sql = String::from(
            "UPDATE wf_instances SET
                version = version + 1, state = ?1, state_size = ?2, sub_status = ?4,
                updated_at = ?6, listing = ?11, lease_token = ?12, journal_floor = ?13,
                control_request = CASE WHEN ?8 THEN NULL ELSE control_request END",
        );
        if self.status {
            sql.push_str(", status = ?3");
        }
        if self.correlation {
            sql.push_str(", correlation_id = ?5");
        }
        if self.finished_at {
            sql.push_str(", finished_at = ?7");
        }
        sql.push_str(" WHERE instance_id = ?10");
        sql
    }
}

/// Inserts a new instance at version 1 with its receipt and consumed queue item (ST-17).
fn insert_instance_tx(c: &Connection, i: &NewInstance<String>) -> StoreResult<()> {
    let state = i.state.as_str();
    if let Some(scope) = &i.activation_scope {
        // The single writer serialises this check with every other creation (ST-17).
        let existing: Option<String> = c
            .prepare_cached(
                "SELECT instance_id FROM wf_instances
                 WHERE activation_scope = ?1 AND status NOT IN ('finished', 'cancelled')
                 LIMIT 1",
            )?
            .query_row([scope], |r| r.get(0))
            .optional()?;
        if let Some(existing) = existing {
            return Err(StoreError::ActivationConflict {
                scope: scope.clone(),
                existing,
            });
        }
    }
    let inserted = c
        .prepare_cached(
            "INSERT INTO wf_instances (instance_id, definition_name, definition_version,
                status, sub_status, correlation_id, version, lease_token, origin_at,
                created_at, updated_at, finished_at, state, state_size, activation_scope,
                listing)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, 0, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?
        .execute(rusqlite::params![
            i.instance_id,
            i.definition_name,
            i.definition_version,
            i.status.as_str(),
            i.sub_status.map(InstanceSubStatus::as_str),
            i.correlation_id,
            i.origin_at,
            i.created_at,
            i.status.is_final().then_some(i.created_at),
            state,
            limit_i64(state.len()),
            i.activation_scope,
            i.listing,
        ]);
    match inserted {
        Ok(_) => {}
        Err(e) if is_constraint(&e) => {
            return Err(StoreError::AlreadyExists {
                what: "instance",
                id: i.instance_id.clone(),
            });
        }
        Err(e) => return Err(e.into()),
    }
    if let Some(stimulus) = &i.receipt {
        c.prepare_cached(
            "INSERT OR IGNORE INTO wf_receipts (instance_id, stimulus_id, at)
             VALUES (?1, ?2, ?3)",
        )?
        .execute(rusqlite::params![i.instance_id, stimulus, i.created_at])?;
    }
    if let Some(item) = &i.consumed_queue_item {
        c.prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?
            .execute([item])?;
    }
    if let Some(record) = &i.idempotency {
        // The first writer's record stays (RT-19).
        put_idempotency_tx(c, record, false)?;
    }
    Ok(())
}

/// Inserts a queue item; an id already queued or dead gives `AlreadyExists`.
fn enqueue_tx(c: &Connection, item: &QueueItem) -> StoreResult<()> {
    let exists = |what: &'static str| StoreError::AlreadyExists {
        what,
        id: item.item_id.clone(),
    };
    let dead = c
        .prepare_cached("SELECT 1 FROM wf_dead_letters WHERE original_item_id = ?1")?
        .query_row([&item.item_id], |_| Ok(()))
        .optional()?
        .is_some();
    if dead {
        return Err(exists("queue item"));
    }
    let inserted = c
        .prepare_cached(&format!(
            "INSERT INTO wf_queue (item_id, {QUEUE_COLS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        ))?
        .execute(rusqlite::params![
            item.item_id,
            item.stimulus_id,
            item.name,
            item.hash,
            item.key_display,
            json_text(&item.payload)?,
            item.correlation_id,
            json_text(&item.targets)?,
            item.sent_at,
            item.enqueued_at,
            item.expires_at,
            item.attempts,
            item.last_error,
            item.last_attempt_at,
            item.held,
            item.idempotency_key,
        ]);
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if is_constraint(&e) => Err(exists("queue item")),
        Err(e) => Err(e.into()),
    }
}

/// ENG-42: the journal shows the newest `max` entries, found without walking them; returns
/// the instance's journal floor, the oldest entry shown (0: all of them).
///
/// This store numbers an instance's entries so that they form one contiguous run, preceded
/// at most by one compaction summary below a gap: a commit's entries are appended as one row
/// from `MAX(last_seq) + 1`, a compaction replaces the entries up to its `through_seq` by a
/// row of one summary at that seq (below the oldest entry when the cap had removed them
/// already: the gap), and the cap removes the oldest. So the number of entries shown follows
/// from three index probes (the two oldest rows at or above the floor and the newest seq:
/// `newest`, when the commit just appended its row and so knows it), and the excess is a
/// range of the oldest. The cap raises the floor past it, which the commit writes into the
/// instance row it updates anyway, and readers start at the floor; the rows below it are
/// deleted as one range, and the row the floor cuts through keeps its newer entries (its
/// `first_seq` raised, ST-10), once they hold [`batch_below_floor`] entries: a commit at its
/// cap then writes no journal page but its own row's. (Counting the entries, or an `OFFSET
/// max` walk, reads every kept row on every commit of an instance at its cap.)
fn cap_journal(
    c: &Connection,
    id: &str,
    max: u64,
    newest: Option<i64>,
    floor: i64,
) -> StoreResult<i64> {
    let oldest: Vec<(i64, i64)> = {
        let mut stmt = c.prepare_cached(
            "SELECT first_seq, last_seq FROM wf_journal WHERE instance_id = ?1 AND last_seq >= ?2
             ORDER BY last_seq LIMIT 2",
        )?;
        stmt.query_map(rusqlite::params![id, floor], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let Some(&(stored_first, first_last)) = oldest.first() else {
        return Ok(floor);
    };
    let first = stored_first.max(floor);
    let newest: i64 = match newest {
        Some(newest) => newest,
        None => c
            .prepare_cached("SELECT MAX(last_seq) FROM wf_journal WHERE instance_id = ?1")?
            .query_row([id], |r| r.get(0))?,
    };
    // A summary below a gap, then the run from the second oldest row on; or one run.
    let (entries, cut_from) = match oldest.get(1) {
        Some(&(second, _)) if first == first_last && second > first.saturating_add(1) => {
            (newest - second + 2, second - 1)
        }
        _ => (newest - first + 1, first),
    };
    let excess = entries.saturating_sub(to_i64(max));
    if excess <= 0 {
        return Ok(floor);
    }
    // The `excess` oldest: the summary (if any) and the start of the run; the oldest entry
    // shown is now `keep`.
    let keep = cut_from + excess;
    let stored_from: i64 = c
        .prepare_cached(
            "SELECT first_seq FROM wf_journal WHERE instance_id = ?1 ORDER BY last_seq LIMIT 1",
        )?
        .query_row([id], |r| r.get(0))?;
    if keep.saturating_sub(stored_from) >= batch_below_floor(max) {
        drop_below_floor(c, id, keep)?;
    }
    Ok(keep)
}

/// How many entries the cap leaves below the floor before it deletes them as one range:
/// `max(64, max / 4)`, so the stored journal of an instance stays under its cap plus that.
fn batch_below_floor(max: u64) -> i64 {
    to_i64((max / 4).max(64))
}

/// Deletes the journal rows wholly below `floor` and trims the row it cuts through.
fn drop_below_floor(c: &Connection, id: &str, floor: i64) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM wf_journal WHERE instance_id = ?1 AND last_seq < ?2")?
        .execute(rusqlite::params![id, floor])?;
    trim_journal_row(c, id, floor)
}

/// The row holding `keep` keeps its entries from `keep` on (ST-10): the oldest row left.
fn trim_journal_row(c: &Connection, id: &str, keep: i64) -> StoreResult<()> {
    c.prepare_cached(
        "UPDATE wf_journal SET first_seq = ?2
         WHERE instance_id = ?1 AND first_seq < ?2 AND last_seq = (
             SELECT MIN(last_seq) FROM wf_journal WHERE instance_id = ?1 AND last_seq >= ?2)",
    )?
    .execute(rusqlite::params![id, keep])?;
    Ok(())
}

/// C-22: the entries up to `through` are replaced by `summary` at that seq: the rows wholly
/// up to it deleted, the row it cuts through trimmed, the summary a row of its own.
fn compact_journal(
    c: &Connection,
    id: &str,
    through: i64,
    summary: &NewJournalRecord<String>,
) -> StoreResult<()> {
    c.prepare_cached("DELETE FROM wf_journal WHERE instance_id = ?1 AND last_seq <= ?2")?
        .execute(rusqlite::params![id, through])?;
    trim_journal_row(c, id, through.saturating_add(1))?;
    insert_journal_row(
        c,
        id,
        through,
        through,
        &journal_rows::encode(std::slice::from_ref(summary))?,
    )
}

fn insert_journal_row(
    c: &Connection,
    id: &str,
    first_seq: i64,
    last_seq: i64,
    entries: &str,
) -> StoreResult<()> {
    c.prepare_cached(
        "INSERT INTO wf_journal (instance_id, last_seq, first_seq, entries)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(rusqlite::params![id, last_seq, first_seq, entries])?;
    Ok(())
}

fn insert_incident_tx(
    c: &Connection,
    instance_id: &str,
    definition_name: &str,
    incident: &NewIncident,
) -> StoreResult<()> {
    let inserted = c
        .prepare_cached(
            "INSERT INTO wf_incidents (incident_id, instance_id, definition_name, kind,
                created_at, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(rusqlite::params![
            incident.incident_id,
            instance_id,
            definition_name,
            incident.kind,
            incident.created_at,
            json_text(&incident.record)?,
        ]);
    match inserted {
        Ok(_) => Ok(()),
        Err(e) if is_constraint(&e) => Err(StoreError::AlreadyExists {
            what: "incident",
            id: incident.incident_id.clone(),
        }),
        Err(e) => Err(e.into()),
    }
}

const INCIDENT_COLS: &str = "incident_id, instance_id, definition_name, kind, created_at, \
    resolved_at, resolution, record";

fn incidents_from(
    stmt: &mut rusqlite::CachedStatement<'_>,
    params: &[&dyn rusqlite::ToSql],
) -> StoreResult<Vec<IncidentRecord>> {
    let rows = stmt.query_map(params, |r| {
        Ok((
            IncidentRecord {
                incident_id: r.get(0)?,
                instance_id: r.get(1)?,
                definition_name: r.get(2)?,
                kind: r.get(3)?,
                created_at: r.get(4)?,
                resolved_at: r.get(5)?,
                resolution: r.get(6)?,
                record: Value::Null,
            },
            r.get::<_, String>(7)?,
        ))
    })?;
    let mut incidents = Vec::new();
    for row in rows {
        let (mut incident, record) = row?;
        incident.record = decode_json("incident", &incident.incident_id, "record", &record)?;
        incidents.push(incident);
    }
    Ok(incidents)
}

fn move_to_dead(
    c: &Connection,
    item_id: &str,
    reason: DeadLetterReason,
    error: Option<&str>,
    now: Micros,
) -> StoreResult<bool> {
    move_to_dead_as(c, item_id, QUEUE_COLS, reason, error, now)
}

/// Moves a queue row to the dead letters, its `QUEUE_COLS` copied as the SQL expressions
/// `columns` give them (`QUEUE_COLS` itself for a plain copy; `?4` in them is `now`).
fn move_to_dead_as(
    c: &Connection,
    item_id: &str,
    columns: &str,
    reason: DeadLetterReason,
    error: Option<&str>,
    now: Micros,
) -> StoreResult<bool> {
    let inserted = c
        .prepare_cached(&format!(
            "INSERT OR IGNORE INTO wf_dead_letters (original_item_id, {QUEUE_COLS}, reason, error, dead_at)
             SELECT item_id, {columns}, ?2, ?3, ?4 FROM wf_queue WHERE item_id = ?1"
        ))?
        .execute(rusqlite::params![item_id, reason.as_str(), error, now])?;
    let deleted = c
        .prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?
        .execute([item_id])?;
    Ok(inserted > 0 && deleted > 0)
}

/// Moves a queue row whose columns are not of their types (a hand-edited or damaged file) to
/// the dead letters as `Rejected`, its error naming the row and the column (ST-22). The copy
/// is made decodable: a text column keeps its value as text, a number column that is not a
/// number becomes the claim time (times) or 0 (counters), and a JSON column that does not
/// parse is wrapped as `{"undecodable": "<text>"}`, so the dead letter lists, shows what was
/// there, and nothing else in the queue is held back.
fn quarantine_corrupt_queue_row(
    c: &Connection,
    item_id: &str,
    error: &StoreError,
    now: Micros,
) -> StoreResult<()> {
    // A blob is shown as its hex digits: cast to text, its bytes need not be UTF-8.
    let as_text = |column: &str| {
        format!(
            "CASE typeof({column}) WHEN 'blob' THEN 'x''' || hex({column}) || ''''
                  ELSE CAST({column} AS TEXT) END"
        )
    };
    let json = |column: &str| {
        format!(
            "CASE WHEN typeof({column}) = 'text' AND json_valid({column}) THEN {column}
                  ELSE json_object('undecodable', {}) END",
            as_text(column)
        )
    };
    let text = |column: &str| format!("COALESCE({}, '')", as_text(column));
    let text_or_null = |column: &str| as_text(column);
    let int = |column: &str, fallback: &str| {
        format!("CASE WHEN typeof({column}) = 'integer' THEN {column} ELSE {fallback} END")
    };
    let int_or_null = |column: &str| {
        format!("CASE WHEN typeof({column}) = 'integer' THEN {column} ELSE NULL END")
    };
    let columns = [
        text("stimulus_id"),
        text("name"),
        text("hash"),
        text_or_null("key_display"),
        json("payload"),
        text_or_null("correlation_id"),
        json("targets"),
        int("sent_at", "?4"),
        int("enqueued_at", "?4"),
        int("expires_at", "?4"),
        int("attempts", "0"),
        text_or_null("last_error"),
        int_or_null("last_attempt_at"),
        int("held", "0"),
        text_or_null("idempotency_key"),
    ]
    .join(", ");
    move_to_dead_as(
        c,
        item_id,
        &columns,
        DeadLetterReason::Rejected,
        Some(&error.to_string()),
        now,
    )?;
    tracing::warn!(
        item = %item_id,
        %error,
        "queue: a row that does not decode was moved to the dead letters as rejected"
    );
    Ok(())
}

/// Moves an undecodable queue item to the dead letters as `Rejected`, wrapping its raw JSON
/// columns as `{"undecodable": "<text>"}` so the dead letter itself decodes (ST-22).
fn quarantine_queue_item(
    c: &Connection,
    item_id: &str,
    payload: &str,
    targets: &str,
    error: &StoreError,
    now: Micros,
) -> StoreResult<()> {
    let wrap = EncodedQueueItem::quarantined_json;
    c.prepare_cached("UPDATE wf_queue SET payload = ?2, targets = ?3 WHERE item_id = ?1")?
        .execute(rusqlite::params![item_id, wrap(payload), wrap(targets)])?;
    move_to_dead(
        c,
        item_id,
        DeadLetterReason::Rejected,
        Some(&error.to_string()),
        now,
    )?;
    Ok(())
}

fn delete_dependents(c: &Connection, id: &str) -> StoreResult<()> {
    for sql in [
        "DELETE FROM wf_bookmarks WHERE instance_id = ?1",
        "DELETE FROM wf_timers WHERE instance_id = ?1",
        "DELETE FROM wf_journal WHERE instance_id = ?1",
        "DELETE FROM wf_receipts WHERE instance_id = ?1",
        "DELETE FROM wf_incidents WHERE instance_id = ?1",
        "DELETE FROM wf_keys WHERE instance_id = ?1",
        "DELETE FROM wf_instances WHERE instance_id = ?1",
    ] {
        c.prepare_cached(sql)?.execute([id])?;
    }
    Ok(())
}

fn check_named_token(c: &Connection, name: &str, token: u64) -> StoreResult<()> {
    let row: Option<(Option<String>, i64)> = c
        .prepare_cached("SELECT owner, token FROM wf_named_leases WHERE name = ?1")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match row {
        Some((Some(_), current)) if to_u64(current) == token => Ok(()),
        other => Err(StoreError::Fenced {
            resource: LeaseKey::named(name).resource(),
            token,
            current: other.map_or(0, |(_, t)| to_u64(t)),
        }),
    }
}

/// Acquires a named lease if none is live at `now` (ST-11, ST-14).
fn acquire_named_tx(
    c: &Connection,
    name: &str,
    owner: &str,
    now: Micros,
    ttl: Micros,
) -> StoreResult<Lease> {
    let row: Option<(Option<String>, Option<Micros>)> = c
        .prepare_cached("SELECT owner, expires_at FROM wf_named_leases WHERE name = ?1")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((Some(holder), Some(until))) = row
        && until > now
    {
        return Err(StoreError::LeaseHeld {
            resource: LeaseKey::named(name).resource(),
            holder,
            until,
        });
    }
    let expires_at = now.saturating_add(ttl);
    let token: i64 = c
        .prepare_cached(
            "INSERT INTO wf_named_leases (name, owner, token, expires_at)
             VALUES (?1, ?2, 1, ?3)
             ON CONFLICT (name) DO UPDATE SET owner = ?2, token = token + 1, expires_at = ?3
             RETURNING token",
        )?
        .query_row(rusqlite::params![name, owner, expires_at], |r| r.get(0))?;
    Ok(Lease {
        token: to_u64(token),
        expires_at,
    })
}

/// Extends a named lease if `token` is current (ST-14).
fn renew_named_tx(
    c: &Connection,
    name: &str,
    token: u64,
    now: Micros,
    ttl: Micros,
) -> StoreResult<Renewal> {
    let expires_at = now.saturating_add(ttl);
    check_named_token(c, name, token)?;
    c.prepare_cached("UPDATE wf_named_leases SET expires_at = ?2 WHERE name = ?1")?
        .execute(rusqlite::params![name, expires_at])?;
    Ok(Renewal {
        lease: Lease { token, expires_at },
        control_request: None,
    })
}

fn purge_tx(c: &Connection, target: &PurgeTarget) -> StoreResult<u64> {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    match target {
        PurgeTarget::Instance(id) => {
            let status: Option<String> = c
                .prepare_cached("SELECT status FROM wf_instances WHERE instance_id = ?1")?
                .query_row([id], |r| r.get(0))
                .optional()?;
            let status = status.ok_or_else(|| not_found("instance", id))?;
            match decode_instance_status(id, &status)? {
                s if s.is_final() => delete_dependents(c, id).map(|()| 1),
                s => Err(StoreError::NotTerminal {
                    instance: id.clone(),
                    status: s,
                }),
            }
        }
        PurgeTarget::Finished(filter) => {
            let first = filter
                .statuses
                .first()
                .map(|s| s.as_str())
                .unwrap_or_default();
            let second = filter.statuses.get(1).map_or(first, |s| s.as_str());
            let ids: Vec<String> = {
                let mut stmt = c.prepare_cached(
                    "SELECT instance_id FROM wf_instances
                     WHERE (status = ?1 OR status = ?2) AND finished_at < ?3
                       AND (?4 IS NULL OR definition_name = ?4)
                     LIMIT ?5",
                )?;
                let rows = stmt.query_map(
                    rusqlite::params![
                        first,
                        second,
                        filter.finished_before,
                        filter.definition_name,
                        limit_i64(filter.batch_size)
                    ],
                    |r| r.get(0),
                )?;
                rows.collect::<Result<_, _>>()?
            };
            for id in &ids {
                delete_dependents(c, id)?;
            }
            Ok(count(ids.len()))
        }
        PurgeTarget::DeadLetter(id) => Ok(count(
            c.prepare_cached("DELETE FROM wf_dead_letters WHERE original_item_id = ?1")?
                .execute([id])?,
        )),
        PurgeTarget::DeadLettersBefore { before, limit } => Ok(count(
            c.prepare_cached(
                "DELETE FROM wf_dead_letters WHERE original_item_id IN (
                    SELECT original_item_id FROM wf_dead_letters WHERE dead_at < ?1 LIMIT ?2)",
            )?
            .execute(rusqlite::params![before, limit_i64(*limit)])?,
        )),
        PurgeTarget::ReceiptsBefore { before, limit } => Ok(count(
            c.prepare_cached(
                "DELETE FROM wf_receipts WHERE (instance_id, stimulus_id) IN (
                    SELECT instance_id, stimulus_id FROM wf_receipts WHERE at < ?1 LIMIT ?2)",
            )?
            .execute(rusqlite::params![before, limit_i64(*limit)])?,
        )),
        PurgeTarget::IdempotencyRecordsBefore { before, limit } => Ok(count(
            c.prepare_cached(
                "DELETE FROM wf_idempotency WHERE idempotency_key IN (
                    SELECT idempotency_key FROM wf_idempotency WHERE created_at < ?1 LIMIT ?2)",
            )?
            .execute(rusqlite::params![before, limit_i64(*limit)])?,
        )),
        PurgeTarget::ExpiredQueueItems { now, limit } => {
            let ids: Vec<String> = {
                let mut stmt = c.prepare_cached(
                    "SELECT item_id FROM wf_queue WHERE held = 0 AND expires_at <= ?1
                     ORDER BY expires_at, item_id LIMIT ?2",
                )?;
                let rows =
                    stmt.query_map(rusqlite::params![now, limit_i64(*limit)], |r| r.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            let mut moved = 0;
            for id in ids {
                if move_to_dead(c, &id, DeadLetterReason::Expired, None, *now)? {
                    moved += 1;
                }
            }
            Ok(moved)
        }
        PurgeTarget::Schedule(id) => Ok(count(
            c.prepare_cached("DELETE FROM wf_timers WHERE timer_id = ?1 AND instance_id IS NULL")?
                .execute([id])?,
        )),
    }
}

fn settle_tx(c: &Connection, id: &str, settlement: &Settlement) -> StoreResult<Settled> {
    match settlement {
        Settlement::Release { owner, .. } => {
            c.prepare_cached(
                "UPDATE wf_queue SET claim_owner = NULL, claim_expires_at = NULL
                 WHERE item_id = ?1 AND claim_owner = ?2",
            )?
            .execute([id, owner])?;
            Ok(Settled::Released)
        }
        Settlement::Renew { owner, now, until } => Ok(Settled::Renewed(
            c.prepare_cached(
                "UPDATE wf_queue SET claim_owner = ?2, claim_expires_at = ?4
                 WHERE item_id = ?1 AND (claim_owner IS NULL OR claim_owner = ?2
                       OR claim_expires_at IS NULL OR claim_expires_at <= ?3)",
            )?
            .execute(rusqlite::params![id, owner, now, until])?
                > 0,
        )),
        Settlement::Ack => Ok(Settled::Acked(
            c.prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?
                .execute([id])?
                > 0,
        )),
        Settlement::Fail {
            error,
            now,
            max_attempts,
        } => {
            let attempts: Option<i64> = c
                .prepare_cached(
                    "UPDATE wf_queue SET attempts = attempts + 1, last_error = ?2,
                        last_attempt_at = ?3, claim_owner = NULL, claim_expires_at = NULL
                     WHERE item_id = ?1 RETURNING attempts",
                )?
                .query_row(rusqlite::params![id, error, now], |r| r.get(0))
                .optional()?;
            let attempts = attempts.ok_or_else(|| not_found("queue item", id))?;
            let attempts = u32::try_from(attempts).unwrap_or(u32::MAX);
            if attempts >= *max_attempts {
                move_to_dead(c, id, DeadLetterReason::Failed, Some(error), *now)?;
                Ok(Settled::DeadLettered(true))
            } else {
                Ok(Settled::Retry { attempts })
            }
        }
        Settlement::DeadLetter { reason, error, now } => Ok(Settled::DeadLettered(move_to_dead(
            c,
            id,
            *reason,
            error.as_deref(),
            *now,
        )?)),
    }
}

/// Loads an instance with the lease token its row carries (the last one committed).
fn load_stored(c: &Connection, id: &str) -> StoreResult<(InstanceRecord<String>, u64)> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {INSTANCE_COLS}, state FROM wf_instances WHERE instance_id = ?1"
    ))?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => {
            let record = instance_from_row(id, row)?;
            let token: i64 = row
                .get(INSTANCE_TOKEN_COL)
                .map_err(|e| StoreError::Decode {
                    what: "instance",
                    id: id.to_owned(),
                    path: "lease_token".to_owned(),
                    message: e.to_string(),
                })?;
            Ok((record, to_u64(token)))
        }
        None => Err(not_found("instance", id)),
    }
}

/// The stored lease token of an instance (`NotFound` without its row).
fn stored_token(c: &Connection, id: &str) -> StoreResult<u64> {
    let token: Option<i64> = c
        .prepare_cached("SELECT lease_token FROM wf_instances WHERE instance_id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    token.map(to_u64).ok_or_else(|| not_found("instance", id))
}

/// Unclaimed, unparked timer rows whose due time is not a time (ST-22): past
/// [`LATEST_DUE`] (SQLite orders text and blobs after every number, so a `due_at` of another
/// type is there too) or, once due, a number that is not an integer. Both are index ranges.
const DAMAGED_TIMERS: &str = "parked = 0
    AND (due_at > ?2 OR (due_at <= ?1 AND typeof(due_at) <> 'integer'))
    AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= ?1)";

fn earliest_tx(c: &Connection, now: Micros) -> StoreResult<Option<Micros>> {
    // A damaged row is due now: the driver claims it and reports it.
    let damaged: Option<i64> = c
        .prepare_cached(&format!(
            "SELECT 1 FROM wf_timers WHERE {DAMAGED_TIMERS} LIMIT 1"
        ))?
        .query_row(rusqlite::params![now, LATEST_DUE], |r| r.get(0))
        .optional()?;
    if damaged.is_some() {
        return Ok(Some(now));
    }
    let due: Option<Micros> = c
        .prepare_cached(
            "SELECT MIN(due_at) FROM wf_timers WHERE parked = 0 AND due_at <= ?2
               AND typeof(due_at) = 'integer'
               AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= ?1)",
        )?
        .query_row(rusqlite::params![now, LATEST_DUE], |r| r.get(0))
        .map_err(|e| decode_error("timer", "*", "due_at", &e))?;
    Ok(due)
}

/// Claims up to `limit` damaged timer rows (see [`DAMAGED_TIMERS`]) for `owner`.
fn claim_damaged_timers(
    c: &Connection,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<DamagedTimer>> {
    let damaged: Vec<DamagedTimer> = c
        .prepare_cached(&format!(
            "SELECT timer_id, instance_id, definition_name, CAST(due_at AS TEXT) FROM wf_timers
             WHERE {DAMAGED_TIMERS} ORDER BY timer_id LIMIT ?3"
        ))?
        .query_map(rusqlite::params![now, LATEST_DUE, limit_i64(limit)], |r| {
            Ok(DamagedTimer {
                timer_id: r.get(0)?,
                instance_id: r.get(1)?,
                definition_name: r.get(2)?,
                found: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut stmt = c.prepare_cached(
        "UPDATE wf_timers SET claim_owner = ?2, claim_expires_at = ?3 WHERE timer_id = ?1",
    )?;
    for t in &damaged {
        stmt.execute(rusqlite::params![
            t.timer_id,
            owner,
            now.saturating_add(claim_ttl)
        ])?;
    }
    Ok(damaged)
}

/// The instance leases: kept in memory (`leases.rs`), the rows read on the calling thread.
impl SqliteStore {
    /// Loads an instance (with the token its row carries), showing its lease as held now.
    fn load_leased(
        &self,
        id: String,
    ) -> BoxFuture<'static, StoreResult<(InstanceRecord<String>, u64)>> {
        let leases = Arc::clone(&self.leases);
        self.read_point(move |c| {
            let (mut record, token) = load_stored(c, &id)?;
            leases.overlay(&id, &mut record.lease);
            Ok((record, token))
        })
    }

    /// Acquires an instance's lease (ST-14): from its slot when the table has one, else
    /// above the token its row carries. `NotFound` for an unknown instance.
    async fn acquire_instance(
        &self,
        id: String,
        owner: String,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Lease> {
        if self.writer.is_none() {
            return Err(read_only());
        }
        if let Known::Decided(taken) = self.leases.acquire_known(&id, &owner, now, ttl) {
            return taken;
        }
        let stored = self.read_stored_token(id.clone()).await?;
        self.leases.acquire_stored(&id, stored, &owner, now, ttl).0
    }

    /// Extends a held instance lease when `token` is current, else `Fenced` (`NotFound` for
    /// an unknown instance without a lease).
    async fn renew_instance(
        &self,
        id: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Lease> {
        if self.writer.is_none() {
            return Err(read_only());
        }
        if let Some(renewed) = self.leases.renew(id, token, now, ttl) {
            return renewed;
        }
        Err(fenced(
            id,
            token,
            self.read_stored_token(id.to_owned()).await?,
        ))
    }

    /// The lease token an instance's row carries, read on the calling thread.
    fn read_stored_token(&self, id: String) -> BoxFuture<'static, StoreResult<u64>> {
        self.read_point(move |c| stored_token(c, &id))
    }

    /// `claim_instance`: the lease taken (or refreshed) in memory, then the row read on the
    /// calling thread; no write, no trip to the writer. The row is read after the lease is
    /// taken, so it holds every commit made under an earlier lease (a commit is answered only
    /// once committed, and only the lease's holder commits).
    async fn claim_leased(
        &self,
        id: String,
        claim: LeaseClaim,
    ) -> StoreResult<ClaimedRecord<String>> {
        let (lease, taken) = match claim.token {
            Some(token) => (
                self.renew_instance(&id, token, claim.now, claim.ttl)
                    .await?,
                false,
            ),
            None => match self
                .leases
                .acquire_known(&id, &claim.owner, claim.now, claim.ttl)
            {
                Known::Decided(taken) => (taken?, true),
                Known::Unknown => {
                    if self.writer.is_none() {
                        return Err(read_only());
                    }
                    // The row's token is needed first; it was read before the lease was
                    // taken, which is enough unless another claim took the lease meanwhile.
                    let (mut record, stored) = self.load_leased(id.clone()).await?;
                    let (taken, raced) =
                        self.leases
                            .acquire_stored(&id, stored, &claim.owner, claim.now, claim.ttl);
                    let lease = taken?;
                    if !raced {
                        self.leases.overlay(&id, &mut record.lease);
                        return Ok(ClaimedRecord { lease, record });
                    }
                    (lease, true)
                }
            },
        };
        match self.load_leased(id.clone()).await {
            Ok((record, _)) => Ok(ClaimedRecord { lease, record }),
            Err(e) => {
                // A claim that fails writes nothing: the lease it took is given back.
                if taken {
                    if matches!(e, StoreError::NotFound { .. }) {
                        self.leases.forget(&id);
                    } else {
                        let _ = self.leases.release(&id, lease.token);
                    }
                }
                Err(e)
            }
        }
    }
}

impl Store for SqliteStore {
    fn create_instance(&self, instance: NewInstance<String>) -> BoxFuture<'_, StoreResult<u64>> {
        self.write_sized(instance.state.len(), move |c| {
            insert_instance_tx(c, &instance)?;
            Ok(1)
        })
    }

    fn load_instance(
        &self,
        instance_id: &str,
    ) -> BoxFuture<'_, StoreResult<InstanceRecord<String>>> {
        let load = self.load_leased(instance_id.to_owned());
        Box::pin(async move { load.await.map(|(record, _)| record) })
    }

    fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> BoxFuture<'_, StoreResult<ClaimedRecord<String>>> {
        Box::pin(self.claim_leased(instance_id.to_owned(), claim))
    }

    fn commit(&self, commit: Commit<String>) -> BoxFuture<'_, StoreResult<u64>> {
        let bytes = commit
            .instances_created
            .iter()
            .fold(commit.state.len(), |n, i| n.saturating_add(i.state.len()));
        let (leases, after) = (Arc::clone(&self.leases), Arc::clone(&self.leases));
        let (id, token, release) = (
            commit.instance_id.clone(),
            commit.lease_token,
            commit.release_lease,
        );
        self.write_then(
            bytes,
            move |c| commit_tx(c, &commit, &leases),
            // Committed: the row carries the token now; a released lease is free before the
            // caller hears of the commit.
            move |result| {
                if result.is_ok() {
                    after.committed(&id, token, release);
                }
            },
        )
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<InstanceStatus>> {
        let id = instance_id.to_owned();
        self.write(move |c| {
            let status: Option<String> = c
                .prepare_cached("SELECT status FROM wf_instances WHERE instance_id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            let status = status.ok_or_else(|| not_found("instance", &id))?;
            let status = decode_instance_status(&id, &status)?;
            if !status.is_final() {
                let text = serde_json::to_string(&request).map_err(StoreError::unavailable)?;
                c.prepare_cached(
                    "UPDATE wf_instances SET control_request = ?1 WHERE instance_id = ?2",
                )?
                .execute([&text, &id])?;
            }
            Ok(status)
        })
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        let leases = Arc::clone(&self.leases);
        self.read(move |c| {
            // Only the filters given become conditions, so SQLite can use the index of the
            // one that narrows (`(definition_name, status)`, `correlation_id`): a condition
            // written `(?n IS NULL OR col = ?n)` hides every index and scans in id order.
            let mut conditions: Vec<&str> = Vec::new();
            let mut values: Vec<SqlValue> = Vec::new();
            if let Some(status) = filter.status {
                conditions.push("status = ?");
                values.push(SqlValue::Text(status.as_str().to_owned()));
            }
            if let Some(definition) = filter.definition_name {
                conditions.push("definition_name = ?");
                values.push(SqlValue::Text(definition));
            }
            if let Some(correlation) = filter.correlation_id {
                conditions.push("correlation_id = ?");
                values.push(SqlValue::Text(correlation));
            }
            if let Some(after) = filter.after {
                conditions.push("instance_id > ?");
                values.push(SqlValue::Text(after));
            }
            if filter.live_only {
                conditions.push("status NOT IN ('finished', 'cancelled')");
            }
            if filter.control_requested {
                conditions.push("control_request IS NOT NULL");
            }
            values.push(SqlValue::Integer(limit_i64(filter.limit)));
            let filters = if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            };
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INSTANCE_COLS} FROM wf_instances {filters} ORDER BY instance_id LIMIT ?"
            ))?;
            let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
            let mut listed = Vec::new();
            while let Some(row) = rows.next()? {
                let id: String = row.get(0)?;
                let mut summary = summary_from_row(&id, row);
                if let Ok(summary) = &mut summary {
                    // The leases live in memory (`leases.rs`), not in the rows.
                    leases.overlay(&id, &mut summary.lease);
                }
                listed.push(ListedInstance {
                    instance_id: id,
                    summary,
                });
            }
            Ok(listed)
        })
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        if self.writer.is_none() {
            return Box::pin(std::future::ready(Err(read_only())));
        }
        let owner = owner.to_owned();
        let leases = Arc::clone(&self.leases);
        // No write: the leases are taken in memory (`leases.rs`); the rows are read in pages,
        // skipping those under a live lease, until `limit` are claimed.
        self.read(move |c| {
            let page = limit.saturating_mul(2).max(64);
            let mut stmt = c.prepare_cached(
                "SELECT instance_id, sub_status, lease_token, updated_at FROM wf_instances
                 WHERE status = 'running'
                   AND (?1 IS NULL OR (updated_at, instance_id) > (?1, ?2))
                 ORDER BY updated_at, instance_id LIMIT ?3",
            )?;
            let mut claimed = Vec::with_capacity(limit);
            let mut after: Option<(Micros, String)> = None;
            while claimed.len() < limit {
                let (at, id) = match &after {
                    Some((at, id)) => (Some(*at), Some(id.clone())),
                    None => (None, None),
                };
                let rows = stmt.query_map(rusqlite::params![at, id, limit_i64(page)], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })?;
                let rows: Vec<_> = rows.collect::<Result<_, _>>()?;
                let full = rows.len() >= page;
                for (id, sub_status, stored, updated_at) in rows {
                    if claimed.len() < limit
                        && let Some(lease) =
                            leases.take_runnable(&id, to_u64(stored), &owner, now, ttl)
                    {
                        claimed.push(ClaimedInstance {
                            instance_id: id.clone(),
                            sub_status: sub_status.as_deref().and_then(InstanceSubStatus::parse),
                            lease,
                        });
                    }
                    after = Some((updated_at, id));
                }
                if !full {
                    break;
                }
            }
            Ok(claimed)
        })
    }

    fn purge(&self, target: PurgeTarget) -> BoxFuture<'_, StoreResult<u64>> {
        let PurgeTarget::Finished(filter) = target else {
            return self.write(move |c| purge_tx(c, &target));
        };
        Box::pin(async move {
            let batch = filter.batch_size.max(1);
            let mut total = 0u64;
            loop {
                let target = PurgeTarget::Finished(filter.clone());
                // Each batch is its own atomic write (ST-31).
                let removed = self.write(move |c| purge_tx(c, &target)).await?;
                total += removed;
                if removed < batch as u64 {
                    return Ok(total);
                }
            }
        })
    }

    fn acquire_lease(
        &self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        match key {
            LeaseKey::Instance(id) => {
                Box::pin(self.acquire_instance(id.clone(), owner.to_owned(), now, ttl))
            }
            LeaseKey::Named(name) => {
                let (name, owner) = (name.clone(), owner.to_owned());
                self.write_volatile(move |c| acquire_named_tx(c, &name, &owner, now, ttl))
            }
        }
    }

    fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        match key {
            LeaseKey::Instance(id) => {
                let id = id.clone();
                Box::pin(async move {
                    let lease = self.renew_instance(&id, token, now, ttl).await?;
                    let control: Option<Option<String>> = self
                        .read_point({
                            let id = id.clone();
                            move |c| {
                                c.prepare_cached(
                                    "SELECT control_request FROM wf_instances
                                     WHERE instance_id = ?1",
                                )?
                                .query_row([&id], |r| r.get(0))
                                .optional()
                                .map_err(StoreError::from)
                            }
                        })
                        .await?;
                    let control = control.ok_or_else(|| not_found("instance", &id))?;
                    Ok(Renewal {
                        lease,
                        control_request: control
                            .map(|text| decode_control_request(&id, &text))
                            .transpose()?,
                    })
                })
            }
            LeaseKey::Named(name) => {
                let name = name.clone();
                self.write_volatile(move |c| renew_named_tx(c, &name, token, now, ttl))
            }
        }
    }

    fn release_lease(&self, key: &LeaseKey, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        match key {
            LeaseKey::Instance(id) => {
                if self.writer.is_none() {
                    return Box::pin(std::future::ready(Err(read_only())));
                }
                if let Some(released) = self.leases.release(id, token) {
                    return Box::pin(std::future::ready(released));
                }
                // No lease is held: fenced (or unknown), as the row says.
                let id = id.clone();
                let stored = self.read_stored_token(id.clone());
                Box::pin(async move { Err(fenced(&id, token, stored.await?)) })
            }
            LeaseKey::Named(name) => {
                let name = name.clone();
                self.write(move |c| {
                    check_named_token(c, &name, token)?;
                    c.prepare_cached(
                        "UPDATE wf_named_leases SET owner = NULL, expires_at = NULL WHERE name = ?1",
                    )?
                    .execute([&name])?;
                    Ok(())
                })
            }
        }
    }

    fn find_bookmarks(
        &self,
        select: BookmarkSelect,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read_point(move |c| match select {
            BookmarkSelect::Hash(query) => bookmarks_by_hash(c, &query),
            BookmarkSelect::Instance(id) => {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {BOOKMARK_COLS} FROM wf_bookmarks WHERE instance_id = ?1
                     ORDER BY created_at, bookmark_id"
                ))?;
                let rows = stmt.query_map([&id], bookmark_from_row)?;
                collect_named(rows, "bookmark")
            }
        })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, stimulus) = (instance_id.to_owned(), stimulus_id.to_owned());
        self.read_point(move |c| {
            Ok(c.prepare_cached(
                "SELECT 1 FROM wf_receipts WHERE instance_id = ?1 AND stimulus_id = ?2",
            )?
            .query_row([&id, &stimulus], |_| Ok(()))
            .optional()?
            .is_some())
        })
    }

    fn find_triggers(&self, select: TriggerSelect) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        self.read_point(move |c| match select {
            TriggerSelect::Definition(name) => {
                select_triggers(c, "WHERE definition_name = ?1", rusqlite::params![name])
            }
            TriggerSelect::Hashes(hashes) => read_snapshot(c, |c| triggers_by_hashes(c, &hashes)),
        })
    }

    fn write_triggers(
        &self,
        definition_name: &str,
        write: TriggerWrite,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let name = definition_name.to_owned();
        self.write(move |c| {
            for (node, hash) in &write.deletes {
                c.prepare_cached(
                    "DELETE FROM wf_triggers
                     WHERE definition_name = ?1 AND node_id = ?2 AND hash = ?3",
                )?
                .execute([&name, node, hash])?;
            }
            for t in &write.upserts {
                c.prepare_cached(
                    "INSERT OR REPLACE INTO wf_triggers (definition_name, node_id, hash,
                        definition_version, name, key_display, payload, activation, registered_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(rusqlite::params![
                    name,
                    t.node_id,
                    t.hash,
                    t.definition_version,
                    t.name,
                    t.key_display,
                    json_text(&t.payload)?,
                    json_text(&t.activation)?,
                    t.registered_at,
                ])?;
            }
            Ok(())
        })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueTimers>> {
        let owner = owner.to_owned();
        let claim = move |c: &Connection| -> StoreResult<DueTimers> {
            let claimed: Vec<TimerRow> = {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {TIMER_COLS} FROM wf_timers
                     WHERE parked = 0 AND due_at <= ?1 AND typeof(due_at) = 'integer'
                       AND (claim_owner IS NULL OR claim_expires_at IS NULL
                            OR claim_expires_at <= ?1)
                     ORDER BY due_at, timer_id LIMIT ?2"
                ))?;
                let rows =
                    stmt.query_map(rusqlite::params![now, limit_i64(limit)], timer_from_row)?;
                collect_named(rows, "timer")?
            };
            let mut stmt = c.prepare_cached(
                "UPDATE wf_timers SET claim_owner = ?2, claim_expires_at = ?3 WHERE timer_id = ?1",
            )?;
            for t in &claimed {
                stmt.execute(rusqlite::params![
                    t.timer_id,
                    owner,
                    now.saturating_add(claim_ttl)
                ])?;
            }
            let damaged = match limit.checked_sub(claimed.len()) {
                Some(room) if room > 0 => claim_damaged_timers(c, &owner, now, claim_ttl, room)?,
                _ => Vec::new(),
            };
            Ok(DueTimers {
                claimed,
                next_due: earliest_tx(c, now)?,
                damaged,
            })
        };
        if limit == 0 {
            // Nothing to claim: a read, off the writer.
            return self.read(claim);
        }
        self.write(claim)
    }

    fn list_timers(&self, scope: TimerScope) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        self.read(move |c| {
            let (sql, key) = match &scope {
                TimerScope::Instance(id) => (
                    format!(
                        "SELECT {TIMER_COLS} FROM wf_timers WHERE instance_id = ?1
                         ORDER BY due_at, timer_id"
                    ),
                    id,
                ),
                TimerScope::Schedules(name) => (
                    format!(
                        "SELECT {TIMER_COLS} FROM wf_timers
                         WHERE instance_id IS NULL AND definition_name = ?1 ORDER BY timer_id"
                    ),
                    name,
                ),
            };
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map([key], timer_from_row)?;
            collect_named(rows, "timer")
        })
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        self.write(move |c| {
            let n = c
                .prepare_cached(
                    "INSERT OR IGNORE INTO wf_timers (timer_id, instance_id, kind, due_at,
                        parked, definition_name, node_id)
                     VALUES (?1, NULL, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(rusqlite::params![
                    schedule.schedule_id,
                    schedule.kind,
                    schedule.due_at,
                    schedule.fired,
                    schedule.definition_name,
                    schedule.node_id,
                ])?;
            Ok(n > 0)
        })
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<String>>,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        self.write(move |c| {
            let current: Option<Micros> = c
                .prepare_cached(
                    "SELECT due_at FROM wf_timers
                     WHERE timer_id = ?1 AND instance_id IS NULL AND parked = 0",
                )?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            if current != Some(expected_due_at) {
                return Ok(ScheduleFiring::Stale);
            }
            let firing = match &instance {
                Some(instance) => ScheduleFiring::of_creation(insert_instance_tx(c, instance))?,
                None => ScheduleFiring::Skipped,
            };
            c.prepare_cached(
                "UPDATE wf_timers SET claim_owner = NULL, claim_expires_at = NULL,
                    due_at = COALESCE(?2, due_at), parked = (?2 IS NULL)
                 WHERE timer_id = ?1",
            )?
            .execute(rusqlite::params![id, next_due])?;
            Ok(firing)
        })
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord<String>>>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            read_snapshot(c, |c| {
                // Entries below the instance's journal floor were removed by the cap.
                let floor: i64 = c
                    .prepare_cached(
                        "SELECT journal_floor FROM wf_instances WHERE instance_id = ?1",
                    )?
                    .query_row([&id], |r| r.get(0))
                    .optional()?
                    .unwrap_or(0);
                let from = to_i64(from_seq).max(floor);
                let mut stmt = c.prepare_cached(
                    "SELECT first_seq, last_seq, entries FROM wf_journal
                     WHERE instance_id = ?1 AND last_seq >= ?2 ORDER BY last_seq",
                )?;
                let mut rows = stmt.query(rusqlite::params![id, from])?;
                // Rows are read one by one, as far as the page needs.
                journal_rows::page(&id, from, limit, || {
                    let Some(row) = rows.next()? else {
                        return Ok(None);
                    };
                    Ok(Some(journal_rows::StoredRow {
                        first_seq: row.get(0)?,
                        last_seq: row.get(1)?,
                        entries: row.get(2)?,
                    }))
                })
            })
        })
    }

    fn enqueue(&self, send: Enqueue) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        self.write(move |c| {
            if let Some(record) = &send.idempotency
                && let Some(existing) = put_idempotency_tx(c, record, send.replace_record)?
            {
                return Ok(Some(existing));
            }
            for item in &send.items {
                enqueue_tx(c, item)?;
            }
            Ok(None)
        })
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        let owner = owner.to_owned();
        self.write(move |c| {
            let mut raw: Vec<EncodedQueueItem> = Vec::new();
            let mut corrupt: Vec<(String, StoreError)> = Vec::new();
            {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT item_id, {QUEUE_COLS} FROM wf_queue
                     WHERE (held = 1 OR expires_at > ?1)
                       AND (claim_owner IS NULL OR claim_expires_at IS NULL
                            OR claim_expires_at <= ?1)
                     ORDER BY sent_at, item_id LIMIT ?2"
                ))?;
                let mut rows = stmt.query(rusqlite::params![now, limit_i64(limit)])?;
                while let Some(row) = rows.next()? {
                    match queue_from_row(row, "queue item")? {
                        Ok(item) => raw.push(item),
                        // ST-22: a row whose columns do not decode fails alone; the rest of
                        // the page is claimed as usual.
                        Err(error) => corrupt.push((row.get::<_, String>(0)?, error)),
                    }
                }
            }
            for (id, error) in &corrupt {
                quarantine_corrupt_queue_row(c, id, error, now)?;
            }
            let mut stmt = c.prepare_cached(
                "UPDATE wf_queue SET claim_owner = ?2, claim_expires_at = ?3 WHERE item_id = ?1",
            )?;
            let mut items = Vec::with_capacity(raw.len());
            for r in raw {
                let id = r.item.item_id.clone();
                let (payload, targets) = (r.payload.clone(), r.targets.clone());
                match r.decode("queue item") {
                    Ok(item) => {
                        stmt.execute(rusqlite::params![id, owner, now.saturating_add(claim_ttl)])?;
                        items.push(item);
                    }
                    // ST-22: an undecodable item fails alone: it becomes a `Rejected` dead
                    // letter naming the error, its raw text kept in a decodable wrapper, so it
                    // neither blocks the queue nor is lost.
                    Err(e) => quarantine_queue_item(c, &id, &payload, &targets, &e, now)?,
                }
            }
            Ok(items)
        })
    }

    fn settle_queue_item(
        &self,
        item_id: &str,
        settlement: Settlement,
    ) -> BoxFuture<'_, StoreResult<Settled>> {
        let id = item_id.to_owned();
        self.write(move |c| settle_tx(c, &id, &settlement))
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        self.write(move |c| {
            let raw = c
                .prepare_cached(&format!(
                    "SELECT original_item_id, {QUEUE_COLS} FROM wf_dead_letters
                     WHERE original_item_id = ?1"
                ))?
                .query_row([&id], |r| queue_from_row(r, "dead letter"))
                .optional()?
                .ok_or_else(|| not_found("dead letter", &id))??;
            let item = raw.decode("dead letter")?.replayed(now, ttl);
            c.prepare_cached("DELETE FROM wf_dead_letters WHERE original_item_id = ?1")?
                .execute([&id])?;
            enqueue_tx(c, &item)?;
            Ok(item)
        })
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        self.read(move |c| {
            let (after_at, after_id) = match &filter.after {
                Some((at, id)) => (Some(*at), Some(id.as_str())),
                None => (None, None),
            };
            let mut stmt = c.prepare_cached(&format!(
                "SELECT original_item_id, {QUEUE_COLS}, reason, error, dead_at FROM wf_dead_letters
                 WHERE (?1 IS NULL OR reason = ?1)
                   AND (?3 IS NULL OR name = ?3)
                   AND (?4 IS NULL OR hash = ?4)
                   AND (?5 IS NULL OR (dead_at, original_item_id) > (?5, ?6))
                 ORDER BY dead_at, original_item_id LIMIT ?2"
            ))?;
            let rows = stmt.query_map(
                rusqlite::params![
                    filter.reason.map(DeadLetterReason::as_str),
                    limit_i64(filter.limit),
                    filter.name,
                    filter.hash,
                    after_at,
                    after_id,
                ],
                |r| {
                    Ok((
                        queue_from_row(r, "dead letter")?,
                        r.get::<_, String>(16)?,
                        r.get::<_, Option<String>>(17)?,
                        r.get::<_, i64>(18)?,
                    ))
                },
            )?;
            let mut letters = Vec::new();
            for row in collect_rows(rows, "dead letter")? {
                let (raw, reason_text, error, dead_at) = row;
                let raw = raw?;
                let item = raw.decode("dead letter")?;
                let reason = DeadLetterReason::decode(&item.item_id, &reason_text)?;
                letters.push(DeadLetter {
                    item,
                    reason,
                    error,
                    dead_at,
                });
            }
            Ok(letters)
        })
    }

    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write(move |c| {
            // Only the columns: the state may be the unreadable part (FLT-9).
            let definition: String = c
                .prepare_cached("SELECT definition_name FROM wf_instances WHERE instance_id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?
                .ok_or_else(|| not_found("instance", &id))?;
            insert_incident_tx(c, &id, &definition, &incident)
        })
    }

    fn list_incidents(
        &self,
        query: IncidentQuery,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        self.read(move |c| {
            let (after_at, after_id) = match &query.after {
                Some((at, id)) => (Some(*at), Some(id.as_str())),
                None => (None, None),
            };
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INCIDENT_COLS} FROM wf_incidents
                 WHERE (?1 IS NULL OR instance_id = ?1)
                   AND (?2 = 0 OR resolved_at IS NULL)
                   AND (?3 IS NULL OR (created_at, incident_id) > (?3, ?4))
                 ORDER BY created_at, incident_id LIMIT ?5"
            ))?;
            incidents_from(
                &mut stmt,
                rusqlite::params![
                    query.instance_id,
                    query.unresolved_only,
                    after_at,
                    after_id,
                    limit_i64(query.limit)
                ],
            )
        })
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        self.read_point(move |c| find_idempotency(c, &key))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        let stats = StoreStats {
            write_requests: self.counters.write_requests.load(Ordering::Relaxed),
            transactions: self.counters.transactions.load(Ordering::Relaxed),
        };
        Box::pin(std::future::ready(Ok(stats)))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::default()
            .with_debounce(self)
            .with_definitions(self)
            .with_child_waits(self)
            .with_remote_hints(self)
            .with_routes(self)
            .with_census(self)
            .with_flow_control(self)
            .with_receipts(self)
            .with_keys(self)
    }
}

impl crate::store::KeyIndex for SqliteStore {
    fn instances_with_key(
        &self,
        key: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        let key = key.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read_point(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT instance_id FROM wf_keys WHERE key = ?1 ORDER BY instance_id LIMIT ?2",
            )?;
            let ids = stmt
                .query_map(rusqlite::params![key, limit], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(ids)
        })
    }
}

impl crate::store::ReceiptIndex for SqliteStore {
    fn consumed_anywhere(&self, stimulus_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let stimulus = stimulus_id.to_owned();
        self.read_point(move |c| {
            Ok(
                c.prepare_cached("SELECT 1 FROM wf_receipts WHERE stimulus_id = ?1 LIMIT 1")?
                    .query_row([&stimulus], |_| Ok(()))
                    .optional()?
                    .is_some(),
            )
        })
    }
}

impl CensusCount for SqliteStore {
    fn census(&self) -> BoxFuture<'_, StoreResult<Census>> {
        self.read(|c| {
            // The index on (definition_name, status) covers it: no row is read.
            let mut stmt = c.prepare_cached(
                "SELECT definition_name, status, COUNT(*) FROM wf_instances
                 GROUP BY definition_name, status ORDER BY definition_name, status",
            )?;
            let groups = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let instances = groups
                .into_iter()
                .map(|(name, status, count)| InstanceCount::decode(name, &status, to_u64(count)))
                .collect::<StoreResult<Vec<_>>>()?;
            let count = |sql: &str| -> StoreResult<u64> {
                let n: i64 = c.prepare_cached(sql)?.query_row([], |r| r.get(0))?;
                Ok(to_u64(n))
            };
            Ok(Census {
                instances,
                queued: Some(count("SELECT COUNT(*) FROM wf_queue")?),
                dead_letters: count("SELECT COUNT(*) FROM wf_dead_letters")?,
            })
        })
    }

    fn version_census(&self) -> BoxFuture<'_, StoreResult<Vec<(String, String, u64)>>> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT definition_name, definition_version, COUNT(*) FROM wf_instances
                 GROUP BY definition_name, definition_version
                 ORDER BY definition_name, definition_version",
            )?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        to_u64(r.get::<_, i64>(2)?),
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }
}

/// A send's routing reads (the trigger rows of its hashes and its first bookmark page) in
/// one read transaction on the calling thread, instead of a transaction per statement.
impl RouteReads for SqliteStore {
    fn find_routes(
        &self,
        hashes: Vec<String>,
        bookmarks: BookmarkQuery,
    ) -> BoxFuture<'_, StoreResult<(Vec<TriggerRow>, Vec<BookmarkRow>)>> {
        self.read_point(move |c| {
            read_snapshot(c, |c| {
                Ok((
                    triggers_by_hashes(c, &hashes)?,
                    bookmarks_by_hash(c, &bookmarks)?,
                ))
            })
        })
    }
}

/// Other processes' commits to the file, heard by the writer (ST-18): every one of them, as
/// `data_version` compares states, it cannot miss one. Only this process claims in the file
/// (one owner per file, ST-26; a dead owner's claims are taken over at open).
impl RemoteHints for SqliteStore {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<WakeUp> {
        self.remote.subscribe()
    }

    fn hears_every_change(&self) -> bool {
        true
    }

    /// `data_version` compares states: no message to lose, and no other process's claim
    /// to lapse.
    fn can_miss_a_crash(&self) -> bool {
        false
    }
}

impl ChildWaitIndex for SqliteStore {
    fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read(move |c| {
            // The name is the literal of the partial index `wf_bookmarks_child_waits`
            // (migration 0007): SQLite uses a partial index only for a query whose WHERE
            // clause names the same constant, never a bound parameter. It is the library's
            // own reserved name (`CHILD_WAIT`), not input.
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {BOOKMARK_COLS} FROM wf_bookmarks INDEXED BY wf_bookmarks_child_waits
                 WHERE name = 'wf.sub_workflow' AND (?1 IS NULL OR bookmark_id > ?1)
                 ORDER BY bookmark_id LIMIT ?2"
            ))?;
            let rows = stmt.query_map(
                rusqlite::params![after, limit_i64(limit)],
                bookmark_from_row,
            )?;
            collect_named(rows, "bookmark")
        })
    }
}

impl DefinitionStore for SqliteStore {
    fn put_definition(&self, definition: DefinitionRecord) -> BoxFuture<'_, StoreResult<bool>> {
        self.write(move |c| {
            Ok(c.prepare_cached(
                "INSERT OR IGNORE INTO wf_definitions (name, version, json, recorded_at)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(rusqlite::params![
                definition.name,
                definition.version,
                definition.json,
                definition.recorded_at
            ])? > 0)
        })
    }

    fn list_definitions(
        &self,
        name: Option<&str>,
    ) -> BoxFuture<'_, StoreResult<Vec<DefinitionRecord>>> {
        let name = name.map(str::to_owned);
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT name, version, json, recorded_at FROM wf_definitions
                 WHERE (?1 IS NULL OR name = ?1) ORDER BY name, recorded_at, version",
            )?;
            let rows = stmt.query_map([&name], |r| {
                Ok(DefinitionRecord {
                    name: r.get(0)?,
                    version: r.get(1)?,
                    json: r.get(2)?,
                    recorded_at: r.get(3)?,
                })
            })?;
            collect_rows(rows, "definition")
        })
    }
}

/// Collects mapped rows; a column of the wrong type is a `Decode` of that kind of row (ST-22),
/// not a transient failure.
fn collect_rows<T>(
    rows: impl Iterator<Item = rusqlite::Result<T>>,
    what: &'static str,
) -> StoreResult<Vec<T>> {
    rows.map(|row| row.map_err(|e| decode_error(what, "?", "row", &e)))
        .collect()
}

/// Bookmark rows by stimulus hash with the query's filters and keyset page (ST-6, C-8).
fn bookmarks_by_hash(c: &Connection, query: &BookmarkQuery) -> StoreResult<Vec<BookmarkRow>> {
    let (after_at, after_id) = match &query.after {
        Some((at, id)) => (Some(*at), Some(id.as_str())),
        None => (None, None),
    };
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {BOOKMARK_COLS} FROM wf_bookmarks
         WHERE hash = ?1
           AND (?2 IS NULL OR instance_id = ?2)
           AND (?3 IS NULL OR correlation_id = ?3)
           AND (?4 IS NULL OR bookmark_id = ?4)
           AND (?5 IS NULL OR (created_at, bookmark_id) > (?5, ?6))
         ORDER BY created_at, bookmark_id LIMIT ?7"
    ))?;
    let rows = stmt.query_map(
        rusqlite::params![
            query.hash,
            query.instance_id,
            query.correlation_id,
            query.bookmark_id,
            after_at,
            after_id,
            limit_i64(query.limit),
        ],
        bookmark_from_row,
    )?;
    collect_named(rows, "bookmark")
}

/// Trigger rows with any of `hashes`, by `(definition_name, node_id, hash)`.
fn triggers_by_hashes(c: &Connection, hashes: &[String]) -> StoreResult<Vec<TriggerRow>> {
    let mut found = Vec::new();
    for hash in hashes {
        found.extend(select_triggers(
            c,
            "WHERE hash = ?1",
            rusqlite::params![hash],
        )?);
    }
    found.sort_by(|a, b| {
        (&a.definition_name, &a.node_id, &a.hash).cmp(&(&b.definition_name, &b.node_id, &b.hash))
    });
    found.dedup_by(|a, b| {
        a.definition_name == b.definition_name && a.node_id == b.node_id && a.hash == b.hash
    });
    Ok(found)
}

/// Runs `f`'s statements in one read transaction: one snapshot, one shared-memory lock taken
/// and released, and the pages read by one statement still cached for the next (SQLite
/// empties a connection's page cache when it begins a read transaction after another
/// connection committed, so statements run one transaction each read every page again).
fn read_snapshot<T>(
    c: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let exec = |sql: &str| c.prepare_cached(sql).and_then(|mut s| s.raw_execute());
    exec("BEGIN")?;
    let result = f(c);
    // A read transaction holds no change: ending it loses nothing. It must end, though, or
    // the connection would keep this snapshot for every later read.
    let mut end = exec("COMMIT").map(drop);
    if !c.is_autocommit() {
        end = exec("ROLLBACK").map(drop);
    }
    let value = result?;
    end?;
    Ok(value)
}

/// Collects rows whose mapper names the row in its own `Decode` (ST-22).
fn collect_named<T>(
    rows: impl Iterator<Item = rusqlite::Result<StoreResult<T>>>,
    what: &'static str,
) -> StoreResult<Vec<T>> {
    rows.map(|row| row.map_err(|e| decode_error(what, "?", "row", &e))?)
        .collect()
}

/// Writes an idempotency record unless its key has one, which is returned instead
/// (`replace`: replacing it).
fn put_idempotency_tx(
    c: &Connection,
    record: &IdempotencyRecord,
    replace: bool,
) -> StoreResult<Option<IdempotencyRecord>> {
    if !replace && let Some(existing) = find_idempotency(c, &record.key)? {
        return Ok(Some(existing));
    }
    c.prepare_cached(
        "INSERT INTO wf_idempotency (idempotency_key, hash, payload_digest, report, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (idempotency_key) DO UPDATE SET hash = excluded.hash,
            payload_digest = excluded.payload_digest, report = excluded.report,
            created_at = excluded.created_at",
    )?
    .execute(rusqlite::params![
        record.key,
        record.hash,
        record.payload_digest,
        json_text(&record.report)?,
        record.created_at
    ])?;
    Ok(None)
}

fn find_idempotency(c: &Connection, key: &str) -> StoreResult<Option<IdempotencyRecord>> {
    let row: Option<(String, String, String, i64)> = c
        .prepare_cached(
            "SELECT hash, payload_digest, report, created_at FROM wf_idempotency
             WHERE idempotency_key = ?1",
        )?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    row.map(|(hash, payload_digest, report, created_at)| {
        Ok(IdempotencyRecord {
            key: key.to_owned(),
            hash,
            payload_digest,
            report: decode_json("idempotency record", key, "report", &report)?,
            created_at,
        })
    })
    .transpose()
}

fn select_triggers(
    c: &Connection,
    filter: &str,
    params: &[&dyn rusqlite::ToSql],
) -> StoreResult<Vec<TriggerRow>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT definition_name, node_id, hash, definition_version, name, key_display, payload,
                activation, registered_at
         FROM wf_triggers {filter} ORDER BY definition_name, node_id, hash"
    ))?;
    let rows = stmt.query_map(params, |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
            r.get::<_, i64>(8)?,
        ))
    })?;
    let mut found = Vec::new();
    for row in rows {
        let (
            definition_name,
            node_id,
            hash,
            definition_version,
            name,
            key_display,
            payload,
            activation,
            registered_at,
        ) = row?;
        let id = format!("{definition_name}/{node_id}/{hash}");
        found.push(TriggerRow {
            payload: decode_json("trigger", &id, "payload", &payload)?,
            activation: decode_json("trigger", &id, "activation", &activation)?,
            definition_name,
            definition_version,
            node_id,
            hash,
            name,
            key_display,
            registered_at,
        });
    }
    Ok(found)
}

impl crate::store::backend::DebounceStore for SqliteStore {
    fn put_debounce(
        &self,
        row: crate::store::rows::DebounceRow,
    ) -> BoxFuture<'_, StoreResult<crate::store::rows::DebounceRow>> {
        self.write(move |c| super::debounce::put(c, &row))
    }

    fn claim_due_debounces(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<crate::store::backend::DueDebounces>> {
        if limit == 0 {
            // Nothing to claim: a read, off the writer.
            return self.read(move |c| super::debounce::next_due(c, now));
        }
        let owner = owner.to_owned();
        self.write(move |c| super::debounce::claim(c, &owner, now, claim_ttl, limit))
    }

    fn finish_debounce(
        &self,
        debounce_id: &str,
        burst_id: &str,
        sends: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (debounce_id, burst_id) = (debounce_id.to_owned(), burst_id.to_owned());
        self.write(move |c| super::debounce::finish(c, &debounce_id, &burst_id, sends))
    }
}
