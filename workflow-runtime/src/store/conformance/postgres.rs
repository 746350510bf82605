//! PostgreSQL test databases: each caller gets a store on a fresh schema of its own, dropped
//! with the guard, so tests run in parallel on one database.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::{PostgresOptions, PostgresStore};

/// The server the tests use: `WORKFLOW_PG_URL`, else the local default
/// `postgres://postgres@127.0.0.1:5432/postgres`.
pub fn database_url() -> String {
    std::env::var("WORKFLOW_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh schema name: `wf_test_<pid>_<time>_<n>`.
pub fn fresh_schema_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "wf_test_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Drops its schema (with every table in it) when dropped.
#[derive(Debug)]
pub struct SchemaGuard {
    url: String,
    schema: String,
}

impl SchemaGuard {
    /// A guard for `schema` on the server at `url`.
    pub fn new(url: impl Into<String>, schema: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: schema.into(),
        }
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let (url, schema) = (self.url.clone(), self.schema.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread
        // with its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&url).await.ok()?;
                sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .execute(&mut conn)
                    .await
                    .ok()?;
                conn.close().await.ok()
            })
        });
        let _ = dropped.join();
    }
}

/// A store on a fresh schema, or `None` (with the reason printed) when no server is
/// reachable at [`database_url`].
pub async fn fresh_store() -> Option<(Arc<PostgresStore>, SchemaGuard)> {
    fresh_store_with(PostgresOptions::default()).await
}

/// [`fresh_store`] with options (the schema name is replaced by a fresh one).
pub async fn fresh_store_with(
    options: PostgresOptions,
) -> Option<(Arc<PostgresStore>, SchemaGuard)> {
    let url = database_url();
    let schema = fresh_schema_name();
    let guard = SchemaGuard::new(url.clone(), schema.clone());
    let options = PostgresOptions {
        max_connections: 4,
        ..options.schema(schema)
    };
    match PostgresStore::connect_with(&url, &options).await {
        Ok(store) => Some((Arc::new(store), guard)),
        Err(crate::store::StoreError::Unavailable { message }) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("skipped: no PostgreSQL server reachable at {url}: {message}");
            }
            None
        }
        Err(other) => panic!("opening the PostgreSQL store failed: {other}"),
    }
}
