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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::base::{BoxFuture, Micros};
use crate::store::backend::{
    BookmarkSelect, Capabilities, CensusCount, ChildWaitIndex, ClaimedRecord, DefinitionRecord,
    DefinitionStore, DueTimers, Enqueue, IncidentQuery, LeaseClaim, LeaseKey, PurgeTarget,
    RemoteHints, RouteReads, Settled, Settlement, Store, TimerScope, TriggerSelect, TriggerWrite,
    WakeUp,
};
use crate::store::error::{StoreError, StoreResult};
use crate::store::migrations::MigrateMode;
use crate::store::rows::{
    BookmarkQuery, BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter,
    DeadLetterFilter, IdempotencyRecord, IncidentRecord, InstanceFilter, InstanceRecord,
    InstanceStatus, JournalRecord, Lease, ListedInstance, NewIncident, NewInstance, QueueItem,
    Renewal, Schedule, ScheduleFiring, StoreStats, TimerRow, TriggerRow,
};

mod debounce;
mod held;
mod kept;
mod liveness;
mod notify;
mod ops;
mod schema;

use held::{HeldAnswer, HeldClaims};
use schema::Schema;

impl From<sqlx::Error> for StoreError {
    /// A column that does not decode into its type is a `Decode` naming the column (ST-22),
    /// not a transient failure to retry; every other driver error is `Unavailable`.
    fn from(error: sqlx::Error) -> Self {
        let column = match &error {
            sqlx::Error::ColumnDecode { index, .. } => index.clone(),
            sqlx::Error::ColumnNotFound(name) => name.clone(),
            sqlx::Error::ColumnIndexOutOfBounds { index, .. } => index.to_string(),
            sqlx::Error::Decode(_) => "?".to_owned(),
            _ => return StoreError::unavailable(error),
        };
        StoreError::Decode {
            what: "row",
            id: "?".to_owned(),
            path: column,
            message: error.to_string(),
        }
    }
}

/// How long a pooled connection may sit idle before it is pinged on its next use.
const IDLE_BEFORE_PING: Duration = Duration::from_millis(250);

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

/// How long a connection of a pool this store opened may sit idle inside a transaction
/// before the server ends its session (ST-27). The store's own transactions never wait for
/// anything but their next statement, so only a transaction whose future was dropped half
/// way reaches it.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Counters {
    write_requests: AtomicU64,
    transactions: AtomicU64,
}

impl Counters {
    /// Counts a write in its own transaction.
    fn count(&self) {
        self.write_requests.fetch_add(1, Ordering::Relaxed);
        self.transactions.fetch_add(1, Ordering::Relaxed);
    }
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
    /// The hints heard from other processes, forwarded to the [`Storage`](super::Storage)
    /// over this store ([`RemoteHints`]).
    hints: broadcast::Sender<WakeUp>,
    /// The hints of committed writes, for the other processes: sent by the notifier task
    /// (see `notify.rs`).
    notifier: mpsc::UnboundedSender<notify::Outgoing>,
    /// This store's origin in the payloads (see `notify.rs`).
    origin: String,
    /// Whether the listener listens now (see `notify.rs`).
    listening: Arc<AtomicBool>,
    counters: Arc<Counters>,
    /// The leases this store claimed, and those it keeps across transitions (ST-38).
    claims: Arc<HeldClaims>,
    /// Gives kept leases back.
    tending: Arc<held::Tending>,
    /// Tend the kept leases, and give back those another process wants.
    held_tasks: [JoinHandle<()>; 2],
    migrations_applied: Vec<u32>,
    listener: Option<JoinHandle<()>>,
    /// Connections kept between single statements (see `kept.rs`).
    kept: Arc<kept::Kept>,
    /// Gives the kept connections that went idle back to the pool.
    give_back: JoinHandle<()>,
    /// The liveness locks of the owners this store claims for (ST-36, `liveness.rs`).
    liveness: Arc<liveness::Liveness>,
    /// Holds those locks; looks for dead owners.
    liveness_tasks: [JoinHandle<()>; 2],
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema.name())
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
        self.give_back.abort();
        for task in self.liveness_tasks.iter().chain(&self.held_tasks) {
            task.abort();
        }
        self.kept.clear();
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

    /// Opens a pool on `url` with `options`, then migrates and starts the listener. Its
    /// connections ask the server to end a session that sits idle inside a transaction for
    /// 10 s (ST-27): a store operation dropped between two statements holds no lock longer.
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
        // ST-27: a transaction whose client stops sending (its future dropped between two
        // statements by a caller's timeout, say) is ended by the server, so its row locks
        // cannot hold other processes' commits for longer than this.
        let connect = connect.options([(
            "idle_in_transaction_session_timeout",
            format!("{}ms", IDLE_IN_TRANSACTION.as_millis()),
        )]);
        // A connection is pinged before use only after it sat idle for a while, not before
        // every operation (a round trip each): a busy store's connections were in use a
        // moment ago, and one the server closed since fails its statement as `Unavailable`
        // (transient: the caller retries and the pool replaces it).
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > IDLE_BEFORE_PING {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await?;
        Self::from_pool(pool, options).await
    }

    /// Creates the schema `schema` with the migrations up to `version` only: a fixture of an
    /// older schema for upgrade tests (ST-29).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a bad schema name, [`StoreError::Unavailable`] when the
    /// database cannot be reached or migrated.
    #[cfg(feature = "test-support")]
    pub async fn create_at_schema(url: &str, schema: &str, version: u32) -> StoreResult<()> {
        let schema = Schema::new(schema)?;
        let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
        let migrated = schema::migrate_to(&pool, &schema, version).await;
        pool.close().await;
        migrated.map(|_| ())
    }

    /// Uses the application's pool: migrates the schema (under an advisory lock, ST-28) and
    /// starts the notification listener, which holds one connection of the pool. The pool
    /// keeps its own connection settings: give it `idle_in_transaction_session_timeout` as
    /// [`PostgresStore::connect_with`] does (ST-27), or a store operation whose future is
    /// dropped half way can leave a transaction holding row locks on a pooled connection.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed schema name; [`StoreError::SchemaTooNew`],
    /// [`StoreError::MigrationChecksumMismatch`], or with [`MigrateMode::CheckOnly`]
    /// [`StoreError::SchemaOutdated`]; [`StoreError::Unavailable`] when the server fails.
    pub async fn from_pool(pool: PgPool, options: &PostgresOptions) -> StoreResult<Self> {
        let schema = Schema::new(&options.schema)?;
        let migrations_applied = schema::migrate(&pool, &schema, options.migrate).await?;
        let kept = Arc::new(kept::Kept::new(&pool));
        let give_back = tokio::spawn(kept::give_back_idle(Arc::downgrade(&kept)));
        let (hints, _) = broadcast::channel(1024);
        let origin = new_origin();
        let (notifier, outgoing) = mpsc::unbounded_channel();
        tokio::spawn(notify::send(
            pool.clone(),
            schema.channel(),
            origin.clone(),
            outgoing,
        ));
        let listening = Arc::new(AtomicBool::new(false));
        let claims = Arc::new(HeldClaims::default());
        let counters = Arc::new(Counters::default());
        let tending = Arc::new(held::Tending {
            counters: Arc::clone(&counters),
            pool: pool.clone(),
            schema: schema.clone(),
            notifier: notifier.clone(),
        });
        let (wanted, wanted_ids) = mpsc::unbounded_channel();
        let held_tasks = [
            tokio::spawn(held::tend(Arc::downgrade(&claims), Arc::clone(&tending))),
            tokio::spawn(held::give_back_wanted(
                Arc::downgrade(&claims),
                Arc::clone(&tending),
                wanted_ids,
            )),
        ];
        let listener = options.listen.then(|| {
            tokio::spawn(notify::listen(
                pool.clone(),
                schema.channel(),
                origin.clone(),
                hints.clone(),
                Arc::clone(&listening),
                options.poll_interval.max(Duration::from_millis(10)),
                wanted,
            ))
        });
        let (liveness, holder) = liveness::Liveness::start(&pool, &schema);
        let checker = tokio::spawn(liveness::check(
            pool.clone(),
            schema.clone(),
            origin.clone(),
            hints.clone(),
        ));
        tracing::info!(
            schema = schema.name(),
            ?migrations_applied,
            "postgres store: open"
        );
        Ok(Self {
            pool,
            schema,
            hints,
            notifier,
            origin,
            listening,
            counters,
            claims,
            tending,
            held_tasks,
            migrations_applied,
            listener,
            kept,
            give_back,
            liveness,
            liveness_tasks: [holder, checker],
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
        // A kept lease's memory of the row no longer holds (ST-38): given back first.
        if let Some(held) = self.claims.take_idle(instance_id) {
            self.tending.give_back(vec![held], false).await;
        }
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
        self.count_transaction();
        Ok(self.pool.begin().await?)
    }

    /// Hands the hints of a committed write to the notifier (see `notify.rs`).
    fn announce(&self, hints: &[WakeUp]) {
        if !hints.is_empty() {
            // The notifier ends only with the store: a closed channel loses nothing.
            let _ = self.notifier.send(notify::Outgoing::Hints(hints.to_vec()));
        }
    }

    /// A pooled connection that answers a ping; the ones that do not are closed.
    async fn live_connection(&self) -> StoreResult<sqlx::pool::PoolConnection<Postgres>> {
        let mut tries = self.pool.size() + 1;
        loop {
            let mut conn = self.pool.acquire().await?;
            match sqlx::Connection::ping(&mut *conn).await {
                Ok(()) => return Ok(conn),
                Err(error) if tries == 0 => return Err(error.into()),
                Err(_) => {
                    tries -= 1;
                    conn.close_on_drop();
                }
            }
        }
    }

    /// Counts a write in its own transaction: an explicit one ([`PostgresStore::begin`]) or
    /// the implicit one of a single statement.
    fn count_transaction(&self) {
        self.counters.count();
    }

    /// Ends a write: on success commits, then hands `hints` to the notifier for the other
    /// processes (only a committed write sends any); on failure rolls back, so nothing is
    /// written. (This process's own hints are sent by [`Storage`](super::Storage).)
    async fn finish<T>(
        &self,
        tx: Transaction<'static, Postgres>,
        result: StoreResult<T>,
        hints: &[WakeUp],
    ) -> StoreResult<T> {
        match result {
            Ok(value) => {
                tx.commit().await?;
                self.announce(hints);
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

    /// [`PostgresStore::finish`] for a write the other processes must hear of (see
    /// `notify.rs`): `hints` are notified inside its transaction, so they are sent exactly
    /// when it commits, by a process that exits at once too.
    async fn finish_notified<T>(
        &self,
        mut tx: Transaction<'static, Postgres>,
        result: StoreResult<T>,
        hints: &[WakeUp],
    ) -> StoreResult<T> {
        let result = match result {
            Ok(value) if !hints.is_empty() => {
                notify::notify_in(&mut tx, &self.schema.channel(), &self.origin, hints)
                    .await
                    .map(|()| value)
                    .map_err(StoreError::from)
            }
            other => other,
        };
        self.finish(tx, result, &[]).await
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

/// [`write_tx!`] whose `$hints` are notified inside the transaction (see
/// [`PostgresStore::finish_notified`]).
macro_rules! write_tx_notified {
    ($self:ident, $hints:expr, |$c:ident| $body:expr) => {{
        let mut tx = $self.begin().await?;
        let result = {
            let $c: &mut PgConnection = &mut tx;
            $body.await
        };
        $self.finish_notified(tx, result, &$hints).await
    }};
}

/// Runs `$body`, one write statement, on a pooled connection `$c` in the statement's own
/// implicit transaction: one round trip. A failure is returned as is (the write may or may
/// not have been applied when the connection was lost: the caller's version and token tell).
macro_rules! single {
    ($self:ident, |$c:ident| $body:expr) => {{
        $self.count_transaction();
        let mut conn = $self.kept.take(&$self.pool).await?;
        let result = {
            let $c: &mut PgConnection = &mut conn;
            $body.await
        };
        if result.is_ok() {
            $self.kept.keep(conn);
        }
        result
    }};
}

/// Runs `$body`, a read, on a pooled connection `$c`, outside any explicit transaction. A
/// read that fails as `Unavailable` runs once more on a connection that answers a ping: the
/// pool does not ping a connection used a moment ago, so after the server dropped its
/// connections (a restart) the first use of each fails, and a read is safe to run again.
macro_rules! read {
    ($self:ident, |$c:ident| $body:expr) => {{
        let mut conn = $self.kept.take(&$self.pool).await?;
        let first = {
            let $c: &mut PgConnection = &mut conn;
            $body.await
        };
        match first {
            Err(StoreError::Unavailable { .. }) => {
                drop(conn);
                let mut conn = $self.live_connection().await?;
                let second = {
                    let $c: &mut PgConnection = &mut conn;
                    $body.await
                };
                if second.is_ok() {
                    $self.kept.keep(conn);
                }
                second
            }
            other => {
                if other.is_ok() {
                    $self.kept.keep(conn);
                }
                other
            }
        }
    }};
}

// After the transaction macros, which it uses.
mod flow;
/// The origin of the notifications sent from an application's transaction (ST-37): no
/// store's own, so every process hears them, this one too.
const APPLICATION_ORIGIN: &str = "application-transaction";

impl PostgresStore {
    /// Creates an instance inside `conn`'s transaction (the application's, ST-37), with a
    /// notification that reaches the processes only if it commits.
    pub(crate) async fn create_instance_in(
        &self,
        conn: &mut PgConnection,
        instance: &NewInstance<String>,
    ) -> StoreResult<()> {
        ops::insert_instance(conn, &self.schema, instance).await?;
        let hint = WakeUp::InstanceUnclaimed {
            id: instance.instance_id.clone(),
        };
        notify::notify_in(conn, &self.schema.channel(), APPLICATION_ORIGIN, &[hint]).await?;
        Ok(())
    }

    /// Settles what this store holds on `id` before a claim for `claim` (ST-38): a lease it
    /// keeps for the claim's owner on `known_version` answers the claim from memory; one it
    /// keeps but cannot answer so is refreshed under its token and nonce (one statement);
    /// one it keeps for another owner of this process is given back. `None`: claim afresh.
    async fn settle_held(
        &self,
        id: &str,
        claim: &LeaseClaim,
        known_version: Option<u64>,
    ) -> StoreResult<Option<FromHeld>> {
        match self.claims.answer(id, claim, known_version) {
            HeldAnswer::Claim => Ok(None),
            HeldAnswer::Memory(claimed) => Ok(Some(FromHeld::Memory(*claimed))),
            HeldAnswer::GiveBack { token, nonce } => {
                self.tending
                    .give_back(vec![(id.to_owned(), token, nonce)], false)
                    .await;
                Ok(None)
            }
            HeldAnswer::Refresh { token, nonce } => {
                let refresh = LeaseClaim {
                    token: Some(token),
                    ..claim.clone()
                };
                let refreshed = single!(self, |c| ops::claim_instance(
                    c,
                    &self.schema,
                    id,
                    &refresh,
                    Some(nonce),
                    token
                ));
                match refreshed {
                    Ok(claimed) => {
                        self.claims.refreshed(
                            id,
                            claimed.lease.token,
                            claimed.lease.expires_at,
                            Some(&claimed.record),
                        );
                        Ok(Some(FromHeld::Refreshed(claimed)))
                    }
                    // Lost meanwhile (taken over, or expired by the liveness check): a
                    // fresh claim follows.
                    Err(StoreError::Fenced { .. }) => {
                        self.claims.remove(id, Some(token));
                        Ok(None)
                    }
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// A fresh claim of `id` (or, with `claim.token`, a refresh), read with its instance.
    async fn claim_read(&self, id: &str, claim: LeaseClaim) -> StoreResult<ClaimedRecord<String>> {
        let nonce = match claim.token {
            None => Some(HeldClaims::new_nonce()),
            Some(token) => self.claims.nonce(id, token),
        };
        let known = self.claims.token(id);
        let mut claimed = single!(self, |c| ops::claim_instance(
            c,
            &self.schema,
            id,
            &claim,
            nonce,
            known
        ));
        // The lease was given back between the claim and the read of its holder (a kept
        // lease, ST-38): it is free now, so the claim runs once more.
        if let Err(StoreError::LeaseHeld { holder, until, .. }) = &claimed
            && (holder.is_empty() || *until <= claim.now)
        {
            claimed = single!(self, |c| ops::claim_instance(
                c,
                &self.schema,
                id,
                &claim,
                nonce,
                known
            ));
        }
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(error) => {
                self.tell_wanted(id, &claim.owner, claim.now, &error);
                return Err(error);
            }
        };
        let lease = claimed.lease;
        match (claim.token, nonce) {
            (None, Some(nonce)) => self
                .claims
                .claimed(id, lease, nonce, &claim, &claimed.record),
            _ => self
                .claims
                .refreshed(id, lease.token, lease.expires_at, None),
        }
        Ok(claimed)
    }

    /// After a claim by `owner` refused with `error`: when another owner holds a live lease
    /// (which the claim marked wanted, ST-38), its holder is told, so that it gives the lease
    /// back if it keeps it idle.
    fn tell_wanted(&self, id: &str, owner: &str, now: Micros, error: &StoreError) {
        if let StoreError::LeaseHeld { holder, until, .. } = error
            && holder != owner
            && *until > now
        {
            // The notifier ends only with the store: a closed channel loses nothing.
            let _ = self.notifier.send(notify::Outgoing::Wanted(id.to_owned()));
        }
    }

    /// Queues an item inside `conn`'s transaction (the application's, ST-37), with a
    /// notification that reaches the processes only if it commits.
    pub(crate) async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        item: &QueueItem,
    ) -> StoreResult<()> {
        ops::enqueue(conn, &self.schema, item).await?;
        let hint = WakeUp::QueueChanged;
        notify::notify_in(conn, &self.schema.channel(), APPLICATION_ORIGIN, &[hint]).await?;
        Ok(())
    }

    /// The stimuli waiting in the queue, oldest sent first, at most `limit`, for inspection
    /// (the `workflow why` command): nothing is claimed, so it runs beside the processes that
    /// deliver them. An item whose row does not decode is left out.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the read fails.
    pub async fn queued(&self, limit: usize) -> StoreResult<Vec<QueueItem>> {
        read!(self, |c| ops::queued(c, &self.schema, limit))
    }
}

/// What [`PostgresStore::settle_held`] answered a claim with.
enum FromHeld {
    /// From memory: the kept lease, lent to the claimer's run.
    Memory(ClaimedRecord<Option<String>>),
    /// The kept lease refreshed, with the instance read.
    Refreshed(ClaimedRecord<String>),
}

impl crate::store::ClaimKnown for PostgresStore {
    /// The claim of a run that committed `known_version` last (ENG-53): answered from memory
    /// while this store keeps the instance's lease for the same owner on that version
    /// (ST-38); otherwise claimed, and the state read compared with `known_text`.
    fn claim_instance_known<'a>(
        &'a self,
        instance_id: &'a str,
        claim: LeaseClaim,
        known_version: u64,
        known_text: &'a str,
    ) -> BoxFuture<'a, StoreResult<ClaimedRecord<Option<String>>>> {
        self.liveness.hold(&claim.owner);
        Box::pin(async move {
            let claimed = match self
                .settle_held(instance_id, &claim, Some(known_version))
                .await?
            {
                Some(FromHeld::Memory(claimed)) => return Ok(claimed),
                Some(FromHeld::Refreshed(claimed)) => claimed,
                None => self.claim_read(instance_id, claim).await?,
            };
            let unchanged =
                claimed.record.version == known_version && claimed.record.state == known_text;
            Ok(ClaimedRecord {
                lease: claimed.lease,
                record: claimed
                    .record
                    .try_map_state(|_, state| {
                        Ok::<_, std::convert::Infallible>((!unchanged).then_some(state))
                    })
                    .unwrap_or_else(|never| match never {}),
            })
        })
    }
}

fn ready<T: Send + 'static>(result: StoreResult<T>) -> BoxFuture<'static, StoreResult<T>> {
    Box::pin(std::future::ready(result))
}

impl Store for PostgresStore {
    fn create_instance(&self, instance: NewInstance<String>) -> BoxFuture<'_, StoreResult<u64>> {
        let hints: Vec<WakeUp> = WakeUp::of_creation(&instance).into_iter().collect();
        Box::pin(async move {
            write_tx!(self, hints, |c| async {
                ops::insert_instance(c, &self.schema, &instance).await?;
                Ok(1)
            })
        })
    }

    fn load_instance(
        &self,
        instance_id: &str,
    ) -> BoxFuture<'_, StoreResult<InstanceRecord<String>>> {
        let id = instance_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::load_instance(c, &self.schema, &id)) })
    }

    fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> BoxFuture<'_, StoreResult<ClaimedRecord<String>>> {
        let id = instance_id.to_owned();
        self.liveness.hold(&claim.owner);
        Box::pin(async move {
            if claim.token.is_none()
                && let Some(FromHeld::Refreshed(claimed)) =
                    self.settle_held(&id, &claim, None).await?
            {
                return Ok(claimed);
            }
            self.claim_read(&id, claim).await
        })
    }

    fn commit(&self, commit: Commit<String>) -> BoxFuture<'_, StoreResult<u64>> {
        let mut hints = WakeUp::of_commit(&commit);
        Box::pin(async move {
            let (id, token) = (commit.instance_id.as_str(), commit.lease_token);
            let nonce = self.claims.nonce(id, token);
            // ST-38: the lease of an instance the commit leaves waiting is kept.
            let keep = self.claims.keep_until(&commit);
            let committed = if ops::commit_needs_transaction(&commit) {
                let mut tx = self.begin().await?;
                let result = ops::commit(&mut tx, &self.schema, &commit, nonce, keep).await;
                self.finish(tx, result, &[]).await?
            } else {
                single!(self, |c| ops::commit(c, &self.schema, &commit, nonce, keep))?
            };
            // ST-18: the other processes hear of new bookmarks only when something waits in
            // the queue for them (this process's own worker hears of them from `Storage`).
            if !committed.queue_waiting {
                hints.retain(|hint| *hint != WakeUp::QueueChanged);
            }
            self.announce(&hints);
            let kept = keep.filter(|_| committed.kept);
            self.claims.committed(&commit, committed.version, kept);
            Ok(committed.version)
        })
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<InstanceStatus>> {
        let id = instance_id.to_owned();
        let hints = [WakeUp::ControlRequested { id: id.clone() }];
        Box::pin(async move {
            let status = write_tx_notified!(self, hints, |c| ops::request_control(
                c,
                &self.schema,
                &id,
                &request
            ))?;
            // ST-38: a lease this store keeps is given back for the request.
            if let Some(held) = self.claims.wanted(&id) {
                self.tending.give_back(vec![held], true).await;
            }
            Ok(status)
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
        self.liveness.hold(owner);
        let owner = owner.to_owned();
        Box::pin(async move {
            let claimed = write_tx!(self, [], |c| ops::claim_runnable(
                c,
                &self.schema,
                &owner,
                now,
                ttl,
                limit
            ))?;
            for instance in &claimed {
                self.claims.remove(&instance.instance_id, None);
            }
            Ok(claimed)
        })
    }

    fn purge(&self, target: PurgeTarget) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let s = &self.schema;
            match target {
                PurgeTarget::Instance(id) => write_tx!(self, [], |c| async {
                    let status = ops::instance_status(c, s, &id).await?;
                    if !status.is_final() {
                        return Err(StoreError::NotTerminal {
                            instance: id.clone(),
                            status,
                        });
                    }
                    ops::delete_dependents(c, s, std::slice::from_ref(&id)).await?;
                    Ok(1)
                }),
                PurgeTarget::Finished(filter) => {
                    let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
                    let batch = filter.batch_size.max(1);
                    let mut total = 0u64;
                    loop {
                        // Each batch is its own atomic transaction (ST-31).
                        let removed = write_tx!(self, [], |c| ops::purge_batch(
                            c,
                            s,
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
                }
                PurgeTarget::DeadLetter(id) => write_tx!(self, [], |c| async {
                    Ok(u64::from(ops::delete_dead_letter(c, s, &id).await?))
                }),
                PurgeTarget::DeadLettersBefore { before, limit } => {
                    write_tx!(self, [], |c| ops::purge_before(
                        c,
                        s,
                        "@wf_dead_letters",
                        "original_item_id",
                        "dead_at",
                        before,
                        limit
                    ))
                }
                PurgeTarget::ReceiptsBefore { before, limit } => {
                    write_tx!(self, [], |c| ops::purge_before(
                        c,
                        s,
                        "@wf_receipts",
                        "instance_id, stimulus_id",
                        "at",
                        before,
                        limit
                    ))
                }
                PurgeTarget::IdempotencyRecordsBefore { before, limit } => {
                    write_tx!(self, [], |c| ops::purge_before(
                        c,
                        s,
                        "@wf_idempotency",
                        "idempotency_key",
                        "created_at",
                        before,
                        limit
                    ))
                }
                PurgeTarget::ExpiredQueueItems { now, limit } => {
                    write_tx!(self, [], |c| ops::expire_queue(c, s, now, limit))
                }
                PurgeTarget::Schedule(id) => write_tx!(self, [], |c| async {
                    Ok(u64::from(ops::delete_schedule(c, s, &id).await?))
                }),
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
        self.liveness.hold(owner);
        let (key, owner) = (key.clone(), owner.to_owned());
        Box::pin(async move {
            if let LeaseKey::Instance(id) = &key
                && let Some(held) = self.claims.take_idle(id)
            {
                self.tending.give_back(vec![held], false).await;
            }
            write_tx!(self, [], |c| async {
                match &key {
                    LeaseKey::Instance(id) => {
                        let lease = ops::acquire_lease(c, &self.schema, id, &owner, now, ttl).await;
                        match &lease {
                            Ok(_) => self.claims.remove(id, None),
                            Err(error) => self.tell_wanted(id, &owner, now, error),
                        }
                        lease
                    }
                    LeaseKey::Named(name) => {
                        ops::acquire_named_lease(c, &self.schema, name, &owner, now, ttl).await
                    }
                }
            })
        })
    }

    fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let key = key.clone();
        Box::pin(async move {
            write_tx!(self, [], |c| async {
                match &key {
                    LeaseKey::Instance(id) => {
                        let nonce = self.claims.nonce(id, token);
                        ops::renew_lease(c, &self.schema, id, token, now, ttl, nonce).await
                    }
                    LeaseKey::Named(name) => Ok(Renewal {
                        lease: ops::renew_named_lease(c, &self.schema, name, token, now, ttl)
                            .await?,
                        control_request: None,
                    }),
                }
            })
        })
    }

    fn release_lease(&self, key: &LeaseKey, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let key = key.clone();
        let hints: Vec<WakeUp> = match &key {
            LeaseKey::Instance(id) => vec![WakeUp::InstanceRunnable { id: id.clone() }],
            LeaseKey::Named(_) => Vec::new(),
        };
        Box::pin(async move {
            write_tx!(self, hints, |c| async {
                match &key {
                    LeaseKey::Instance(id) => {
                        let nonce = self.claims.nonce(id, token);
                        ops::release_lease(c, &self.schema, id, token, nonce).await?;
                        self.claims.remove(id, Some(token));
                        Ok(())
                    }
                    LeaseKey::Named(name) => {
                        ops::release_named_lease(c, &self.schema, name, token).await
                    }
                }
            })
        })
    }

    fn find_bookmarks(
        &self,
        select: BookmarkSelect,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        Box::pin(async move {
            read!(self, |c| async {
                match &select {
                    BookmarkSelect::Hash(query) => {
                        ops::find_bookmarks(c, &self.schema, query).await
                    }
                    BookmarkSelect::Instance(id) => ops::list_bookmarks(c, &self.schema, id).await,
                }
            })
        })
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (id, stimulus) = (instance_id.to_owned(), stimulus_id.to_owned());
        Box::pin(async move { read!(self, |c| ops::has_receipt(c, &self.schema, &id, &stimulus)) })
    }

    fn find_triggers(&self, select: TriggerSelect) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        Box::pin(async move {
            read!(self, |c| async {
                match &select {
                    TriggerSelect::Hashes(hashes) => {
                        ops::find_triggers(c, &self.schema, hashes).await
                    }
                    TriggerSelect::Definition(name) => {
                        ops::definition_triggers(c, &self.schema, name).await
                    }
                }
            })
        })
    }

    fn write_triggers(
        &self,
        definition_name: &str,
        write: TriggerWrite,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let name = definition_name.to_owned();
        Box::pin(async move {
            write_tx!(self, [], |c| ops::write_triggers(
                c,
                &self.schema,
                &name,
                &write
            ))
        })
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueTimers>> {
        self.liveness.hold(owner);
        let owner = owner.to_owned();
        Box::pin(async move {
            if limit == 0 {
                return read!(self, |c| async {
                    Ok(DueTimers {
                        claimed: Vec::new(),
                        next_due: ops::earliest_timer(c, &self.schema, now).await?,
                        damaged: Vec::new(),
                    })
                });
            }
            write_tx!(self, [], |c| async {
                let claimed =
                    ops::claim_due_timers(c, &self.schema, &owner, now, claim_ttl, limit).await?;
                let room = limit.saturating_sub(claimed.len());
                let damaged = if room > 0 {
                    ops::claim_damaged_timers(c, &self.schema, &owner, now, claim_ttl, room).await?
                } else {
                    Vec::new()
                };
                let next_due = ops::earliest_timer(c, &self.schema, now).await?;
                Ok(DueTimers {
                    claimed,
                    next_due,
                    damaged,
                })
            })
        })
    }

    fn list_timers(&self, scope: TimerScope) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        Box::pin(async move {
            read!(self, |c| async {
                match &scope {
                    TimerScope::Instance(id) => ops::list_timers(c, &self.schema, id).await,
                    TimerScope::Schedules(name) => {
                        ops::list_schedule_rows(c, &self.schema, name).await
                    }
                }
            })
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

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<String>>,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let id = schedule_id.to_owned();
        let mut hints: Vec<WakeUp> = instance
            .as_ref()
            .and_then(WakeUp::of_creation)
            .into_iter()
            .collect();
        hints.push(WakeUp::TimersChanged { earliest: next_due });
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::fire_schedule(
                c,
                &self.schema,
                &id,
                expected_due_at,
                instance.as_ref(),
                next_due
            ))
        })
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord<String>>>> {
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

    fn enqueue(&self, send: Enqueue) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let hints: Vec<WakeUp> = if send.items.is_empty() {
            Vec::new()
        } else {
            vec![WakeUp::QueueChanged]
        };
        Box::pin(async move {
            write_tx_notified!(self, hints, |c| async {
                if let Some(record) = &send.idempotency
                    && let Some(existing) =
                        ops::put_idempotency_record(c, &self.schema, record, send.replace_record)
                            .await?
                {
                    return Ok(Some(existing));
                }
                for item in &send.items {
                    ops::enqueue(c, &self.schema, item).await?;
                }
                Ok(None)
            })
        })
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        self.liveness.hold(owner);
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

    fn settle_queue_item(
        &self,
        item_id: &str,
        settlement: Settlement,
    ) -> BoxFuture<'_, StoreResult<Settled>> {
        let id = item_id.to_owned();
        let hints: Vec<WakeUp> = match settlement {
            Settlement::Release { announce: true, .. } | Settlement::Fail { .. } => {
                vec![WakeUp::QueueChanged]
            }
            Settlement::Release {
                announce: false, ..
            }
            | Settlement::Renew { .. }
            | Settlement::Ack
            | Settlement::DeadLetter { .. } => Vec::new(),
        };
        Box::pin(async move {
            write_tx!(self, hints, |c| ops::settle_queue_item(
                c,
                &self.schema,
                &id,
                &settlement
            ))
        })
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let id = item_id.to_owned();
        Box::pin(async move {
            write_tx_notified!(self, [WakeUp::QueueChanged], |c| ops::replay_dead_letter(
                c,
                &self.schema,
                &id,
                now,
                ttl
            ))
        })
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        Box::pin(async move { read!(self, |c| ops::list_dead_letters(c, &self.schema, &filter)) })
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

    fn list_incidents(
        &self,
        query: IncidentQuery,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        Box::pin(async move { read!(self, |c| ops::list_incidents(c, &self.schema, &query)) })
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

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        ready(Ok(StoreStats {
            write_requests: self.counters.write_requests.load(Ordering::Relaxed),
            transactions: self.counters.transactions.load(Ordering::Relaxed),
        }))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::default()
            .with_debounce(self)
            .with_remote_hints(self)
            .with_definitions(self)
            .with_child_waits(self)
            .with_routes(self)
            .with_census(self)
            .with_flow_control(self)
            .with_postgres(self)
            .with_receipts(self)
            .with_keys(self)
            .with_claim_known(self)
    }
}

impl crate::store::KeyIndex for PostgresStore {
    fn instances_with_key(
        &self,
        key: &str,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        let key = key.to_owned();
        Box::pin(async move {
            read!(self, |c| ops::instances_with_key(
                c,
                &self.schema,
                &key,
                limit
            ))
        })
    }
}

impl crate::store::ReceiptIndex for PostgresStore {
    fn consumed_anywhere(&self, stimulus_id: &str) -> BoxFuture<'_, StoreResult<bool>> {
        let stimulus = stimulus_id.to_owned();
        Box::pin(async move { read!(self, |c| ops::consumed_anywhere(c, &self.schema, &stimulus)) })
    }
}

impl CensusCount for PostgresStore {
    fn census(&self) -> BoxFuture<'_, StoreResult<Census>> {
        Box::pin(async move { read!(self, |c| ops::census(c, &self.schema)) })
    }

    fn version_census(&self) -> BoxFuture<'_, StoreResult<Vec<(String, String, u64)>>> {
        Box::pin(async move { read!(self, |c| ops::version_census(c, &self.schema)) })
    }
}

impl ChildWaitIndex for PostgresStore {
    fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        Box::pin(async move {
            read!(self, |c| ops::find_child_waits(
                c,
                &self.schema,
                after.as_deref(),
                limit
            ))
        })
    }
}

impl RouteReads for PostgresStore {
    fn find_routes(
        &self,
        hashes: Vec<String>,
        bookmarks: BookmarkQuery,
    ) -> BoxFuture<'_, StoreResult<(Vec<TriggerRow>, Vec<BookmarkRow>)>> {
        Box::pin(async move {
            read!(self, |c| ops::find_routes(
                c,
                &self.schema,
                &hashes,
                &bookmarks
            ))
        })
    }
}

/// The other processes' notifications (ST-27, RT-27): every one sent while the listener
/// listens is heard, and a reconnection is announced as a change. A hint sent after its
/// commit can still be lost to a crash in between, and a dead process's claims lapse
/// unannounced: [`RemoteHints::can_miss_a_crash`] keeps its default.
impl RemoteHints for PostgresStore {
    fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.hints.subscribe()
    }

    fn hears_every_change(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    fn flush(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // A process about to go gives back the leases it keeps (ST-38), announced to the
            // others: the next deploy need not wait for them to expire.
            self.tending
                .give_back(self.claims.take_all_idle(), true)
                .await;
            let (done, sent) = tokio::sync::oneshot::channel();
            if self.notifier.send(notify::Outgoing::Flush(done)).is_ok() {
                // The sender ends only with the store: then there is nothing left to wait for.
                let _ = sent.await;
            }
        })
    }
}

impl DefinitionStore for PostgresStore {
    fn put_definition(&self, definition: DefinitionRecord) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(async move {
            write_tx!(self, [], |c| ops::put_definition(
                c,
                &self.schema,
                &definition
            ))
        })
    }

    fn list_definitions(
        &self,
        name: Option<&str>,
    ) -> BoxFuture<'_, StoreResult<Vec<DefinitionRecord>>> {
        let name = name.map(str::to_owned);
        Box::pin(async move {
            read!(self, |c| ops::list_definitions(
                c,
                &self.schema,
                name.as_deref()
            ))
        })
    }
}

impl crate::store::backend::DebounceStore for PostgresStore {
    fn put_debounce(
        &self,
        row: crate::store::rows::DebounceRow,
    ) -> BoxFuture<'_, StoreResult<crate::store::rows::DebounceRow>> {
        Box::pin(async move { write_tx!(self, [], |c| debounce::put(c, &self.schema, &row)) })
    }

    fn claim_due_debounces(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<crate::store::backend::DueDebounces>> {
        let owner = owner.to_owned();
        Box::pin(async move {
            if limit == 0 {
                return read!(self, |c| async {
                    Ok(crate::store::backend::DueDebounces {
                        claimed: Vec::new(),
                        next_due: debounce::earliest(c, &self.schema, now).await?,
                    })
                });
            }
            write_tx!(self, [], |c| async {
                let claimed =
                    debounce::claim(c, &self.schema, &owner, now, claim_ttl, limit).await?;
                let next_due = debounce::earliest(c, &self.schema, now).await?;
                Ok(crate::store::backend::DueDebounces { claimed, next_due })
            })
        })
    }

    fn finish_debounce(
        &self,
        debounce_id: &str,
        burst_id: &str,
        sends: u64,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let (debounce_id, burst_id) = (debounce_id.to_owned(), burst_id.to_owned());
        Box::pin(async move {
            write_tx!(self, [], |c| debounce::finish(
                c,
                &self.schema,
                &debounce_id,
                &burst_id,
                sends
            ))
        })
    }
}
