//! The SQL of the PostgreSQL store: one small function per operation, each running on a
//! connection inside the transaction its caller opened (every statement parameterized).

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::schema::Schema;
use crate::base::Micros;
use crate::store::backend::CHILD_WAIT;
use crate::store::backend::{
    ClaimedRecord, DamagedTimer, DefinitionRecord, IncidentQuery, LATEST_DUE, LeaseClaim, LeaseKey,
    Settled, Settlement, TriggerWrite,
};
use crate::store::convert::{decode_json, json_text, limit_i64, not_found, to_i64, to_u64};
use crate::store::error::{StoreError, StoreResult};
use crate::store::journal_rows;
use crate::store::rows::{
    BookmarkQuery, BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter,
    DeadLetterFilter, DeadLetterReason, EncodedQueueItem, IdempotencyRecord, IncidentRecord,
    InstanceCount, InstanceFilter, InstanceRecord, InstanceStatus, InstanceSubStatus,
    InstanceSummary, JournalRecord, Lease, LeaseState, ListedInstance, NewIncident, NewInstance,
    QueueItem, Renewal, Schedule, ScheduleFiring, TimerRow, TriggerRow, decode_control_request,
    decode_instance_status, decode_instance_text_columns,
};

pub(super) type Conn = PgConnection;

fn instance_resource(id: &str) -> String {
    LeaseKey::instance(id).resource()
}

fn named_resource(name: &str) -> String {
    LeaseKey::named(name).resource()
}

/// Whether a database error is a unique violation (SQLSTATE 23505).
fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(sqlx::error::DatabaseError::code)
        .is_some_and(|code| code == "23505")
}

// ----- row decoding -----

const INSTANCE_COLS: &str = "instance_id, definition_name, definition_version, status, \
    sub_status, correlation_id, version, lease_owner, lease_token, lease_expires_at, \
    control_request, origin_at, created_at, updated_at, finished_at, listing, state";

/// Decodes one instance row with its state text (column 16), left encoded.
fn instance_from_row(id: &str, row: &PgRow) -> StoreResult<InstanceRecord<String>> {
    let summary = summary_from_row(id, row)?;
    let state: String = row.try_get(16).map_err(|e| StoreError::Decode {
        what: "instance",
        id: id.to_owned(),
        path: "state".to_owned(),
        message: e.to_string(),
    })?;
    Ok(summary.with_state(state))
}

/// Decodes one instance row's columns; any failure is a `Decode` naming the instance and
/// the column (ST-22).
fn summary_from_row(id: &str, row: &PgRow) -> StoreResult<InstanceSummary> {
    let c = Cols::named(row, "instance", id.to_owned());
    let (status, sub_status, control_request) =
        decode_instance_text_columns(id, c.get(3)?, c.get(4)?, c.get(10)?)?;
    Ok(InstanceRecord {
        instance_id: id.to_owned(),
        definition_name: c.get(1)?,
        definition_version: c.get(2)?,
        correlation_id: c.get(5)?,
        version: to_u64(c.get(6)?),
        lease: LeaseState::from_columns(c.get(7)?, to_u64(c.get(8)?), c.get(9)?),
        origin_at: c.get(11)?,
        created_at: c.get(12)?,
        updated_at: c.get(13)?,
        finished_at: c.get(14)?,
        listing: c.get(15)?,
        status,
        sub_status,
        control_request,
        state: (),
    })
}

/// Reads the columns of one row; a column of the wrong type is a `Decode` naming the row (its
/// kind, its id, and its instance when it has one) and the column (ST-22), as the SQLite
/// backend does, not a transient failure.
struct Cols<'r> {
    row: &'r PgRow,
    what: &'static str,
    id: String,
}

impl<'r> Cols<'r> {
    /// `id` is the column of the row's id, `instance` that of its instance, if any.
    fn new(row: &'r PgRow, what: &'static str, id: usize, instance: Option<usize>) -> Self {
        let mut name = rendered(row, id);
        if let Some(instance) =
            instance.and_then(|i| row.try_get::<Option<String>, _>(i).ok().flatten())
        {
            name = format!("{name} (instance {instance})");
        }
        Self::named(row, what, name)
    }

    /// A row whose name is known already.
    fn named(row: &'r PgRow, what: &'static str, id: String) -> Self {
        Self { row, what, id }
    }

    fn get<T>(&self, idx: usize) -> StoreResult<T>
    where
        T: for<'a> sqlx::Decode<'a, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        self.row
            .try_get(idx)
            .map_err(|e| match StoreError::from(e) {
                StoreError::Decode { message, .. } => StoreError::Decode {
                    what: self.what,
                    id: self.id.clone(),
                    path: self
                        .row
                        .columns()
                        .get(idx)
                        .map_or_else(|| idx.to_string(), |c| sqlx::Column::name(c).to_owned()),
                    message,
                },
                other => other,
            })
    }
}

/// A text column's value, to name a row whose other columns do not decode (`?` when it is
/// not text either).
fn rendered(row: &PgRow, idx: usize) -> String {
    row.try_get::<Option<String>, _>(idx)
        .ok()
        .flatten()
        .unwrap_or_else(|| "?".to_owned())
}

const BOOKMARK_COLS: &str = "bookmark_id, instance_id, hash, name, node_id, context_id, \
    correlation_id, definition_name, definition_version, look_back, created_at";

fn bookmark_from_row(row: &PgRow) -> StoreResult<BookmarkRow> {
    bookmark_from_row_at(row, 0)
}

/// Reads `BOOKMARK_COLS` starting at column `at`.
fn bookmark_from_row_at(row: &PgRow, at: usize) -> StoreResult<BookmarkRow> {
    let c = Cols::new(row, "bookmark", at, Some(at + 1));
    Ok(BookmarkRow {
        bookmark_id: c.get(at)?,
        instance_id: c.get(at + 1)?,
        hash: c.get(at + 2)?,
        name: c.get(at + 3)?,
        node_id: c.get(at + 4)?,
        context_id: to_u64(c.get(at + 5)?),
        correlation_id: c.get(at + 6)?,
        definition_name: c.get(at + 7)?,
        definition_version: c.get(at + 8)?,
        look_back: c.get(at + 9)?,
        created_at: c.get(at + 10)?,
    })
}

const TIMER_COLS: &str = "timer_id, instance_id, kind, due_at, parked, definition_name, node_id";

fn timer_from_row(row: &PgRow) -> StoreResult<TimerRow> {
    let c = Cols::new(row, "timer", 0, Some(1));
    Ok(TimerRow {
        timer_id: c.get(0)?,
        instance_id: c.get(1)?,
        kind: c.get(2)?,
        due_at: c.get(3)?,
        parked: c.get(4)?,
        definition_name: c.get(5)?,
        node_id: c.get(6)?,
    })
}

/// The queue columns after the id, shared by `wf_queue` and `wf_dead_letters`.
const QUEUE_COLS: &str = "stimulus_id, name, hash, key_display, payload, correlation_id, \
    targets, sent_at, enqueued_at, expires_at, attempts, last_error, last_attempt_at, held, \
    idempotency_key";

/// Reads `id, QUEUE_COLS...` starting at column 0; `what` names the row in errors.
fn queue_from_row(row: &PgRow, what: &'static str) -> StoreResult<EncodedQueueItem> {
    let c = Cols::new(row, what, 0, None);
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
            held: c.get(14)?,
            idempotency_key: c.get(15)?,
        },
        payload: c.get(5)?,
        targets: c.get(7)?,
    })
}

// ----- instances -----

pub(super) async fn load_instance(
    c: &mut Conn,
    s: &Schema,
    id: &str,
) -> StoreResult<InstanceRecord<String>> {
    let row = sqlx::query(&s.sql(&format!(
        "SELECT {INSTANCE_COLS} FROM @wf_instances WHERE instance_id = $1"
    )))
    .bind(id)
    .fetch_optional(&mut *c)
    .await?;
    match row {
        Some(row) => instance_from_row(id, &row),
        None => Err(not_found("instance", id)),
    }
}

/// Inserts a new instance at version 1 with its receipt and consumed queue item (ST-17). The
/// activation check runs under a transaction-scoped advisory lock on the scope, which
/// serialises it with every other creation in that scope across processes (ST-27).
pub(super) async fn insert_instance(
    c: &mut Conn,
    s: &Schema,
    i: &NewInstance<String>,
) -> StoreResult<()> {
    let state = i.state.as_str();
    if let Some(scope) = &i.activation_scope {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("workflow-activation:{}:{scope}", s.name()))
            .execute(&mut *c)
            .await?;
        let existing: Option<String> = sqlx::query_scalar(&s.sql(
            "SELECT instance_id FROM @wf_instances
             WHERE activation_scope = $1 AND status NOT IN ('finished', 'cancelled')
             LIMIT 1",
        ))
        .bind(scope)
        .fetch_optional(&mut *c)
        .await?;
        if let Some(existing) = existing {
            return Err(StoreError::ActivationConflict {
                scope: scope.clone(),
                existing,
            });
        }
    }
    let inserted = sqlx::query(&s.sql(
        "INSERT INTO @wf_instances (instance_id, definition_name, definition_version,
            status, sub_status, correlation_id, version, lease_token, origin_at,
            created_at, updated_at, finished_at, state, state_size, activation_scope, listing)
         VALUES ($1, $2, $3, $4, $5, $6, 1, 0, $7, $8, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (instance_id) DO NOTHING",
    ))
    .bind(&i.instance_id)
    .bind(&i.definition_name)
    .bind(&i.definition_version)
    .bind(i.status.as_str())
    .bind(i.sub_status.map(InstanceSubStatus::as_str))
    .bind(&i.correlation_id)
    .bind(i.origin_at)
    .bind(i.created_at)
    .bind(i.status.is_final().then_some(i.created_at))
    .bind(state)
    .bind(limit_i64(state.len()))
    .bind(&i.activation_scope)
    .bind(&i.listing)
    .execute(&mut *c)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(StoreError::AlreadyExists {
            what: "instance",
            id: i.instance_id.clone(),
        });
    }
    if let Some(stimulus) = &i.receipt {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_receipts (instance_id, stimulus_id, at) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
        ))
        .bind(&i.instance_id)
        .bind(stimulus)
        .bind(i.created_at)
        .execute(&mut *c)
        .await?;
    }
    if let Some(item) = &i.consumed_queue_item {
        sqlx::query(&s.sql("DELETE FROM @wf_queue WHERE item_id = $1"))
            .bind(item)
            .execute(&mut *c)
            .await?;
    }
    if let Some(record) = &i.idempotency {
        // The first writer's record stays (RT-19).
        put_idempotency_record(c, s, record, false).await?;
    }
    Ok(())
}

/// Applies a commit (ST-16) in one call of the schema's commit function (migration 3),
/// which locks the instance row first (`FOR UPDATE`), so the version and token checks and
/// every write see the one current row: a concurrent commit waits, then finds the new
/// version and reports `Conflict`; a commit under a superseded token reports `Fenced`
/// (ST-27). The rows a run writes on every transition (receipts, bookmarks, timers,
/// journal, queue acknowledgements, the instance) go to the function as arrays, so a
/// transition's commit is one round trip. What only some commits carry (instances created,
/// queue items, incidents opened, an idempotency record) follows in the same transaction
/// (`c` is then a transaction: see [`commit_needs_transaction`]). Any failure rolls the
/// whole transaction back.
///
/// `nonce` is the nonce of the lease claim the commit's token comes from, `None` for a lease
/// taken by a durable claim (see [`claim_instance`]). Returns the new version and whether
/// the queue may hold items (see [`Committed`]).
pub(super) async fn commit(
    c: &mut Conn,
    s: &Schema,
    commit: &Commit<String>,
    nonce: Option<i64>,
    keep_until: Option<Micros>,
) -> StoreResult<Committed> {
    let id = commit.instance_id.as_str();
    let state = commit.state.as_str();
    let added = &commit.bookmarks_added;
    let timers = &commit.timers_added;
    let journal = &commit.journal;
    let compaction = commit.journal_compaction.as_ref();
    let summary_text = compaction
        .map(|c| journal_rows::encode(std::slice::from_ref(&c.summary)))
        .transpose()?;
    let journal_text = (!journal.is_empty())
        .then(|| journal_rows::encode(journal))
        .transpose()?;
    let mut control_targets = Vec::with_capacity(commit.control_requests.len());
    let mut control_texts = Vec::with_capacity(commit.control_requests.len());
    for (target, request) in &commit.control_requests {
        control_targets.push(target.as_str());
        control_texts.push(serde_json::to_string(request).map_err(StoreError::unavailable)?);
    }
    let (resolved_ids, resolutions): (Vec<&str>, Vec<&str>) = commit
        .incidents_resolved
        .iter()
        .map(|(id, resolution)| (id.as_str(), resolution.as_str()))
        .unzip();
    // Whether the queue holds items, asked only of a commit adding bookmarks; read in the
    // statement's snapshot, so an item the commit consumes still counts (a hint too many).
    let queue = if added.is_empty() {
        "FALSE"
    } else {
        "EXISTS (SELECT 1 FROM @wf_queue)"
    };
    let row = sqlx::query(&s.sql(&format!(
        "SELECT new_version, definition, {queue}, kept FROM @wf_commit($1, $2, $3, $4, $5, $6,
            $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23,
            $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39)",
    )))
    .bind(id)
    .bind(to_i64(commit.expected_version))
    .bind(to_i64(commit.lease_token))
    .bind(nonce)
    .bind(commit.now)
    .bind(state)
    .bind(commit.status.as_str())
    .bind(commit.sub_status.map(InstanceSubStatus::as_str))
    .bind(&commit.correlation_id)
    .bind(commit.status.is_final().then_some(commit.now))
    .bind(commit.clear_control_request)
    .bind(commit.release_lease)
    .bind(keep_until)
    .bind(&commit.receipts)
    .bind(&commit.bookmarks_removed)
    .bind(
        added
            .iter()
            .map(|b| b.bookmark_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(added.iter().map(|b| b.hash.as_str()).collect::<Vec<_>>())
    .bind(added.iter().map(|b| b.name.as_str()).collect::<Vec<_>>())
    .bind(added.iter().map(|b| b.node_id.as_str()).collect::<Vec<_>>())
    .bind(
        added
            .iter()
            .map(|b| to_i64(b.context_id))
            .collect::<Vec<_>>(),
    )
    .bind(added.iter().map(|b| b.look_back).collect::<Vec<_>>())
    .bind(added.iter().map(|b| b.created_at).collect::<Vec<_>>())
    .bind(&commit.timers_removed)
    .bind(
        timers
            .iter()
            .map(|t| t.timer_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(timers.iter().map(|t| t.kind.as_str()).collect::<Vec<_>>())
    .bind(timers.iter().map(|t| t.due_at).collect::<Vec<_>>())
    .bind(commit.timers_parked)
    .bind(commit.clear_waits)
    .bind(compaction.map(|c| to_i64(c.through_seq)))
    .bind(summary_text)
    .bind(i64::try_from(journal.len()).unwrap_or(i64::MAX))
    .bind(journal_text)
    .bind(commit.max_journal_entries.map(to_i64))
    .bind(&commit.consumed_queue_items)
    .bind(control_targets)
    .bind(control_texts)
    .bind(resolved_ids)
    .bind(resolutions)
    .bind(&commit.listing)
    .fetch_one(&mut *c)
    .await
    .map_err(|e| commit_error(commit, e))?;
    let version = to_u64(row.try_get(0)?);
    let definition_name: String = row.try_get(1)?;
    let queue_waiting: bool = row.try_get(2)?;
    let kept: bool = row.try_get(3)?;
    // ENG-54: a migration re-pins the instance and its bookmark rows (those the function
    // just added included), in this transaction, after the function's version and token
    // checks.
    if let Some(repinned) = &commit.definition_version {
        sqlx::query(
            &s.sql("UPDATE @wf_instances SET definition_version = $1 WHERE instance_id = $2"),
        )
        .bind(repinned)
        .bind(id)
        .execute(&mut *c)
        .await?;
        sqlx::query(
            &s.sql("UPDATE @wf_bookmarks SET definition_version = $1 WHERE instance_id = $2"),
        )
        .bind(repinned)
        .bind(id)
        .execute(&mut *c)
        .await?;
    }
    // RT-36: the keys the instance's waits carry first, after the function's version and
    // token checks, in this transaction (rows already indexed are kept).
    if !commit.keys_added.is_empty() {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_keys (key, instance_id) SELECT unnest($1::text[]), $2
             ON CONFLICT DO NOTHING",
        ))
        .bind(&commit.keys_added)
        .bind(id)
        .execute(&mut *c)
        .await?;
    }
    for instance in &commit.instances_created {
        insert_instance(c, s, instance).await?;
    }
    for item in &commit.queue_items {
        enqueue(c, s, item).await?;
    }
    for opened in &commit.incidents_opened {
        insert_incident_row(c, s, id, &definition_name, opened).await?;
    }
    if let Some(record) = &commit.idempotency {
        // The first writer's record stays (RT-19).
        put_idempotency_record(c, s, record, false).await?;
    }
    Ok(Committed {
        version,
        queue_waiting: queue_waiting || !commit.queue_items.is_empty(),
        kept,
    })
}

/// What a commit answered.
pub(super) struct Committed {
    /// The instance's new version.
    pub(super) version: u64,
    /// Whether the queue may hold items after the commit (asked only of a commit that added
    /// bookmarks): without any, its `QueueChanged` hint can wake no other process's queue
    /// worker to anything, so they are not sent it.
    pub(super) queue_waiting: bool,
    /// Whether the lease the commit was asked to keep (`keep_until`) stays with its holder
    /// (ST-38): no other process marked it wanted.
    pub(super) kept: bool,
}

/// Whether a commit writes more than the commit function does, so its statements must run
/// in one explicit transaction; a commit without them is the function's call alone, one
/// round trip in its own implicit transaction.
pub(super) fn commit_needs_transaction(commit: &Commit<String>) -> bool {
    !commit.instances_created.is_empty()
        || commit.definition_version.is_some()
        || !commit.queue_items.is_empty()
        || !commit.incidents_opened.is_empty()
        || commit.idempotency.is_some()
        || !commit.keys_added.is_empty()
}

/// The typed error of a commit the function refused (its `WF` SQL states), else the
/// driver's error as is.
fn commit_error(commit: &Commit<String>, error: sqlx::Error) -> StoreError {
    let id = commit.instance_id.as_str();
    let Some(db) = error.as_database_error() else {
        return error.into();
    };
    let message = db.message().to_owned();
    let number = || message.parse::<u64>().unwrap_or(0);
    match db.code().as_deref() {
        Some("WFNF0") => not_found("instance", id),
        Some("WFCF0") => StoreError::Conflict {
            instance: id.to_owned(),
            expected: commit.expected_version,
            actual: number(),
        },
        Some("WFFN0") => StoreError::Fenced {
            resource: instance_resource(id),
            token: commit.lease_token,
            current: number(),
        },
        Some("WFRX0") => StoreError::ReceiptExists {
            instance: id.to_owned(),
            stimulus_id: message,
        },
        Some("WFBK0") => StoreError::AlreadyExists {
            what: "bookmark",
            id: message,
        },
        Some("WFTM0") => StoreError::AlreadyExists {
            what: "timer",
            id: message,
        },
        _ => error.into(),
    }
}

pub(super) async fn request_control(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    request: &ControlRequest,
) -> StoreResult<InstanceStatus> {
    let status = instance_status(c, s, id).await?;
    if !status.is_final() {
        let text = serde_json::to_string(request).map_err(StoreError::unavailable)?;
        // ST-38: a lease kept by its holder is wanted for the request.
        sqlx::query(&s.sql(
            "UPDATE @wf_instances SET control_request = $1,
                lease_wanted = lease_wanted OR lease_owner IS NOT NULL
             WHERE instance_id = $2",
        ))
        .bind(text)
        .bind(id)
        .execute(&mut *c)
        .await?;
    }
    Ok(status)
}

pub(super) async fn list_instances(
    c: &mut Conn,
    s: &Schema,
    filter: &InstanceFilter,
) -> StoreResult<Vec<ListedInstance>> {
    let columns = INSTANCE_COLS.trim_end_matches(", state");
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT {columns} FROM @wf_instances
         WHERE ($1::text IS NULL OR status = $1)
           AND ($2::text IS NULL OR definition_name = $2)
           AND ($3::text IS NULL OR correlation_id = $3)
           AND ($4::text IS NULL OR instance_id > $4)
           AND (NOT $6 OR control_request IS NOT NULL)
           AND (NOT $7 OR status NOT IN ('finished', 'cancelled'))
         ORDER BY instance_id LIMIT $5"
    )))
    .bind(filter.status.map(InstanceStatus::as_str))
    .bind(&filter.definition_name)
    .bind(&filter.correlation_id)
    .bind(&filter.after)
    .bind(limit_i64(filter.limit))
    .bind(filter.control_requested)
    .bind(filter.live_only)
    .fetch_all(&mut *c)
    .await?;
    let mut listed = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: String = row.try_get(0)?;
        let summary = summary_from_row(&id, row);
        listed.push(ListedInstance {
            instance_id: id,
            summary,
        });
    }
    Ok(listed)
}

/// Claims runnable instances with `FOR UPDATE SKIP LOCKED` (ST-15, ST-27): rows another
/// process is claiming or committing are skipped, not waited for, and each claimed row gets
/// a new fencing token in the same statement. `runnable_at` is `updated_at` of a running
/// instance and `NULL` otherwise (migration 6), so the index it keys orders the claims
/// oldest `updated_at` first without a commit of a waiting instance touching it.
pub(super) async fn claim_runnable(
    c: &mut Conn,
    s: &Schema,
    owner: &str,
    now: Micros,
    ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<ClaimedInstance>> {
    let rows = sqlx::query(&s.sql(
        "WITH picked AS (
            SELECT instance_id FROM @wf_instances
            WHERE runnable_at IS NOT NULL
              AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $1)
            ORDER BY runnable_at, instance_id LIMIT $2
            FOR UPDATE SKIP LOCKED)
         UPDATE @wf_instances i SET lease_token = i.lease_token + 1, lease_owner = $3,
            lease_expires_at = $4, lease_nonce = NULL
         FROM picked WHERE i.instance_id = picked.instance_id
         RETURNING i.instance_id, i.sub_status, i.lease_token, i.updated_at",
    ))
    .bind(now)
    .bind(limit_i64(limit))
    .bind(owner)
    .bind(now.saturating_add(ttl))
    .fetch_all(&mut *c)
    .await?;
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let sub_status: Option<String> = row.try_get(1)?;
        let updated_at: Micros = row.try_get(3)?;
        claimed.push((
            updated_at,
            ClaimedInstance {
                instance_id: row.try_get(0)?,
                sub_status: sub_status.as_deref().and_then(InstanceSubStatus::parse),
                lease: Lease {
                    token: to_u64(row.try_get(2)?),
                    expires_at: now.saturating_add(ttl),
                },
            },
        ));
    }
    claimed.sort_by(|a, b| (a.0, &a.1.instance_id).cmp(&(b.0, &b.1.instance_id)));
    Ok(claimed.into_iter().map(|(_, c)| c).collect())
}

pub(super) async fn instance_status(
    c: &mut Conn,
    s: &Schema,
    id: &str,
) -> StoreResult<InstanceStatus> {
    let status: Option<String> = sqlx::query_scalar(
        &s.sql("SELECT status FROM @wf_instances WHERE instance_id = $1 FOR UPDATE"),
    )
    .bind(id)
    .fetch_optional(&mut *c)
    .await?;
    let status = status.ok_or_else(|| not_found("instance", id))?;
    decode_instance_status(id, &status)
}

/// Deletes an instance and its dependent rows.
pub(super) async fn delete_dependents(c: &mut Conn, s: &Schema, ids: &[String]) -> StoreResult<()> {
    for table in [
        "@wf_bookmarks",
        "@wf_timers",
        "@wf_journal",
        "@wf_receipts",
        "@wf_incidents",
        "@wf_keys",
        "@wf_instances",
    ] {
        sqlx::query(&s.sql(&format!("DELETE FROM {table} WHERE instance_id = ANY($1)")))
            .bind(ids)
            .execute(&mut *c)
            .await?;
    }
    Ok(())
}

/// One purge batch: final instances finished before the cut-off (ST-31); rows locked by
/// another purger are skipped.
pub(super) async fn purge_batch(
    c: &mut Conn,
    s: &Schema,
    statuses: &[&str],
    cut_off: Micros,
    definition: Option<&str>,
    batch: usize,
) -> StoreResult<usize> {
    let ids: Vec<String> = sqlx::query_scalar(&s.sql(
        "SELECT instance_id FROM @wf_instances
         WHERE status = ANY($1) AND finished_at < $2
           AND ($3::text IS NULL OR definition_name = $3)
         LIMIT $4 FOR UPDATE SKIP LOCKED",
    ))
    .bind(statuses)
    .bind(cut_off)
    .bind(definition)
    .bind(limit_i64(batch))
    .fetch_all(&mut *c)
    .await?;
    delete_dependents(c, s, &ids).await?;
    Ok(ids.len())
}

// ----- leases -----

/// Acquires an instance lease in one statement: the `WHERE` re-checks that no live lease is
/// held once the row is locked, so two processes can never both get it (ST-14).
pub(super) async fn acquire_lease(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    owner: &str,
    now: Micros,
    ttl: Micros,
) -> StoreResult<Lease> {
    let expires_at = now.saturating_add(ttl);
    let token: Option<i64> = sqlx::query_scalar(&s.sql(
        "UPDATE @wf_instances SET lease_token = lease_token + 1, lease_owner = $2,
            lease_expires_at = $3, lease_nonce = NULL, lease_wanted = FALSE
         WHERE instance_id = $1
           AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $4)
         RETURNING lease_token",
    ))
    .bind(id)
    .bind(owner)
    .bind(expires_at)
    .bind(now)
    .fetch_optional(&mut *c)
    .await?;
    if let Some(token) = token {
        return Ok(Lease {
            token: to_u64(token),
            expires_at,
        });
    }
    let (holder, until, _) = mark_wanted(c, s, id, owner, now).await?;
    Err(StoreError::LeaseHeld {
        resource: instance_resource(id),
        holder,
        until,
    })
}

/// The holder, expiry and token of an instance's lease, read after a claim by `owner` found
/// it held; a live lease of another owner is marked wanted (`lease_wanted`, ST-38) in the
/// same statement, so its holder gives it back at its next commit (and the store notifies
/// the holder: see the callers).
async fn mark_wanted(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    owner: &str,
    now: Micros,
) -> StoreResult<(String, Micros, u64)> {
    let row = sqlx::query(&s.sql(
        "UPDATE @wf_instances SET lease_wanted = lease_wanted
            OR (lease_owner IS NOT NULL AND lease_owner <> $2 AND lease_expires_at > $3)
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed(s)
         WHERE instance_id = $1
         RETURNING lease_owner, lease_expires_at, lease_token",
    ))
    .bind(id)
    .bind(owner)
    .bind(now)
    .fetch_optional(&mut *c)
    .await?
    .ok_or_else(|| not_found("instance", id))?;
    Ok((
        row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
        row.try_get::<Option<Micros>, _>(1)?.unwrap_or_default(),
        to_u64(row.try_get(2)?),
    ))
}

/// Takes (or, with `token`, refreshes) an instance's lease and reads the instance in one
/// statement (ST-14): an `UPDATE .. RETURNING` of the instance row, state included, so a
/// run's claim is one round trip in its own implicit transaction. The `WHERE` re-checks the
/// lease once the row is locked, so two processes can never both get it. Only when nothing
/// was updated does a second read tell `NotFound` from `LeaseHeld` (or `Fenced`).
///
/// The claim's transaction commits without waiting for its WAL flush
/// (`synchronous_commit = off` for it alone, ST-35): the commit under its token, which
/// does wait, flushes the WAL past it, so a durable commit implies a durable claim, and a
/// claim lost to a server crash has no durable commit. Such a lost claim's token may be
/// issued again after the restart, so a new claim writes `nonce`, random, which the commits
/// and renewals under the lease must name, and takes a token above `known_token`, the
/// highest this store was given for the instance (so it is never given one twice); a refresh
/// (`claim.token`) names the lease's nonce in `nonce` (`None` for a lease taken by a durable
/// claim).
pub(super) async fn claim_instance(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    claim: &LeaseClaim,
    nonce: Option<i64>,
    known_token: u64,
) -> StoreResult<ClaimedRecord<String>> {
    let expires_at = claim.now.saturating_add(claim.ttl);
    let row = match claim.token {
        None => {
            sqlx::query(&s.sql(&format!(
                "UPDATE @wf_instances SET lease_token = GREATEST(lease_token, $6) + 1,
                    lease_owner = $2, lease_expires_at = $3, lease_nonce = $5,
                    lease_wanted = FALSE
                 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed(s)
                 WHERE instance_id = $1
                   AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $4)
                 RETURNING {INSTANCE_COLS}"
            )))
            .bind(id)
            .bind(&claim.owner)
            .bind(expires_at)
            .bind(claim.now)
            .bind(nonce)
            .bind(to_i64(known_token))
            .fetch_optional(&mut *c)
            .await?
        }
        Some(token) => {
            sqlx::query(&s.sql(&format!(
                "UPDATE @wf_instances SET lease_expires_at = $2
                 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed(s)
                 WHERE instance_id = $1 AND lease_owner IS NOT NULL AND lease_token = $3
                   AND lease_nonce IS NOT DISTINCT FROM $4
                 RETURNING {INSTANCE_COLS}"
            )))
            .bind(id)
            .bind(expires_at)
            .bind(to_i64(token))
            .bind(nonce)
            .fetch_optional(&mut *c)
            .await?
        }
    };
    if let Some(row) = row {
        let record = instance_from_row(id, &row)?;
        let token: i64 = row.try_get(8)?;
        return Ok(ClaimedRecord {
            lease: Lease {
                token: to_u64(token),
                expires_at,
            },
            record,
        });
    }
    if let Some(token) = claim.token {
        let current: i64 = sqlx::query_scalar(
            &s.sql("SELECT lease_token FROM @wf_instances WHERE instance_id = $1"),
        )
        .bind(id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or_else(|| not_found("instance", id))?;
        return Err(StoreError::Fenced {
            resource: instance_resource(id),
            token,
            current: to_u64(current),
        });
    }
    let (holder, until, _) = mark_wanted(c, s, id, &claim.owner, claim.now).await?;
    Err(StoreError::LeaseHeld {
        resource: instance_resource(id),
        holder,
        until,
    })
}

/// Checks that `token` (with the claim's `nonce`, see [`claim_instance`]) is the current,
/// held token of an instance lease, locking the row.
async fn check_instance_token(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    token: u64,
    nonce: Option<i64>,
) -> StoreResult<()> {
    let row = sqlx::query(&s.sql(
        "SELECT lease_owner, lease_token, lease_nonce FROM @wf_instances
         WHERE instance_id = $1 FOR UPDATE",
    ))
    .bind(id)
    .fetch_optional(&mut *c)
    .await?
    .ok_or_else(|| not_found("instance", id))?;
    let owner: Option<String> = row.try_get(0)?;
    let current = to_u64(row.try_get(1)?);
    let held: Option<i64> = row.try_get(2)?;
    if owner.is_none() || current != token || held != nonce {
        return Err(StoreError::Fenced {
            resource: instance_resource(id),
            token,
            current,
        });
    }
    Ok(())
}

pub(super) async fn renew_lease(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    token: u64,
    now: Micros,
    ttl: Micros,
    nonce: Option<i64>,
) -> StoreResult<Renewal> {
    check_instance_token(c, s, id, token, nonce).await?;
    let expires_at = now.saturating_add(ttl);
    let control: Option<String> = sqlx::query_scalar(&s.sql(
        "UPDATE @wf_instances SET lease_expires_at = $2 WHERE instance_id = $1
         RETURNING control_request",
    ))
    .bind(id)
    .bind(expires_at)
    .fetch_one(&mut *c)
    .await?;
    Ok(Renewal {
        lease: Lease { token, expires_at },
        control_request: control
            .map(|text| decode_control_request(id, &text))
            .transpose()?,
    })
}

pub(super) async fn release_lease(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    token: u64,
    nonce: Option<i64>,
) -> StoreResult<()> {
    check_instance_token(c, s, id, token, nonce).await?;
    sqlx::query(&s.sql(
        "UPDATE @wf_instances SET lease_owner = NULL, lease_expires_at = NULL, lease_nonce = NULL,
            lease_wanted = FALSE
         WHERE instance_id = $1",
    ))
    .bind(id)
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// Gives back the kept leases `ids` (ST-38) under their tokens and nonces, in one statement:
/// a lease taken over meanwhile is left as it is. Returns the instances given back.
pub(super) async fn give_back_kept(
    c: &mut Conn,
    s: &Schema,
    ids: &[String],
    tokens: &[i64],
    nonces: &[i64],
) -> StoreResult<Vec<String>> {
    Ok(sqlx::query_scalar(&s.sql(
        "UPDATE @wf_instances i SET lease_owner = NULL, lease_expires_at = NULL,
            lease_nonce = NULL, lease_wanted = FALSE
         FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS k(id, token, nonce)
         WHERE i.instance_id = k.id AND i.lease_token = k.token AND i.lease_nonce = k.nonce
           AND i.lease_owner IS NOT NULL
         RETURNING i.instance_id",
    ))
    .bind(ids)
    .bind(tokens)
    .bind(nonces)
    .fetch_all(&mut *c)
    .await?)
}

/// Renews the kept leases `ids` (ST-38) under their tokens and nonces until `expires_at`, in
/// one statement, unless another process wants one (that one is left to expire or be given
/// back). Returns the instances renewed.
pub(super) async fn renew_kept(
    c: &mut Conn,
    s: &Schema,
    ids: &[String],
    tokens: &[i64],
    nonces: &[i64],
    expires_at: Micros,
) -> StoreResult<Vec<String>> {
    Ok(sqlx::query_scalar(&s.sql(
        "UPDATE @wf_instances i SET lease_expires_at = $4
         FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS k(id, token, nonce)
         WHERE i.instance_id = k.id AND i.lease_token = k.token AND i.lease_nonce = k.nonce
           AND i.lease_owner IS NOT NULL AND NOT i.lease_wanted
         RETURNING i.instance_id",
    ))
    .bind(ids)
    .bind(tokens)
    .bind(nonces)
    .bind(expires_at)
    .fetch_all(&mut *c)
    .await?)
}

/// Acquires a named lease (ST-11) in one upsert that only takes a free or expired lease.
pub(super) async fn acquire_named_lease(
    c: &mut Conn,
    s: &Schema,
    name: &str,
    owner: &str,
    now: Micros,
    ttl: Micros,
) -> StoreResult<Lease> {
    let expires_at = now.saturating_add(ttl);
    let token: Option<i64> = sqlx::query_scalar(&s.sql(
        "INSERT INTO @wf_named_leases AS l (name, owner, token, expires_at)
         VALUES ($1, $2, 1, $3)
         ON CONFLICT (name) DO UPDATE SET owner = $2, token = l.token + 1, expires_at = $3
         WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= $4
         RETURNING token",
    ))
    .bind(name)
    .bind(owner)
    .bind(expires_at)
    .bind(now)
    .fetch_optional(&mut *c)
    .await?;
    if let Some(token) = token {
        return Ok(Lease {
            token: to_u64(token),
            expires_at,
        });
    }
    let row = sqlx::query(&s.sql("SELECT owner, expires_at FROM @wf_named_leases WHERE name = $1"))
        .bind(name)
        .fetch_one(&mut *c)
        .await?;
    Err(StoreError::LeaseHeld {
        resource: named_resource(name),
        holder: row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
        until: row.try_get::<Option<Micros>, _>(1)?.unwrap_or_default(),
    })
}

async fn check_named_token(c: &mut Conn, s: &Schema, name: &str, token: u64) -> StoreResult<()> {
    let row =
        sqlx::query(&s.sql("SELECT owner, token FROM @wf_named_leases WHERE name = $1 FOR UPDATE"))
            .bind(name)
            .fetch_optional(&mut *c)
            .await?;
    let (owner, current): (Option<String>, u64) = match row {
        Some(row) => (row.try_get(0)?, to_u64(row.try_get(1)?)),
        None => (None, 0),
    };
    if owner.is_some() && current == token {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            resource: named_resource(name),
            token,
            current,
        })
    }
}

pub(super) async fn renew_named_lease(
    c: &mut Conn,
    s: &Schema,
    name: &str,
    token: u64,
    now: Micros,
    ttl: Micros,
) -> StoreResult<Lease> {
    check_named_token(c, s, name, token).await?;
    let expires_at = now.saturating_add(ttl);
    sqlx::query(&s.sql("UPDATE @wf_named_leases SET expires_at = $2 WHERE name = $1"))
        .bind(name)
        .bind(expires_at)
        .execute(&mut *c)
        .await?;
    Ok(Lease { token, expires_at })
}

pub(super) async fn release_named_lease(
    c: &mut Conn,
    s: &Schema,
    name: &str,
    token: u64,
) -> StoreResult<()> {
    check_named_token(c, s, name, token).await?;
    sqlx::query(
        &s.sql("UPDATE @wf_named_leases SET owner = NULL, expires_at = NULL WHERE name = $1"),
    )
    .bind(name)
    .execute(&mut *c)
    .await?;
    Ok(())
}

// ----- bookmarks, receipts, triggers -----

pub(super) async fn find_bookmarks(
    c: &mut Conn,
    s: &Schema,
    query: &BookmarkQuery,
) -> StoreResult<Vec<BookmarkRow>> {
    let sql = s.sql(&format!(
        "SELECT {BOOKMARK_COLS} FROM @wf_bookmarks {}",
        bookmark_page_filter(1)
    ));
    let rows = bind_bookmark_page(sqlx::query(&sql), query)
        .fetch_all(&mut *c)
        .await?;
    rows.iter().map(bookmark_from_row).collect()
}

/// The `WHERE .. ORDER BY .. LIMIT` of a page of bookmarks matching a [`BookmarkQuery`],
/// its seven parameters numbered from `$first`, bound by [`bind_bookmark_page`] in order.
fn bookmark_page_filter(first: usize) -> String {
    let (hash, instance, correlation, bookmark) = (first, first + 1, first + 2, first + 3);
    let (after_at, after_id, limit) = (first + 4, first + 5, first + 6);
    format!(
        "WHERE hash = ${hash}
           AND (${instance}::text IS NULL OR instance_id = ${instance})
           AND (${correlation}::text IS NULL OR correlation_id = ${correlation})
           AND (${bookmark}::text IS NULL OR bookmark_id = ${bookmark})
           AND (${after_at}::bigint IS NULL OR (created_at, bookmark_id) > (${after_at}, ${after_id}))
         ORDER BY created_at, bookmark_id LIMIT ${limit}"
    )
}

/// Binds the parameters of [`bookmark_page_filter`], after those already bound.
fn bind_bookmark_page<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    query: &'q BookmarkQuery,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let (after_at, after_id) = match &query.after {
        Some((at, id)) => (Some(*at), Some(id.as_str())),
        None => (None, None),
    };
    q.bind(&query.hash)
        .bind(&query.instance_id)
        .bind(&query.correlation_id)
        .bind(&query.bookmark_id)
        .bind(after_at)
        .bind(after_id)
        .bind(limit_i64(query.limit))
}

pub(super) async fn list_bookmarks(
    c: &mut Conn,
    s: &Schema,
    id: &str,
) -> StoreResult<Vec<BookmarkRow>> {
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT {BOOKMARK_COLS} FROM @wf_bookmarks WHERE instance_id = $1
         ORDER BY created_at, bookmark_id"
    )))
    .bind(id)
    .fetch_all(&mut *c)
    .await?;
    rows.iter().map(bookmark_from_row).collect()
}

/// The bookmarks of parents waiting on a child (ACT-24) after `after`, in bookmark-id
/// order: one query walking the primary key, not a read per suspended instance.
pub(super) async fn find_child_waits(
    c: &mut Conn,
    s: &Schema,
    after: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<BookmarkRow>> {
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT {BOOKMARK_COLS} FROM @wf_bookmarks
         WHERE name = $1 AND ($2::text IS NULL OR bookmark_id > $2)
         ORDER BY bookmark_id LIMIT $3"
    )))
    .bind(CHILD_WAIT)
    .bind(after)
    .bind(limit_i64(limit))
    .fetch_all(&mut *c)
    .await?;
    rows.iter().map(bookmark_from_row).collect()
}

pub(super) async fn has_receipt(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    stimulus: &str,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar::<_, i32>(
        &s.sql("SELECT 1 FROM @wf_receipts WHERE instance_id = $1 AND stimulus_id = $2"),
    )
    .bind(id)
    .bind(stimulus)
    .fetch_optional(&mut *c)
    .await?
    .is_some())
}

pub(super) async fn instances_with_key(
    c: &mut Conn,
    s: &Schema,
    key: &str,
    limit: usize,
) -> StoreResult<Vec<String>> {
    Ok(sqlx::query_scalar::<_, String>(
        &s.sql("SELECT instance_id FROM @wf_keys WHERE key = $1 ORDER BY instance_id LIMIT $2"),
    )
    .bind(key)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(&mut *c)
    .await?)
}

pub(super) async fn consumed_anywhere(
    c: &mut Conn,
    s: &Schema,
    stimulus: &str,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar::<_, i32>(
        &s.sql("SELECT 1 FROM @wf_receipts WHERE stimulus_id = $1 LIMIT 1"),
    )
    .bind(stimulus)
    .fetch_optional(&mut *c)
    .await?
    .is_some())
}

const TRIGGER_COLS: &str = "definition_name, node_id, hash, definition_version, name, \
    key_display, payload, activation, registered_at";

fn trigger_from_row(row: &PgRow) -> StoreResult<TriggerRow> {
    trigger_from_row_at(row, 0)
}

/// Reads `TRIGGER_COLS` starting at column `at`.
fn trigger_from_row_at(row: &PgRow, at: usize) -> StoreResult<TriggerRow> {
    let id = format!(
        "{}/{}/{}",
        rendered(row, at),
        rendered(row, at + 1),
        rendered(row, at + 2)
    );
    let c = Cols::named(row, "trigger", id.clone());
    let payload: String = c.get(at + 6)?;
    let activation: String = c.get(at + 7)?;
    Ok(TriggerRow {
        payload: decode_json("trigger", &id, "payload", &payload)?,
        activation: decode_json("trigger", &id, "activation", &activation)?,
        definition_version: c.get(at + 3)?,
        name: c.get(at + 4)?,
        key_display: c.get(at + 5)?,
        registered_at: c.get(at + 8)?,
        definition_name: c.get(at)?,
        node_id: c.get(at + 1)?,
        hash: c.get(at + 2)?,
    })
}

/// A send's routing reads in one statement (RT-15, RT-17): the trigger rows with any of
/// `hashes` and the first page of bookmarks matching `query`, as one `UNION ALL` whose rows
/// say which they are (column 0) and carry the trigger columns (from 1) or the bookmark
/// columns (from 10), the others `NULL`.
pub(super) async fn find_routes(
    c: &mut Conn,
    s: &Schema,
    hashes: &[String],
    query: &BookmarkQuery,
) -> StoreResult<(Vec<TriggerRow>, Vec<BookmarkRow>)> {
    const NO_TRIGGER: &str = "NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, \
        NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT";
    const NO_BOOKMARK: &str = "NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, \
        NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::BIGINT";
    let sql = s.sql(&format!(
        "SELECT 0, {TRIGGER_COLS}, {NO_BOOKMARK} FROM @wf_triggers WHERE hash = ANY($1)
         UNION ALL
         (SELECT 1, {NO_TRIGGER}, {BOOKMARK_COLS} FROM @wf_bookmarks {})",
        bookmark_page_filter(2)
    ));
    let rows = bind_bookmark_page(sqlx::query(&sql).bind(hashes), query)
        .fetch_all(&mut *c)
        .await?;
    let (mut triggers, mut bookmarks) = (Vec::new(), Vec::new());
    for row in &rows {
        if row.try_get::<i32, _>(0)? == 0 {
            triggers.push(trigger_from_row_at(row, 1)?);
        } else {
            bookmarks.push(bookmark_from_row_at(row, 10)?);
        }
    }
    // The orders of `find_triggers` and `find_bookmarks` (text keys collate as bytes).
    triggers.sort_by(|a, b| {
        (&a.definition_name, &a.node_id, &a.hash).cmp(&(&b.definition_name, &b.node_id, &b.hash))
    });
    bookmarks.sort_by(|a, b| (a.created_at, &a.bookmark_id).cmp(&(b.created_at, &b.bookmark_id)));
    Ok((triggers, bookmarks))
}

/// Writes a definition's trigger changes (ST-7), under an advisory lock on the definition so
/// two processes registering it at once do not interleave (ST-27).
pub(super) async fn write_triggers(
    c: &mut Conn,
    s: &Schema,
    name: &str,
    write: &TriggerWrite,
) -> StoreResult<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("workflow-triggers:{}:{name}", s.name()))
        .execute(&mut *c)
        .await?;
    for (node, hash) in &write.deletes {
        sqlx::query(&s.sql(
            "DELETE FROM @wf_triggers WHERE definition_name = $1 AND node_id = $2 AND hash = $3",
        ))
        .bind(name)
        .bind(node)
        .bind(hash)
        .execute(&mut *c)
        .await?;
    }
    for t in &write.upserts {
        sqlx::query(&s.sql(
            "INSERT INTO @wf_triggers (definition_name, node_id, hash, definition_version,
                name, key_display, payload, activation, registered_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (definition_name, node_id, hash) DO UPDATE SET
                definition_version = EXCLUDED.definition_version, name = EXCLUDED.name,
                key_display = EXCLUDED.key_display, payload = EXCLUDED.payload,
                activation = EXCLUDED.activation, registered_at = EXCLUDED.registered_at",
        ))
        .bind(name)
        .bind(&t.node_id)
        .bind(&t.hash)
        .bind(&t.definition_version)
        .bind(&t.name)
        .bind(&t.key_display)
        .bind(json_text(&t.payload)?)
        .bind(json_text(&t.activation)?)
        .bind(t.registered_at)
        .execute(&mut *c)
        .await?;
    }
    Ok(())
}

/// A definition's triggers.
pub(super) async fn definition_triggers(
    c: &mut Conn,
    s: &Schema,
    name: &str,
) -> StoreResult<Vec<TriggerRow>> {
    sqlx::query(&s.sql(&format!(
        "SELECT {TRIGGER_COLS} FROM @wf_triggers WHERE definition_name = $1
         ORDER BY definition_name, node_id, hash"
    )))
    .bind(name)
    .fetch_all(&mut *c)
    .await?
    .iter()
    .map(trigger_from_row)
    .collect()
}

pub(super) async fn find_triggers(
    c: &mut Conn,
    s: &Schema,
    hashes: &[String],
) -> StoreResult<Vec<TriggerRow>> {
    sqlx::query(&s.sql(&format!(
        "SELECT {TRIGGER_COLS} FROM @wf_triggers WHERE hash = ANY($1)
         ORDER BY definition_name, node_id, hash"
    )))
    .bind(hashes)
    .fetch_all(&mut *c)
    .await?
    .iter()
    .map(trigger_from_row)
    .collect()
}

// ----- timers and schedules -----

/// Unclaimed, unparked timer rows whose due time is past [`LATEST_DUE`] (ST-22): not a time,
/// so never due; an index range.
const DAMAGED_TIMERS: &str = "NOT parked AND due_at > $2
    AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1)";

pub(super) async fn earliest_timer(
    c: &mut Conn,
    s: &Schema,
    now: Micros,
) -> StoreResult<Option<Micros>> {
    // A damaged row is due now: the driver claims it and reports it.
    let damaged: Option<i32> = sqlx::query_scalar(&s.sql(&format!(
        "SELECT 1 FROM @wf_timers WHERE {DAMAGED_TIMERS} LIMIT 1"
    )))
    .bind(now)
    .bind(LATEST_DUE)
    .fetch_optional(&mut *c)
    .await?;
    if damaged.is_some() {
        return Ok(Some(now));
    }
    Ok(sqlx::query_scalar(&s.sql(
        "SELECT MIN(due_at) FROM @wf_timers WHERE NOT parked AND due_at <= $2
           AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1)",
    ))
    .bind(now)
    .bind(LATEST_DUE)
    .fetch_one(&mut *c)
    .await?)
}

/// Claims up to `limit` damaged timer rows (see [`DAMAGED_TIMERS`]) for `owner`.
pub(super) async fn claim_damaged_timers(
    c: &mut Conn,
    s: &Schema,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<DamagedTimer>> {
    let rows: Vec<(String, Option<String>, Option<String>, String)> =
        sqlx::query_as(&s.sql(&format!(
            "WITH picked AS (
            SELECT timer_id FROM @wf_timers WHERE {DAMAGED_TIMERS}
            ORDER BY timer_id LIMIT $3
            FOR UPDATE SKIP LOCKED)
         UPDATE @wf_timers t SET claim_owner = $4, claim_expires_at = $5
         FROM picked WHERE t.timer_id = picked.timer_id
         RETURNING t.timer_id, t.instance_id, t.definition_name, t.due_at::text"
        )))
        .bind(now)
        .bind(LATEST_DUE)
        .bind(limit_i64(limit))
        .bind(owner)
        .bind(now.saturating_add(claim_ttl))
        .fetch_all(&mut *c)
        .await?;
    let mut damaged: Vec<DamagedTimer> = rows
        .into_iter()
        .map(
            |(timer_id, instance_id, definition_name, found)| DamagedTimer {
                timer_id,
                instance_id,
                definition_name,
                found,
            },
        )
        .collect();
    damaged.sort_by(|a, b| a.timer_id.cmp(&b.timer_id));
    Ok(damaged)
}

/// Claims due timers with `FOR UPDATE SKIP LOCKED` (ST-15, ST-27).
pub(super) async fn claim_due_timers(
    c: &mut Conn,
    s: &Schema,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<TimerRow>> {
    let rows = sqlx::query(&s.sql(&format!(
        "WITH picked AS (
            SELECT timer_id FROM @wf_timers
            WHERE NOT parked AND due_at <= $1
              AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1)
            ORDER BY due_at, timer_id LIMIT $2
            FOR UPDATE SKIP LOCKED)
         UPDATE @wf_timers t SET claim_owner = $3, claim_expires_at = $4
         FROM picked WHERE t.timer_id = picked.timer_id
         RETURNING {}",
        qualified("t", TIMER_COLS)
    )))
    .bind(now)
    .bind(limit_i64(limit))
    .bind(owner)
    .bind(now.saturating_add(claim_ttl))
    .fetch_all(&mut *c)
    .await?;
    let mut timers = rows
        .iter()
        .map(timer_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    timers.sort_by(|a, b| (a.due_at, &a.timer_id).cmp(&(b.due_at, &b.timer_id)));
    Ok(timers)
}

pub(super) async fn put_schedule(
    c: &mut Conn,
    s: &Schema,
    schedule: &Schedule,
) -> StoreResult<bool> {
    let done = sqlx::query(&s.sql(
        "INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked, definition_name,
            node_id)
         VALUES ($1, NULL, $2, $3, $4, $5, $6) ON CONFLICT (timer_id) DO NOTHING",
    ))
    .bind(&schedule.schedule_id)
    .bind(&schedule.kind)
    .bind(schedule.due_at)
    .bind(schedule.fired)
    .bind(&schedule.definition_name)
    .bind(&schedule.node_id)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn delete_schedule(c: &mut Conn, s: &Schema, id: &str) -> StoreResult<bool> {
    let done =
        sqlx::query(&s.sql("DELETE FROM @wf_timers WHERE timer_id = $1 AND instance_id IS NULL"))
            .bind(id)
            .execute(&mut *c)
            .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn list_schedule_rows(
    c: &mut Conn,
    s: &Schema,
    name: &str,
) -> StoreResult<Vec<TimerRow>> {
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT {TIMER_COLS} FROM @wf_timers
         WHERE instance_id IS NULL AND definition_name = $1 ORDER BY timer_id"
    )))
    .bind(name)
    .fetch_all(&mut *c)
    .await?;
    rows.iter().map(timer_from_row).collect()
}

/// Fires one occurrence (TM-11 to TM-13): the schedule row is locked, so of several
/// processes firing the same occurrence one creates the instance and the others find the
/// schedule moved on (`Stale`).
pub(super) async fn fire_schedule(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    expected_due_at: Micros,
    instance: Option<&NewInstance<String>>,
    next_due: Option<Micros>,
) -> StoreResult<ScheduleFiring> {
    let current: Option<Micros> = sqlx::query_scalar(&s.sql(
        "SELECT due_at FROM @wf_timers
         WHERE timer_id = $1 AND instance_id IS NULL AND NOT parked FOR UPDATE",
    ))
    .bind(id)
    .fetch_optional(&mut *c)
    .await?;
    if current != Some(expected_due_at) {
        return Ok(ScheduleFiring::Stale);
    }
    // The activation check fails before the insert writes anything, so the transaction is
    // still usable after a refusal.
    let firing = match instance {
        Some(instance) => ScheduleFiring::of_creation(insert_instance(c, s, instance).await)?,
        None => ScheduleFiring::Skipped,
    };
    sqlx::query(&s.sql(
        "UPDATE @wf_timers SET claim_owner = NULL, claim_expires_at = NULL,
            due_at = COALESCE($2, due_at), parked = ($2::bigint IS NULL)
         WHERE timer_id = $1",
    ))
    .bind(id)
    .bind(next_due)
    .execute(&mut *c)
    .await?;
    Ok(firing)
}

pub(super) async fn list_timers(c: &mut Conn, s: &Schema, id: &str) -> StoreResult<Vec<TimerRow>> {
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT {TIMER_COLS} FROM @wf_timers WHERE instance_id = $1 ORDER BY due_at, timer_id"
    )))
    .bind(id)
    .fetch_all(&mut *c)
    .await?;
    rows.iter().map(timer_from_row).collect()
}

// ----- journal -----

pub(super) async fn read_journal(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    from_seq: u64,
    limit: usize,
) -> StoreResult<Vec<JournalRecord<String>>> {
    // The rows that can hold the page's entries: from the first row with entries at or after
    // `from`, whose first such entry is `start`, up to the one holding `start + need - 1`
    // (entries are numbered without gaps, but for a compaction's summary below the oldest
    // entries: a page that comes out short reads on after its last row).
    let from_seq = to_i64(from_seq);
    let mut from = from_seq;
    let mut entries = Vec::new();
    while entries.len() < limit {
        let need = limit - entries.len();
        // Nothing below the instance's journal floor is read: the cap raised it past those
        // entries, whose rows are deleted later (migration 7).
        let rows = sqlx::query(&s.sql(
            "WITH floor AS (SELECT COALESCE((SELECT i.journal_first FROM @wf_instances i
                     WHERE i.instance_id = $1), 0) AS f)
             SELECT GREATEST(j.first_seq, floor.f), j.last_seq, j.entries
               FROM @wf_journal j, floor
             WHERE j.instance_id = $1 AND j.last_seq >= GREATEST($2, floor.f)
               AND j.first_seq < $3 + GREATEST($2, floor.f, (
                 SELECT k.first_seq FROM @wf_journal k WHERE k.instance_id = $1
                    AND k.last_seq >= GREATEST($2, floor.f) ORDER BY k.last_seq LIMIT 1))
             ORDER BY j.last_seq",
        ))
        .bind(id)
        .bind(from)
        .bind(limit_i64(need))
        .fetch_all(&mut *c)
        .await?;
        let Some(last) = rows.last() else { break };
        from = last.try_get::<i64, _>(1)?.saturating_add(1);
        let mut rows = rows.iter();
        let more = journal_rows::page_into(id, from_seq, limit, &mut entries, || {
            let Some(row) = rows.next() else {
                return Ok(None);
            };
            Ok(Some(journal_rows::StoredRow {
                first_seq: row.try_get(0)?,
                last_seq: row.try_get(1)?,
                entries: row.try_get(2)?,
            }))
        })?;
        if !more {
            break;
        }
    }
    Ok(entries)
}

// ----- queue and dead letters -----

/// Inserts a queue item; an id already queued or dead gives `AlreadyExists`.
pub(super) async fn enqueue(c: &mut Conn, s: &Schema, item: &QueueItem) -> StoreResult<()> {
    let exists = || StoreError::AlreadyExists {
        what: "queue item",
        id: item.item_id.clone(),
    };
    let dead = sqlx::query_scalar::<_, i32>(
        &s.sql("SELECT 1 FROM @wf_dead_letters WHERE original_item_id = $1"),
    )
    .bind(&item.item_id)
    .fetch_optional(&mut *c)
    .await?
    .is_some();
    if dead {
        return Err(exists());
    }
    let inserted = sqlx::query(&s.sql(&format!(
        "INSERT INTO @wf_queue (item_id, {QUEUE_COLS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
         ON CONFLICT (item_id) DO NOTHING"
    )))
    .bind(&item.item_id)
    .bind(&item.stimulus_id)
    .bind(&item.name)
    .bind(&item.hash)
    .bind(&item.key_display)
    .bind(json_text(&item.payload)?)
    .bind(&item.correlation_id)
    .bind(json_text(&item.targets)?)
    .bind(item.sent_at)
    .bind(item.enqueued_at)
    .bind(item.expires_at)
    .bind(i64::from(item.attempts))
    .bind(&item.last_error)
    .bind(item.last_attempt_at)
    .bind(item.held)
    .bind(&item.idempotency_key)
    .execute(&mut *c)
    .await;
    match inserted {
        Ok(done) if done.rows_affected() > 0 => Ok(()),
        Ok(_) => Err(exists()),
        Err(e) if is_unique_violation(&e) => Err(exists()),
        Err(e) => Err(e.into()),
    }
}

/// Claims a queue page with `FOR UPDATE SKIP LOCKED` (ST-15, ST-27). An undecodable item
/// fails alone (ST-22): it becomes a `Rejected` dead letter naming the error, its raw text
/// kept in a decodable wrapper, so it neither blocks the queue nor is lost.
pub(super) async fn claim_queue_page(
    c: &mut Conn,
    s: &Schema,
    owner: &str,
    now: Micros,
    claim_ttl: Micros,
    limit: usize,
) -> StoreResult<Vec<QueueItem>> {
    let rows = sqlx::query(&s.sql(&format!(
        "WITH picked AS (
            SELECT item_id FROM @wf_queue
            WHERE (held OR expires_at > $1)
              AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= $1)
            ORDER BY sent_at, item_id LIMIT $2
            FOR UPDATE SKIP LOCKED)
         UPDATE @wf_queue q SET claim_owner = $3, claim_expires_at = $4
         FROM picked WHERE q.item_id = picked.item_id
         RETURNING q.item_id, {}",
        qualified("q", QUEUE_COLS)
    )))
    .bind(now)
    .bind(limit_i64(limit))
    .bind(owner)
    .bind(now.saturating_add(claim_ttl))
    .fetch_all(&mut *c)
    .await?;
    let mut raw = rows
        .iter()
        .map(|row| queue_from_row(row, "queue item"))
        .collect::<Result<Vec<_>, _>>()?;
    raw.sort_by(|a, b| (a.item.sent_at, &a.item.item_id).cmp(&(b.item.sent_at, &b.item.item_id)));
    let mut items = Vec::with_capacity(raw.len());
    for r in raw {
        let id = r.item.item_id.clone();
        let (payload, targets) = (r.payload.clone(), r.targets.clone());
        match r.decode("queue item") {
            Ok(item) => items.push(item),
            Err(e) => quarantine_queue_item(c, s, &id, &payload, &targets, &e, now).await?,
        }
    }
    Ok(items)
}

pub(super) async fn move_to_dead(
    c: &mut Conn,
    s: &Schema,
    item_id: &str,
    reason: DeadLetterReason,
    error: Option<&str>,
    now: Micros,
) -> StoreResult<bool> {
    let inserted = sqlx::query(&s.sql(&format!(
        "INSERT INTO @wf_dead_letters (original_item_id, {QUEUE_COLS}, reason, error, dead_at)
         SELECT item_id, {QUEUE_COLS}, $2, $3, $4 FROM @wf_queue WHERE item_id = $1
         ON CONFLICT (original_item_id) DO NOTHING"
    )))
    .bind(item_id)
    .bind(reason.as_str())
    .bind(error)
    .bind(now)
    .execute(&mut *c)
    .await?;
    let deleted = sqlx::query(&s.sql("DELETE FROM @wf_queue WHERE item_id = $1"))
        .bind(item_id)
        .execute(&mut *c)
        .await?;
    Ok(inserted.rows_affected() > 0 && deleted.rows_affected() > 0)
}

async fn quarantine_queue_item(
    c: &mut Conn,
    s: &Schema,
    item_id: &str,
    payload: &str,
    targets: &str,
    error: &StoreError,
    now: Micros,
) -> StoreResult<()> {
    let wrap = EncodedQueueItem::quarantined_json;
    sqlx::query(&s.sql("UPDATE @wf_queue SET payload = $2, targets = $3 WHERE item_id = $1"))
        .bind(item_id)
        .bind(wrap(payload))
        .bind(wrap(targets))
        .execute(&mut *c)
        .await?;
    move_to_dead(
        c,
        s,
        item_id,
        DeadLetterReason::Rejected,
        Some(&error.to_string()),
        now,
    )
    .await?;
    Ok(())
}

/// Settles a claimed queue item (RT-27, C-16, C-17).
pub(super) async fn settle_queue_item(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    settlement: &Settlement,
) -> StoreResult<Settled> {
    match settlement {
        Settlement::Release { owner, .. } => {
            sqlx::query(&s.sql(
                "UPDATE @wf_queue SET claim_owner = NULL, claim_expires_at = NULL
                 WHERE item_id = $1 AND claim_owner = $2",
            ))
            .bind(id)
            .bind(owner)
            .execute(&mut *c)
            .await?;
            Ok(Settled::Released)
        }
        Settlement::Renew { owner, now, until } => {
            let done = sqlx::query(&s.sql(
                "UPDATE @wf_queue SET claim_owner = $2, claim_expires_at = $4
                 WHERE item_id = $1 AND (claim_owner IS NULL OR claim_owner = $2
                       OR claim_expires_at IS NULL OR claim_expires_at <= $3)",
            ))
            .bind(id)
            .bind(owner)
            .bind(now)
            .bind(until)
            .execute(&mut *c)
            .await?;
            Ok(Settled::Renewed(done.rows_affected() > 0))
        }
        Settlement::Ack => {
            let done = sqlx::query(&s.sql("DELETE FROM @wf_queue WHERE item_id = $1"))
                .bind(id)
                .execute(&mut *c)
                .await?;
            Ok(Settled::Acked(done.rows_affected() > 0))
        }
        Settlement::Fail {
            error,
            now,
            max_attempts,
        } => {
            let attempts: Option<i64> = sqlx::query_scalar(&s.sql(
                "UPDATE @wf_queue SET attempts = attempts + 1, last_error = $2,
                    last_attempt_at = $3, claim_owner = NULL, claim_expires_at = NULL
                 WHERE item_id = $1 RETURNING attempts",
            ))
            .bind(id)
            .bind(error)
            .bind(now)
            .fetch_optional(&mut *c)
            .await?;
            let attempts = attempts.ok_or_else(|| not_found("queue item", id))?;
            let attempts = u32::try_from(attempts).unwrap_or(u32::MAX);
            if attempts >= *max_attempts {
                move_to_dead(c, s, id, DeadLetterReason::Failed, Some(error), *now).await?;
                Ok(Settled::DeadLettered(true))
            } else {
                Ok(Settled::Retry { attempts })
            }
        }
        Settlement::DeadLetter { reason, error, now } => Ok(Settled::DeadLettered(
            move_to_dead(c, s, id, *reason, error.as_deref(), *now).await?,
        )),
    }
}

pub(super) async fn expire_queue(
    c: &mut Conn,
    s: &Schema,
    now: Micros,
    limit: usize,
) -> StoreResult<u64> {
    let ids: Vec<String> = sqlx::query_scalar(&s.sql(
        "SELECT item_id FROM @wf_queue WHERE NOT held AND expires_at <= $1
         ORDER BY expires_at, item_id LIMIT $2 FOR UPDATE SKIP LOCKED",
    ))
    .bind(now)
    .bind(limit_i64(limit))
    .fetch_all(&mut *c)
    .await?;
    let mut moved = 0;
    for id in ids {
        if move_to_dead(c, s, &id, DeadLetterReason::Expired, None, now).await? {
            moved += 1;
        }
    }
    Ok(moved)
}

pub(super) async fn replay_dead_letter(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    now: Micros,
    ttl: Micros,
) -> StoreResult<QueueItem> {
    let row = sqlx::query(&s.sql(&format!(
        "DELETE FROM @wf_dead_letters WHERE original_item_id = $1
         RETURNING original_item_id, {QUEUE_COLS}"
    )))
    .bind(id)
    .fetch_optional(&mut *c)
    .await?
    .ok_or_else(|| not_found("dead letter", id))?;
    let item = queue_from_row(&row, "dead letter")?
        .decode("dead letter")?
        .replayed(now, ttl);
    enqueue(c, s, &item).await?;
    Ok(item)
}

pub(super) async fn delete_dead_letter(c: &mut Conn, s: &Schema, id: &str) -> StoreResult<bool> {
    let done = sqlx::query(&s.sql("DELETE FROM @wf_dead_letters WHERE original_item_id = $1"))
        .bind(id)
        .execute(&mut *c)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Deletes up to `limit` rows of `table` whose `column` is before `before`, in one batch.
pub(super) async fn purge_before(
    c: &mut Conn,
    s: &Schema,
    table: &str,
    key: &str,
    column: &str,
    before: Micros,
    limit: usize,
) -> StoreResult<u64> {
    let done = sqlx::query(&s.sql(&format!(
        "DELETE FROM {table} WHERE ({key}) IN (
            SELECT {key} FROM {table} WHERE {column} < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
    )))
    .bind(before)
    .bind(limit_i64(limit))
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

pub(super) async fn list_dead_letters(
    c: &mut Conn,
    s: &Schema,
    filter: &DeadLetterFilter,
) -> StoreResult<Vec<DeadLetter>> {
    let (after_at, after_id) = match &filter.after {
        Some((at, id)) => (Some(*at), Some(id.as_str())),
        None => (None, None),
    };
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT original_item_id, {QUEUE_COLS}, reason, error, dead_at FROM @wf_dead_letters
         WHERE ($1::text IS NULL OR reason = $1)
           AND ($3::text IS NULL OR name = $3)
           AND ($4::text IS NULL OR hash = $4)
           AND ($5::bigint IS NULL OR (dead_at, original_item_id) > ($5, $6))
         ORDER BY dead_at, original_item_id LIMIT $2"
    )))
    .bind(filter.reason.map(DeadLetterReason::as_str))
    .bind(limit_i64(filter.limit))
    .bind(&filter.name)
    .bind(&filter.hash)
    .bind(after_at)
    .bind(after_id)
    .fetch_all(&mut *c)
    .await?;
    let mut letters = Vec::with_capacity(rows.len());
    for row in &rows {
        let item = queue_from_row(row, "dead letter")?.decode("dead letter")?;
        let reason_text: String = row.try_get(16)?;
        let reason = DeadLetterReason::decode(&item.item_id, &reason_text)?;
        letters.push(DeadLetter {
            item,
            reason,
            error: row.try_get(17)?,
            dead_at: row.try_get(18)?,
        });
    }
    Ok(letters)
}

// ----- incidents and idempotency records -----

pub(super) async fn insert_incident_row(
    c: &mut Conn,
    s: &Schema,
    instance_id: &str,
    definition_name: &str,
    incident: &NewIncident,
) -> StoreResult<()> {
    let done = sqlx::query(&s.sql(
        "INSERT INTO @wf_incidents (incident_id, instance_id, definition_name, kind,
            created_at, record) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (incident_id) DO NOTHING",
    ))
    .bind(&incident.incident_id)
    .bind(instance_id)
    .bind(definition_name)
    .bind(&incident.kind)
    .bind(incident.created_at)
    .bind(json_text(&incident.record)?)
    .execute(&mut *c)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::AlreadyExists {
            what: "incident",
            id: incident.incident_id.clone(),
        });
    }
    Ok(())
}

/// Records an incident alone; reads only the instance's columns, since its state may be the
/// unreadable part (FLT-9).
pub(super) async fn insert_incident(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    incident: &NewIncident,
) -> StoreResult<()> {
    let definition: String = sqlx::query_scalar(
        &s.sql("SELECT definition_name FROM @wf_instances WHERE instance_id = $1"),
    )
    .bind(id)
    .fetch_optional(&mut *c)
    .await?
    .ok_or_else(|| not_found("instance", id))?;
    insert_incident_row(c, s, id, &definition, incident).await
}

const INCIDENT_COLS: &str = "incident_id, instance_id, definition_name, kind, created_at, \
    resolved_at, resolution, record";

fn incident_from_row(row: &PgRow) -> StoreResult<IncidentRecord> {
    let c = Cols::new(row, "incident", 0, Some(1));
    let incident_id: String = c.get(0)?;
    let record: String = c.get(7)?;
    Ok(IncidentRecord {
        record: decode_json("incident", &incident_id, "record", &record)?,
        incident_id,
        instance_id: c.get(1)?,
        definition_name: c.get(2)?,
        kind: c.get(3)?,
        created_at: c.get(4)?,
        resolved_at: c.get(5)?,
        resolution: c.get(6)?,
    })
}

pub(super) async fn list_incidents(
    c: &mut Conn,
    s: &Schema,
    query: &IncidentQuery,
) -> StoreResult<Vec<IncidentRecord>> {
    let (after_at, after_id) = match &query.after {
        Some((at, id)) => (Some(*at), Some(id.as_str())),
        None => (None, None),
    };
    sqlx::query(&s.sql(&format!(
        "SELECT {INCIDENT_COLS} FROM @wf_incidents
         WHERE ($1::text IS NULL OR instance_id = $1)
           AND (NOT $2 OR resolved_at IS NULL)
           AND ($3::bigint IS NULL OR (created_at, incident_id) > ($3, $4))
         ORDER BY created_at, incident_id LIMIT $5"
    )))
    .bind(&query.instance_id)
    .bind(query.unresolved_only)
    .bind(after_at)
    .bind(after_id)
    .bind(limit_i64(query.limit))
    .fetch_all(&mut *c)
    .await?
    .iter()
    .map(incident_from_row)
    .collect()
}

/// Stores an idempotency record unless its key exists (C-20); of two processes storing the
/// same key at once, one inserts and the other gets the stored record. With `replace`, the
/// record replaces the stored one.
pub(super) async fn put_idempotency_record(
    c: &mut Conn,
    s: &Schema,
    record: &IdempotencyRecord,
    replace: bool,
) -> StoreResult<Option<IdempotencyRecord>> {
    let on_conflict = if replace {
        "DO UPDATE SET hash = EXCLUDED.hash, payload_digest = EXCLUDED.payload_digest,
            report = EXCLUDED.report, created_at = EXCLUDED.created_at"
    } else {
        "DO NOTHING"
    };
    let done = sqlx::query(&s.sql(&format!(
        "INSERT INTO @wf_idempotency (idempotency_key, hash, payload_digest, report, created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idempotency_key) {on_conflict}"
    )))
    .bind(&record.key)
    .bind(&record.hash)
    .bind(&record.payload_digest)
    .bind(json_text(&record.report)?)
    .bind(record.created_at)
    .execute(&mut *c)
    .await?;
    if done.rows_affected() > 0 {
        return Ok(None);
    }
    find_idempotency_record(c, s, &record.key).await
}

pub(super) async fn find_idempotency_record(
    c: &mut Conn,
    s: &Schema,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    let row = sqlx::query(&s.sql(
        "SELECT hash, payload_digest, report, created_at FROM @wf_idempotency
         WHERE idempotency_key = $1",
    ))
    .bind(key)
    .fetch_optional(&mut *c)
    .await?;
    row.map(|row| {
        let report: String = row.try_get(2)?;
        Ok(IdempotencyRecord {
            key: key.to_owned(),
            hash: row.try_get(0)?,
            payload_digest: row.try_get(1)?,
            report: decode_json("idempotency record", key, "report", &report)?,
            created_at: row.try_get(3)?,
        })
    })
    .transpose()
}

/// The queue, oldest sent first, at most `limit`, without claiming anything; an item whose
/// row does not decode is left out.
pub(super) async fn queued(c: &mut Conn, s: &Schema, limit: usize) -> StoreResult<Vec<QueueItem>> {
    let rows = sqlx::query(&s.sql(&format!(
        "SELECT item_id, {QUEUE_COLS} FROM @wf_queue ORDER BY sent_at, item_id LIMIT $1"
    )))
    .bind(limit_i64(limit))
    .fetch_all(&mut *c)
    .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            queue_from_row(row, "queue item")
                .ok()?
                .decode("queue item")
                .ok()
        })
        .collect())
}

// ----- definitions -----

pub(super) async fn put_definition(
    c: &mut Conn,
    s: &Schema,
    definition: &DefinitionRecord,
) -> StoreResult<bool> {
    let done = sqlx::query(&s.sql(
        "INSERT INTO @wf_definitions (name, version, json, recorded_at)
         VALUES ($1, $2, $3, $4) ON CONFLICT (name, version) DO NOTHING",
    ))
    .bind(&definition.name)
    .bind(&definition.version)
    .bind(&definition.json)
    .bind(definition.recorded_at)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn list_definitions(
    c: &mut Conn,
    s: &Schema,
    name: Option<&str>,
) -> StoreResult<Vec<DefinitionRecord>> {
    let rows = sqlx::query(&s.sql(
        "SELECT name, version, json, recorded_at FROM @wf_definitions
         WHERE ($1::TEXT IS NULL OR name = $1) ORDER BY name, recorded_at, version",
    ))
    .bind(name)
    .fetch_all(&mut *c)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(DefinitionRecord {
                name: row.try_get(0)?,
                version: row.try_get(1)?,
                json: row.try_get(2)?,
                recorded_at: row.try_get(3)?,
            })
        })
        .collect()
}

// ----- test hooks -----

#[cfg(feature = "test-support")]
pub(super) async fn write_raw_state(
    c: &mut Conn,
    s: &Schema,
    id: &str,
    raw: &str,
) -> StoreResult<()> {
    let done = sqlx::query(&s.sql("UPDATE @wf_instances SET state = $1 WHERE instance_id = $2"))
        .bind(raw)
        .bind(id)
        .execute(&mut *c)
        .await?;
    if done.rows_affected() == 0 {
        return Err(not_found("instance", id));
    }
    Ok(())
}

#[cfg(feature = "test-support")]
pub(super) async fn read_raw_state(c: &mut Conn, s: &Schema, id: &str) -> StoreResult<String> {
    sqlx::query_scalar(&s.sql("SELECT state FROM @wf_instances WHERE instance_id = $1"))
        .bind(id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or_else(|| not_found("instance", id))
}

/// `cols` (a `", "`-separated column list) with each column qualified by `alias`, for a
/// `RETURNING` clause of an `UPDATE .. FROM` whose other side has columns of the same name.
fn qualified(alias: &str, cols: &str) -> String {
    cols.split(", ")
        .map(|col| format!("{alias}.{col}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Instances by definition and version (sorted; one aggregate over the instances' rows).
pub(super) async fn version_census(
    c: &mut Conn,
    s: &Schema,
) -> StoreResult<Vec<(String, String, u64)>> {
    let rows = sqlx::query(&s.sql(
        "SELECT definition_name, definition_version, COUNT(*) FROM @wf_instances
         GROUP BY definition_name, definition_version
         ORDER BY definition_name, definition_version",
    ))
    .fetch_all(&mut *c)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push((
            row.try_get(0)?,
            row.try_get(1)?,
            to_u64(row.try_get::<i64, _>(2)?),
        ));
    }
    Ok(out)
}

/// Instances by definition and status (the index on both covers it), queued stimuli and
/// dead letters: three aggregate queries.
pub(super) async fn census(c: &mut Conn, s: &Schema) -> StoreResult<Census> {
    let rows = sqlx::query(&s.sql(
        "SELECT definition_name, status, COUNT(*) FROM @wf_instances
         GROUP BY definition_name, status ORDER BY definition_name, status",
    ))
    .fetch_all(&mut *c)
    .await?;
    let mut instances = Vec::with_capacity(rows.len());
    for row in &rows {
        instances.push(InstanceCount::decode(
            row.try_get(0)?,
            row.try_get::<String, _>(1)?.as_str(),
            to_u64(row.try_get::<i64, _>(2)?),
        )?);
    }
    let queued: i64 = sqlx::query_scalar(&s.sql("SELECT COUNT(*) FROM @wf_queue"))
        .fetch_one(&mut *c)
        .await?;
    let dead_letters: i64 = sqlx::query_scalar(&s.sql("SELECT COUNT(*) FROM @wf_dead_letters"))
        .fetch_one(&mut *c)
        .await?;
    Ok(Census {
        instances,
        queued: Some(to_u64(queued)),
        dead_letters: to_u64(dead_letters),
    })
}
