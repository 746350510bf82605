//! Durable commits per second: `SqliteStore` with N concurrent committers against the raw
//! SQLite one-row-per-commit rate, measured in the same run on the same disk.
//!
//! Run with `cargo bench -p workflow-runtime --bench store`. Environment:
//! `STORE_BENCH_SECS` (default 2) per measurement, `STORE_BENCH_DIR` (default: a temporary
//! directory under the system one) for the database files.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workflow_runtime::store::{
    Commit, InstanceStatus, InstanceSubStatus, LeaseKey, NewBookmark, NewInstance, SqliteOptions,
    SqliteStore, Storage, Synchronous,
};

const T0: i64 = 1_700_000_000_000_000;
const TTL: i64 = 3_600_000_000;

/// A state document of about 1 KiB, like a small workflow's.
fn state(n: u64) -> Value {
    json!({
        "format": 1,
        "n": n,
        "data": { "order_id": n, "customer": "ACME Corporation", "lines": vec!["line item"; 20] },
        "contexts": (0..8).map(|i| json!({ "id": i, "node_id": format!("root:step{i}"), "status": "completed" })).collect::<Vec<_>>(),
    })
}

struct Row {
    what: String,
    sync: &'static str,
    committers: usize,
    commits: u64,
    secs: f64,
    transactions: Option<u64>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.commits as f64 / self.secs
    }
}

fn sync_name(sync: Synchronous) -> &'static str {
    match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

/// Plain rusqlite, WAL, one UPDATE of one row per transaction.
fn raw_sqlite(path: &Path, sync: Synchronous, duration: Duration) -> Row {
    let conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch(&format!("PRAGMA synchronous = {}", sync_name(sync)))
        .unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, version INTEGER, state TEXT);
         INSERT OR REPLACE INTO t VALUES (1, 0, '');",
    )
    .unwrap();
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < duration {
        let text = serde_json::to_string(&state(commits)).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        tx.execute(
            "UPDATE t SET version = version + 1, state = ?1 WHERE id = 1",
            [&text],
        )
        .unwrap();
        tx.commit().unwrap();
        commits += 1;
    }
    Row {
        what: "raw rusqlite, 1 row/tx".to_owned(),
        sync: sync_name(sync),
        committers: 1,
        commits,
        secs: start.elapsed().as_secs_f64(),
        transactions: Some(commits),
    }
}

/// `SqliteStore` commits (state, one bookmark added and one removed) from `committers` tasks,
/// each on its own instance.
async fn store_commits(
    path: &Path,
    sync: Synchronous,
    committers: usize,
    duration: Duration,
) -> Row {
    let options = SqliteOptions {
        synchronous: sync,
        ..SqliteOptions::default()
    };
    let store: Storage = Arc::new(SqliteStore::open_with(path, &options).unwrap()).into();
    let mut tokens = Vec::new();
    for i in 0..committers {
        let id = format!("wf-{i}");
        store
            .create_instance(NewInstance {
                instance_id: id.clone(),
                definition_name: "bench".to_owned(),
                definition_version: "v1".to_owned(),
                status: InstanceStatus::Running,
                sub_status: Some(InstanceSubStatus::Pending),
                correlation_id: None,
                origin_at: T0,
                created_at: T0,
                state: state(0),
                receipt: None,
                consumed_queue_item: None,
                activation_scope: None,
                listing: None,
            })
            .await
            .unwrap();
        tokens.push(
            store
                .acquire_lease(&LeaseKey::instance(&id), "bench", T0, TTL)
                .await
                .unwrap()
                .token,
        );
    }
    let before = store.stats().await.unwrap();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for (i, token) in tokens.into_iter().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wf-{i}");
            let mut version = 1;
            while Instant::now() < deadline {
                let mut c = Commit::new(
                    &id,
                    version,
                    token,
                    T0,
                    state(version),
                    InstanceStatus::Suspended,
                    Some(InstanceSubStatus::Waiting),
                );
                c.bookmarks_added.push(NewBookmark {
                    bookmark_id: format!("{id}-b{version}"),
                    hash: "h".to_owned(),
                    name: "approved".to_owned(),
                    node_id: "root:wait".to_owned(),
                    context_id: 1,
                    look_back: None,
                    created_at: T0,
                });
                if version > 1 {
                    c.bookmarks_removed.push(format!("{id}-b{}", version - 1));
                }
                version = store.commit(c).await.unwrap();
            }
            version - 1
        }));
    }
    let mut commits = 0;
    for task in tasks {
        commits += task.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let after = store.stats().await.unwrap();
    Row {
        what: "SqliteStore::commit".to_owned(),
        sync: sync_name(sync),
        committers,
        commits,
        secs,
        transactions: Some(after.transactions - before.transactions),
    }
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

fn main() {
    let secs: f64 = std::env::var("STORE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let duration = Duration::from_secs_f64(secs);
    let temp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("STORE_BENCH_DIR")
        .map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("store bench: {secs} s per row, files in {}", dir.display());
    println!();
    println!(
        "| {:<24} | {:<6} | {:>10} | {:>8} | {:>10} | {:>12} | {:>10} | {:>7} |",
        "what",
        "sync",
        "committers",
        "commits",
        "commits/s",
        "transactions",
        "commits/tx",
        "vs raw"
    );
    println!(
        "|{:-<26}|{:-<8}|{:->12}|{:->10}|{:->12}|{:->14}|{:->12}|{:->9}|",
        "", "", "", "", "", "", "", ""
    );
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let raw = raw_sqlite(&fresh(&dir, "raw.db"), sync, duration);
        let raw_rate = raw.rate();
        let mut rows = vec![raw];
        for committers in [1, 4, 16, 64] {
            let path = fresh(&dir, &format!("store-{committers}.db"));
            rows.push(runtime.block_on(store_commits(&path, sync, committers, duration)));
        }
        for row in rows {
            let per_tx = row.transactions.map_or_else(
                || "-".to_owned(),
                |t| format!("{:.1}", row.commits as f64 / t.max(1) as f64),
            );
            println!(
                "| {:<24} | {:<6} | {:>10} | {:>8} | {:>10.0} | {:>12} | {:>10} | {:>6.2}x |",
                row.what,
                row.sync,
                row.committers,
                row.commits,
                row.rate(),
                row.transactions
                    .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                per_tx,
                row.rate() / raw_rate,
            );
        }
    }
}
