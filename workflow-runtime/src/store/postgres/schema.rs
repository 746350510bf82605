//! The library-owned, versioned and checksummed migrations of the PostgreSQL store (ST-28).
//!
//! Table names in the migration texts are written `@wf_<name>`; [`Schema::sql`] qualifies
//! them with the configured schema, so the checksum of a migration does not depend on the
//! schema it is applied to. Concurrent migrators (several processes starting at once) are
//! serialised by a transaction-scoped advisory lock on a hash of the schema name (ST-27); the
//! later one finds the work done.

use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool, Row};

use super::super::{BoxFuture, MigrateMode, StoreError, StoreResult};

/// The configured schema: its validated name and the SQL qualifier derived from it.
#[derive(Debug, Clone)]
pub(super) struct Schema {
    name: String,
    prefix: String,
}

impl Schema {
    /// Validates a schema name: 1 to 48 bytes of `[a-z0-9_]`, not starting with a digit (it
    /// is also part of the notification channel's name, at most 63 bytes).
    pub(super) fn new(name: &str) -> StoreResult<Self> {
        let valid = !name.is_empty()
            && name.len() <= 48
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.as_bytes().first().is_some_and(u8::is_ascii_digit);
        if !valid {
            return Err(StoreError::Invalid {
                what: "schema",
                reason: format!(
                    "{name:?} must be 1 to 48 bytes of [a-z0-9_], not starting with a digit"
                ),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            prefix: format!("\"{name}\".wf_"),
        })
    }

    /// The schema's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The notification channel of this schema's store (ST-27).
    pub(super) fn channel(&self) -> String {
        format!("workflow_{}", self.name)
    }

    /// `text` with every `@wf_` replaced by the schema-qualified table prefix.
    pub(super) fn sql(&self, text: &str) -> String {
        text.replace("@wf_", &self.prefix)
    }
}

/// The embedded, forward-only migrations: `(version, name, sql)`.
pub(super) const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "0001_init", MIGRATION_0001),
    (2, "0002_definitions", MIGRATION_0002),
];

/// Recorded definitions: each registered version's JSON form and fingerprint, so tools (the
/// `workflow` command) can draw and explain an instance without the application's code.
const MIGRATION_0002: &str = r#"
CREATE TABLE @wf_definitions (
    name        TEXT COLLATE "C" NOT NULL,
    version     TEXT COLLATE "C" NOT NULL,
    json        TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);
"#;

/// The whole schema of the first release of this backend. Every text key collates as `"C"`
/// (byte order), so keyset pages order as in the other backends whatever the database's
/// collation. JSON documents are stored as text: a load always decodes (ST-25) and a damaged
/// row fails alone (ST-22). The hot tables (queue, timers, receipts) are narrow and get
/// aggressive autovacuum settings (ST-27).
const MIGRATION_0001: &str = r#"
CREATE TABLE @wf_instances (
    instance_id        TEXT COLLATE "C" PRIMARY KEY,
    definition_name    TEXT COLLATE "C" NOT NULL,
    definition_version TEXT COLLATE "C" NOT NULL,
    status             TEXT NOT NULL,
    sub_status         TEXT,
    correlation_id     TEXT COLLATE "C",
    version            BIGINT NOT NULL,
    lease_owner        TEXT,
    lease_token        BIGINT NOT NULL DEFAULT 0,
    lease_expires_at   BIGINT,
    control_request    TEXT,
    origin_at          BIGINT NOT NULL,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    finished_at        BIGINT,
    state              TEXT NOT NULL,
    state_size         BIGINT NOT NULL,
    activation_scope   TEXT COLLATE "C"
);
CREATE INDEX wf_instances_runnable ON @wf_instances (updated_at, instance_id)
    WHERE status = 'running';
CREATE INDEX wf_instances_definition ON @wf_instances (definition_name, status);
CREATE INDEX wf_instances_correlation ON @wf_instances (correlation_id);
CREATE INDEX wf_instances_finished ON @wf_instances (finished_at);
CREATE INDEX wf_instances_activation ON @wf_instances (activation_scope)
    WHERE activation_scope IS NOT NULL AND status NOT IN ('finished', 'cancelled');

CREATE TABLE @wf_bookmarks (
    bookmark_id        TEXT COLLATE "C" PRIMARY KEY,
    instance_id        TEXT COLLATE "C" NOT NULL,
    hash               TEXT COLLATE "C" NOT NULL,
    name               TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    context_id         BIGINT NOT NULL,
    correlation_id     TEXT COLLATE "C",
    definition_name    TEXT COLLATE "C" NOT NULL,
    definition_version TEXT COLLATE "C" NOT NULL,
    look_back          BIGINT,
    created_at         BIGINT NOT NULL
);
CREATE INDEX wf_bookmarks_hash ON @wf_bookmarks (hash, created_at, bookmark_id);
CREATE INDEX wf_bookmarks_instance ON @wf_bookmarks (instance_id);

CREATE TABLE @wf_triggers (
    definition_name    TEXT COLLATE "C" NOT NULL,
    node_id            TEXT COLLATE "C" NOT NULL,
    hash               TEXT COLLATE "C" NOT NULL,
    definition_version TEXT NOT NULL,
    name               TEXT NOT NULL,
    key_display        TEXT,
    payload            TEXT NOT NULL,
    activation         TEXT NOT NULL,
    registered_at      BIGINT NOT NULL,
    PRIMARY KEY (definition_name, node_id, hash)
);
CREATE INDEX wf_triggers_hash ON @wf_triggers (hash);

CREATE TABLE @wf_queue (
    item_id          TEXT COLLATE "C" PRIMARY KEY,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT COLLATE "C" NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          BIGINT NOT NULL,
    enqueued_at      BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT,
    last_attempt_at  BIGINT,
    held             BOOLEAN NOT NULL DEFAULT FALSE,
    idempotency_key  TEXT,
    claim_owner      TEXT,
    claim_expires_at BIGINT
);
CREATE INDEX wf_queue_order ON @wf_queue (sent_at, item_id);
CREATE INDEX wf_queue_expiry ON @wf_queue (expires_at) WHERE NOT held;
ALTER TABLE @wf_queue SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_dead_letters (
    original_item_id TEXT COLLATE "C" PRIMARY KEY,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT COLLATE "C" NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          BIGINT NOT NULL,
    enqueued_at      BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT,
    last_attempt_at  BIGINT,
    held             BOOLEAN NOT NULL,
    idempotency_key  TEXT,
    reason           TEXT NOT NULL,
    error            TEXT,
    dead_at          BIGINT NOT NULL
);
CREATE INDEX wf_dead_letters_dead_at ON @wf_dead_letters (dead_at, original_item_id);

CREATE TABLE @wf_timers (
    timer_id         TEXT COLLATE "C" PRIMARY KEY,
    instance_id      TEXT COLLATE "C",
    kind             TEXT NOT NULL,
    due_at           BIGINT NOT NULL,
    claim_owner      TEXT,
    claim_expires_at BIGINT,
    parked           BOOLEAN NOT NULL DEFAULT FALSE,
    definition_name  TEXT COLLATE "C",
    node_id          TEXT
);
CREATE INDEX wf_timers_due ON @wf_timers (due_at, timer_id) WHERE NOT parked;
CREATE INDEX wf_timers_instance ON @wf_timers (instance_id);
CREATE INDEX wf_timers_definition ON @wf_timers (definition_name);
ALTER TABLE @wf_timers SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_journal (
    instance_id TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    context_id  BIGINT,
    node_id     TEXT,
    detail      TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

CREATE TABLE @wf_receipts (
    instance_id TEXT COLLATE "C" NOT NULL,
    stimulus_id TEXT COLLATE "C" NOT NULL,
    at          BIGINT NOT NULL,
    PRIMARY KEY (instance_id, stimulus_id)
);
CREATE INDEX wf_receipts_at ON @wf_receipts (at);
ALTER TABLE @wf_receipts SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_named_leases (
    name       TEXT COLLATE "C" PRIMARY KEY,
    owner      TEXT,
    token      BIGINT NOT NULL,
    expires_at BIGINT
);

CREATE TABLE @wf_idempotency (
    idempotency_key TEXT COLLATE "C" PRIMARY KEY,
    hash            TEXT NOT NULL,
    payload_digest  TEXT NOT NULL,
    report          TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);
CREATE INDEX wf_idempotency_created ON @wf_idempotency (created_at);

CREATE TABLE @wf_incidents (
    incident_id     TEXT COLLATE "C" PRIMARY KEY,
    instance_id     TEXT COLLATE "C" NOT NULL,
    definition_name TEXT NOT NULL,
    kind            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    resolved_at     BIGINT,
    resolution      TEXT,
    record          TEXT NOT NULL
);
CREATE INDEX wf_incidents_instance ON @wf_incidents (instance_id, created_at);
CREATE INDEX wf_incidents_created ON @wf_incidents (created_at, incident_id);
"#;

/// The newest schema version this library knows.
pub(super) fn latest_schema_version() -> u32 {
    MIGRATIONS.iter().map(|(v, _, _)| *v).max().unwrap_or(0)
}

/// SHA-256 of a migration's text, in hex: detects an edited migration (ST-28).
fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks and applies the pending migrations, each in its own transaction under the
/// schema's advisory lock (ST-27, ST-28). Returns the versions applied by this call.
///
/// Boxed as a `Send` future here, where its lifetimes are concrete: callers can then spawn
/// the store's constructors on a multi-threaded runtime.
pub(super) fn migrate<'a>(
    pool: &'a PgPool,
    schema: &'a Schema,
    mode: MigrateMode,
) -> BoxFuture<'a, StoreResult<Vec<u32>>> {
    Box::pin(migrate_inner(pool, schema, mode))
}

async fn migrate_inner(pool: &PgPool, schema: &Schema, mode: MigrateMode) -> StoreResult<Vec<u32>> {
    let mut done = Vec::new();
    loop {
        let mut tx = pool.begin().await?;
        let step = {
            let c: &mut PgConnection = &mut tx;
            migrate_one(c, schema, mode).await
        };
        match step {
            Ok(Some(version)) => {
                tx.commit().await?;
                done.push(version);
            }
            Ok(None) => {
                tx.commit().await?;
                return Ok(done);
            }
            Err(error) => {
                let _ = tx.rollback().await;
                return Err(error);
            }
        }
    }
}

/// Runs a migration script statement by statement (the texts have no `;` but between
/// statements).
async fn execute_script(c: &mut PgConnection, script: &str) -> StoreResult<()> {
    for statement in script.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        sqlx::query(statement).execute(&mut *c).await?;
    }
    Ok(())
}

/// One step of [`migrate`], inside its transaction: takes the lock, checks what is applied,
/// applies the next pending migration; `None` when there is none.
async fn migrate_one(
    c: &mut PgConnection,
    schema: &Schema,
    mode: MigrateMode,
) -> StoreResult<Option<u32>> {
    let latest = latest_schema_version();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("workflow-migrations:{}", schema.name()))
        .execute(&mut *c)
        .await?;
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
         WHERE schemaname = $1 AND tablename = 'wf_schema_migrations')",
    )
    .bind(schema.name().to_owned())
    .fetch_one(&mut *c)
    .await?;
    let mut applied: Vec<(i64, String)> = Vec::new();
    if exists {
        let rows = sqlx::query(
            &schema.sql("SELECT version, checksum FROM @wf_schema_migrations ORDER BY version"),
        )
        .fetch_all(&mut *c)
        .await?;
        for row in &rows {
            applied.push((row.try_get(0)?, row.try_get(1)?));
        }
    }
    let found = crate::store::convert::check_recorded_migrations(&applied, MIGRATIONS, checksum)?;
    let Some((version, name, sql)) = MIGRATIONS
        .iter()
        .find(|(v, _, _)| !applied.iter().any(|(a, _)| *a == i64::from(*v)))
    else {
        return Ok(None);
    };
    if mode == MigrateMode::CheckOnly {
        return Err(StoreError::SchemaOutdated {
            found,
            required: latest,
        });
    }
    if !exists {
        let create = schema.sql(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{}\";
             CREATE TABLE @wf_schema_migrations (
                version    BIGINT PRIMARY KEY,
                name       TEXT NOT NULL,
                checksum   TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             );",
            schema.name()
        ));
        execute_script(c, &create).await?;
    }
    execute_script(c, &schema.sql(sql)).await?;
    sqlx::query(
        &schema
            .sql("INSERT INTO @wf_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"),
    )
    .bind(i64::from(*version))
    .bind(*name)
    .bind(checksum(sql))
    .execute(&mut *c)
    .await?;
    tracing::info!(
        schema = schema.name(),
        version,
        name,
        "postgres store: migration applied"
    );
    Ok(Some(*version))
}
