//! `SqliteStore`: the embedded default backend (ST-26).
//!
//! One database file, WAL mode, foreign keys on, a busy timeout and `synchronous = FULL` by
//! default. A single writer thread owns the only write connection; requests arrive over a
//! channel and the writer takes every pending request (up to a batch limit), applies each in
//! its own savepoint inside one transaction — so one failed version check rolls back only its
//! own request — commits once (one sync), then answers each request with its own result. It
//! never waits to fill a batch: a lone commit is written at once and batches form naturally
//! under load (group commit). Reads run on a small pool of read-only connections on WAL
//! snapshots and never block the writer.
//!
//! The futures returned are executor-agnostic: the blocking work runs on the store's own
//! threads and results come back over `tokio::sync::oneshot` channels.
//!
//! Schema migrations are forward-only, numbered, checksummed and recorded in
//! `wf_schema_migrations` (ST-28); every statement is parameterized (ST-1).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, Row, TransactionBehavior};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::memory::same_trigger;
use super::{
    BookmarkQuery, BookmarkRow, BoxFuture, ClaimedInstance, Commit, ControlRequest,
    DEFAULT_MAX_STATE_BYTES, DeadLetter, DeadLetterReason, IdempotencyRecord, InstanceFilter,
    InstanceRecord, InstanceStatus, InstanceSubStatus, JournalRecord, Lease, LeaseState,
    ListedInstance, MigrateMode, NewInstance, NewJournalRecord, PurgeFilter, QueueFailure,
    QueueItem, Renewal, Store, StoreError, StoreResult, StoreStats, TimerRow, TriggerDiff,
    TriggerRow, WAKE_UP_CAPACITY, WakeUp, commit_hints, create_hint, decode_state, encode_commit,
    encode_state, instance_resource, journal_detail, named_resource, page, purge_statuses,
    send_hints, validate_instance_id,
};
use super::{DeadLetterFilter, IncidentRecord, NewIncident, Schedule, ScheduleFiring};

/// SQLite's `synchronous` setting (ST-26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced: survives power loss. The default.
    #[default]
    Full,
    /// Survives a process crash, may lose the last commits on power loss.
    Normal,
}

/// Options of [`SqliteStore::open_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Durability of each transaction.
    pub synchronous: Synchronous,
    /// Migrations: apply or only check.
    pub migrate: MigrateMode,
    /// The state size limit (ST-24).
    pub max_state_bytes: usize,
    /// Read connections (at least one).
    pub readers: usize,
    /// The most write requests grouped into one transaction (ST-26: 256).
    pub max_batch: usize,
    /// The most state bytes grouped into one transaction (ST-26: 4 MiB); a batch closes once
    /// it reaches this size.
    pub max_batch_bytes: usize,
    /// How long a connection waits on a lock held by another process.
    pub busy_timeout: Duration,
    /// The name recorded as the file's owner and reported in `InUse` (default `pid <n>`).
    pub owner: Option<String>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            migrate: MigrateMode::Apply,
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            readers: 2,
            max_batch: 256,
            max_batch_bytes: 4 * 1024 * 1024,
            busy_timeout: Duration::from_secs(5),
            owner: None,
        }
    }
}

/// Answers one write request once its transaction has committed (`None`) or failed.
type Responder = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// One write request: runs inside its savepoint (or not at all when given `None`) and says
/// whether it succeeded.
type WriteJob = Box<dyn FnOnce(Option<&Connection>) -> (bool, Responder) + Send>;
/// A write request with its approximate size in bytes (the state documents it writes).
type WriteRequest = (usize, WriteJob);
/// One read request.
type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

#[derive(Debug, Default)]
struct Counters {
    write_requests: AtomicU64,
    transactions: AtomicU64,
}

/// The embedded SQLite store (ST-26). Wrap it in an `Arc` to share it
/// (`Arc<dyn Store>`); dropping the last handle stops its threads and closes the file.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
///
/// use workflow_runtime::{Runtime, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("workflows.db");
/// let store = SqliteStore::open(&path)?; // created, or migrated, on open
/// let runtime = Runtime::builder().store(Arc::new(store)).build()?;
/// # drop(runtime);
/// # Ok(())
/// # }
/// ```
pub struct SqliteStore {
    writer: Option<mpsc::Sender<WriteRequest>>,
    readers: Option<mpsc::Sender<ReadJob>>,
    threads: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    max_state_bytes: usize,
    path: PathBuf,
    migrations_applied: Vec<u32>,
    hints: broadcast::Sender<WakeUp>,
    /// Holds the exclusive lock on the `-owner` side file while the store is open (ST-26).
    /// Declared last: released after the threads have stopped.
    _owner_lock: Option<Mutex<Connection>>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("max_state_bytes", &self.max_state_bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.writer = None;
        self.readers = None;
        for thread in self.threads.drain(..) {
            // A panicked thread has nothing left to clean up.
            let _ = thread.join();
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::unavailable(error)
    }
}

fn closed() -> StoreError {
    StoreError::unavailable("the store is closed")
}

fn is_constraint(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::ConstraintViolation)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_owned(),
    }
}

fn json_text(value: &Value) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid {
        what: "json",
        reason: e.to_string(),
    })
}

fn decode_json(what: &'static str, id: &str, path: &str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Decode {
        what,
        id: id.to_owned(),
        path: path.to_owned(),
        message: e.to_string(),
    })
}

// ----- migrations (ST-28) -----

/// The embedded, forward-only migrations: `(version, name, sql)`.
const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "0001_init", MIGRATION_0001),
    (2, "0002_activation_and_idempotency", MIGRATION_0002),
    (3, "0003_incidents", MIGRATION_0003),
    (4, "0004_retention_indexes", MIGRATION_0004),
    (5, "0005_trigger_schedules", MIGRATION_0005),
];

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
fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Checks and applies migrations in one immediate transaction, which serialises concurrent
/// migrators: the later one finds the work done. Returns the versions applied now.
fn migrate(conn: &mut Connection, mode: MigrateMode) -> StoreResult<Vec<u32>> {
    migrate_to(conn, mode, latest_schema_version())
}

/// [`migrate`] up to `target` only (test fixtures of older schemas, ST-29).
fn migrate_to(conn: &mut Connection, mode: MigrateMode, target: u32) -> StoreResult<Vec<u32>> {
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
    let found = applied
        .iter()
        .map(|(v, _)| u32::try_from(*v).unwrap_or(u32::MAX))
        .max()
        .unwrap_or(0);
    if found > latest {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: latest,
        });
    }
    for (version, sum) in &applied {
        let version = u32::try_from(*version).unwrap_or(u32::MAX);
        let embedded = MIGRATIONS.iter().find(|(v, _, _)| *v == version);
        if embedded.is_none_or(|(_, _, sql)| checksum(sql) != *sum) {
            return Err(StoreError::MigrationChecksumMismatch { version });
        }
    }
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

fn configure(conn: &Connection, options: &SqliteOptions) -> StoreResult<()> {
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
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Refuses a file whose schema is older or newer than this library's (ST-29).
fn require_current_schema(conn: &Connection) -> StoreResult<()> {
    let applied: Vec<i64> = {
        let mut stmt = conn.prepare("SELECT version FROM wf_schema_migrations")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let latest = latest_schema_version();
    let found = applied
        .iter()
        .map(|v| u32::try_from(*v).unwrap_or(u32::MAX))
        .max()
        .unwrap_or(0);
    if found > latest {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: latest,
        });
    }
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
fn take_owner_lock(path: &Path) -> StoreResult<Connection> {
    let mut side = path.as_os_str().to_owned();
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

/// ST-14, ST-26: a file is written by one store at a time, so once its owner lock is taken
/// every instance lease, timer claim and queue claim recorded in it belongs to a store that
/// is gone (a killed process, a dropped store). They are expired at once, keeping their
/// fencing tokens, so the new owner recovers interrupted instances and fires overdue timers
/// without waiting for the dead owner's TTLs; a late commit of the old owner stays fenced.
fn take_over_dead_claims(conn: &Connection) -> StoreResult<()> {
    let taken = conn.execute(
        "UPDATE wf_instances SET lease_expires_at = 0
         WHERE lease_owner IS NOT NULL AND lease_expires_at > 0",
        [],
    )?;
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

/// An open error that names the file, so a message says which file could not be opened.
fn naming_file(path: &Path, error: StoreError) -> StoreError {
    match error {
        StoreError::Unavailable { message } => StoreError::Unavailable {
            message: format!("cannot open SQLite file `{}`: {message}", path.display()),
        },
        other => other,
    }
}

/// `InUse` with the holder recorded in the database, when it can be read.
fn in_use(path: &Path) -> StoreError {
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

/// Takes every pending request up to the batch limits, without waiting for more (ST-26).
fn writer_loop(
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
fn run_batch(conn: &Connection, batch: Vec<WriteJob>, counters: &Counters) {
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

fn reader_loop(conn: &Connection, rx: &Mutex<mpsc::Receiver<ReadJob>>) {
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

impl SqliteStore {
    /// Opens (creating if needed) the database file with the default options, applying
    /// pending migrations. Blocking: call it at start-up.
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::open_with`].
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(path, &SqliteOptions::default())
    }

    /// Opens the database file with `options`. Blocking: call it at start-up.
    ///
    /// Only one store may hold a file for writing: another open (in this process or another)
    /// gets `InUse { holder, until }` until this store is dropped or its process exits; the
    /// operating system releases the lock of a killed process, so a restart after a crash
    /// opens at once. Use [`SqliteStore::open_read_only`] to inspect a file in use.
    ///
    /// # Errors
    ///
    /// [`StoreError::InUse`] when another store holds the file for writing,
    /// [`StoreError::SchemaTooNew`] or [`StoreError::MigrationChecksumMismatch`] for a schema this
    /// version cannot use, and [`StoreError::Unavailable`] when the file cannot be opened or
    /// created.
    pub fn open_with(path: impl AsRef<Path>, options: &SqliteOptions) -> StoreResult<Self> {
        let path = path.as_ref();
        Self::open_with_inner(path, options).map_err(|e| naming_file(path, e))
    }

    fn open_with_inner(path: &Path, options: &SqliteOptions) -> StoreResult<Self> {
        let path = path.to_path_buf();
        let holder = options
            .owner
            .clone()
            .unwrap_or_else(|| format!("pid {}", std::process::id()));
        let owner_lock = take_owner_lock(&path)?;
        let mut conn = Connection::open(&path)?;
        configure(&conn, options)?;
        let migrations_applied = migrate(&mut conn, options.migrate)?;
        conn.execute(
            "INSERT INTO wf_named_leases (name, owner, token, expires_at)
             VALUES ('store-owner', ?1, 1, ?2)
             ON CONFLICT (name) DO UPDATE SET owner = ?1, token = token + 1, expires_at = ?2",
            rusqlite::params![holder, i64::MAX],
        )?;
        take_over_dead_claims(&conn)?;
        Self::start(
            path,
            Some(conn),
            options,
            migrations_applied,
            Some(owner_lock),
        )
    }

    /// Opens a file read-only, for inspection, even while another store holds it (C-33).
    /// The schema must be current (`SchemaOutdated` or `SchemaTooNew` otherwise); every write
    /// operation fails with `Invalid`.
    ///
    /// # Errors
    ///
    /// [`StoreError::SchemaOutdated`] or [`StoreError::SchemaTooNew`] when the schema is not
    /// current, [`StoreError::Unavailable`] when the file cannot be opened.
    pub fn open_read_only(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref();
        Self::open_read_only_inner(path).map_err(|e| naming_file(path, e))
    }

    fn open_read_only_inner(path: &Path) -> StoreResult<Self> {
        let path = path.to_path_buf();
        let options = SqliteOptions::default();
        let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(options.busy_timeout)?;
        require_current_schema(&conn)?;
        drop(conn);
        Self::start(path, None, &options, Vec::new(), None)
    }

    /// Opens a file for an operator's requests beside the process that holds it: no owner
    /// lock is taken, so it opens while an application runs on the file (the `workflow`
    /// command line uses it). Use it only for writes that are safe beside the owner and that
    /// the owner picks up by itself: enqueueing a stimulus (its queue worker delivers it),
    /// recording a control request (applied at the instance's next step), replaying a dead
    /// letter, purging final instances. It never creates the file nor migrates it: the schema
    /// must be current (`SchemaOutdated` or `SchemaTooNew` otherwise).
    ///
    /// # Errors
    ///
    /// `NotFound`-like open errors from SQLite when the file is missing, and the schema
    /// errors above.
    pub fn open_operator(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref();
        Self::open_operator_inner(path).map_err(|e| naming_file(path, e))
    }

    fn open_operator_inner(path: &Path) -> StoreResult<Self> {
        let path = path.to_path_buf();
        let options = SqliteOptions::default();
        let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        configure(&conn, &options)?;
        require_current_schema(&conn)?;
        Self::start(path, Some(conn), &options, Vec::new(), None)
    }

    /// Starts the writer (when given its connection) and the readers.
    fn start(
        path: PathBuf,
        writer: Option<Connection>,
        options: &SqliteOptions,
        migrations_applied: Vec<u32>,
        owner_lock: Option<Connection>,
    ) -> StoreResult<Self> {
        let counters = Arc::new(Counters::default());
        let mut threads = Vec::new();
        let write_tx = match writer {
            Some(conn) => {
                let (write_tx, write_rx) = mpsc::channel::<WriteRequest>();
                let writer_counters = Arc::clone(&counters);
                let limits = (options.max_batch.max(1), options.max_batch_bytes.max(1));
                threads.push(
                    std::thread::Builder::new()
                        .name("wf-sqlite-writer".to_owned())
                        .spawn(move || writer_loop(&conn, &write_rx, limits, &writer_counters))
                        .map_err(StoreError::unavailable)?,
                );
                Some(write_tx)
            }
            None => None,
        };

        let (read_tx, read_rx) = mpsc::channel::<ReadJob>();
        let read_rx = Arc::new(Mutex::new(read_rx));
        for n in 0..options.readers.max(1) {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(options.busy_timeout)?;
            conn.set_prepared_statement_cache_capacity(64);
            let rx = Arc::clone(&read_rx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("wf-sqlite-reader-{n}"))
                    .spawn(move || reader_loop(&conn, &rx))
                    .map_err(StoreError::unavailable)?,
            );
        }

        Ok(Self {
            writer: write_tx,
            readers: Some(read_tx),
            threads,
            counters,
            max_state_bytes: options.max_state_bytes,
            path,
            migrations_applied,
            hints: broadcast::Sender::new(WAKE_UP_CAPACITY),
            _owner_lock: owner_lock.map(Mutex::new),
        })
    }

    /// Creates a database file with the migrations up to `version` only: a fixture of an
    /// older schema for upgrade tests (ST-29).
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the file cannot be created or migrated.
    #[cfg(feature = "test-support")]
    pub fn create_at_schema(path: impl AsRef<Path>, version: u32) -> StoreResult<()> {
        let mut conn = Connection::open(path)?;
        configure(&conn, &SqliteOptions::default())?;
        migrate_to(&mut conn, MigrateMode::Apply, version)?;
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The migrations this open applied (empty when the schema was current, ST-28).
    pub fn migrations_applied(&self) -> &[u32] {
        &self.migrations_applied
    }

    /// The newest schema version this library knows.
    pub fn schema_version() -> u32 {
        latest_schema_version()
    }

    /// Replaces an instance's stored state text as is: a test hook to simulate a corrupted
    /// or hand-edited row (C-25, C-26).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown instance, [`StoreError::Unavailable`] when the
    /// write fails.
    #[cfg(feature = "test-support")]
    pub async fn write_raw_state(&self, instance_id: &str, raw: &str) -> StoreResult<()> {
        let (id, raw) = (instance_id.to_owned(), raw.to_owned());
        self.write(move |c| {
            let n = c.execute(
                "UPDATE wf_instances SET state = ?1 WHERE instance_id = ?2",
                rusqlite::params![raw, id],
            )?;
            if n == 0 {
                return Err(not_found("instance", &id));
            }
            Ok(())
        })
        .await
    }

    /// The stored state text of an instance, as is (test hook, C-26).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown instance, [`StoreError::Unavailable`] when the
    /// read fails.
    #[cfg(feature = "test-support")]
    pub async fn read_raw_state(&self, instance_id: &str) -> StoreResult<String> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            c.query_row(
                "SELECT state FROM wf_instances WHERE instance_id = ?1",
                [&id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| not_found("instance", &id))
        })
        .await
    }

    /// The stimuli waiting in the queue, oldest sent first, at most `limit`, for inspection
    /// (the `workflow why` command): read-only, no claim is taken, so it works on a file
    /// opened with [`SqliteStore::open_read_only`] beside the running application. An item
    /// whose row does not decode is left out.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the read fails.
    pub async fn queued(&self, limit: usize) -> StoreResult<Vec<QueueItem>> {
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT item_id, {QUEUE_COLS} FROM wf_queue ORDER BY sent_at, item_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit_i64(limit)], queue_from_row)?;
            let mut items = Vec::new();
            for raw in rows {
                if let Ok(item) = raw?.decode("queue item") {
                    items.push(item);
                }
            }
            Ok(items)
        })
        .await
    }

    /// Sends one write request to the writer thread.
    fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.write_sized(0, f)
    }

    /// Sends one write request of about `bytes` bytes to the writer thread.
    fn write_sized<T: Send + 'static>(
        &self,
        bytes: usize,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: WriteJob = Box::new(move |conn| {
            let result = match conn {
                Some(conn) => f(conn),
                None => Err(StoreError::unavailable("the transaction was aborted")),
            };
            let ok = result.is_ok();
            let responder: Responder = Box::new(move |failure| {
                let _ = tx.send(match failure {
                    None => result,
                    Some(e) => Err(e),
                });
            });
            (ok, responder)
        });
        let Some(writer) = &self.writer else {
            return Box::pin(std::future::ready(Err(StoreError::Invalid {
                what: "operation",
                reason: "the store was opened read-only".to_owned(),
            })));
        };
        let sent = writer.send((bytes, job)).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(closed());
            }
            rx.await.unwrap_or_else(|_| Err(closed()))
        })
    }

    /// Sends one write request and, once it has committed successfully, `hints` (ST-18).
    fn write_hinting<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        hints: Vec<WakeUp>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.write_sized_hinting(0, f, hints)
    }

    /// [`SqliteStore::write_sized`], then `hints` once committed successfully.
    fn write_sized_hinting<T: Send + 'static>(
        &self,
        bytes: usize,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        hints: Vec<WakeUp>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let write = self.write_sized(bytes, f);
        let sender = self.hints.clone();
        Box::pin(async move {
            let result = write.await;
            if result.is_ok() {
                send_hints(&sender, hints);
            }
            result
        })
    }

    /// Sends one read request to the reader pool.
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: ReadJob = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        let sent = self.readers.as_ref().is_some_and(|r| r.send(job).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(closed());
            }
            rx.await.unwrap_or_else(|_| Err(closed()))
        })
    }
}

// ----- row decoding -----

const INSTANCE_COLS: &str = "instance_id, definition_name, definition_version, status, \
    sub_status, correlation_id, version, lease_owner, lease_token, lease_expires_at, \
    control_request, origin_at, created_at, updated_at, finished_at, state";

/// Decodes one instance row; any failure is a `Decode` naming the instance (ST-22).
fn instance_from_row(id: &str, row: &Row<'_>) -> StoreResult<InstanceRecord> {
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
    let state: String = row.get(15).map_err(col)?;
    Ok(InstanceRecord {
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
        state: decode_state(id, &state)?,
    })
}

const BOOKMARK_COLS: &str = "bookmark_id, instance_id, hash, name, node_id, context_id, \
    correlation_id, definition_name, definition_version, look_back, created_at";

fn bookmark_from_row(row: &Row<'_>) -> rusqlite::Result<BookmarkRow> {
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

const TIMER_COLS: &str = "timer_id, instance_id, kind, due_at, parked, definition_name, node_id";

fn timer_from_row(row: &Row<'_>) -> rusqlite::Result<TimerRow> {
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
const QUEUE_COLS: &str = "stimulus_id, name, hash, key_display, payload, correlation_id, \
    targets, sent_at, enqueued_at, expires_at, attempts, last_error, last_attempt_at, held, \
    idempotency_key";

/// Raw queue row: JSON columns still encoded.
struct RawQueue {
    item: QueueItem,
    payload: String,
    targets: String,
}

/// Reads `id, QUEUE_COLS...` starting at column 0.
fn queue_from_row(row: &Row<'_>) -> rusqlite::Result<RawQueue> {
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
    fn decode(self, what: &'static str) -> StoreResult<QueueItem> {
        let mut item = self.item;
        item.payload = decode_json(what, &item.item_id, "payload", &self.payload)?;
        item.targets = decode_json(what, &item.item_id, "targets", &self.targets)?;
        Ok(item)
    }
}

// ----- write operations (run on the writer thread, inside a savepoint) -----

/// What a commit reads first: version, lease owner and token, definition name and version,
/// correlation id.
type CommitGuard = (i64, Option<String>, i64, String, String, Option<String>);

fn commit_tx(c: &Connection, commit: &Commit, state: &str, created: &[String]) -> StoreResult<u64> {
    let id = commit.instance_id.as_str();
    let row: Option<CommitGuard> = c
        .prepare_cached(
            "SELECT version, lease_owner, lease_token, definition_name, definition_version,
                correlation_id
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
            ))
        })
        .optional()?;
    let (version, lease_owner, lease_token, definition_name, definition_version, correlation) =
        row.ok_or_else(|| not_found("instance", id))?;
    let version = to_u64(version);
    if version != commit.expected_version {
        return Err(StoreError::Conflict {
            instance: id.to_owned(),
            expected: commit.expected_version,
            actual: version,
        });
    }
    let lease_token = to_u64(lease_token);
    if lease_owner.is_none() || lease_token != commit.lease_token {
        return Err(StoreError::Fenced {
            resource: instance_resource(id),
            token: commit.lease_token,
            current: lease_token,
        });
    }
    {
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
    {
        let mut stmt = c.prepare_cached(
            "DELETE FROM wf_bookmarks WHERE bookmark_id = ?1 AND instance_id = ?2",
        )?;
        for bookmark_id in &commit.bookmarks_removed {
            stmt.execute([bookmark_id, id])?;
        }
    }
    {
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
        // C-10: the bookmark rows follow the instance's correlation id.
        c.prepare_cached(
            "UPDATE wf_bookmarks SET correlation_id = ?1
             WHERE instance_id = ?2 AND correlation_id IS NOT ?1",
        )?
        .execute(rusqlite::params![commit.correlation_id, id])?;
    }
    {
        let mut stmt =
            c.prepare_cached("DELETE FROM wf_timers WHERE timer_id = ?1 AND instance_id = ?2")?;
        for timer_id in &commit.timers_removed {
            stmt.execute([timer_id, id])?;
        }
    }
    {
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
    if commit.status.is_final() {
        // ENG-22: a final instance has no bookmarks or timers.
        c.prepare_cached("DELETE FROM wf_bookmarks WHERE instance_id = ?1")?
            .execute([id])?;
        c.prepare_cached("DELETE FROM wf_timers WHERE instance_id = ?1")?
            .execute([id])?;
    }
    if let Some(compaction) = &commit.journal_compaction {
        let through = to_i64(compaction.through_seq);
        c.prepare_cached("DELETE FROM wf_journal WHERE instance_id = ?1 AND seq <= ?2")?
            .execute(rusqlite::params![id, through])?;
        insert_journal(c, id, through, &compaction.summary)?;
    }
    if !commit.journal.is_empty() {
        let last: i64 = c
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM wf_journal WHERE instance_id = ?1")?
            .query_row([id], |r| r.get(0))?;
        for (seq, entry) in (last + 1..).zip(&commit.journal) {
            insert_journal(c, id, seq, entry)?;
        }
    }
    {
        let mut stmt = c.prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?;
        for item in &commit.consumed_queue_items {
            stmt.execute([item])?;
        }
    }
    for (instance, state) in commit.instances_created.iter().zip(created) {
        insert_instance_tx(c, instance, state)?;
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
    for (target, request) in &commit.control_requests {
        let text = serde_json::to_string(request).map_err(StoreError::unavailable)?;
        c.prepare_cached(
            "UPDATE wf_instances SET control_request = ?1
             WHERE instance_id = ?2 AND status NOT IN ('finished', 'cancelled')",
        )?
        .execute([&text, target])?;
    }
    c.prepare_cached(
        "UPDATE wf_instances SET
            version = version + 1, state = ?1, state_size = ?2, status = ?3, sub_status = ?4,
            correlation_id = ?5, updated_at = ?6, finished_at = ?7,
            control_request = CASE WHEN ?8 THEN NULL ELSE control_request END,
            lease_owner = CASE WHEN ?9 THEN NULL ELSE lease_owner END,
            lease_expires_at = CASE WHEN ?9 THEN NULL ELSE lease_expires_at END
         WHERE instance_id = ?10",
    )?
    .execute(rusqlite::params![
        state,
        limit_i64(state.len()),
        commit.status.as_str(),
        commit.sub_status.map(InstanceSubStatus::as_str),
        commit.correlation_id,
        commit.now,
        commit.status.is_final().then_some(commit.now),
        commit.clear_control_request,
        commit.release_lease,
        id,
    ])?;
    Ok(version + 1)
}

/// Inserts a new instance at version 1 with its receipt and consumed queue item (ST-17).
fn insert_instance_tx(c: &Connection, i: &NewInstance, state: &str) -> StoreResult<()> {
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
                created_at, updated_at, finished_at, state, state_size, activation_scope)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, 0, ?7, ?8, ?8, ?9, ?10, ?11, ?12)",
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

fn insert_journal(c: &Connection, id: &str, seq: i64, entry: &NewJournalRecord) -> StoreResult<()> {
    let detail = json_text(&journal_detail(&entry.detail))?;
    c.prepare_cached(
        "INSERT INTO wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(rusqlite::params![
        id,
        seq,
        entry.at,
        entry.kind,
        entry.context_id.map(to_i64),
        entry.node_id,
        detail,
    ])?;
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
    now: i64,
) -> StoreResult<bool> {
    let inserted = c
        .prepare_cached(&format!(
            "INSERT OR IGNORE INTO wf_dead_letters (original_item_id, {QUEUE_COLS}, reason, error, dead_at)
             SELECT item_id, {QUEUE_COLS}, ?2, ?3, ?4 FROM wf_queue WHERE item_id = ?1"
        ))?
        .execute(rusqlite::params![item_id, reason.as_str(), error, now])?;
    let deleted = c
        .prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?
        .execute([item_id])?;
    Ok(inserted > 0 && deleted > 0)
}

/// Moves an undecodable queue item to the dead letters as `Rejected`, wrapping its raw JSON
/// columns as `{"undecodable": "<text>"}` so the dead letter itself decodes (ST-22).
fn quarantine_queue_item(
    c: &Connection,
    item_id: &str,
    payload: &str,
    targets: &str,
    error: &StoreError,
    now: i64,
) -> StoreResult<()> {
    let wrap = |raw: &str| -> StoreResult<String> {
        match serde_json::from_str::<Value>(raw) {
            Ok(_) => Ok(raw.to_owned()),
            Err(_) => json_text(&serde_json::json!({ "undecodable": raw })),
        }
    };
    c.prepare_cached("UPDATE wf_queue SET payload = ?2, targets = ?3 WHERE item_id = ?1")?
        .execute(rusqlite::params![item_id, wrap(payload)?, wrap(targets)?])?;
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
        "DELETE FROM wf_instances WHERE instance_id = ?1",
    ] {
        c.prepare_cached(sql)?.execute([id])?;
    }
    Ok(())
}

fn acquire_instance_lease(
    c: &Connection,
    id: &str,
    owner: &str,
    now: i64,
    ttl: i64,
) -> StoreResult<Lease> {
    let row: Option<(Option<String>, Option<i64>)> = c
        .prepare_cached(
            "SELECT lease_owner, lease_expires_at FROM wf_instances WHERE instance_id = ?1",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (holder, until) = row.ok_or_else(|| not_found("instance", id))?;
    if let (Some(holder), Some(until)) = (holder, until)
        && until > now
    {
        return Err(StoreError::LeaseHeld {
            resource: instance_resource(id),
            holder,
            until,
        });
    }
    let expires_at = now.saturating_add(ttl);
    let token: i64 = c
        .prepare_cached(
            "UPDATE wf_instances SET lease_token = lease_token + 1, lease_owner = ?2,
                lease_expires_at = ?3
             WHERE instance_id = ?1 RETURNING lease_token",
        )?
        .query_row(rusqlite::params![id, owner, expires_at], |r| r.get(0))?;
    Ok(Lease {
        token: to_u64(token),
        expires_at,
    })
}

/// Checks that `token` is the current, held token of an instance lease.
fn check_instance_token(c: &Connection, id: &str, token: u64) -> StoreResult<()> {
    let row: Option<(Option<String>, i64)> = c
        .prepare_cached("SELECT lease_owner, lease_token FROM wf_instances WHERE instance_id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (owner, current) = row.ok_or_else(|| not_found("instance", id))?;
    if owner.is_none() || to_u64(current) != token {
        return Err(StoreError::Fenced {
            resource: instance_resource(id),
            token,
            current: to_u64(current),
        });
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
            resource: named_resource(name),
            token,
            current: other.map_or(0, |(_, t)| to_u64(t)),
        }),
    }
}

impl Store for SqliteStore {
    fn create_instance(&self, instance: NewInstance) -> BoxFuture<'_, StoreResult<u64>> {
        let encoded = validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes));
        let state = match encoded {
            Ok(state) => state,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let hints = create_hint(&instance).into_iter().collect();
        self.write_sized_hinting(
            state.len(),
            move |c| {
                insert_instance_tx(c, &instance, &state)?;
                Ok(1)
            },
            hints,
        )
    }

    fn load_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<InstanceRecord>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INSTANCE_COLS} FROM wf_instances WHERE instance_id = ?1"
            ))?;
            let mut rows = stmt.query([&id])?;
            match rows.next()? {
                Some(row) => instance_from_row(&id, row),
                None => Err(not_found("instance", &id)),
            }
        })
    }

    fn commit(&self, commit: Commit) -> BoxFuture<'_, StoreResult<u64>> {
        let (state, created) = match encode_commit(&commit, self.max_state_bytes) {
            Ok(encoded) => encoded,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let hints = commit_hints(&commit);
        let bytes = created
            .iter()
            .fold(state.len(), |n, s| n.saturating_add(s.len()));
        self.write_sized_hinting(
            bytes,
            move |c| commit_tx(c, &commit, &state, &created),
            hints,
        )
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write_hinting(
            move |c| {
                let status: Option<String> = c
                    .prepare_cached("SELECT status FROM wf_instances WHERE instance_id = ?1")?
                    .query_row([&id], |r| r.get(0))
                    .optional()?;
                let status = status.ok_or_else(|| not_found("instance", &id))?;
                if InstanceStatus::parse(&status).is_none_or(InstanceStatus::is_final) {
                    return Err(StoreError::Invalid {
                        what: "control request",
                        reason: format!("instance {id} is {status}"),
                    });
                }
                let text = serde_json::to_string(&request).map_err(StoreError::unavailable)?;
                c.prepare_cached(
                    "UPDATE wf_instances SET control_request = ?1 WHERE instance_id = ?2",
                )?
                .execute([&text, &id])?;
                Ok(())
            },
            vec![WakeUp::ControlRequested {
                id: instance_id.to_owned(),
            }],
        )
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INSTANCE_COLS} FROM wf_instances
                 WHERE (?1 IS NULL OR status = ?1)
                   AND (?2 IS NULL OR definition_name = ?2)
                   AND (?3 IS NULL OR correlation_id = ?3)
                   AND (?4 IS NULL OR instance_id > ?4)
                   AND (?6 = 0 OR control_request IS NOT NULL)
                 ORDER BY instance_id LIMIT ?5"
            ))?;
            let mut rows = stmt.query(rusqlite::params![
                filter.status.map(InstanceStatus::as_str),
                filter.definition_name,
                filter.correlation_id,
                filter.after,
                limit_i64(page(filter.limit, 100)),
                filter.control_requested,
            ])?;
            let mut listed = Vec::new();
            while let Some(row) = rows.next()? {
                let id: String = row.get(0)?;
                let record = instance_from_row(&id, row);
                listed.push(ListedInstance {
                    instance_id: id,
                    record,
                });
            }
            Ok(listed)
        })
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: i64,
        ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        let owner = owner.to_owned();
        self.write(move |c| {
            let candidates: Vec<(String, Option<String>)> = {
                let mut stmt = c.prepare_cached(
                    "SELECT instance_id, sub_status FROM wf_instances
                     WHERE status = 'running'
                       AND (lease_owner IS NULL OR lease_expires_at IS NULL
                            OR lease_expires_at <= ?1)
                     ORDER BY updated_at, instance_id LIMIT ?2",
                )?;
                let rows = stmt.query_map(rusqlite::params![now, limit_i64(limit)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
                rows.collect::<Result<_, _>>()?
            };
            let mut claimed = Vec::with_capacity(candidates.len());
            for (id, sub_status) in candidates {
                let lease = acquire_instance_lease(c, &id, &owner, now, ttl)?;
                claimed.push(ClaimedInstance {
                    instance_id: id,
                    sub_status: sub_status.as_deref().and_then(InstanceSubStatus::parse),
                    lease,
                });
            }
            Ok(claimed)
        })
    }

    fn delete_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write(move |c| {
            let status: Option<String> = c
                .prepare_cached("SELECT status FROM wf_instances WHERE instance_id = ?1")?
                .query_row([&id], |r| r.get(0))
                .optional()?;
            let status = status.ok_or_else(|| not_found("instance", &id))?;
            match InstanceStatus::parse(&status) {
                Some(s) if s.is_final() => delete_dependents(c, &id),
                Some(s) => Err(StoreError::NotTerminal {
                    instance: id,
                    status: s,
                }),
                None => Err(StoreError::Decode {
                    what: "instance",
                    id,
                    path: "status".to_owned(),
                    message: format!("unknown status {status:?}"),
                }),
            }
        })
    }

    fn purge(&self, filter: PurgeFilter) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let statuses = purge_statuses(&filter)?;
            let first = statuses.first().map(|s| s.as_str()).unwrap_or_default();
            let second = statuses.get(1).map_or(first, |s| s.as_str());
            let batch = page(filter.batch_size, 500);
            let mut total = 0u64;
            loop {
                let (first, second) = (first.to_owned(), second.to_owned());
                let definition = filter.definition_name.clone();
                let cut_off = filter.finished_before;
                // Each batch is its own atomic write (ST-31).
                let removed = self
                    .write(move |c| {
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
                                    cut_off,
                                    definition,
                                    limit_i64(batch)
                                ],
                                |r| r.get(0),
                            )?;
                            rows.collect::<Result<_, _>>()?
                        };
                        for id in &ids {
                            delete_dependents(c, id)?;
                        }
                        Ok(ids.len())
                    })
                    .await?;
                total += removed as u64;
                if removed < batch {
                    return Ok(total);
                }
            }
        })
    }

    fn acquire_lease(
        &self,
        instance_id: &str,
        owner: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (id, owner) = (instance_id.to_owned(), owner.to_owned());
        self.write(move |c| acquire_instance_lease(c, &id, &owner, now, ttl))
    }

    fn renew_lease(
        &self,
        instance_id: &str,
        token: u64,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let id = instance_id.to_owned();
        self.write(move |c| {
            check_instance_token(c, &id, token)?;
            let expires_at = now.saturating_add(ttl);
            let control: Option<String> = c
                .prepare_cached(
                    "UPDATE wf_instances SET lease_expires_at = ?2 WHERE instance_id = ?1
                     RETURNING control_request",
                )?
                .query_row(rusqlite::params![id, expires_at], |r| r.get(0))?;
            let control_request = match control {
                None => None,
                Some(text) => {
                    Some(serde_json::from_str(&text).map_err(|e| StoreError::Decode {
                        what: "instance",
                        id: id.clone(),
                        path: "control_request".to_owned(),
                        message: e.to_string(),
                    })?)
                }
            };
            Ok(Renewal {
                lease: Lease { token, expires_at },
                control_request,
            })
        })
    }

    fn release_lease(&self, instance_id: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        self.write_hinting(
            move |c| {
                check_instance_token(c, &id, token)?;
                c.prepare_cached(
                    "UPDATE wf_instances SET lease_owner = NULL, lease_expires_at = NULL
                 WHERE instance_id = ?1",
                )?
                .execute([&id])?;
                Ok(())
            },
            vec![WakeUp::InstanceRunnable {
                id: instance_id.to_owned(),
            }],
        )
    }

    fn acquire_named_lease(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.write(move |c| {
            let row: Option<(Option<String>, Option<i64>)> = c
                .prepare_cached("SELECT owner, expires_at FROM wf_named_leases WHERE name = ?1")?
                .query_row([&name], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((Some(holder), Some(until))) = row
                && until > now
            {
                return Err(StoreError::LeaseHeld {
                    resource: named_resource(&name),
                    holder,
                    until,
                });
            }
            let expires_at = now.saturating_add(ttl);
            let token: i64 = c
                .prepare_cached(
                    "INSERT INTO wf_named_leases (name, owner, token, expires_at)
                     VALUES (?1, ?2, 1, ?3)
                     ON CONFLICT (name) DO UPDATE SET owner = ?2, token = token + 1,
                        expires_at = ?3
                     RETURNING token",
                )?
                .query_row(rusqlite::params![name, owner, expires_at], |r| r.get(0))?;
            Ok(Lease {
                token: to_u64(token),
                expires_at,
            })
        })
    }

    fn renew_named_lease(
        &self,
        name: &str,
        token: u64,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let name = name.to_owned();
        self.write(move |c| {
            check_named_token(c, &name, token)?;
            let expires_at = now.saturating_add(ttl);
            c.prepare_cached("UPDATE wf_named_leases SET expires_at = ?2 WHERE name = ?1")?
                .execute(rusqlite::params![name, expires_at])?;
            Ok(Lease { token, expires_at })
        })
    }

    fn release_named_lease(&self, name: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let name = name.to_owned();
        self.write(move |c| {
            check_named_token(c, &name, token)?;
            c.prepare_cached(
                "UPDATE wf_named_leases SET owner = NULL, expires_at = NULL WHERE name = ?1",
            )?
            .execute([&name])?;
            Ok(())
        })
    }

    fn find_bookmarks(&self, query: BookmarkQuery) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        self.read(move |c| {
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
                    limit_i64(page(query.limit, 100)),
                ],
                bookmark_from_row,
            )?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn list_bookmarks(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {BOOKMARK_COLS} FROM wf_bookmarks WHERE instance_id = ?1
                 ORDER BY created_at, bookmark_id"
            ))?;
            let rows = stmt.query_map([&id], bookmark_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, stimulus) = (instance_id.to_owned(), stimulus_id.to_owned());
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT 1 FROM wf_receipts WHERE instance_id = ?1 AND stimulus_id = ?2",
            )?
            .query_row([&id, &stimulus], |_| Ok(()))
            .optional()?
            .is_some())
        })
    }

    fn replace_triggers(
        &self,
        definition_name: &str,
        triggers: Vec<TriggerRow>,
    ) -> BoxFuture<'_, StoreResult<TriggerDiff>> {
        let name = definition_name.to_owned();
        self.write(move |c| {
            if let Some(t) = triggers.iter().find(|t| t.definition_name != name) {
                return Err(StoreError::Invalid {
                    what: "trigger",
                    reason: format!("belongs to {}, not {name}", t.definition_name),
                });
            }
            let existing =
                select_triggers(c, "WHERE definition_name = ?1", rusqlite::params![name])?;
            let mut diff = TriggerDiff::default();
            for old in &existing {
                if !triggers
                    .iter()
                    .any(|t| t.node_id == old.node_id && t.hash == old.hash)
                {
                    c.prepare_cached(
                        "DELETE FROM wf_triggers
                         WHERE definition_name = ?1 AND node_id = ?2 AND hash = ?3",
                    )?
                    .execute([&name, &old.node_id, &old.hash])?;
                    diff.removed += 1;
                }
            }
            for t in &triggers {
                let same = existing.iter().any(|old| {
                    old.node_id == t.node_id && old.hash == t.hash && same_trigger(old, t)
                });
                if same {
                    diff.unchanged += 1;
                    continue;
                }
                c.prepare_cached(
                    "INSERT OR REPLACE INTO wf_triggers (definition_name, node_id, hash,
                        definition_version, name, key_display, payload, activation, registered_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(rusqlite::params![
                    t.definition_name,
                    t.node_id,
                    t.hash,
                    t.definition_version,
                    t.name,
                    t.key_display,
                    json_text(&t.payload)?,
                    json_text(&t.activation)?,
                    t.registered_at,
                ])?;
                diff.added += 1;
            }
            Ok(diff)
        })
    }

    fn find_triggers(&self, hashes: &[String]) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        let hashes = hashes.to_vec();
        self.read(move |c| {
            let mut found = Vec::new();
            for hash in &hashes {
                found.extend(select_triggers(
                    c,
                    "WHERE hash = ?1",
                    rusqlite::params![hash],
                )?);
            }
            found.sort_by(|a, b| {
                (&a.definition_name, &a.node_id, &a.hash).cmp(&(
                    &b.definition_name,
                    &b.node_id,
                    &b.hash,
                ))
            });
            found.dedup_by(|a, b| {
                a.definition_name == b.definition_name && a.node_id == b.node_id && a.hash == b.hash
            });
            Ok(found)
        })
    }

    fn earliest_timer(&self, now: i64) -> BoxFuture<'_, StoreResult<Option<i64>>> {
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT MIN(due_at) FROM wf_timers WHERE parked = 0
                   AND (claim_owner IS NULL OR claim_expires_at IS NULL OR claim_expires_at <= ?1)",
            )?
            .query_row([now], |r| r.get(0))?)
        })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: i64,
        claim_ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let owner = owner.to_owned();
        self.write(move |c| {
            let rows: Vec<TimerRow> = {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {TIMER_COLS} FROM wf_timers
                     WHERE parked = 0 AND due_at <= ?1
                       AND (claim_owner IS NULL OR claim_expires_at IS NULL
                            OR claim_expires_at <= ?1)
                     ORDER BY due_at, timer_id LIMIT ?2"
                ))?;
                let rows =
                    stmt.query_map(rusqlite::params![now, limit_i64(limit)], timer_from_row)?;
                rows.collect::<Result<_, _>>()?
            };
            let mut stmt = c.prepare_cached(
                "UPDATE wf_timers SET claim_owner = ?2, claim_expires_at = ?3 WHERE timer_id = ?1",
            )?;
            for t in &rows {
                stmt.execute(rusqlite::params![
                    t.timer_id,
                    owner,
                    now.saturating_add(claim_ttl)
                ])?;
            }
            Ok(rows)
        })
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        self.write_hinting(
            move |c| {
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
            },
            vec![WakeUp::TimersChanged { earliest: None }],
        )
    }

    fn delete_schedule(&self, schedule_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = schedule_id.to_owned();
        self.write(move |c| {
            Ok(c.prepare_cached(
                "DELETE FROM wf_timers WHERE timer_id = ?1 AND instance_id IS NULL",
            )?
            .execute([&id])?
                > 0)
        })
    }

    fn list_schedules(&self, definition_name: &str) -> BoxFuture<'_, StoreResult<Vec<Schedule>>> {
        let name = definition_name.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {TIMER_COLS} FROM wf_timers
                 WHERE instance_id IS NULL AND definition_name = ?1 ORDER BY timer_id"
            ))?;
            let rows = stmt.query_map([&name], timer_from_row)?;
            let mut schedules = Vec::new();
            for row in rows {
                let row = row?;
                schedules.push(Schedule {
                    schedule_id: row.timer_id,
                    definition_name: row.definition_name.unwrap_or_default(),
                    node_id: row.node_id.unwrap_or_default(),
                    kind: row.kind,
                    due_at: row.due_at,
                    fired: row.parked,
                });
            }
            Ok(schedules)
        })
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: i64,
        instance: NewInstance,
        next_due: Option<i64>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        let encoded = validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes));
        let state = match encoded {
            Ok(state) => state,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let mut hints: Vec<WakeUp> = create_hint(&instance).into_iter().collect();
        hints.push(WakeUp::TimersChanged { earliest: next_due });
        self.write_hinting(
            move |c| {
                let current: Option<i64> = c
                    .prepare_cached(
                        "SELECT due_at FROM wf_timers
                         WHERE timer_id = ?1 AND instance_id IS NULL AND parked = 0",
                    )?
                    .query_row([&id], |r| r.get(0))
                    .optional()?;
                if current != Some(expected_due_at) {
                    return Ok(ScheduleFiring::Stale);
                }
                let firing = match insert_instance_tx(c, &instance, &state) {
                    Ok(()) => ScheduleFiring::Started,
                    Err(StoreError::ActivationConflict { existing, .. }) => {
                        ScheduleFiring::Refused { existing }
                    }
                    Err(e) => return Err(e),
                };
                c.prepare_cached(
                    "UPDATE wf_timers SET claim_owner = NULL, claim_expires_at = NULL,
                        due_at = COALESCE(?2, due_at), parked = (?2 IS NULL)
                     WHERE timer_id = ?1",
                )?
                .execute(rusqlite::params![id, next_due])?;
                Ok(firing)
            },
            hints,
        )
    }

    fn list_timers(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {TIMER_COLS} FROM wf_timers WHERE instance_id = ?1
                 ORDER BY due_at, timer_id"
            ))?;
            let rows = stmt.query_map([&id], timer_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord>>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, at, kind, context_id, node_id, detail FROM wf_journal
                 WHERE instance_id = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(
                rusqlite::params![id, to_i64(from_seq), limit_i64(page(limit, 100))],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, String>(5)?,
                    ))
                },
            )?;
            let mut entries = Vec::new();
            for row in rows {
                let (seq, at, kind, context_id, node_id, detail) = row?;
                entries.push(JournalRecord {
                    seq: to_u64(seq),
                    at,
                    kind,
                    context_id: context_id.map(to_u64),
                    node_id,
                    detail: decode_json("journal entry", &id, "detail", &detail)?,
                });
            }
            Ok(entries)
        })
    }

    fn enqueue(&self, item: QueueItem) -> BoxFuture<'_, StoreResult<()>> {
        self.write_hinting(move |c| enqueue_tx(c, &item), vec![WakeUp::QueueChanged])
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: i64,
        claim_ttl: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        let owner = owner.to_owned();
        self.write(move |c| {
            let raw: Vec<RawQueue> = {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT item_id, {QUEUE_COLS} FROM wf_queue
                     WHERE (held = 1 OR expires_at > ?1)
                       AND (claim_owner IS NULL OR claim_expires_at IS NULL
                            OR claim_expires_at <= ?1)
                     ORDER BY sent_at, item_id LIMIT ?2"
                ))?;
                let rows =
                    stmt.query_map(rusqlite::params![now, limit_i64(limit)], queue_from_row)?;
                rows.collect::<Result<_, _>>()?
            };
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

    fn release_queue_item(&self, item_id: &str, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let (id, owner) = (item_id.to_owned(), owner.to_owned());
        self.write_hinting(
            move |c| {
                c.prepare_cached(
                    "UPDATE wf_queue SET claim_owner = NULL, claim_expires_at = NULL
                 WHERE item_id = ?1 AND claim_owner = ?2",
                )?
                .execute([&id, &owner])?;
                Ok(())
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn ack_queue_item(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        self.write(move |c| {
            Ok(c.prepare_cached("DELETE FROM wf_queue WHERE item_id = ?1")?
                .execute([&id])?
                > 0)
        })
    }

    fn record_queue_failure(
        &self,
        item_id: &str,
        error: &str,
        now: i64,
        max_attempts: u32,
    ) -> BoxFuture<'_, StoreResult<QueueFailure>> {
        let (id, error) = (item_id.to_owned(), error.to_owned());
        self.write_hinting(
            move |c| {
                let attempts: Option<i64> = c
                    .prepare_cached(
                        "UPDATE wf_queue SET attempts = attempts + 1, last_error = ?2,
                        last_attempt_at = ?3, claim_owner = NULL, claim_expires_at = NULL
                     WHERE item_id = ?1 RETURNING attempts",
                    )?
                    .query_row(rusqlite::params![id, error, now], |r| r.get(0))
                    .optional()?;
                let attempts = attempts.ok_or_else(|| not_found("queue item", &id))?;
                let attempts = u32::try_from(attempts).unwrap_or(u32::MAX);
                if attempts >= max_attempts {
                    move_to_dead(c, &id, DeadLetterReason::Failed, Some(&error), now)?;
                    Ok(QueueFailure::DeadLettered)
                } else {
                    Ok(QueueFailure::Retry { attempts })
                }
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn dead_letter(
        &self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<&str>,
        now: i64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, error) = (item_id.to_owned(), error.map(str::to_owned));
        self.write(move |c| move_to_dead(c, &id, reason, error.as_deref(), now))
    }

    fn expire_queue(&self, now: i64, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |c| {
            let ids: Vec<String> = {
                let mut stmt = c.prepare_cached(
                    "SELECT item_id FROM wf_queue WHERE held = 0 AND expires_at <= ?1
                     ORDER BY expires_at, item_id LIMIT ?2",
                )?;
                let rows =
                    stmt.query_map(rusqlite::params![now, limit_i64(limit)], |r| r.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            let mut moved = 0;
            for id in ids {
                if move_to_dead(c, &id, DeadLetterReason::Expired, None, now)? {
                    moved += 1;
                }
            }
            Ok(moved)
        })
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: i64,
        ttl: i64,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        self.write_hinting(
            move |c| {
                let raw = c
                    .prepare_cached(&format!(
                        "SELECT original_item_id, {QUEUE_COLS} FROM wf_dead_letters
                         WHERE original_item_id = ?1"
                    ))?
                    .query_row([&id], queue_from_row)
                    .optional()?
                    .ok_or_else(|| not_found("dead letter", &id))?;
                let mut item = raw.decode("dead letter")?;
                item.enqueued_at = now;
                item.expires_at = now.saturating_add(ttl);
                item.attempts = 0;
                item.last_error = None;
                item.last_attempt_at = None;
                c.prepare_cached("DELETE FROM wf_dead_letters WHERE original_item_id = ?1")?
                    .execute([&id])?;
                enqueue_tx(c, &item)?;
                Ok(item)
            },
            vec![WakeUp::QueueChanged],
        )
    }

    fn delete_dead_letter(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        self.write(move |c| {
            Ok(
                c.prepare_cached("DELETE FROM wf_dead_letters WHERE original_item_id = ?1")?
                    .execute([&id])?
                    > 0,
            )
        })
    }

    fn purge_dead_letters(
        &self,
        dead_before: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |c| {
            let n = c
                .prepare_cached(
                    "DELETE FROM wf_dead_letters WHERE original_item_id IN (
                        SELECT original_item_id FROM wf_dead_letters WHERE dead_at < ?1 LIMIT ?2)",
                )?
                .execute(rusqlite::params![dead_before, limit_i64(limit)])?;
            Ok(n as u64)
        })
    }

    fn purge_receipts(&self, before: i64, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |c| {
            let n = c
                .prepare_cached(
                    "DELETE FROM wf_receipts WHERE (instance_id, stimulus_id) IN (
                        SELECT instance_id, stimulus_id FROM wf_receipts WHERE at < ?1 LIMIT ?2)",
                )?
                .execute(rusqlite::params![before, limit_i64(limit)])?;
            Ok(n as u64)
        })
    }

    fn purge_idempotency_records(
        &self,
        before: i64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        self.write(move |c| {
            let n = c
                .prepare_cached(
                    "DELETE FROM wf_idempotency WHERE idempotency_key IN (
                        SELECT idempotency_key FROM wf_idempotency WHERE created_at < ?1 LIMIT ?2)",
                )?
                .execute(rusqlite::params![before, limit_i64(limit)])?;
            Ok(n as u64)
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

    fn list_incidents(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        let id = instance_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INCIDENT_COLS} FROM wf_incidents WHERE instance_id = ?1
                 ORDER BY created_at, incident_id"
            ))?;
            incidents_from(&mut stmt, rusqlite::params![id])
        })
    }

    fn list_all_incidents(
        &self,
        unresolved_only: bool,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        self.read(move |c| {
            let (after_at, after_id) = match &after {
                Some((at, id)) => (Some(*at), Some(id.as_str())),
                None => (None, None),
            };
            let mut stmt = c.prepare_cached(&format!(
                "SELECT {INCIDENT_COLS} FROM wf_incidents
                 WHERE (?1 = 0 OR resolved_at IS NULL)
                   AND (?2 IS NULL OR (created_at, incident_id) > (?2, ?3))
                 ORDER BY created_at, incident_id LIMIT ?4"
            ))?;
            incidents_from(
                &mut stmt,
                rusqlite::params![
                    unresolved_only,
                    after_at,
                    after_id,
                    limit_i64(page(limit, 100))
                ],
            )
        })
    }

    fn put_idempotency_record(
        &self,
        record: IdempotencyRecord,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let report = match json_text(&record.report) {
            Ok(report) => report,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        self.write(move |c| {
            if let Some(existing) = find_idempotency(c, &record.key)? {
                return Ok(Some(existing));
            }
            c.prepare_cached(
                "INSERT INTO wf_idempotency (idempotency_key, hash, payload_digest, report,
                    created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(rusqlite::params![
                record.key,
                record.hash,
                record.payload_digest,
                report,
                record.created_at
            ])?;
            Ok(None)
        })
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        self.read(move |c| find_idempotency(c, &key))
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
                    limit_i64(page(filter.limit, 100)),
                    filter.name,
                    filter.hash,
                    after_at,
                    after_id,
                ],
                |r| {
                    Ok((
                        queue_from_row(r)?,
                        r.get::<_, String>(16)?,
                        r.get::<_, Option<String>>(17)?,
                        r.get::<_, i64>(18)?,
                    ))
                },
            )?;
            let mut letters = Vec::new();
            for row in rows {
                let (raw, reason_text, error, dead_at) = row?;
                let item = raw.decode("dead letter")?;
                let reason =
                    DeadLetterReason::parse(&reason_text).ok_or_else(|| StoreError::Decode {
                        what: "dead letter",
                        id: item.item_id.clone(),
                        path: "reason".to_owned(),
                        message: format!("unknown reason {reason_text:?}"),
                    })?;
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

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.hints.subscribe()
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        let stats = StoreStats {
            write_requests: self.counters.write_requests.load(Ordering::Relaxed),
            transactions: self.counters.transactions.load(Ordering::Relaxed),
        };
        Box::pin(std::future::ready(Ok(stats)))
    }
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
