//! `PostgresStore`: several processes sharing one PostgreSQL database (ST-27).
//!
//! Every table lives in one schema (default `workflow`). The library owns the migrations:
//! forward-only, numbered, checksummed, recorded in `wf_schema_migrations` and applied under
//! an advisory lock, so processes starting at once are safe (ST-28). Each store operation is
//! one transaction on a connection of a [`PgPool`] (the application's own pool, or one opened
//! from a URL). Claims of runnable instances, due timers and queue pages use
//! `FOR UPDATE SKIP LOCKED`; a commit locks its instance row and writes only under the
//! expected version and the current lease token (fencing, ST-14). Wake-ups reach the other
//! processes through `LISTEN`/`NOTIFY` (see `notify.rs`). Every statement is parameterized.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::{
    BookmarkQuery, BookmarkRow, BoxFuture, ClaimedInstance, Commit, ControlRequest,
    DEFAULT_MAX_STATE_BYTES, DeadLetter, DeadLetterFilter, DeadLetterReason, IdempotencyRecord,
    IncidentRecord, InstanceFilter, InstanceRecord, JournalRecord, Lease, ListedInstance, Micros,
    MigrateMode, NewIncident, NewInstance, PurgeFilter, QueueFailure, QueueItem, Renewal, Schedule,
    ScheduleFiring, Store, StoreError, StoreResult, StoreStats, TimerRow, TriggerDiff, TriggerRow,
    WAKE_UP_CAPACITY, WakeUp, commit_hints, create_hint, encode_commit, encode_state, page,
    purge_statuses, send_hints, validate_instance_id,
};

mod notify;
mod ops;
mod schema;

use schema::Schema;

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::unavailable(error)
    }
}

/// Options of [`PostgresStore::connect_with`] and [`PostgresStore::from_pool`].
///
/// Lease and claim durations are not store options: the runtime passes them with each call
/// ([`RuntimeBuilder::lease_ttl`](crate::RuntimeBuilder::lease_ttl)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The schema holding the tables (default `workflow`): 1 to 48 bytes of `[a-z0-9_]`, not
    /// starting with a digit. Created if missing.
    pub schema: String,
    /// Migrations: apply or only check (ST-28).
    pub migrate: MigrateMode,
    /// The state size limit (ST-24).
    pub max_state_bytes: usize,
    /// Connections of the pool opened from a URL (default 10). One of them is held by the
    /// notification listener. Ignored by [`PostgresStore::from_pool`].
    pub max_connections: u32,
    /// How long an operation waits for a free pool connection (default 30 s). Ignored by
    /// [`PostgresStore::from_pool`].
    pub acquire_timeout: Duration,
    /// Listen for other processes' wake-ups (`LISTEN`/`NOTIFY`, default on).
    pub listen: bool,
    /// While the listener cannot connect, how often the store sends its sweep hints instead
    /// (default 5 s): the polling fallback.
    pub poll_interval: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: "workflow".to_owned(),
            migrate: MigrateMode::Apply,
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            listen: true,
            poll_interval: Duration::from_secs(5),
        }
    }
}

impl PostgresOptions {
    /// The defaults with another schema name.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
}

#[derive(Debug, Default)]
struct Counters {
    write_requests: AtomicU64,
    transactions: AtomicU64,
}

/// The PostgreSQL store (ST-27): for several processes sharing one database. Wrap it in an
/// `Arc` to share it (`Arc<dyn Store>`); dropping it stops its notification listener (the
/// pool stays open when it is the application's).
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
///
/// use workflow_runtime::{PostgresStore, Runtime};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // Opens a pool, creates the schema `workflow` or migrates it, starts the listener.
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1:5432/app").await?;
/// let runtime = Runtime::builder().store(Arc::new(store)).build()?;
/// # drop(runtime);
/// # Ok(())
/// # }
/// ```
pub struct PostgresStore {
    pool: PgPool,
    schema: Schema,
    hints: broadcast::Sender<WakeUp>,
    /// This store's id in notification payloads, so it ignores its own.
    origin: String,
    counters: Arc<Counters>,
    max_state_bytes: usize,
    migrations_applied: Vec<u32>,
    listener: Option<JoinHandle<()>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema.name())
            .field("max_state_bytes", &self.max_state_bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
    }
}

/// A random-enough origin id: process id, time and a per-process counter.
fn new_origin() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl PostgresStore {
    /// Opens a pool on `url` with the default options (schema `workflow`), then migrates
    /// and starts the listener.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the server cannot be reached; the migration errors of
    /// [`PostgresStore::from_pool`].
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, &PostgresOptions::default()).await
    }

    /// Opens a pool on `url` with `options`, then migrates and starts the listener.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed URL or schema name,
    /// [`StoreError::Unavailable`] when the server cannot be reached; the migration errors of
    /// [`PostgresStore::from_pool`].
    pub async fn connect_with(url: &str, options: &PostgresOptions) -> StoreResult<Self> {
        Schema::new(&options.schema)?;
        let connect: PgConnectOptions =
            url.parse().map_err(|e: sqlx::Error| StoreError::Invalid {
                what: "database url",
                reason: e.to_string(),
            })?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Self::from_pool(pool, options).await
    }

    /// Uses the application's pool: migrates the schema (under an advisory lock, ST-28) and
    /// starts the notification listener, which holds one connection of the pool.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed schema name; [`StoreError::SchemaTooNew`],
    /// [`StoreError::MigrationChecksumMismatch`], or with [`MigrateMode::CheckOnly`]
    /// [`StoreError::SchemaOutdated`]; [`StoreError::Unavailable`] when the server fails.
    pub async fn from_pool(pool: PgPool, options: &PostgresOptions) -> StoreResult<Self> {
        let schema = Schema::new(&options.schema)?;
        let migrations_applied = schema::migrate(&pool, &schema, options.migrate).await?;
        let (hints, _) = broadcast::channel(WAKE_UP_CAPACITY);
        let origin = new_origin();
        let listener = options.listen.then(|| {
            tokio::spawn(notify::listen(
                pool.clone(),
                schema.channel(),
                origin.clone(),
                hints.clone(),
                options.poll_interval.max(Duration::from_millis(10)),
            ))
        });
        tracing::info!(
            schema = schema.name(),
            ?migrations_applied,
            "postgres store: open"
        );
        Ok(Self {
            pool,
            schema,
            hints,
            origin,
            counters: Arc::new(Counters::default()),
            max_state_bytes: options.max_state_bytes,
            migrations_applied,
            listener,
        })
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding the tables.
    pub fn schema(&self) -> &str {
        self.schema.name()
    }

    /// The migrations this open applied (empty when the schema was current).
    pub fn migrations_applied(&self) -> &[u32] {
        &self.migrations_applied
    }

    /// The newest schema version this library knows (ST-28).
    pub fn schema_version() -> u32 {
        schema::latest_schema_version()
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
        let mut tx = self.begin().await?;
        let result = ops::write_raw_state(&mut tx, &self.schema, instance_id, raw).await;
        self.finish(tx, result, &[]).await
    }

    /// The stored state text of an instance, as is (test hook, C-26).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown instance, [`StoreError::Unavailable`] when the
    /// read fails.
    #[cfg(feature = "test-support")]
    pub async fn read_raw_state(&self, instance_id: &str) -> StoreResult<String> {
        let mut conn = self.pool.acquire().await?;
        ops::read_raw_state(&mut conn, &self.schema, instance_id).await
    }

    async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        self.counters.write_requests.fetch_add(1, Ordering::Relaxed);
        self.counters.transactions.fetch_add(1, Ordering::Relaxed);
        Ok(self.pool.begin().await?)
    }

    /// Ends a write: on success sends `hints` to the other processes inside the transaction
    /// (`NOTIFY` is delivered only if it commits), commits, then sends them locally (ST-18);
    /// on failure rolls back, so nothing is written.
    async fn finish<T>(
        &self,
        mut tx: Transaction<'static, Postgres>,
        result: StoreResult<T>,
        hints: &[WakeUp],
    ) -> StoreResult<T> {
        match result {
            Ok(value) => {
                if !hints.is_empty() {
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(self.schema.channel())
                        .bind(notify::payload(&self.origin, hints))
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                send_hints(&self.hints, hints.to_vec());
                Ok(value)
            }
            Err(error) => {
                // A failed rollback leaves nothing either: the server discards the
                // transaction when the connection closes.
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }
}

/// Runs `$body` (an expression using the connection `$c`) in a write transaction of
/// `$self`, then commits with `$hints` or rolls back.
macro_rules! write_tx {
    ($self:ident, $hints:expr, |$c:ident| $body:expr) => {{
        let mut tx = $self.begin().await?;
        let result = {
            let $c: &mut PgConnection = &mut tx;
            $body.await
        };
        $self.finish(tx, result, &$hints).await
    }};
}

/// Runs `$body` on a pooled connection `$c`, outside any explicit transaction.
macro_rules! read {
    ($self:ident, |$c:ident| $body:expr) => {{
        let mut conn = $self.pool.acquire().await?;
        let $c: &mut PgConnection = &mut conn;
        $body.await
    }};
}

fn ready<T: Send + 'static>(result: StoreResult<T>) -> BoxFuture<'static, StoreResult<T>> {
    Box::pin(std::future::ready(result))
}

impl Store for PostgresStore {
    fn create_instance(&self, instance: NewInstance) -> BoxFuture<'_, StoreResult<u64>> {
        let state = match validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes))
        {
            Ok(state) => state,
            Err(e) => return ready(Err(e)),
        };
        let hints: Vec<WakeUp> = create_hint(&instance).into_iter().collect();
        Box::pin(async move {
            write_tx!(self, hints, |c| async {
                ops::insert_instance(c, &self.schema, &instance, &state).await?;
                Ok(1)
            })
        })
    }

    fn load_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<InstanceRecord>> {
        let id = instance_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::load_instance(c, &self.schema, &id)) })
    }

    fn commit(&self, commit: Commit) -> BoxFuture<'_, StoreResult<u64>> {
        let (state, created) = match encode_commit(&commit, self.max_state_bytes) {
            Ok(encoded) => encoded,
            Err(e) => return ready(Err(e)),
        };
        let hints = commit_hints(&commit);
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::commit(
                c,
                &self.schema,
                &commit,
                &state,
                &created
            ))
        })
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        let hints = [WakeUp::ControlRequested { id: id.clone() }];
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::request_control(
                c,
                &self.schema,
                &id,
                &request
            ))
        })
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        Box::pin(async move { read!(self, |c| ops::list_instances(c, &self.schema, &filter)) })
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::claim_runnable(
                c,
                &self.schema,
                &owner,
                now,
                ttl,
                limit
            ))
        })
    }

    fn delete_instance(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| async {
                let status = ops::instance_status(c, &self.schema, &id).await?;
                if !status.is_final() {
                    return Err(StoreError::NotTerminal {
                        instance: id.clone(),
                        status,
                    });
                }
                ops::delete_dependents(c, &self.schema, std::slice::from_ref(&id)).await
            })
        })
    }

    fn purge(&self, filter: PurgeFilter) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let statuses = purge_statuses(&filter)?;
            let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
            let batch = page(filter.batch_size, 500);
            let mut total = 0u64;
            loop {
                // Each batch is its own atomic transaction (ST-31).
                let removed = write_tx!(self, [], |c| ops::purge_batch(
                    c,
                    &self.schema,
                    &statuses,
                    filter.finished_before,
                    filter.definition_name.as_deref(),
                    batch
                ))?;
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
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (id, owner) = (instance_id.to_owned(), owner.to_owned());
        Box::pin(async move {
            write_tx!(self, [], |c| ops::acquire_lease(
                c,
                &self.schema,
                &id,
                &owner,
                now,
                ttl
            ))
        })
    }

    fn renew_lease(
        &self,
        instance_id: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let id = instance_id.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::renew_lease(
                c,
                &self.schema,
                &id,
                token,
                now,
                ttl
            ))
        })
    }

    fn release_lease(&self, instance_id: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        let hints = [WakeUp::InstanceRunnable { id: id.clone() }];
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::release_lease(
                c,
                &self.schema,
                &id,
                token
            ))
        })
    }

    fn acquire_named_lease(
        &self,
        name: &str,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        Box::pin(async move {
            write_tx!(self, [], |c| ops::acquire_named_lease(
                c,
                &self.schema,
                &name,
                &owner,
                now,
                ttl
            ))
        })
    }

    fn renew_named_lease(
        &self,
        name: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let name = name.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::renew_named_lease(
                c,
                &self.schema,
                &name,
                token,
                now,
                ttl
            ))
        })
    }

    fn release_named_lease(&self, name: &str, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let name = name.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::release_named_lease(
                c,
                &self.schema,
                &name,
                token
            ))
        })
    }

    fn find_bookmarks(&self, query: BookmarkQuery) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        Box::pin(async move { read!(self, |c| ops::find_bookmarks(c, &self.schema, &query)) })
    }

    fn list_bookmarks(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        let id = instance_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::list_bookmarks(c, &self.schema, &id)) })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, stimulus) = (instance_id.to_owned(), stimulus_id.to_owned());
        Box::pin(async move { read!(self, |c| ops::has_receipt(c, &self.schema, &id, &stimulus)) })
    }

    fn replace_triggers(
        &self,
        definition_name: &str,
        triggers: Vec<TriggerRow>,
    ) -> BoxFuture<'_, StoreResult<TriggerDiff>> {
        let name = definition_name.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::replace_triggers(
                c,
                &self.schema,
                &name,
                &triggers
            ))
        })
    }

    fn find_triggers(&self, hashes: &[String]) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        let hashes = hashes.to_vec();
        Box::pin(async move { read!(self, |c| ops::find_triggers(c, &self.schema, &hashes)) })
    }

    fn earliest_timer(&self, now: Micros) -> BoxFuture<'_, StoreResult<Option<Micros>>> {
        Box::pin(async move { read!(self, |c| ops::earliest_timer(c, &self.schema, now)) })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::claim_due_timers(
                c,
                &self.schema,
                &owner,
                now,
                claim_ttl,
                limit
            ))
        })
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        let hints = [WakeUp::TimersChanged { earliest: None }];
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::put_schedule(
                c,
                &self.schema,
                &schedule
            ))
        })
    }

    fn delete_schedule(&self, schedule_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = schedule_id.to_owned();
        Box::pin(async move { write_tx!(self, [], |c| ops::delete_schedule(c, &self.schema, &id)) })
    }

    fn list_schedules(&self, definition_name: &str) -> BoxFuture<'_, StoreResult<Vec<Schedule>>> {
        let name = definition_name.to_owned();
        Box::pin(async move { read!(self, |c| ops::list_schedules(c, &self.schema, &name)) })
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: NewInstance,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        let state = match validate_instance_id(&instance.instance_id)
            .and_then(|()| encode_state(&instance.state, self.max_state_bytes))
        {
            Ok(state) => state,
            Err(e) => return ready(Err(e)),
        };
        let mut hints: Vec<WakeUp> = create_hint(&instance).into_iter().collect();
        hints.push(WakeUp::TimersChanged { earliest: next_due });
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::fire_schedule(
                c,
                &self.schema,
                &id,
                expected_due_at,
                &instance,
                &state,
                next_due
            ))
        })
    }

    fn list_timers(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        let id = instance_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::list_timers(c, &self.schema, &id)) })
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord>>> {
        let id = instance_id.to_owned();
        Box::pin(async move {
            read!(self, |c| ops::read_journal(
                c,
                &self.schema,
                &id,
                from_seq,
                limit
            ))
        })
    }

    fn enqueue(&self, item: QueueItem) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            write_tx!(self, [WakeUp::QueueChanged], |c| ops::enqueue(
                c,
                &self.schema,
                &item
            ))
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
        Box::pin(async move {
            write_tx!(self, [], |c| ops::claim_queue_page(
                c,
                &self.schema,
                &owner,
                now,
                claim_ttl,
                limit
            ))
        })
    }

    fn release_queue_item(&self, item_id: &str, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
        let (id, owner) = (item_id.to_owned(), owner.to_owned());
        Box::pin(async move {
            write_tx!(self, [WakeUp::QueueChanged], |c| ops::release_queue_item(
                c,
                &self.schema,
                &id,
                &owner
            ))
        })
    }

    fn ack_queue_item(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        Box::pin(async move { write_tx!(self, [], |c| ops::ack_queue_item(c, &self.schema, &id)) })
    }

    fn record_queue_failure(
        &self,
        item_id: &str,
        error: &str,
        now: Micros,
        max_attempts: u32,
    ) -> BoxFuture<'_, StoreResult<QueueFailure>> {
        let (id, error) = (item_id.to_owned(), error.to_owned());
        Box::pin(async move {
            write_tx!(self, [WakeUp::QueueChanged], |c| ops::record_queue_failure(
                c,
                &self.schema,
                &id,
                &error,
                now,
                max_attempts
            ))
        })
    }

    fn dead_letter(
        &self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<&str>,
        now: Micros,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, error) = (item_id.to_owned(), error.map(str::to_owned));
        Box::pin(async move {
            write_tx!(self, [], |c| ops::move_to_dead(
                c,
                &self.schema,
                &id,
                reason,
                error.as_deref(),
                now
            ))
        })
    }

    fn expire_queue(&self, now: Micros, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(
            async move { write_tx!(self, [], |c| ops::expire_queue(c, &self.schema, now, limit)) },
        )
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        Box::pin(async move {
            write_tx!(self, [WakeUp::QueueChanged], |c| ops::replay_dead_letter(
                c,
                &self.schema,
                &id,
                now,
                ttl
            ))
        })
    }

    fn delete_dead_letter(&self, item_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let id = item_id.to_owned();
        Box::pin(
            async move { write_tx!(self, [], |c| ops::delete_dead_letter(c, &self.schema, &id)) },
        )
    }

    fn purge_dead_letters(
        &self,
        dead_before: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            write_tx!(self, [], |c| ops::purge_before(
                c,
                &self.schema,
                "@wf_dead_letters",
                "original_item_id",
                "dead_at",
                dead_before,
                limit
            ))
        })
    }

    fn purge_receipts(&self, before: Micros, limit: usize) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            write_tx!(self, [], |c| ops::purge_before(
                c,
                &self.schema,
                "@wf_receipts",
                "instance_id, stimulus_id",
                "at",
                before,
                limit
            ))
        })
    }

    fn purge_idempotency_records(
        &self,
        before: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            write_tx!(self, [], |c| ops::purge_before(
                c,
                &self.schema,
                "@wf_idempotency",
                "idempotency_key",
                "created_at",
                before,
                limit
            ))
        })
    }

    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let id = instance_id.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::insert_incident(
                c,
                &self.schema,
                &id,
                &incident
            ))
        })
    }

    fn list_incidents(&self, instance_id: &str) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        let id = instance_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::list_incidents(c, &self.schema, &id)) })
    }

    fn list_all_incidents(
        &self,
        unresolved_only: bool,
        after: Option<(Micros, String)>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        Box::pin(async move {
            read!(self, |c| ops::list_all_incidents(
                c,
                &self.schema,
                unresolved_only,
                after.as_ref(),
                limit
            ))
        })
    }

    fn put_idempotency_record(
        &self,
        record: IdempotencyRecord,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let report = match ops::json_text(&record.report) {
            Ok(report) => report,
            Err(e) => return ready(Err(e)),
        };
        Box::pin(async move {
            write_tx!(self, [], |c| ops::put_idempotency_record(
                c,
                &self.schema,
                &record,
                &report
            ))
        })
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        Box::pin(async move {
            read!(self, |c| ops::find_idempotency_record(
                c,
                &self.schema,
                &key
            ))
        })
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        Box::pin(async move { read!(self, |c| ops::list_dead_letters(c, &self.schema, &filter)) })
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        ready(Ok(StoreStats {
            write_requests: self.counters.write_requests.load(Ordering::Relaxed),
            transactions: self.counters.transactions.load(Ordering::Relaxed),
        }))
    }

    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.hints.subscribe()
    }
}
