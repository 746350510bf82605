//! Versioned migrations (ST-28), connection settings and the one-owner lock of a file (ST-26).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::{MigrateMode, SqliteOptions, Synchronous};
use crate::store::error::{StoreError, StoreResult};

// ----- migrations (ST-28) -----

/// The embedded, forward-only migrations: `(version, name, sql)`.
const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "0001_init", MIGRATION_0001),
    (2, "0002_activation_and_idempotency", MIGRATION_0002),
    (3, "0003_incidents", MIGRATION_0003),
    (4, "0004_retention_indexes", MIGRATION_0004),
    (5, "0005_trigger_schedules", MIGRATION_0005),
    (6, "0006_definitions", MIGRATION_0006),
    (7, "0007_child_waits", MIGRATION_0007),
    (8, "0008_instance_listing", MIGRATION_0008),
    (9, "0009_journal_rows_per_commit", MIGRATION_0009),
    (10, "0010_clustered_journal_and_bookmarks", MIGRATION_0010),
    (11, "0011_bookmarks_keyed_by_instance", MIGRATION_0011),
    (12, "0012_flow_control", MIGRATION_0012),
    (13, "0013_debounced_sends", MIGRATION_0013),
    (14, "0014_receipts_by_stimulus", MIGRATION_0014),
    (15, "0015_instance_keys", MIGRATION_0015),
];

/// The key index (RT-36): each key digest an instance's waits carried, with the instance,
/// so a send by key that no instance waits for can name the instances with its key. Kept
/// until the instance is purged.
const MIGRATION_0015: &str = r"
CREATE TABLE wf_keys (
    key         TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    PRIMARY KEY (key, instance_id)
) WITHOUT ROWID;
CREATE INDEX wf_keys_instance ON wf_keys (instance_id);
";

/// Flow-control queues (QU-5): per queue a row of counters (the last fencing token, waiter
/// sequence and round-robin turn issued) and the limits last asked with; slot rows (one per
/// holder, leased, with a fencing token); waiter rows (the line); the turn each partition key
/// was last served at; and the grants of the rate window (QU-6).
const MIGRATION_0012: &str = r"
CREATE TABLE wf_flow_queues (
    name        TEXT PRIMARY KEY NOT NULL,
    last_token  INTEGER NOT NULL,
    last_seq    INTEGER NOT NULL,
    last_turn   INTEGER NOT NULL,
    concurrency INTEGER,
    per_process INTEGER,
    per_key     INTEGER,
    rate_starts INTEGER,
    rate_period INTEGER
) WITHOUT ROWID;
CREATE TABLE wf_flow_slots (
    queue         TEXT NOT NULL,
    holder        TEXT NOT NULL,
    owner         TEXT NOT NULL,
    partition_key TEXT,
    token         INTEGER NOT NULL,
    acquired_at   INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    PRIMARY KEY (queue, holder)
) WITHOUT ROWID;
CREATE TABLE wf_flow_waiters (
    queue         TEXT NOT NULL,
    holder        TEXT NOT NULL,
    partition_key TEXT,
    priority      INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    enqueued_at   INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    PRIMARY KEY (queue, holder)
) WITHOUT ROWID;
CREATE TABLE wf_flow_turns (
    queue         TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    turn          INTEGER NOT NULL,
    PRIMARY KEY (queue, partition_key)
) WITHOUT ROWID;
CREATE TABLE wf_flow_starts (
    queue TEXT NOT NULL,
    token INTEGER NOT NULL,
    at    INTEGER NOT NULL,
    PRIMARY KEY (queue, token)
) WITHOUT ROWID;
CREATE INDEX wf_flow_starts_at ON wf_flow_starts (queue, at);
";

/// Receipts found by their stimulus (RT-19): a queued stimulus routed again after a crash
/// between its delivery and its acknowledgement is known consumed.
const MIGRATION_0014: &str = r"
CREATE INDEX wf_receipts_stimulus ON wf_receipts (stimulus_id);
";

/// Debounced sends (RT-35, C-44): one row per debounce id, holding the last send, claimed
/// by the process that delivers it once due.
const MIGRATION_0013: &str = r"
CREATE TABLE wf_debounce (
    debounce_id      TEXT PRIMARY KEY NOT NULL,
    burst_id         TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT NOT NULL,
    stimulus         TEXT NOT NULL,
    first_sent_at    INTEGER NOT NULL,
    last_sent_at     INTEGER NOT NULL,
    due_at           INTEGER NOT NULL,
    sends            INTEGER NOT NULL,
    claim_owner      TEXT,
    claim_expires_at INTEGER
) WITHOUT ROWID;
CREATE INDEX wf_debounce_due ON wf_debounce (due_at, debounce_id);
";

/// Recorded definitions: each registered version's JSON form, so tools can show a
/// definition without the application's code.
const MIGRATION_0006: &str = r"
CREATE TABLE wf_definitions (
    name        TEXT NOT NULL,
    version     TEXT NOT NULL,
    json        TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
";

/// A partial index on the bookmarks of parents waiting on a child workflow (ACT-24): start-up
/// finds them without reading every suspended instance. Partial, so the bookmarks stimuli
/// wait on (almost all of them) cost nothing more to write.
const MIGRATION_0007: &str = r"
CREATE INDEX wf_bookmarks_child_waits ON wf_bookmarks (bookmark_id)
    WHERE name = 'wf.sub_workflow';
";

/// What a listing shows of an instance (where it is, what it waits for), written by every
/// commit and creation beside the state, so a listing reads no state document (`NULL` for
/// rows written before: a listing reads their document).
const MIGRATION_0008: &str = r"
ALTER TABLE wf_instances ADD COLUMN listing TEXT;
";

/// The journal as one row per commit (ST-10): keyed by (instance, `last_seq`), the row holds
/// the commit's entries as one JSON array and `first_seq`, its oldest entry still kept (see
/// `store::journal_rows`). Each row of the previous form becomes a row of one entry, its
/// values unchanged (a detail that did not decode still does not, and still marks its entry
/// alone).
const MIGRATION_0009: &str = r"
ALTER TABLE wf_journal RENAME TO wf_journal_entries;
CREATE TABLE wf_journal (
    instance_id TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    first_seq   INTEGER NOT NULL,
    entries     TEXT NOT NULL,
    PRIMARY KEY (instance_id, last_seq)
);
INSERT INTO wf_journal (instance_id, last_seq, first_seq, entries)
SELECT instance_id, seq, seq, json_array(json_array(at, kind, context_id, node_id, detail))
  FROM wf_journal_entries;
DROP TABLE wf_journal_entries;
";

/// The journal and the bookmarks stored in their primary key's order (`WITHOUT ROWID`):
/// a row and its key are one B-tree entry instead of a table row plus an index entry, so a
/// transition's commit (one journal row appended, the oldest one deleted by the cap, a
/// bookmark replaced) writes one page fewer for each, and its probes by key read one tree
/// instead of two. Rows, columns, keys and the other indexes are the same as before. The
/// instance row keeps its journal's floor, the oldest entry shown (0: every entry stored is
/// shown): the cap raises it and deletes the rows below it in batches (`ops::cap_journal`).
const MIGRATION_0010: &str = r"
CREATE TABLE wf_journal_clustered (
    instance_id TEXT NOT NULL,
    last_seq    INTEGER NOT NULL,
    first_seq   INTEGER NOT NULL,
    entries     TEXT NOT NULL,
    PRIMARY KEY (instance_id, last_seq)
) WITHOUT ROWID;
INSERT INTO wf_journal_clustered (instance_id, last_seq, first_seq, entries)
SELECT instance_id, last_seq, first_seq, entries FROM wf_journal;
DROP TABLE wf_journal;
ALTER TABLE wf_journal_clustered RENAME TO wf_journal;

CREATE TABLE wf_bookmarks_clustered (
    bookmark_id        TEXT PRIMARY KEY NOT NULL,
    instance_id        TEXT NOT NULL,
    hash               TEXT NOT NULL,
    name               TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    context_id         INTEGER NOT NULL,
    correlation_id     TEXT,
    definition_name    TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    look_back          INTEGER,
    created_at         INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO wf_bookmarks_clustered (bookmark_id, instance_id, hash, name, node_id, context_id,
    correlation_id, definition_name, definition_version, look_back, created_at)
SELECT bookmark_id, instance_id, hash, name, node_id, context_id, correlation_id,
    definition_name, definition_version, look_back, created_at
  FROM wf_bookmarks;
DROP TABLE wf_bookmarks;
ALTER TABLE wf_bookmarks_clustered RENAME TO wf_bookmarks;
CREATE INDEX wf_bookmarks_hash ON wf_bookmarks (hash, created_at, bookmark_id);
CREATE INDEX wf_bookmarks_instance ON wf_bookmarks (instance_id);
CREATE INDEX wf_bookmarks_child_waits ON wf_bookmarks (bookmark_id)
    WHERE name = 'wf.sub_workflow';

ALTER TABLE wf_instances ADD COLUMN journal_floor INTEGER NOT NULL DEFAULT 0;
";

/// The bookmarks keyed by `(instance_id, bookmark_id)` (ST-6): the reads, deletes and
/// correlation rewrites of one instance's bookmarks (a commit's removed bookmark, the waits
/// cleared when it finishes, its listing, a purge) are ranges of the table's own key, so the
/// index `wf_bookmarks_instance` goes: a commit replacing a bookmark writes the table and the
/// hash index, two B-trees instead of three. A bookmark id is unique within its instance (the
/// key, C-9); ids are ULIDs drawn by the engine, so no second index checks them across
/// instances. Every row is copied as it is, and the hash and child-wait indexes are created
/// again (an index entry of a `WITHOUT ROWID` table carries the key: `instance_id` is
/// appended to each).
const MIGRATION_0011: &str = r"
CREATE TABLE wf_bookmarks_by_instance (
    instance_id        TEXT NOT NULL,
    bookmark_id        TEXT NOT NULL,
    hash               TEXT NOT NULL,
    name               TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    context_id         INTEGER NOT NULL,
    correlation_id     TEXT,
    definition_name    TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    look_back          INTEGER,
    created_at         INTEGER NOT NULL,
    PRIMARY KEY (instance_id, bookmark_id)
) WITHOUT ROWID;
INSERT INTO wf_bookmarks_by_instance (instance_id, bookmark_id, hash, name, node_id,
    context_id, correlation_id, definition_name, definition_version, look_back, created_at)
SELECT instance_id, bookmark_id, hash, name, node_id, context_id, correlation_id,
    definition_name, definition_version, look_back, created_at
  FROM wf_bookmarks;
DROP TABLE wf_bookmarks;
ALTER TABLE wf_bookmarks_by_instance RENAME TO wf_bookmarks;
CREATE INDEX wf_bookmarks_hash ON wf_bookmarks (hash, created_at, bookmark_id);
CREATE INDEX wf_bookmarks_child_waits ON wf_bookmarks (bookmark_id)
    WHERE name = 'wf.sub_workflow';
";

const MIGRATION_0001: &str = r"
CREATE TABLE wf_instances (
    instance_id        TEXT PRIMARY KEY NOT NULL,
    definition_name    TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    status             TEXT NOT NULL,
    sub_status         TEXT,
    correlation_id     TEXT,
    version            INTEGER NOT NULL,
    lease_owner        TEXT,
    lease_token        INTEGER NOT NULL DEFAULT 0,
    lease_expires_at   INTEGER,
    control_request    TEXT,
    origin_at          INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    state              TEXT NOT NULL,
    state_size         INTEGER NOT NULL
);
CREATE INDEX wf_instances_recovery ON wf_instances (status, lease_expires_at);
CREATE INDEX wf_instances_definition ON wf_instances (definition_name, status);
CREATE INDEX wf_instances_correlation ON wf_instances (correlation_id);
CREATE INDEX wf_instances_finished ON wf_instances (finished_at);

CREATE TABLE wf_bookmarks (
    bookmark_id        TEXT PRIMARY KEY NOT NULL,
    instance_id        TEXT NOT NULL,
    hash               TEXT NOT NULL,
    name               TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    context_id         INTEGER NOT NULL,
    correlation_id     TEXT,
    definition_name    TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    look_back          INTEGER,
    created_at         INTEGER NOT NULL
);
CREATE INDEX wf_bookmarks_hash ON wf_bookmarks (hash, created_at, bookmark_id);
CREATE INDEX wf_bookmarks_instance ON wf_bookmarks (instance_id);

CREATE TABLE wf_triggers (
    definition_name    TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    hash               TEXT NOT NULL,
    definition_version TEXT NOT NULL,
    name               TEXT NOT NULL,
    key_display        TEXT,
    payload            TEXT NOT NULL,
    activation         TEXT NOT NULL,
    registered_at      INTEGER NOT NULL,
    PRIMARY KEY (definition_name, node_id, hash)
);
CREATE INDEX wf_triggers_hash ON wf_triggers (hash);

CREATE TABLE wf_queue (
    item_id          TEXT PRIMARY KEY NOT NULL,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          INTEGER NOT NULL,
    enqueued_at      INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    last_attempt_at  INTEGER,
    held             INTEGER NOT NULL DEFAULT 0,
    idempotency_key  TEXT,
    claim_owner      TEXT,
    claim_expires_at INTEGER
);
CREATE INDEX wf_queue_order ON wf_queue (sent_at, item_id);
CREATE INDEX wf_queue_hash ON wf_queue (hash, sent_at);
CREATE INDEX wf_queue_expiry ON wf_queue (expires_at);

CREATE TABLE wf_dead_letters (
    original_item_id TEXT PRIMARY KEY NOT NULL,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          INTEGER NOT NULL,
    enqueued_at      INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    attempts         INTEGER NOT NULL,
    last_error       TEXT,
    last_attempt_at  INTEGER,
    held             INTEGER NOT NULL,
    idempotency_key  TEXT,
    reason           TEXT NOT NULL,
    error            TEXT,
    dead_at          INTEGER NOT NULL
);
CREATE INDEX wf_dead_letters_dead_at ON wf_dead_letters (dead_at);

CREATE TABLE wf_timers (
    timer_id         TEXT PRIMARY KEY NOT NULL,
    instance_id      TEXT,
    kind             TEXT NOT NULL,
    due_at           INTEGER NOT NULL,
    claim_owner      TEXT,
    claim_expires_at INTEGER,
    parked           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX wf_timers_due ON wf_timers (due_at);
CREATE INDEX wf_timers_instance ON wf_timers (instance_id);

CREATE TABLE wf_journal (
    instance_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    context_id  INTEGER,
    node_id     TEXT,
    detail      TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
) WITHOUT ROWID;

CREATE TABLE wf_receipts (
    instance_id TEXT NOT NULL,
    stimulus_id TEXT NOT NULL,
    at          INTEGER NOT NULL,
    PRIMARY KEY (instance_id, stimulus_id)
) WITHOUT ROWID;

CREATE TABLE wf_named_leases (
    name       TEXT PRIMARY KEY NOT NULL,
    owner      TEXT,
    token      INTEGER NOT NULL,
    expires_at INTEGER
);
";

/// Activation guards (ST-17) and idempotency records (ST-12).
const MIGRATION_0002: &str = r"
ALTER TABLE wf_instances ADD COLUMN activation_scope TEXT;
CREATE INDEX wf_instances_activation ON wf_instances (activation_scope, status);

CREATE TABLE wf_idempotency (
    idempotency_key TEXT PRIMARY KEY NOT NULL,
    hash            TEXT NOT NULL,
    payload_digest  TEXT NOT NULL,
    report          TEXT NOT NULL,
    created_at      INTEGER NOT NULL
);
CREATE INDEX wf_idempotency_created ON wf_idempotency (created_at);
";

/// Incidents (ST-12, FLT-6).
const MIGRATION_0003: &str = r"
CREATE TABLE wf_incidents (
    incident_id     TEXT PRIMARY KEY NOT NULL,
    instance_id     TEXT NOT NULL,
    definition_name TEXT NOT NULL,
    kind            TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    resolved_at     INTEGER,
    resolution      TEXT,
    record          TEXT NOT NULL
);
CREATE INDEX wf_incidents_instance ON wf_incidents (instance_id, created_at);
CREATE INDEX wf_incidents_created ON wf_incidents (created_at, incident_id);
";

/// Indexes for the retention of receipts (ST-30).
const MIGRATION_0004: &str = r"
CREATE INDEX wf_receipts_at ON wf_receipts (at);
";

/// Trigger schedules: timer rows without an instance (ST-9, TM-11 to TM-13).
const MIGRATION_0005: &str = r"
ALTER TABLE wf_timers ADD COLUMN definition_name TEXT;
ALTER TABLE wf_timers ADD COLUMN node_id TEXT;
CREATE INDEX wf_timers_definition ON wf_timers (definition_name);
";

/// The newest schema version this library knows.
pub(crate) fn latest_schema_version() -> u32 {
    MIGRATIONS.iter().map(|(v, _, _)| *v).max().unwrap_or(0)
}

/// FNV-1a (64 bits) of a migration's text, in hex: detects an edited migration (ST-28).
pub(super) fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Checks and applies migrations in one immediate transaction, which serialises concurrent
/// migrators: the later one finds the work done. Returns the versions applied now.
pub(super) fn migrate(conn: &mut Connection, mode: MigrateMode) -> StoreResult<Vec<u32>> {
    migrate_to(conn, mode, latest_schema_version())
}

/// [`migrate`] up to `target` only (test fixtures of older schemas, ST-29).
pub(super) fn migrate_to(
    conn: &mut Connection,
    mode: MigrateMode,
    target: u32,
) -> StoreResult<Vec<u32>> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS wf_schema_migrations (
            version    INTEGER PRIMARY KEY NOT NULL,
            name       TEXT NOT NULL,
            checksum   TEXT NOT NULL,
            applied_at INTEGER NOT NULL
        )",
    )?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let applied: Vec<(i64, String)> = {
        let mut stmt =
            tx.prepare("SELECT version, checksum FROM wf_schema_migrations ORDER BY version")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    let latest = latest_schema_version();
    let found =
        crate::store::migrations::check_recorded_migrations(&applied, MIGRATIONS, checksum)?;
    let pending: Vec<&(u32, &str, &str)> = MIGRATIONS
        .iter()
        .filter(|(v, _, _)| *v <= target && !applied.iter().any(|(a, _)| *a == i64::from(*v)))
        .collect();
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    if mode == MigrateMode::CheckOnly {
        return Err(StoreError::SchemaOutdated {
            found,
            required: latest,
        });
    }
    let mut done = Vec::new();
    for (version, name, sql) in pending {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO wf_schema_migrations (version, name, checksum, applied_at)
             VALUES (?1, ?2, ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER))",
            rusqlite::params![version, name, checksum(sql)],
        )?;
        done.push(*version);
    }
    tx.commit()?;
    Ok(done)
}

// ----- opening and threads -----

pub(super) fn configure(conn: &Connection, options: &SqliteOptions) -> StoreResult<()> {
    conn.busy_timeout(options.busy_timeout)?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::unavailable(format!(
            "could not enable WAL mode (journal_mode is {mode})"
        )));
    }
    conn.execute_batch(match options.synchronous {
        Synchronous::Full => "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
        Synchronous::Normal => "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
    })?;
    tune(conn)
}

/// The settings of every connection of a store, read connections included: a statement
/// cache that holds every statement of the hot paths (a commit's instance `UPDATE` alone has
/// a text per combination of the indexed columns it changes), and query plans that do not depend on
/// bound values. Without that guarantee (QPSG), SQLite re-prepares a statement whose plan
/// looked at a parameter (a `LIMIT ?`, a comparison with a partial index's condition) every
/// time that parameter is bound again, i.e. on every execution: one re-parse per routing
/// read, tens of microseconds each.
pub(super) fn tune(conn: &Connection) -> StoreResult<()> {
    conn.set_prepared_statement_cache_capacity(128);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// Refuses a file whose schema is older or newer than this library's (ST-29).
pub(super) fn require_current_schema(conn: &Connection) -> StoreResult<()> {
    let applied: Vec<i64> = {
        let mut stmt = conn.prepare("SELECT version FROM wf_schema_migrations")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let latest = latest_schema_version();
    let found = crate::store::migrations::newest_recorded(applied, latest)?;
    if found < latest {
        return Err(StoreError::SchemaOutdated {
            found,
            required: latest,
        });
    }
    Ok(())
}

/// Takes the exclusive lock of the `<file>-owner` side file, held for the store's life
/// (ST-26). A busy lock means another store holds the file: `InUse`, naming the holder
/// recorded in the database.
pub(super) fn take_owner_lock(path: &Path) -> StoreResult<Connection> {
    // The lock belongs to the file, not to the name it was opened by: a symbolic link (or
    // `..` in the path) names the same file, so it must name the same lock.
    let mut side = canonical(path).into_os_string();
    side.push("-owner");
    let lock = Connection::open(PathBuf::from(side))?;
    lock.busy_timeout(Duration::ZERO)?;
    let taken = lock.execute_batch(
        "PRAGMA locking_mode = EXCLUSIVE;
         BEGIN EXCLUSIVE;
         CREATE TABLE IF NOT EXISTS owner (taken INTEGER);
         COMMIT;",
    );
    match taken {
        Ok(()) => Ok(lock),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) =>
        {
            Err(in_use(path))
        }
        Err(e) => Err(e.into()),
    }
}

/// The file's canonical path (links resolved); for a file not created yet, its canonical
/// directory joined with its name.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            std::fs::canonicalize(dir).map_or_else(|_| path.to_path_buf(), |d| d.join(name))
        }
        _ => path.to_path_buf(),
    }
}

/// ST-14, ST-26: a file is written by one store at a time, so once its owner lock is taken
/// every instance lease, timer claim and queue claim recorded in it belongs to a store that
/// is gone (a killed process, a dropped store). They are cleared at once, the fencing tokens
/// of running instances advanced, so the new owner recovers interrupted instances and fires
/// overdue timers without waiting for the dead owner's TTLs. (An instance lease is kept in
/// the owner's memory and never written to its row, `leases.rs`: only a file last written by
/// an older version has one to clear.)
pub(super) fn take_over_dead_claims(conn: &Connection) -> StoreResult<()> {
    let cleared = conn.execute(
        "UPDATE wf_instances SET lease_owner = NULL, lease_expires_at = NULL
         WHERE lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL",
        [],
    )?;
    // The previous owner may have held the lease of any running instance, and the tokens it
    // issued were in its memory: each such row's token is advanced past one it may have used,
    // so a first token (1) still means that no process but this one's sweeps ever leased
    // the instance, which the runtime's recovery relies on (it leaves such an instance to its
    // creator for a while; the creator of one created before this open is gone).
    let taken = conn.execute(
        "UPDATE wf_instances SET lease_token = lease_token + 1 WHERE status = 'running'",
        [],
    )?;
    let taken = taken.max(cleared);
    let timers = conn.execute(
        "UPDATE wf_timers SET claim_owner = NULL, claim_expires_at = NULL
         WHERE claim_owner IS NOT NULL",
        [],
    )?;
    let queue = conn.execute(
        "UPDATE wf_queue SET claim_owner = NULL, claim_expires_at = NULL
         WHERE claim_owner IS NOT NULL",
        [],
    )?;
    if taken + timers + queue > 0 {
        tracing::info!(
            leases = taken,
            timer_claims = timers,
            queue_claims = queue,
            "sqlite store: took over the leases and claims of the file's previous owner"
        );
    }
    Ok(())
}

/// The tables the migrations create: each must exist once the schema is current.
const TABLES: &[&str] = &[
    "wf_instances",
    "wf_bookmarks",
    "wf_triggers",
    "wf_queue",
    "wf_dead_letters",
    "wf_timers",
    "wf_journal",
    "wf_receipts",
    "wf_named_leases",
    "wf_idempotency",
    "wf_incidents",
    "wf_definitions",
    "wf_flow_queues",
    "wf_flow_slots",
    "wf_flow_waiters",
    "wf_flow_turns",
    "wf_flow_starts",
    "wf_debounce",
    "wf_keys",
];

/// A table dropped from the file (by hand, by a tool) is found at open, not at the first
/// operation that needs it: `Decode` naming the table.
pub(super) fn check_tables(conn: &Connection) -> StoreResult<()> {
    let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
    let present: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    match TABLES.iter().find(|t| !present.iter().any(|p| p == *t)) {
        Some(missing) => Err(StoreError::Decode {
            what: "database file",
            id: String::new(),
            path: format!("table {missing}"),
            message: "the table is missing: the file was altered outside this library".to_owned(),
        }),
        None => Ok(()),
    }
}

/// An open error that names the file, so a message says which file could not be opened.
pub(super) fn naming_file(path: &Path, error: StoreError) -> StoreError {
    match error {
        StoreError::Decode {
            what,
            id,
            path: column,
            message,
        } if id.is_empty() => StoreError::Decode {
            what,
            id: path.display().to_string(),
            path: column,
            message,
        },
        StoreError::Unavailable { message } => StoreError::Unavailable {
            message: format!("cannot open SQLite file `{}`: {message}", path.display()),
        },
        other => other,
    }
}

/// `InUse` with the holder recorded in the database, when it can be read.
pub(super) fn in_use(path: &Path) -> StoreError {
    let recorded = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| {
            c.query_row(
                "SELECT owner, expires_at FROM wf_named_leases WHERE name = 'store-owner'",
                [],
                |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<i64>>(1)?)),
            )
        })
        .ok();
    let (holder, until) = recorded.unwrap_or_default();
    StoreError::InUse {
        holder: holder.unwrap_or_else(|| "another store".to_owned()),
        until: until.unwrap_or(i64::MAX),
    }
}
