//! `SqliteStore`: the embedded default backend (ST-26).
//!
//! One database file, WAL mode, foreign keys on, a busy timeout and `synchronous = FULL` by
//! default. A single writer thread owns the only write connection; requests arrive over a
//! channel and the writer takes every pending request (up to a batch limit), applies each in
//! its own savepoint inside one transaction — so one failed version check rolls back only its
//! own request — commits once (one sync), then answers each request with its own result. It
//! never waits to fill a batch: a lone commit is written at once and batches form naturally
//! under load (group commit). Reads run on a small pool of read-only connections on WAL
//! snapshots and never block the writer. The WAL's checkpoints run on a connection and a
//! thread of their own, beside the writer's commits (`checkpoint.rs`).
//!
//! The futures returned are executor-agnostic: the blocking work runs on the store's own
//! threads and results come back over `tokio::sync::oneshot` channels. The exception are the
//! point reads of routing and of a run (an instance, its bookmarks by hash, a receipt, the
//! triggers of a hash, an idempotency record): one indexed lookup on a WAL snapshot, which
//! never waits for the writer, takes microseconds, less than handing it to a reader thread
//! and waking the caller again. They run on the calling thread, on the writer's connection
//! while the writer is between transactions (its page cache outlives its own commits), else
//! on one of the store's own read connections when one is free (on a reader thread
//! otherwise), and the future they return is ready.
//!
//! Schema migrations are forward-only, numbered, checksummed and recorded in
//! `wf_schema_migrations` (ST-28); every statement is parameterized (ST-1).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use tokio::sync::oneshot;

use crate::base::BoxFuture;
use crate::store::error::{StoreError, StoreResult};

mod changes;
mod checkpoint;
mod debounce;
mod flow;
mod leases;
mod ops;
mod options;
mod rows;
mod schema;
mod worker;

use crate::store::migrations::MigrateMode;
use checkpoint::{Checkpoints, checkpointer_loop};
pub use options::{SqliteOptions, Synchronous};
use rows::QUEUE_COLS;
#[cfg(feature = "test-support")]
use schema::migrate_to;
use schema::{
    check_tables, configure, latest_schema_version, migrate, naming_file, require_current_schema,
    take_over_dead_claims, take_owner_lock, tune,
};
use worker::{reader_loop, writer_loop};

/// Answers one write request once its transaction has committed (`None`) or failed.
pub(super) type Responder = Box<dyn FnOnce(Option<StoreError>) + Send>;
/// One write request: runs inside its savepoint (or not at all when given `None`) and says
/// whether it succeeded.
pub(super) type WriteJob = Box<dyn FnOnce(Option<&Connection>) -> (bool, Responder) + Send>;
/// A write request: its approximate size in bytes (the state documents it writes), what it
/// promises (its [`Kind`]), and the job.
pub(super) struct WriteRequest {
    pub(super) bytes: usize,
    pub(super) kind: Kind,
    pub(super) job: WriteJob,
}

/// What a request on the writer thread promises its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Answered once its transaction is committed (synced under `synchronous = FULL`).
    Durable,
    /// A named lease's claim or renewal: no durability promised (see
    /// `SqliteStore::write_volatile`), answered as soon as it has run.
    Volatile,
}
/// One read request.
pub(super) type ReadJob = Box<dyn FnOnce(&Connection) + Send>;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) write_requests: AtomicU64,
    pub(super) transactions: AtomicU64,
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
    /// The writer's connection, for the point reads run while the writer is between
    /// transactions (`read_point`).
    writer_conn: Option<Arc<Mutex<Connection>>>,
    readers: Option<mpsc::Sender<ReadJob>>,
    /// Read connections for the point reads run on the calling thread (`read_point`).
    inline: Vec<Mutex<Connection>>,
    threads: Vec<JoinHandle<()>>,
    counters: Arc<Counters>,
    /// The instance leases, kept in memory: this process owns the file (`leases.rs`).
    leases: Arc<leases::InstanceLeases>,
    path: PathBuf,
    migrations_applied: Vec<u32>,
    /// Other processes' commits, heard by the writer (`changes.rs`).
    remote: tokio::sync::broadcast::Sender<crate::store::backend::WakeUp>,
    /// Holds the exclusive lock on the `-owner` side file while the store is open (ST-26).
    /// Declared last: released after the threads have stopped.
    _owner_lock: Option<Mutex<Connection>>,
}

/// The write connection a store starts its writer thread with.
struct Writer {
    conn: Connection,
    /// Whether the WAL's checkpoints run on a connection of their own (`checkpoint.rs`).
    checkpointer: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.writer = None;
        self.writer_conn = None;
        self.readers = None;
        self.inline.clear();
        for thread in self.threads.drain(..) {
            // A panicked thread has nothing left to clean up.
            let _ = thread.join();
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        match &error {
            // A file that is not a database, or a damaged one, is not a transient failure:
            // retrying cannot help (the open names the file, `naming_file`).
            rusqlite::Error::SqliteFailure(e, _)
                if matches!(e.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) =>
            {
                StoreError::Decode {
                    what: "database file",
                    id: String::new(),
                    path: "file".to_owned(),
                    message: error.to_string(),
                }
            }
            _ => StoreError::unavailable(error),
        }
    }
}

pub(super) fn closed() -> StoreError {
    StoreError::unavailable("the store is closed")
}

/// The error of a write on a store opened with [`SqliteStore::open_read_only`].
pub(super) fn read_only() -> StoreError {
    StoreError::Invalid {
        what: "operation",
        reason: "the store was opened read-only".to_owned(),
    }
}

pub(super) fn is_constraint(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::ConstraintViolation)
}

pub(super) use crate::store::convert::{
    decode_json, json_text, limit_i64, not_found, to_i64, to_u64,
};

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
        check_tables(&conn)?;
        conn.execute(
            "INSERT INTO wf_named_leases (name, owner, token, expires_at)
             VALUES ('store-owner', ?1, 1, ?2)
             ON CONFLICT (name) DO UPDATE SET owner = ?1, token = token + 1, expires_at = ?2",
            rusqlite::params![holder, i64::MAX],
        )?;
        take_over_dead_claims(&conn)?;
        Self::start(
            path,
            Some(Writer {
                conn,
                checkpointer: true,
            }),
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
        check_tables(&conn)?;
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
        check_tables(&conn)?;
        // An operator's few writes leave the WAL's checkpoints to SQLite (inside its commits).
        let writer = Writer {
            conn,
            checkpointer: false,
        };
        Self::start(path, Some(writer), &options, Vec::new(), None)
    }

    /// Starts the writer (when given its connection), its checkpointer (when asked) and the
    /// readers.
    fn start(
        path: PathBuf,
        writer: Option<Writer>,
        options: &SqliteOptions,
        migrations_applied: Vec<u32>,
        owner_lock: Option<Connection>,
    ) -> StoreResult<Self> {
        let counters = Arc::new(Counters::default());
        let remote = tokio::sync::broadcast::Sender::new(16);
        let mut threads = Vec::new();
        let mut writer_conn = None;
        let write_tx = match writer {
            Some(Writer { conn, checkpointer }) => {
                let checkpoints = if checkpointer {
                    let (wake, woken) = mpsc::sync_channel::<()>(1);
                    let own = Connection::open_with_flags(
                        &path,
                        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )?;
                    configure(&own, options)?;
                    threads.push(
                        std::thread::Builder::new()
                            .name("wf-sqlite-checkpointer".to_owned())
                            .spawn(move || checkpointer_loop(&own, &woken))
                            .map_err(StoreError::unavailable)?,
                    );
                    Some(Checkpoints::install(&conn, wake)?)
                } else {
                    None
                };
                // The point reads' statements beside the writer's own.
                conn.set_prepared_statement_cache_capacity(256);
                let conn = Arc::new(Mutex::new(conn));
                writer_conn = Some(Arc::clone(&conn));
                let (write_tx, write_rx) = mpsc::channel::<WriteRequest>();
                let writer_counters = Arc::clone(&counters);
                let mut watch = changes::Watch::new(remote.clone());
                let limits = (options.max_batch.max(1), options.max_batch_bytes.max(1));
                threads.push(
                    std::thread::Builder::new()
                        .name("wf-sqlite-writer".to_owned())
                        .spawn(move || {
                            writer_loop(
                                &conn,
                                &write_rx,
                                limits,
                                &writer_counters,
                                &mut watch,
                                checkpoints,
                            );
                        })
                        .map_err(StoreError::unavailable)?,
                );
                Some(write_tx)
            }
            None => None,
        };

        let open_reader = || -> StoreResult<Connection> {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(options.busy_timeout)?;
            tune(&conn)?;
            Ok(conn)
        };
        let inline = (0..options.readers.max(1))
            .map(|_| open_reader().map(Mutex::new))
            .collect::<StoreResult<Vec<_>>>()?;
        let (read_tx, read_rx) = mpsc::channel::<ReadJob>();
        let read_rx = Arc::new(Mutex::new(read_rx));
        for n in 0..options.readers.max(1) {
            let conn = open_reader()?;
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
            writer_conn,
            readers: Some(read_tx),
            inline,
            threads,
            counters,
            leases: Arc::default(),
            path,
            migrations_applied,
            remote,
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
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?
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
    pub async fn queued(&self, limit: usize) -> StoreResult<Vec<crate::store::rows::QueueItem>> {
        self.read(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "SELECT item_id, {QUEUE_COLS} FROM wf_queue ORDER BY sent_at, item_id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit_i64(limit)], |r| {
                rows::queue_from_row(r, "queue item")
            })?;
            let mut items = Vec::new();
            for raw in rows {
                if let Ok(item) = raw?.and_then(|raw| raw.decode("queue item")) {
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
        self.write_request(bytes, Kind::Durable, f, |_| {})
    }

    /// Sends one write request that is answered as soon as it has run, before its
    /// transaction commits: a named lease's claim or renewal (ST-11, ST-14), a flow-control
    /// slot's ask, renewal or release (`flow.rs`, QU-6). One process owns the file (ST-26)
    /// and no read outside the writer reads those rows (`queue_usage` reads through the
    /// writer), so only this store's own later requests see the lease before it is
    /// committed, and a crash before the commit loses only leases of the process that
    /// crashed, whose holders died with it. (Instance leases do not go to the writer at all:
    /// `leases.rs`.)
    fn write_volatile<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.write_request(0, Kind::Volatile, f, |_| {})
    }

    /// Sends one durable write request and runs `then` with its result once it is known
    /// (after the commit, or with the failure), on the writer thread, before the caller is
    /// answered: what the caller learns has already been applied.
    fn write_then<T: Send + 'static>(
        &self,
        bytes: usize,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        then: impl FnOnce(&StoreResult<T>) + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        self.write_request(bytes, Kind::Durable, f, then)
    }

    fn write_request<T: Send + 'static>(
        &self,
        bytes: usize,
        kind: Kind,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
        then: impl FnOnce(&StoreResult<T>) + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: WriteJob = Box::new(move |conn| {
            let result = match conn {
                Some(conn) => f(conn),
                None => Err(StoreError::unavailable("the transaction was aborted")),
            };
            let ok = result.is_ok();
            let responder: Responder = Box::new(move |failure| {
                let result = match failure {
                    None => result,
                    Some(e) => Err(e),
                };
                then(&result);
                let _ = tx.send(result);
            });
            (ok, responder)
        });
        let Some(writer) = &self.writer else {
            return Box::pin(std::future::ready(Err(read_only())));
        };
        let sent = writer.send(WriteRequest { bytes, kind, job }).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(closed());
            }
            rx.await.unwrap_or_else(|_| Err(closed()))
        })
    }

    /// Runs a point read (one indexed lookup) on the calling thread, on a free connection of
    /// the store, and returns a ready future: no thread hop for what takes microseconds.
    ///
    /// The writer's connection first, when the writer is between transactions: SQLite keeps
    /// a connection's page cache across its own commits but empties a read connection's at
    /// its first read after another connection committed, so there the read finds the pages
    /// it needs in memory instead of reading them again from the WAL. It holds no open
    /// transaction then, so the read sees committed rows only. Else a read connection; when
    /// every one is in use by another caller, the read goes to the reader pool. Every write a
    /// caller was answered for is committed (the writer answers a durable request only after
    /// its commit, and no read outside the writer's transactions reads a row a volatile
    /// request writes), so the read sees it (ST-26).
    fn read_point<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        if let Some(conn) = &self.writer_conn
            && let Ok(conn) = conn.try_lock()
        {
            let result = f(&conn);
            return Box::pin(std::future::ready(result));
        }
        for slot in &self.inline {
            if let Ok(conn) = slot.try_lock() {
                let result = f(&conn);
                return Box::pin(std::future::ready(result));
            }
        }
        self.read(f)
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
