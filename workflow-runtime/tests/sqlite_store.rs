//! SQLite-specific store tests: durability across reopen, group commit (C-32), decode errors on
//! hand-edited rows (C-25), migrations (C-30) and crash atomicity (C-31).
#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::store::conformance::{
    JOURNAL_BEFORE_UPGRADE, SEC, T0, TTL, assert_journal_reads_as_before_the_upgrade, bookmark,
    create_leased, doc, journal_entry, new_instance, queue_item, waiting,
};
use workflow_runtime::store::{
    BookmarkQuery, DeadLetterFilter, DeadLetterReason, InstanceFilter, InstanceStatus, LeaseClaim,
    LeaseKey, MigrateMode, NewJournalRecord, NewTimer, SqliteOptions, SqliteStore, Storage, Store,
    StoreError, TriggerRow,
};
use workflow_runtime::{InstanceQuery, Runtime, TaskContext, workflow};

/// The newest schema version (11 at the time of writing: 0011 keys the bookmarks by instance
/// and bookmark id).
const LATEST: u32 = 15;

fn all_migrations() -> Vec<u32> {
    assert_eq!(SqliteStore::schema_version(), LATEST);
    (1..=LATEST).collect()
}

/// A SQLite store opened for a test: used through its [`Storage`], as the runtime does, with
/// the backend at hand for its own methods.
struct Opened {
    storage: Storage,
    sqlite: Arc<SqliteStore>,
}

impl std::ops::Deref for Opened {
    type Target = Storage;

    fn deref(&self) -> &Storage {
        &self.storage
    }
}

impl Opened {
    fn migrations_applied(&self) -> &[u32] {
        self.sqlite.migrations_applied()
    }
}

fn open(path: &Path) -> Opened {
    let sqlite = Arc::new(SqliteStore::open(path).unwrap());
    Opened {
        storage: Storage::new(sqlite.clone()),
        sqlite,
    }
}

#[tokio::test]
async fn reopening_the_file_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let token = {
        let store = open(&path);
        assert_eq!(store.migrations_applied(), all_migrations());
        let lease = create_leased(&store, "wf-1").await;
        let mut c = waiting("wf-1", 1, lease.token, 7);
        c.correlation_id = Some("order-7".to_owned());
        c.bookmarks_added = vec![bookmark("b1", "h", T0)];
        c.timers_added = vec![NewTimer {
            timer_id: "t1".to_owned(),
            kind: "delay".to_owned(),
            due_at: T0 + 60 * SEC,
        }];
        c.journal = vec![NewJournalRecord {
            at: T0,
            kind: "suspended".to_owned(),
            context_id: Some(1),
            node_id: Some("root".to_owned()),
            detail: json!({ "why": "waiting" }),
        }];
        c.receipts = vec!["s0".to_owned()];
        store.commit(c).await.unwrap();
        store.enqueue(queue_item("q1", T0)).await.unwrap();
        store.enqueue(queue_item("q2", T0)).await.unwrap();
        store
            .dead_letter("q2", DeadLetterReason::Rejected, Some("bad"), T0)
            .await
            .unwrap();
        store
            .replace_triggers(
                "order",
                vec![TriggerRow {
                    definition_name: "order".to_owned(),
                    definition_version: "v1".to_owned(),
                    node_id: "root:start".to_owned(),
                    hash: "th".to_owned(),
                    name: "placed".to_owned(),
                    key_display: None,
                    payload: json!({}),
                    activation: json!({}),
                    registered_at: T0,
                }],
            )
            .await
            .unwrap();
        store
            .acquire_lease(&LeaseKey::named("purge"), "node-a", T0, TTL)
            .await
            .unwrap();
        lease.token
        // The store (its threads and connections) is dropped here.
    };

    let store = open(&path);
    assert!(store.migrations_applied().is_empty(), "second open: no-op");
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.version, 2);
    assert_eq!(loaded.state, doc(7));
    assert_eq!(loaded.status, InstanceStatus::Suspended);
    assert_eq!(loaded.correlation_id.as_deref(), Some("order-7"));
    // The instance lease was held in the closed store's memory (ST-14, ST-26): gone with it.
    assert_eq!(loaded.lease, None);
    let found = store
        .find_bookmarks(BookmarkQuery::by_hash("h", 10))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].correlation_id.as_deref(), Some("order-7"));
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 60 * SEC));
    assert_eq!(store.read_journal("wf-1", 0, 10).await.unwrap().len(), 1);
    assert!(store.has_receipt("wf-1", "s0").await.unwrap());
    let page = store.claim_queue_page("n", T0, TTL, 10).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0], queue_item("q1", T0));
    assert_eq!(
        store
            .list_dead_letters(DeadLetterFilter::all(10))
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.find_triggers(&["th".to_owned()]).await.unwrap().len(),
        1
    );
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::named("purge"), "node-b", T0 + SEC, TTL)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    // The closed store's lease holder died with it: its token is fenced, and the instance
    // is claimable at once with a higher token, which commits.
    assert!(matches!(
        store.commit(waiting("wf-1", 2, token, 8)).await,
        Err(StoreError::Fenced { .. })
    ));
    let again = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + SEC, TTL)
        .await
        .unwrap();
    assert!(again.token > token);
    assert_eq!(
        store
            .commit(waiting("wf-1", 2, again.token, 8))
            .await
            .unwrap(),
        3
    );
}

/// C-32: many concurrent commits land in fewer transactions than commits, each with its own
/// result; one failing version check does not affect the others.
#[tokio::test]
async fn group_commit_batches_concurrent_commits() {
    const N: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let store: Storage = open(&dir.path().join("store.db")).storage;
    let mut setup = Vec::new();
    for i in 0..N {
        let store = store.clone();
        setup.push(tokio::spawn(async move {
            create_leased(&store, &format!("wf-{i}")).await
        }));
    }
    let mut tokens = Vec::new();
    for task in setup {
        tokens.push(task.await.unwrap().token);
    }
    let before = store.stats().await.unwrap();
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().copied().enumerate() {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wf-{i}");
            // Instance 100 names a stale version: only it fails.
            let version = if i == 100 { 7 } else { 1 };
            let mut c = waiting(&id, version, token, i as i64);
            c.bookmarks_added = vec![bookmark(&format!("b-{i}"), "h", T0)];
            store.commit(c).await
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let result = task.await.unwrap();
        if i == 100 {
            assert!(matches!(
                result,
                Err(StoreError::Conflict {
                    expected: 7,
                    actual: 1,
                    ..
                })
            ));
        } else {
            assert_eq!(result.unwrap(), 2, "wf-{i}");
        }
    }
    let after = store.stats().await.unwrap();
    let requests = after.write_requests - before.write_requests;
    let transactions = after.transactions - before.transactions;
    println!("group commit: {requests} requests in {transactions} transactions");
    assert_eq!(requests, N as u64);
    assert!(transactions < requests, "{transactions} transactions");
    for i in 0..N {
        let loaded = store.load_instance(&format!("wf-{i}")).await.unwrap();
        if i == 100 {
            assert_eq!((loaded.version, loaded.state), (1, doc(0)));
            assert!(store.list_bookmarks("wf-100").await.unwrap().is_empty());
        } else {
            assert_eq!((loaded.version, loaded.state), (2, doc(i as i64)));
        }
    }
    let all = store
        .find_bookmarks(BookmarkQuery::by_hash("h", 1000))
        .await
        .unwrap();
    assert_eq!(all.len(), N - 1);
}

/// C-25 through the file: a hand-edited row gives `Decode` naming the instance, for that row
/// only.
#[tokio::test]
async fn hand_edited_rows_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = open(&path);
        for id in ["wf-1", "wf-2", "wf-3"] {
            store.create_instance(new_instance(id)).await.unwrap();
        }
    }
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute(
            "UPDATE wf_instances SET state = 'not json' WHERE instance_id = 'wf-1'",
            [],
        )
        .unwrap();
        raw.execute(
            "UPDATE wf_instances SET status = 'sleeping' WHERE instance_id = 'wf-3'",
            [],
        )
        .unwrap();
    }
    let store = open(&path);
    match store.load_instance("wf-1").await {
        Err(StoreError::Decode { what, id, path, .. }) => {
            assert_eq!(
                (what, id.as_str(), path.as_str()),
                ("instance", "wf-1", "state")
            );
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    match store.load_instance("wf-3").await {
        Err(StoreError::Decode { id, path, .. }) => {
            assert_eq!((id.as_str(), path.as_str()), ("wf-3", "status"));
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(store.load_instance("wf-2").await.unwrap().state, doc(0));
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    // A listing reads the columns only: the row whose document is corrupt lists (its load
    // fails, above), the row whose status column is corrupt is an error item.
    let ok: Vec<bool> = listed.iter().map(|l| l.summary.is_ok()).collect();
    assert_eq!(ok, [true, true, false]);
}

/// The data of [`Notes`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Note {
    text: String,
}

async fn noop(_ctx: &mut TaskContext<Note>) {}

workflow! {
    /// A task, then a wait for `read`.
    pub workflow Notes(Note) = sequence [task(noop), wait = event("read")];
}

/// ENG-51: a listing shows where each instance is from its row (the listing its last commit
/// stored), reading no state document: with every document overwritten by text that is not
/// JSON, the listing is what it was. A row without a listing (written by an older version)
/// has its document read, and is listed as unreadable here.
#[tokio::test]
async fn a_listing_reads_where_each_instance_is_from_its_row_not_its_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let sqlite = Arc::new(SqliteStore::open(&path).unwrap());
    let runtime = Runtime::builder()
        .store(sqlite.clone())
        .register::<Notes>()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let started = runtime.start::<Notes>(Note::default()).await.unwrap();
        ids.push(started.instance_id);
    }
    ids.sort();
    let before = runtime
        .list_instances(InstanceQuery::default())
        .await
        .unwrap();
    assert_eq!(before.len(), 3);
    for summary in &before {
        assert_eq!(summary.waiting_for, ["read"]);
        assert!(!summary.at.is_empty(), "{summary:?}");
        assert_eq!(summary.unreadable, None);
    }
    for id in &ids {
        sqlite.write_raw_state(id, "not a document").await.unwrap();
    }
    let after = runtime
        .list_instances(InstanceQuery::default())
        .await
        .unwrap();
    assert_eq!(after, before);

    // The row of the last one loses its listing, as a row an older version wrote.
    let db = rusqlite::Connection::open(&path).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    db.execute(
        "UPDATE wf_instances SET listing = NULL WHERE instance_id = ?1",
        [&ids[2]],
    )
    .unwrap();
    let listed = runtime
        .list_instances(InstanceQuery::default())
        .await
        .unwrap();
    assert_eq!(listed[..2], before[..2]);
    assert_eq!(listed[2].instance_id, ids[2]);
    assert!(listed[2].unreadable.is_some(), "{:?}", listed[2]);
}

/// C-30: fresh database, re-run is a no-op, concurrent migrators, newer schema refused,
/// checksum mismatch detected, `CheckOnly` refuses pending migrations.
#[test]
fn migrations() {
    let dir = tempfile::tempdir().unwrap();

    // CheckOnly on an empty database: outdated.
    let check_only = SqliteOptions {
        migrate: MigrateMode::CheckOnly,
        ..SqliteOptions::default()
    };
    let empty = dir.path().join("empty.db");
    assert!(matches!(
        SqliteStore::open_with(&empty, &check_only),
        Err(StoreError::SchemaOutdated {
            found: 0,
            required: LATEST
        })
    ));

    // Concurrent migrators: the owner lock serialises them (the others get `InUse` and
    // retry); exactly one applies the migrations, the later ones find the work done.
    let path = dir.path().join("store.db");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || {
                loop {
                    match SqliteStore::open(&path) {
                        Ok(store) => return store.migrations_applied().to_vec(),
                        Err(StoreError::InUse { .. }) => {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                        Err(other) => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    let applied: Vec<Vec<u32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        applied.iter().filter(|a| **a == all_migrations()).count(),
        1,
        "{applied:?}"
    );
    assert_eq!(applied.iter().filter(|a| a.is_empty()).count(), 3);
    assert!(open(&path).migrations_applied().is_empty());
    assert!(SqliteStore::open_with(&path, &check_only).is_ok());

    let raw = rusqlite::Connection::open(&path).unwrap();
    let rows: i64 = raw
        .query_row("SELECT COUNT(*) FROM wf_schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(rows, i64::from(LATEST));

    // A checksum mismatch.
    raw.execute(
        "UPDATE wf_schema_migrations SET checksum = 'edited' WHERE version = 1",
        [],
    )
    .unwrap();
    assert!(matches!(
        SqliteStore::open(&path),
        Err(StoreError::MigrationChecksumMismatch { version: 1 })
    ));

    // A newer schema.
    let newer = dir.path().join("newer.db");
    drop(open(&newer));
    let raw = rusqlite::Connection::open(&newer).unwrap();
    raw.execute(
        "INSERT INTO wf_schema_migrations (version, name, checksum, applied_at)
         VALUES (99, '0099_future', 'x', 0)",
        [],
    )
    .unwrap();
    assert_eq!(
        SqliteStore::open(&newer).unwrap_err(),
        StoreError::SchemaTooNew {
            found: 99,
            supported: SqliteStore::schema_version()
        }
    );
}

/// ST-20: stored payloads carry no Rust type names, so a state written
/// from one Rust type loads into a renamed one.
#[tokio::test]
async fn renaming_a_rust_type_does_not_break_stored_instances() {
    #[derive(Serialize)]
    struct OrderData {
        id: u64,
        lines: Vec<String>,
    }
    #[derive(Deserialize, PartialEq, Debug)]
    struct RenamedOrderData {
        id: u64,
        lines: Vec<String>,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = open(&path);
        let mut new = new_instance("wf-1");
        new.state = json!({
            "format": 1,
            "data": OrderData { id: u64::MAX, lines: vec!["a".to_owned()] },
        });
        store.create_instance(new).await.unwrap();
        let raw = store.sqlite.read_raw_state("wf-1").await.unwrap();
        assert!(!raw.contains("OrderData"), "{raw}");
    }
    let store = open(&path);
    let loaded = store.load_instance("wf-1").await.unwrap();
    let data: RenamedOrderData = serde_json::from_value(loaded.state["data"].clone()).unwrap();
    assert_eq!(
        data,
        RenamedOrderData {
            id: u64::MAX,
            lines: vec!["a".to_owned()]
        }
    );
}

const CRASH_ENV: &str = "WF_STORE_CRASH_DB";
const CRASH_INSTANCES: usize = 8;

/// The commit of the crash test: from version `v`, state `v`, bookmark and timer `v` replace
/// those of `v - 1`, one journal entry, receipt `s-v`.
fn crash_commit(id: &str, version: u64, token: u64) -> workflow_runtime::store::Commit {
    let n = version as i64;
    let mut c = waiting(id, version, token, n);
    c.bookmarks_added = vec![bookmark(&format!("{id}-b{n}"), "h", T0 + n)];
    c.timers_added = vec![NewTimer {
        timer_id: format!("{id}-t{n}"),
        kind: "delay".to_owned(),
        due_at: T0 + n,
    }];
    if n > 1 {
        c.bookmarks_removed = vec![format!("{id}-b{}", n - 1)];
        c.timers_removed = vec![format!("{id}-t{}", n - 1)];
    }
    c.journal = vec![NewJournalRecord {
        at: T0 + n,
        kind: "step".to_owned(),
        context_id: None,
        node_id: None,
        detail: json!({ "n": n }),
    }];
    c.receipts = vec![format!("s-{n}")];
    c
}

/// Child side of `crash_leaves_every_instance_at_one_committed_version`: commits in a loop
/// until killed. Does nothing unless the parent set the database path.
#[tokio::test]
async fn crash_child() {
    let Ok(path) = std::env::var(CRASH_ENV) else {
        return;
    };
    let store: Storage = open(Path::new(&path)).storage;
    let mut tasks = Vec::new();
    for i in 0..CRASH_INSTANCES {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("wf-{i}");
            let lease = create_leased(&store, &id).await;
            let mut version = 1;
            loop {
                match store.commit(crash_commit(&id, version, lease.token)).await {
                    Ok(next) => version = next,
                    // End the process (closing stdout) so the parent cannot hang.
                    Err(e) => {
                        eprintln!("crash child: {e}");
                        std::process::exit(1);
                    }
                }
                if version == 3 && i == 0 {
                    println!("crash-child-ready");
                }
            }
        }));
    }
    // The tasks never end: the parent kills this process.
    if let Some(task) = tasks.pop() {
        task.await.unwrap();
    }
}

/// C-31: a child process committing in a loop is killed with SIGKILL; after reopening, every
/// instance is at one committed version with consistent bookmarks, timers, journal and
/// receipts.
#[tokio::test]
async fn crash_leaves_every_instance_at_one_committed_version() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CRASH_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("crash-child-ready"))),
        "the child never got going"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let store = open(&path);
    let mut total = 0;
    for i in 0..CRASH_INSTANCES {
        let id = format!("wf-{i}");
        let record = store.load_instance(&id).await.unwrap();
        let v = record.version;
        assert!(v >= 1);
        let last = v - 1; // the last committed step
        total += last;
        if last == 0 {
            assert_eq!(record.state, doc(0));
            continue;
        }
        assert_eq!(record.state, doc(last as i64), "{id}");
        let bookmarks: Vec<String> = store
            .list_bookmarks(&id)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.bookmark_id)
            .collect();
        assert_eq!(bookmarks, [format!("{id}-b{last}")]);
        let timers: Vec<String> = store
            .list_timers(&id)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.timer_id)
            .collect();
        assert_eq!(timers, [format!("{id}-t{last}")]);
        let journal = store.read_journal(&id, 0, 1_000_000).await.unwrap();
        assert_eq!(journal.len() as u64, last);
        assert_eq!(journal.last().map(|e| e.seq), Some(last));
        assert!(store.has_receipt(&id, &format!("s-{last}")).await.unwrap());
        assert!(!store.has_receipt(&id, &format!("s-{v}")).await.unwrap());
    }
    println!("crash test: {total} commits survived the kill");
    assert!(total >= 2);
}

/// ST-28, ST-29: a database at an older schema (a fixture at version 1) is migrated forward
/// on open and its rows keep working.
#[tokio::test]
async fn an_older_schema_is_migrated_forward() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    SqliteStore::create_at_schema(&path, 1).unwrap();
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute(
            "INSERT INTO wf_instances (instance_id, definition_name, definition_version, status,
                sub_status, version, lease_token, origin_at, created_at, updated_at, state,
                state_size)
             VALUES ('old-1', 'order', 'v1', 'suspended', 'waiting', 4, 2, 0, 0, 0,
                '{\"format\":1,\"n\":4}', 20)",
            [],
        )
        .unwrap();
    }
    let check_only = SqliteOptions {
        migrate: MigrateMode::CheckOnly,
        ..SqliteOptions::default()
    };
    assert!(matches!(
        SqliteStore::open_with(&path, &check_only),
        Err(StoreError::SchemaOutdated {
            found: 1,
            required: LATEST
        })
    ));
    let store = open(&path);
    assert_eq!(store.migrations_applied(), &all_migrations()[1..]);
    let old = store.load_instance("old-1").await.unwrap();
    assert_eq!((old.version, old.state), (4, doc(4)));
    let mut new = new_instance("new-1");
    new.activation_scope = Some("singleton:order".to_owned());
    store.create_instance(new).await.unwrap();
    let lease = store
        .acquire_lease(&LeaseKey::instance("old-1"), "n", T0, TTL)
        .await
        .unwrap();
    assert_eq!(lease.token, 3);
    assert_eq!(store.commit(waiting("old-1", 4, 3, 5)).await.unwrap(), 5);
}

/// ST-10, ST-28: journal entries written one row each by schema 8 read the same after the
/// upgrade to one row per commit: their seqs, values and a summary below a gap; a detail that
/// did not decode still marks its entry alone; the next commit appends after them and the
/// cap (ENG-42) counts them as before.
#[tokio::test]
async fn journal_entries_of_schema_8_read_the_same_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    SqliteStore::create_at_schema(&path, 8).unwrap();
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        for (seq, kind, context, node, detail) in JOURNAL_BEFORE_UPGRADE {
            raw.execute(
                "INSERT INTO wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
                 VALUES ('wf-1', ?1, ?2, ?3, ?4, ?5, ?6)",
                rusqlite::params![seq, T0 + seq, kind, context, node, detail],
            )
            .unwrap();
        }
    }
    let store = open(&path);
    assert_eq!(store.migrations_applied(), (9..=LATEST).collect::<Vec<_>>());
    assert_journal_reads_as_before_the_upgrade(&store).await;
}

/// ST-28, ST-29: the bookmarks and the journal of schema 9 read the same after migration 10
/// stores them in their key's order: every column of every bookmark row, by hash, by
/// instance and as a child wait; the journal's entries by seq; and a commit replaces a
/// bookmark and appends entries after them as before.
#[tokio::test]
async fn bookmarks_and_journal_of_schema_9_read_the_same_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    SqliteStore::create_at_schema(&path, 9).unwrap();
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute(
            "INSERT INTO wf_instances (instance_id, definition_name, definition_version, status,
                sub_status, version, lease_token, origin_at, created_at, updated_at, state,
                state_size)
             VALUES ('wf-1', 'order', 'v1', 'suspended', 'waiting', 3, 2, 0, 0, 0,
                '{\"format\":1,\"n\":3}', 20)",
            [],
        )
        .unwrap();
        for (id, hash, name, correlation, look_back, created_at) in [
            ("b-1", "h-1", "approved", None, None, T0),
            (
                "b-2",
                "h-2",
                "wf.sub_workflow",
                Some("c-1"),
                Some(T0 - SEC),
                T0 + 1,
            ),
        ] {
            raw.execute(
                "INSERT INTO wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                    context_id, correlation_id, definition_name, definition_version, look_back,
                    created_at)
                 VALUES (?1, 'wf-1', ?2, ?3, 'root:wait', 2, ?4, 'order', 'v1', ?5, ?6)",
                rusqlite::params![id, hash, name, correlation, look_back, created_at],
            )
            .unwrap();
        }
        raw.execute(
            "INSERT INTO wf_journal (instance_id, last_seq, first_seq, entries)
             VALUES ('wf-1', 3, 2, ?1)",
            [format!(
                "[[{}, \"k1\", null, null, \"1\"], [{}, \"k2\", 4, \"root\", \"2\"], \
                 [{}, \"k3\", null, null, \"3\"]]",
                T0 + 1,
                T0 + 2,
                T0 + 3
            )],
        )
        .unwrap();
    }
    let store = open(&path);
    assert_eq!(
        store.migrations_applied(),
        (10..=LATEST).collect::<Vec<_>>()
    );
    let by_hash = store
        .find_bookmarks(BookmarkQuery::by_hash("h-1", 10))
        .await
        .unwrap();
    assert_eq!(by_hash.len(), 1, "{by_hash:?}");
    let row = &by_hash[0];
    assert_eq!(
        (
            row.bookmark_id.as_str(),
            row.instance_id.as_str(),
            row.name.as_str(),
            row.node_id.as_str(),
            row.context_id,
            row.correlation_id.as_deref(),
            row.definition_name.as_str(),
            row.definition_version.as_str(),
            row.look_back,
            row.created_at
        ),
        (
            "b-1",
            "wf-1",
            "approved",
            "root:wait",
            2,
            None,
            "order",
            "v1",
            None,
            T0
        )
    );
    let listed: Vec<String> = store
        .list_bookmarks("wf-1")
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.bookmark_id)
        .collect();
    assert_eq!(listed, ["b-1", "b-2"]);
    let waits = store.find_child_waits(None, 10).await.unwrap();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(
        (
            waits[0].bookmark_id.as_str(),
            waits[0].correlation_id.as_deref(),
            waits[0].look_back
        ),
        ("b-2", Some("c-1"), Some(T0 - SEC))
    );
    let seqs: Vec<(u64, String)> = store
        .read_journal("wf-1", 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.kind))
        .collect();
    assert_eq!(seqs, [(2, "k2".to_owned()), (3, "k3".to_owned())]);

    // The instance goes on: `b-1` replaced by `b-3`, two entries appended after 3.
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    let mut c = waiting("wf-1", 3, lease.token, 4);
    c.bookmarks_removed = vec!["b-1".to_owned()];
    c.bookmarks_added = vec![bookmark("b-3", "h-1", T0 + 2)];
    c.journal = (4..=5).map(journal_entry).collect();
    assert_eq!(store.commit(c).await.unwrap(), 4);
    let by_hash: Vec<String> = store
        .find_bookmarks(BookmarkQuery::by_hash("h-1", 10))
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.bookmark_id)
        .collect();
    assert_eq!(by_hash, ["b-3"]);
    let seqs: Vec<u64> = store
        .read_journal("wf-1", 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [2, 3, 4, 5]);
}

/// ST-6, ST-28, ST-29: the bookmarks of schema 10 read the same after migration 11 keys them
/// by instance: every column of every row (two instances, a child wait among them), by hash,
/// by instance and as a child wait; the indexes are the hash and child-wait ones only; and a
/// commit replaces a bookmark, clears another instance's waits and rewrites a correlation id
/// as before.
#[tokio::test]
async fn bookmarks_of_schema_10_read_the_same_after_migration_11() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    SqliteStore::create_at_schema(&path, 10).unwrap();
    let rows = [
        ("b-1", "wf-1", "h-1", "approved", None, None, T0),
        (
            "b-2",
            "wf-1",
            "h-2",
            "wf.sub_workflow",
            Some("c-1"),
            Some(T0 - SEC),
            T0 + 1,
        ),
        ("b-0", "wf-2", "h-1", "approved", Some("c-2"), None, T0 + 2),
    ];
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        for (id, version) in [("wf-1", 3), ("wf-2", 1)] {
            raw.execute(
                "INSERT INTO wf_instances (instance_id, definition_name, definition_version,
                    status, sub_status, version, lease_token, origin_at, created_at, updated_at,
                    state, state_size)
                 VALUES (?1, 'order', 'v1', 'suspended', 'waiting', ?2, 2, 0, 0, 0,
                    '{\"format\":1,\"n\":3}', 20)",
                rusqlite::params![id, version],
            )
            .unwrap();
        }
        for (id, instance, hash, name, correlation, look_back, created_at) in rows {
            raw.execute(
                "INSERT INTO wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                    context_id, correlation_id, definition_name, definition_version, look_back,
                    created_at)
                 VALUES (?1, ?2, ?3, ?4, 'root:wait', 2, ?5, 'order', 'v1', ?6, ?7)",
                rusqlite::params![id, instance, hash, name, correlation, look_back, created_at],
            )
            .unwrap();
        }
    }
    let store = open(&path);
    assert_eq!(
        store.migrations_applied(),
        (11..=LATEST).collect::<Vec<_>>()
    );
    type Columns = (
        String,
        String,
        String,
        String,
        String,
        u64,
        Option<String>,
        String,
        String,
        Option<i64>,
        i64,
    );
    let columns = |b: &workflow_runtime::store::BookmarkRow| -> Columns {
        (
            b.bookmark_id.clone(),
            b.instance_id.clone(),
            b.hash.clone(),
            b.name.clone(),
            b.node_id.clone(),
            b.context_id,
            b.correlation_id.clone(),
            b.definition_name.clone(),
            b.definition_version.clone(),
            b.look_back,
            b.created_at,
        )
    };
    let expected = |i: usize| -> Columns {
        let (id, instance, hash, name, correlation, look_back, created_at) = rows[i];
        (
            id.to_owned(),
            instance.to_owned(),
            hash.to_owned(),
            name.to_owned(),
            "root:wait".to_owned(),
            2,
            correlation.map(str::to_owned),
            "order".to_owned(),
            "v1".to_owned(),
            look_back,
            created_at,
        )
    };
    let by_hash = |hash: &'static str| {
        let store = &store;
        async move {
            store
                .find_bookmarks(BookmarkQuery::by_hash(hash, 10))
                .await
                .unwrap()
        }
    };
    let found: Vec<Columns> = by_hash("h-1").await.iter().map(columns).collect();
    assert_eq!(found, [expected(0), expected(2)]);
    let found: Vec<Columns> = by_hash("h-2").await.iter().map(columns).collect();
    assert_eq!(found, [expected(1)]);
    let listed: Vec<Columns> = store
        .list_bookmarks("wf-1")
        .await
        .unwrap()
        .iter()
        .map(columns)
        .collect();
    assert_eq!(listed, [expected(0), expected(1)]);
    let listed: Vec<Columns> = store
        .list_bookmarks("wf-2")
        .await
        .unwrap()
        .iter()
        .map(columns)
        .collect();
    assert_eq!(listed, [expected(2)]);
    let waits: Vec<Columns> = store
        .find_child_waits(None, 10)
        .await
        .unwrap()
        .iter()
        .map(columns)
        .collect();
    assert_eq!(waits, [expected(1)]);
    {
        let raw = rusqlite::Connection::open(&path).unwrap();
        let mut stmt = raw
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'wf_bookmarks'
                 ORDER BY name",
            )
            .unwrap();
        let indexes: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        // The key of a `WITHOUT ROWID` table is the table itself, not an index of it.
        assert_eq!(indexes, ["wf_bookmarks_child_waits", "wf_bookmarks_hash"]);
    }

    // The instances go on: `b-1` replaced by `b-3` under a new correlation id, `wf-2`'s waits
    // cleared.
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    let mut c = waiting("wf-1", 3, lease.token, 4);
    c.correlation_id = Some("c-3".to_owned());
    c.bookmarks_removed = vec!["b-1".to_owned()];
    c.bookmarks_added = vec![bookmark("b-3", "h-1", T0 + 3)];
    assert_eq!(store.commit(c).await.unwrap(), 4);
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-2"), "n", T0, TTL)
        .await
        .unwrap();
    let mut c = waiting("wf-2", 1, lease.token, 2);
    c.clear_waits = true;
    assert_eq!(store.commit(c).await.unwrap(), 2);
    let found: Vec<(String, Option<String>)> = by_hash("h-1")
        .await
        .into_iter()
        .map(|b| (b.bookmark_id, b.correlation_id))
        .collect();
    assert_eq!(found, [("b-3".to_owned(), Some("c-3".to_owned()))]);
    let listed: Vec<(String, Option<String>)> = store
        .list_bookmarks("wf-1")
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.bookmark_id, b.correlation_id))
        .collect();
    assert_eq!(
        listed,
        [
            ("b-2".to_owned(), Some("c-3".to_owned())),
            ("b-3".to_owned(), Some("c-3".to_owned()))
        ]
    );
    assert!(store.list_bookmarks("wf-2").await.unwrap().is_empty());
    let waits: Vec<String> = store
        .find_child_waits(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.bookmark_id)
        .collect();
    assert_eq!(waits, ["b-2"]);
}

/// ST-6: every statement on the bookmarks reads them by a key or an index, none by a scan of
/// the table: one instance's by the table's key `(instance_id, bookmark_id)`, a stimulus's by
/// the hash index, the child waits by their partial index.
#[test]
fn every_bookmark_statement_reads_by_a_key_or_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.db");
    SqliteStore::create_at_schema(&path, LATEST).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    for (sql, uses) in [
        (
            "DELETE FROM wf_bookmarks WHERE bookmark_id = ?1 AND instance_id = ?2",
            "PRIMARY KEY (instance_id=? AND bookmark_id=?)",
        ),
        (
            "DELETE FROM wf_bookmarks WHERE instance_id = ?1",
            "PRIMARY KEY (instance_id=?)",
        ),
        (
            "UPDATE wf_bookmarks SET correlation_id = ?1
             WHERE instance_id = ?2 AND correlation_id IS NOT ?1",
            "PRIMARY KEY (instance_id=?)",
        ),
        (
            "SELECT * FROM wf_bookmarks WHERE instance_id = ?1 ORDER BY created_at, bookmark_id",
            "PRIMARY KEY (instance_id=?)",
        ),
        (
            "SELECT * FROM wf_bookmarks
             WHERE hash = ?1
               AND (?2 IS NULL OR instance_id = ?2)
               AND (?3 IS NULL OR correlation_id = ?3)
               AND (?4 IS NULL OR bookmark_id = ?4)
               AND (?5 IS NULL OR (created_at, bookmark_id) > (?5, ?6))
             ORDER BY created_at, bookmark_id LIMIT ?7",
            "INDEX wf_bookmarks_hash (hash=?)",
        ),
        (
            "SELECT * FROM wf_bookmarks INDEXED BY wf_bookmarks_child_waits
             WHERE name = 'wf.sub_workflow' AND (?1 IS NULL OR bookmark_id > ?1)
             ORDER BY bookmark_id LIMIT ?2",
            "INDEX wf_bookmarks_child_waits",
        ),
    ] {
        let mut stmt = raw.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let n = stmt.parameter_count();
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(vec![None::<i64>; n]), |r| {
                r.get(3)
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter().any(|step| step.contains(uses)),
            "{sql}: {plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step == "SCAN wf_bookmarks"),
            "{sql}: {plan:?}"
        );
    }
}

/// ENG-42, ST-26: at its cap, an instance's journal shows exactly the newest `max` entries
/// after every commit, while the rows below them are deleted in batches: the file never holds
/// more than the cap plus a batch (64 entries here), and less than everything written.
#[tokio::test]
async fn the_journal_cap_shows_the_newest_entries_and_deletes_the_rest_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.db");
    let store = open(&path);
    let lease = create_leased(&store, "wf-1").await;
    let raw = rusqlite::Connection::open(&path).unwrap();
    let stored = || -> i64 {
        raw.query_row(
            "SELECT COALESCE(SUM(last_seq - first_seq + 1), 0) FROM wf_journal
             WHERE instance_id = 'wf-1'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let mut most = 0;
    for version in 1..=200u64 {
        let mut c = waiting("wf-1", version, lease.token, 1);
        c.journal = vec![NewJournalRecord {
            at: T0 + i64::try_from(version).unwrap(),
            kind: format!("e{version}"),
            context_id: None,
            node_id: None,
            detail: json!(version),
        }];
        c.max_journal_entries = Some(10);
        store.commit(c).await.unwrap();
        let shown: Vec<u64> = store
            .read_journal("wf-1", 0, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.seq)
            .collect();
        let expected: Vec<u64> = (version.saturating_sub(9).max(1)..=version).collect();
        assert_eq!(shown, expected, "after commit {version}");
        let from_middle: Vec<u64> = store
            .read_journal("wf-1", version.saturating_sub(4), 2)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(from_middle.len(), 2.min(usize::try_from(version).unwrap()));
        most = most.max(stored());
    }
    assert!(most <= 10 + 64, "{most} entries stored at most");
    assert!(
        stored() < 200 - 64,
        "{} entries stored at the end",
        stored()
    );
}

/// ST-26: the WAL's checkpoints run beside the writer, and commits back to back (about
/// thirteen pages each, no pause between them) keep the `-wal` file bounded: it never holds
/// much more than the 4,000 frames past which the writer checkpoints itself. Without any
/// checkpoint the 1,000 commits would leave about 13,000 frames in it. Every commit is there
/// after a reopen.
#[tokio::test]
async fn commits_back_to_back_keep_the_wal_bounded() {
    const COMMITS: i64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let store = open(&path);
    let lease = create_leased(&store, "wf-1").await;
    let pad = "x".repeat(48 * 1024);
    let mut version = 1;
    let mut most = 0;
    for n in 0..COMMITS {
        let mut c = waiting("wf-1", version, lease.token, n);
        c.state = json!({ "format": 1, "n": n, "pad": pad });
        version = store.commit(c).await.unwrap();
        most = most.max(
            std::fs::metadata(path.with_extension("db-wal"))
                .unwrap()
                .len(),
        );
    }
    // A frame is a 24-byte header and a 4,096-byte page; the WAL's own header is 32 bytes.
    let frames = most.saturating_sub(32) / (24 + 4096);
    println!("WAL: at most {most} bytes ({frames} frames) over {COMMITS} commits");
    assert!(frames <= 5_000, "{frames} frames in the WAL");
    drop(store);
    let store = open(&path);
    let record = store.load_instance("wf-1").await.unwrap();
    assert_eq!(record.version, u64::try_from(COMMITS).unwrap() + 1);
    assert_eq!(record.state["n"], json!(COMMITS - 1));
}

/// C-33: a second writing open gives `InUse` naming the holder; a read-only open works and
/// refuses writes; once the owner is dropped the file opens again.
#[tokio::test]
async fn one_writer_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let options = SqliteOptions {
        owner: Some("node-a".to_owned()),
        ..SqliteOptions::default()
    };
    let owner = Storage::new(Arc::new(SqliteStore::open_with(&path, &options).unwrap()));
    owner.create_instance(new_instance("wf-1")).await.unwrap();
    assert_eq!(
        SqliteStore::open(&path).unwrap_err(),
        StoreError::InUse {
            holder: "node-a".to_owned(),
            until: i64::MAX
        }
    );
    assert_eq!(
        SqliteStore::open(&path).unwrap_err().to_string(),
        "the store is in use by node-a (until that store is closed or its process exits)"
    );
    let reader = Storage::new(Arc::new(SqliteStore::open_read_only(&path).unwrap()));
    assert_eq!(reader.load_instance("wf-1").await.unwrap().state, doc(0));
    assert!(matches!(
        reader.create_instance(new_instance("wf-2")).await,
        Err(StoreError::Invalid {
            what: "operation",
            ..
        })
    ));
    drop(reader);
    drop(owner);
    let again = SqliteStore::open(&path).unwrap();
    assert_eq!(again.load_instance("wf-1").await.unwrap().version, 1);
    let fresh = dir.path().join("fresh.db");
    assert!(SqliteStore::open_read_only(&fresh).is_err());
    // Open errors name the file.
    let message = SqliteStore::open_read_only(&fresh).unwrap_err().to_string();
    assert!(
        message.contains(&format!("`{}`", fresh.display())),
        "{message}"
    );
    let nowhere = dir.path().join("no-such-dir").join("app.db");
    let message = SqliteStore::open(&nowhere).unwrap_err().to_string();
    assert!(
        message.contains(&format!("`{}`", nowhere.display())),
        "{message}"
    );
}

/// ST-26: the one-writer lock belongs to the file, not to its name: opening the same file
/// through a symbolic link (or a path with `..`) while it is held gives `InUse`.
#[cfg(unix)]
#[tokio::test]
async fn a_link_to_a_held_file_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let owner = SqliteStore::open(&path).unwrap();
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(matches!(
        SqliteStore::open(&link),
        Err(StoreError::InUse { .. })
    ));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let dotted = dir.path().join("sub").join("..").join("store.db");
    assert!(matches!(
        SqliteStore::open(&dotted),
        Err(StoreError::InUse { .. })
    ));
    drop(owner);
    // Once the owner is gone the link opens, and it is the same file.
    let through_link = SqliteStore::open(&link).unwrap();
    drop(through_link);
}

/// ST-22: a damaged file is a typed, non-transient error naming it: a file that is not a
/// database, and a database whose table was dropped outside this library.
#[test]
fn a_damaged_file_is_named_and_not_transient() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.db");
    std::fs::write(&text, "these are my notes, not a database, but long enough to be read as one ........................................................................................").unwrap();
    let error = SqliteStore::open(&text).unwrap_err();
    assert!(!error.is_transient(), "{error:?}");
    assert!(
        matches!(&error, StoreError::Decode { what: "database file", id, .. } if *id == text.display().to_string()),
        "{error:?}"
    );

    let path = dir.path().join("store.db");
    drop(open(&path));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE wf_timers")
        .unwrap();
    let error = SqliteStore::open(&path).unwrap_err();
    assert!(!error.is_transient(), "{error:?}");
    match &error {
        StoreError::Decode { id, path: what, .. } => {
            assert_eq!(id, &path.display().to_string());
            assert_eq!(what, "table wf_timers");
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert!(matches!(
        SqliteStore::open_read_only(&path),
        Err(StoreError::Decode { .. })
    ));
}

/// ST-26: a batch closes at its request limit or its byte limit.
#[tokio::test]
async fn group_commit_respects_its_limits() {
    async fn transactions_for(options: SqliteOptions) -> u64 {
        const N: usize = 40;
        let dir = tempfile::tempdir().unwrap();
        let store: Storage =
            Arc::new(SqliteStore::open_with(dir.path().join("s.db"), &options).unwrap()).into();
        let mut tokens = Vec::new();
        for i in 0..N {
            tokens.push(create_leased(&store, &format!("wf-{i}")).await.token);
        }
        let before = store.stats().await.unwrap();
        let tasks: Vec<_> = tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .commit(waiting(&format!("wf-{i}"), 1, token, i as i64))
                        .await
                })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), 2);
        }
        let after = store.stats().await.unwrap();
        assert_eq!(after.write_requests - before.write_requests, N as u64);
        after.transactions - before.transactions
    }
    let by_bytes = transactions_for(SqliteOptions {
        max_batch_bytes: 1,
        ..SqliteOptions::default()
    })
    .await;
    assert_eq!(
        by_bytes, 40,
        "every commit exceeds one byte: one per transaction"
    );
    let by_count = transactions_for(SqliteOptions {
        max_batch: 4,
        ..SqliteOptions::default()
    })
    .await;
    assert!(by_count >= 10, "{by_count}");
}

/// ST-22 for the queue: a hand-edited, undecodable queue item fails alone: the page holds the
/// other items and the bad one becomes a `Rejected` dead letter keeping its raw text.
#[tokio::test]
async fn an_undecodable_queue_item_does_not_block_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    {
        let store = open(&path);
        for (id, at) in [("q1", 1), ("q2", 2), ("q3", 3)] {
            store.enqueue(queue_item(id, T0 + at)).await.unwrap();
        }
    }
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE wf_queue SET payload = '{broken' WHERE item_id = 'q2'",
            [],
        )
        .unwrap();
    let store = open(&path);
    let page = store.claim_queue_page("n", T0, TTL, 10).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|q| q.item_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q3"]);
    let dead = store
        .list_dead_letters(DeadLetterFilter::all(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].item.item_id, "q2");
    assert_eq!(dead[0].reason, DeadLetterReason::Rejected);
    assert_eq!(dead[0].item.payload, json!({ "undecodable": "{broken" }));
    assert!(dead[0].error.as_deref().unwrap().contains("payload"));
}

fn claim(owner: &str, now: i64) -> LeaseClaim {
    LeaseClaim {
        owner: owner.to_owned(),
        token: None,
        now,
        ttl: TTL,
    }
}

/// ST-14, ST-26: the instance leases live in the owning store's memory. Two runtimes sharing
/// one `SqliteStore` (two `Storage` handles over it) see each other's leases: the second
/// cannot claim what the first holds, its recovery does not take it, a superseded token is
/// fenced, and every reader (loads, listings) sees the lease held now.
#[tokio::test]
async fn in_memory_leases_are_shared_by_everyone_using_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(dir.path().join("store.db")).unwrap());
    let first = Storage::new(sqlite.clone());
    let second = Storage::new(sqlite.clone());
    first.create_instance(new_instance("wf-1")).await.unwrap();

    let held = first
        .claim_instance("wf-1", claim("node-a", T0))
        .await
        .unwrap();
    assert_eq!(held.record.version, 1);
    assert_eq!(
        held.record
            .lease
            .as_ref()
            .map(|l| (l.owner.as_str(), l.token)),
        Some(("node-a", held.lease.token))
    );
    assert!(matches!(
        second.claim_instance("wf-1", claim("node-b", T0 + SEC)).await,
        Err(StoreError::LeaseHeld { holder, until, .. }) if holder == "node-a" && until == T0 + TTL
    ));
    // Recovery does not steal a live lease: the instance is Running but leased.
    assert!(
        second
            .claim_runnable("node-b", T0 + SEC, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Loads and listings show the lease held in memory.
    let listed = second
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    let summary = listed[0].summary.as_ref().unwrap();
    assert_eq!(
        summary.lease.as_ref().map(|l| l.token),
        Some(held.lease.token)
    );
    assert_eq!(
        second
            .load_instance("wf-1")
            .await
            .unwrap()
            .lease
            .map(|l| l.owner),
        Some("node-a".to_owned())
    );

    // The first holder commits (the row now carries its token) and keeps the lease.
    let mut running = waiting("wf-1", 1, held.lease.token, 1);
    running.status = InstanceStatus::Running;
    running.sub_status = Some(workflow_runtime::store::InstanceSubStatus::Executing);
    assert_eq!(first.commit(running).await.unwrap(), 2);

    // Expired: recovery takes it over with a higher token, and reads the first's commit.
    let later = T0 + TTL + SEC;
    let recovered = second
        .claim_runnable("node-b", later, TTL, 10)
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1);
    let token = recovered[0].lease.token;
    assert!(token > held.lease.token);
    // The superseded holder is fenced, whether it commits, renews or releases.
    assert!(matches!(
        first.commit(waiting("wf-1", 2, held.lease.token, 2)).await,
        Err(StoreError::Fenced { current, .. }) if current == token
    ));
    assert!(matches!(
        first
            .renew_lease(&LeaseKey::instance("wf-1"), held.lease.token, later, TTL)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    // The recovery claim refreshes the lease it took and loads what the first committed.
    let mut refresh = claim("node-b", later);
    refresh.token = Some(token);
    let resumed = second.claim_instance("wf-1", refresh).await.unwrap();
    assert_eq!(resumed.lease.token, token);
    assert_eq!(resumed.record.version, 2);
    assert_eq!(resumed.record.state, doc(1));
    // A final commit releases it: at once claimable again, with a higher token.
    let mut end = waiting("wf-1", 2, token, 3);
    end.release_lease = true;
    second.commit(end).await.unwrap();
    assert_eq!(second.load_instance("wf-1").await.unwrap().lease, None);
    let next = first
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", later, TTL)
        .await
        .unwrap();
    assert_eq!(next.token, token + 1);
}

/// ST-14, ST-26: a closed store's instance leases died with it (their holders held the
/// store). Reopened, the file's instances are claimable at once, the new tokens are above
/// every token a committed row carries, and the closed store's tokens are fenced.
#[tokio::test]
async fn a_reopened_file_has_no_stale_instance_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let (committed, issued) = {
        let store = open(&path);
        let lease = create_leased(&store, "wf-1").await;
        store
            .commit(waiting("wf-1", 1, lease.token, 1))
            .await
            .unwrap();
        store
            .release_lease(&LeaseKey::instance("wf-1"), lease.token)
            .await
            .unwrap();
        // Claimed, released without a commit, claimed again and left held.
        let unused = store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0, TTL)
            .await
            .unwrap();
        store
            .release_lease(&LeaseKey::instance("wf-1"), unused.token)
            .await
            .unwrap();
        let held = store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0, TTL)
            .await
            .unwrap();
        assert_eq!(
            held.token,
            unused.token + 1,
            "a released token is not reissued"
        );
        // Created (Running) but never run: its creator dies with the store.
        store.create_instance(new_instance("wf-2")).await.unwrap();
        (lease.token, held.token)
    };
    assert!(issued > committed);

    let store = open(&path);
    assert_eq!(store.load_instance("wf-1").await.unwrap().lease, None);
    // A running instance's token was advanced by the open: the previous owner may have
    // leased it, so recovery's first token is not 1 (which says only sweeps ever did).
    let recovered = store
        .claim_runnable("node-b", T0 + SEC, TTL, 10)
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(
        (recovered[0].instance_id.as_str(), recovered[0].lease.token),
        ("wf-2", 2)
    );
    // Claimable at once: before the closed store's lease would have expired.
    let claimed = store
        .claim_instance("wf-1", claim("node-b", T0 + SEC))
        .await
        .unwrap();
    assert!(claimed.lease.token > committed);
    assert_eq!(claimed.record.version, 2);
    // The closed store's holder is fenced.
    assert!(matches!(
        store.commit(waiting("wf-1", 2, issued, 2)).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(
        store
            .commit(waiting("wf-1", 2, claimed.lease.token, 2))
            .await
            .unwrap(),
        3
    );

    // A read-only open from elsewhere sees no live instance lease (they live in the owner's
    // memory) but every committed row.
    let inspect = Storage::new(Arc::new(SqliteStore::open_read_only(&path).unwrap()));
    let seen = inspect.load_instance("wf-1").await.unwrap();
    assert_eq!((seen.version, seen.lease), (3, None));
}
