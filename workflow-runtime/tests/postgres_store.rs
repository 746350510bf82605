//! The PostgreSQL store beyond the conformance suite (ST-27, ST-28): several stores on one
//! schema as separate processes would hold them: concurrent migrations, wake-ups through
//! `LISTEN`/`NOTIFY`, fencing of a stale lease holder, a connection killed in the middle of a
//! commit, a runtime that survives its connections being dropped, and connections kept between
//! statements that leave a small pool's transactions a connection. Each test uses a fresh
//! schema; without a reachable server (`WORKFLOW_PG_URL`) each is skipped, saying why.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name, fresh_store,
};
use workflow_runtime::store::conformance::{
    JOURNAL_BEFORE_UPGRADE, SEC, T0, TTL, assert_journal_reads_as_before_the_upgrade,
    create_leased, doc, journal_entry, new_instance, waiting,
};
use workflow_runtime::store::{
    LeaseClaim, LeaseKey, PostgresOptions, PostgresStore, Storage, StoreError, WakeUp,
};
use workflow_runtime::{Completion, Runtime, TaskContext, workflow};

/// A connection to the test server, or `None` (printed) when none is reachable.
async fn server() -> Option<PgConnection> {
    let url = database_url();
    match PgConnection::connect(&url).await {
        Ok(conn) => Some(conn),
        Err(e) => {
            eprintln!("skipped: no PostgreSQL server reachable at {url}: {e}");
            None
        }
    }
}

/// `url` with an `application_name`, so a test can find its own connections.
fn url_named(name: &str) -> String {
    let url = database_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}application_name={name}")
}

async fn open(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::connect_with(url, &PostgresOptions::default().schema(schema))
        .await
        .unwrap()
}

/// The policy layer over a store, as a runtime holds it (inside tokio: it forwards the
/// store's notifications).
async fn storage(url: &str, schema: &str) -> Storage {
    Storage::new(Arc::new(open(url, schema).await))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_starting_at_once_migrate_the_schema_once() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move { open(&url, &schema).await })
        })
        .collect();
    let mut applied = Vec::new();
    for open in opens {
        applied.extend_from_slice(open.await.unwrap().migrations_applied());
    }
    applied.sort_unstable();
    let all: Vec<u32> = (1..=PostgresStore::schema_version()).collect();
    assert_eq!(
        applied, all,
        "each migration applied by exactly one process"
    );
    let recorded: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\".wf_schema_migrations"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(recorded, i64::from(PostgresStore::schema_version()));
    // An edited migration is refused (ST-28).
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_schema_migrations SET checksum = 'edited' WHERE version = 1"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let err = PostgresStore::connect_with(&url, &PostgresOptions::default().schema(&schema))
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::MigrationChecksumMismatch { version: 1 });
}

/// ST-10, ST-29: journal entries written one row each by schema 4 read the same after
/// migration 5 (one row per commit): seqs, values, a summary below a gap; the next commit
/// numbers its entries after them and the cap (ENG-42) counts them as before.
#[tokio::test]
async fn journal_entries_of_schema_4_read_the_same_after_the_upgrade() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    PostgresStore::create_at_schema(&url, &schema, 4)
        .await
        .unwrap();
    for (seq, kind, context, node, detail) in JOURNAL_BEFORE_UPGRADE {
        sqlx::query(&format!(
            "INSERT INTO \"{schema}\".wf_journal
                (instance_id, seq, at, kind, context_id, node_id, detail)
             VALUES ('wf-1', $1, $2, $3, $4, $5, $6)"
        ))
        .bind(seq)
        .bind(T0 + seq)
        .bind(kind)
        .bind(context)
        .bind(node)
        .bind(detail)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let store = storage(&url, &schema).await;
    assert_journal_reads_as_before_the_upgrade(&store).await;
}

/// ST-15, ST-10, ST-29: a database at schema 5 upgrades to the instance row updated in place
/// (migration 6) and the amortised journal cap (migration 7): running instances are still
/// claimed oldest `updated_at` first, the journal reads the same, the cap keeps exactly the
/// newest entries while the rows below it go in batches, not on every commit, and the
/// commits of a waiting instance update its row in place (HOT updates).
#[tokio::test]
async fn a_schema_5_database_upgrades_to_commits_in_place_and_an_amortised_cap() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    PostgresStore::create_at_schema(&url, &schema, 5)
        .await
        .unwrap();
    // Rows as schema 5 wrote them: three running instances and a waiting one whose journal
    // the cap cut through (entries 2 to 6 kept, counted in `journal_rows`).
    for (id, status, sub_status, updated_at, journal_rows) in [
        ("r1", "running", "pending", T0 + 3, None),
        ("r2", "running", "pending", T0 + 1, None),
        ("r3", "running", "executing", T0 + 2, None),
        ("wf-1", "suspended", "waiting", T0, Some(5_i64)),
    ] {
        sqlx::query(&format!(
            "INSERT INTO \"{schema}\".wf_instances (instance_id, definition_name,
                definition_version, status, sub_status, version, origin_at, created_at,
                updated_at, state, state_size, journal_rows)
             VALUES ($1, 'order', 'v1', $2, $3, 1, $4, $4, $4, '{{\"n\":0}}', 7, $5)"
        ))
        .bind(id)
        .bind(status)
        .bind(sub_status)
        .bind(updated_at)
        .bind(journal_rows)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let entry = |n: i64| format!("[{},\"k{n}\",null,null,\"{n}\"]", T0 + n);
    for (last, first, entries) in [(3_i64, 2_i64, 1..=3_i64), (6, 4, 4..=6)] {
        let text = format!("[{}]", entries.map(entry).collect::<Vec<_>>().join(","));
        sqlx::query(&format!(
            "INSERT INTO \"{schema}\".wf_journal (instance_id, last_seq, first_seq, entries)
             VALUES ('wf-1', $1, $2, $3)"
        ))
        .bind(last)
        .bind(first)
        .bind(text)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let raw = Arc::new(open(&url, &schema).await);
    assert_eq!(raw.migrations_applied(), (6..=14).collect::<Vec<_>>());
    let store = Storage::new(raw);
    // The runnable index no longer holds `updated_at`, which every commit changes.
    let runnable: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1
            AND indexname = 'wf_instances_runnable'",
    )
    .bind(&schema)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(
        runnable.contains("(runnable_at, instance_id)") && !runnable.contains("updated_at"),
        "{runnable}"
    );
    let claimed: Vec<String> = store
        .claim_runnable("node-a", T0 + SEC, TTL, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.instance_id)
        .collect();
    assert_eq!(claimed, ["r2", "r3", "r1"], "oldest updated_at first");
    let seqs = |journal: Vec<workflow_runtime::store::JournalRecord>| -> Vec<u64> {
        journal.iter().map(|e| e.seq).collect()
    };
    let journal = store.read_journal("wf-1", 0, 100).await.unwrap();
    assert_eq!(seqs(journal.clone()), [2, 3, 4, 5, 6]);
    assert_eq!(journal[0].kind, "k2");
    assert_eq!(journal[4].detail, serde_json::json!(6));
    // Commits of three entries each under a cap of ten.
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0, TTL)
        .await
        .unwrap();
    let (mut rows_before, mut grew, mut shrank, mut most) =
        (journal_stored(&mut conn, &schema).await.0, 0, 0, 0);
    let commits = 60_u64;
    for version in 1..=commits {
        let mut c = waiting("wf-1", version, lease.token, version as i64);
        c.now = T0 + SEC + version as i64;
        let next = 7 + 3 * (version - 1);
        c.journal = (next..next + 3).map(journal_entry).collect();
        c.max_journal_entries = Some(10);
        store.commit(c).await.unwrap();
        let newest = next + 2;
        let want: Vec<u64> = ((newest - 9).max(2)..=newest).collect();
        assert_eq!(
            seqs(store.read_journal("wf-1", 0, 100).await.unwrap()),
            want,
            "after commit {version}"
        );
        let page = store
            .read_journal("wf-1", newest.saturating_sub(12), 2)
            .await
            .unwrap();
        assert_eq!(seqs(page), want[..2], "a page from below the cap");
        let (rows, entries) = journal_stored(&mut conn, &schema).await;
        assert!(
            entries < 10 + 64 + 3,
            "{entries} entries stored after {version}"
        );
        most = most.max(entries);
        if rows > rows_before {
            grew += 1;
        } else {
            shrank += 1;
        }
        rows_before = rows;
    }
    assert!(
        most > 40,
        "the rows below the cap wait for a batch ({most} stored at most)"
    );
    assert!(
        shrank >= 1 && grew > commits * 3 / 4,
        "rows went in batches: {grew} commits added a row, {shrank} deleted some"
    );
    // Every commit above (the instance stays suspended) updated its row in place. The
    // server's statistics arrive from the store's connections within seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (updates, hot) = loop {
        let (updates, hot): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname = 'wf_instances'",
        )
        .bind(&schema)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if updates >= commits as i64 + 4 || std::time::Instant::now() > deadline {
            break (updates, hot);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        hot >= commits as i64,
        "{hot} of {updates} updates of the instances were HOT"
    );
}

/// The journal rows of `wf-1` in `schema` and the entries they hold, those below the floor
/// included.
async fn journal_stored(conn: &mut PgConnection, schema: &str) -> (i64, i64) {
    sqlx::query_as(&format!(
        "SELECT count(*), COALESCE(sum(last_seq - first_seq + 1), 0)::BIGINT
           FROM \"{schema}\".wf_journal WHERE instance_id = 'wf-1'"
    ))
    .fetch_one(conn)
    .await
    .unwrap()
}

/// ST-10, ST-22: a journal row whose entries do not decode is a `Decode` naming the instance
/// and its entries; the rows after it read.
#[tokio::test]
async fn a_journal_row_that_does_not_decode_names_itself_and_hides_no_other_row() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let store = storage(&url, &schema).await;
    let lease = create_leased(&store, "wf-1").await;
    for version in 1..=3_u64 {
        let mut c = waiting("wf-1", version, lease.token, version as i64);
        c.journal = (0..3)
            .map(|n| workflow_runtime::store::NewJournalRecord {
                at: T0,
                kind: format!("v{version}.{n}"),
                context_id: None,
                node_id: None,
                detail: serde_json::json!(n),
            })
            .collect();
        store.commit(c).await.unwrap();
    }
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_journal SET entries = '[[1,' WHERE last_seq = 6"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let page = store.read_journal("wf-1", 0, 100).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let error = store.read_journal("wf-1", 5, 100).await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    assert!(
        error.to_string().contains("wf-1 (entries 4 to 6)"),
        "{error}"
    );
    let after = store.read_journal("wf-1", 7, 100).await.unwrap();
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), [7, 8, 9]);
}

#[tokio::test]
async fn a_bad_schema_name_is_refused_before_connecting() {
    let err = PostgresStore::connect_with(
        "postgres://nobody@127.0.0.1:1/none",
        &PostgresOptions::default().schema("Robert'); DROP TABLE x; --"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { what: "schema", .. }),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_hears_of_new_work_through_notify() {
    let Some(_conn) = server().await else { return };
    let Some((a, guard)) = fresh_store().await else {
        return;
    };
    let a = Storage::new(a);
    let b = storage(&database_url(), guard.schema()).await;
    let mut heard = b.subscribe();
    // The listener of `b` may still be connecting: enqueue until it hears.
    let mut n = 0;
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            n += 1;
            a.enqueue(workflow_runtime::store::conformance::queue_item(
                &format!("q{n}"),
                T0,
            ))
            .await
            .unwrap();
            let wait = tokio::time::timeout(Duration::from_millis(300), heard.recv()).await;
            if let Ok(Ok(hint)) = wait {
                return hint;
            }
        }
    })
    .await
    .expect("the other store heard nothing within 10 s");
    assert_eq!(got, WakeUp::QueueChanged);
    // Its own hints a store does not hear twice: `a` sent QueueChanged locally only.
    let mut own = a.subscribe();
    a.enqueue(workflow_runtime::store::conformance::queue_item("own", T0))
        .await
        .unwrap();
    assert_eq!(own.recv().await.unwrap(), WakeUp::QueueChanged);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        own.try_recv().is_err(),
        "a store's own notification came back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_under_a_stale_fencing_token_writes_nothing() {
    let Some(_conn) = server().await else { return };
    let Some((first, guard)) = fresh_store().await else {
        return;
    };
    let second = storage(&database_url(), guard.schema()).await;
    let first = Storage::new(first);
    // Process one takes the lease, then stalls past its TTL; process two takes over.
    let stale = create_leased(&first, "wf-1").await;
    let current = second
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + TTL + SEC, TTL)
        .await
        .unwrap();
    assert!(current.token > stale.token);
    let mut late = waiting("wf-1", 1, stale.token, 7);
    late.bookmarks_added = vec![workflow_runtime::store::conformance::bookmark(
        "b1", "h", T0,
    )];
    late.journal = vec![];
    let err = first.commit(late).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Fenced { token, current: c, .. } if token == stale.token && c == current.token),
        "{err:?}"
    );
    let record = second.load_instance("wf-1").await.unwrap();
    assert_eq!((record.version, record.state), (1, doc(0)));
    assert!(second.list_bookmarks("wf-1").await.unwrap().is_empty());
    // The current holder commits normally.
    assert_eq!(
        second
            .commit(waiting("wf-1", 1, current.token, 8))
            .await
            .unwrap(),
        2
    );
}

/// ST-27: a transaction left open on one of the store's connections, as a store operation
/// whose future was dropped between two statements leaves it, holding the lock of an
/// instance's row: the server ends that session after the store's idle-in-transaction
/// bound, so the instance's next commit waits for it, not for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_abandoned_on_a_pooled_connection_holds_no_commit_for_ever() {
    let Some(_conn) = server().await else { return };
    let Some((store, guard)) = fresh_store().await else {
        return;
    };
    let storage = Storage::new(Arc::clone(&store) as Arc<dyn workflow_runtime::store::Store>);
    let lease = create_leased(&storage, "wf-1").await;
    let mut abandoned = store.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM \"{}\".wf_instances WHERE instance_id = 'wf-1' FOR UPDATE",
        guard.schema()
    ))
    .execute(&mut *abandoned)
    .await
    .unwrap();
    // Never committed, rolled back nor given back to the pool: its client went quiet.
    std::mem::forget(abandoned);
    let began = std::time::Instant::now();
    let committed = tokio::time::timeout(
        Duration::from_secs(60),
        storage.commit(waiting("wf-1", 1, lease.token, 7)),
    )
    .await
    .expect("the commit still waits for the abandoned transaction's row lock");
    assert_eq!(committed.unwrap(), 2);
    assert!(
        began.elapsed() >= Duration::from_secs(5),
        "the commit did not wait for the lock: {:?}",
        began.elapsed()
    );
}

/// ST-27: a commit adding a bookmark tells the other processes `QueueChanged` only when
/// something waits in the queue; its own process hears of it either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_processes_hear_of_a_new_bookmark_only_when_something_is_queued() {
    let Some(_conn) = server().await else { return };
    let Some((a, guard)) = fresh_store().await else {
        return;
    };
    let a = Storage::new(a);
    let b = storage(&database_url(), guard.schema()).await;
    let mut heard = b.subscribe();
    // The listener of `b` may still be connecting: mark instances runnable until it hears.
    let mut n = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            n += 1;
            a.create_instance(new_instance(&format!("wf-{n}")))
                .await
                .unwrap();
            let wait = tokio::time::timeout(Duration::from_millis(300), heard.recv()).await;
            if let Ok(Ok(_)) = wait {
                return;
            }
        }
    })
    .await
    .expect("the other store heard nothing within 10 s");
    let bookmarked = |version: u64, token: u64, id: &str| {
        let mut commit = waiting("wf-1", version, token, 1);
        commit.bookmarks_added = vec![workflow_runtime::store::conformance::bookmark(id, "h", T0)];
        commit
    };
    let lease = a
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0, TTL)
        .await
        .unwrap();
    let mut own = a.subscribe();
    a.commit(bookmarked(1, lease.token, "b1")).await.unwrap();
    assert!(
        own.try_recv()
            .is_ok_and(|hint| hint == WakeUp::QueueChanged)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(hint) = heard.try_recv() {
        assert_ne!(
            hint,
            WakeUp::QueueChanged,
            "nothing is queued: no hint to others"
        );
    }

    a.enqueue(workflow_runtime::store::conformance::queue_item("q1", T0))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await;
    assert!(matches!(got, Ok(Ok(WakeUp::QueueChanged))), "{got:?}");
    a.commit(bookmarked(2, lease.token, "b2")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await;
    assert!(matches!(got, Ok(Ok(WakeUp::QueueChanged))), "{got:?}");
}

/// Forgets the lease claim of `id` as a server crash before its WAL flush would (ST-35): the
/// row's lease columns back to what they were before the claim.
async fn lose_claim(admin: &mut PgConnection, schema: &str, id: &str, token_before: i64) {
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_instances SET lease_token = $2, lease_owner = NULL,
            lease_expires_at = NULL, lease_nonce = NULL WHERE instance_id = $1"
    ))
    .bind(id)
    .bind(token_before)
    .execute(admin)
    .await
    .unwrap();
}

/// Claims `id`, waiting (at most 2 s) for a lease another store keeps to be given back
/// (ST-38).
async fn claim_given_back(
    store: &Storage,
    id: &str,
    claim: LeaseClaim,
) -> workflow_runtime::store::ClaimedRecord {
    let asked = std::time::Instant::now();
    loop {
        match store.claim_instance(id, claim.clone()).await {
            Err(StoreError::LeaseHeld { .. }) if asked.elapsed() < Duration::from_secs(2) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            claimed => return claimed.unwrap(),
        }
    }
}

fn claim(owner: &str, token: Option<u64>, now: i64) -> LeaseClaim {
    LeaseClaim {
        owner: owner.to_owned(),
        token,
        now,
        ttl: TTL,
    }
}

/// ST-35: a run's claim is not flushed, so a server crash can lose it after it was answered,
/// and the token it gave can then be given again. The holder of the lost claim is fenced,
/// whether the token went to another process (the nonce differs) or to the same store (it
/// never takes a token it was given before), and the new holder commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_of_a_claim_lost_to_a_server_crash_is_fenced() {
    let Some(mut admin) = server().await else {
        return;
    };
    let Some((first, guard)) = fresh_store().await else {
        return;
    };
    let schema = guard.schema().to_owned();
    let second = storage(&database_url(), &schema).await;
    let first = Storage::new(first);
    first.create_instance(new_instance("wf-1")).await.unwrap();

    // Another process is given the lost claim's token again.
    let lost = first
        .claim_instance("wf-1", claim("node-a", None, T0))
        .await
        .unwrap();
    lose_claim(&mut admin, &schema, "wf-1", 0).await;
    let current = second
        .claim_instance("wf-1", claim("node-b", None, T0 + SEC))
        .await
        .unwrap();
    assert_eq!(
        current.lease.token, lost.lease.token,
        "the token is issued again"
    );
    let err = first
        .commit(waiting("wf-1", 1, lost.lease.token, 7))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let renewal = first
        .renew_lease(&LeaseKey::instance("wf-1"), lost.lease.token, T0 + SEC, TTL)
        .await;
    assert!(
        matches!(renewal, Err(StoreError::Fenced { .. })),
        "{renewal:?}"
    );
    let refresh = first
        .claim_instance("wf-1", claim("node-a", Some(lost.lease.token), T0 + SEC))
        .await;
    assert!(
        matches!(refresh, Err(StoreError::Fenced { .. })),
        "{refresh:?}"
    );
    assert_eq!(first.load_instance("wf-1").await.unwrap().state, doc(0));
    let mut done = waiting("wf-1", 1, current.lease.token, 8);
    done.release_lease = true;
    assert_eq!(second.commit(done).await.unwrap(), 2);

    // The same store claims again after losing its claim: a token it was not given before.
    // (The second store keeps the lease its waiting commit would release, ST-38, and gives it
    // back when asked.)
    let lost = claim_given_back(&first, "wf-1", claim("node-a", None, T0 + 2 * SEC)).await;
    let before = i64::try_from(lost.lease.token).unwrap() - 1;
    lose_claim(&mut admin, &schema, "wf-1", before).await;
    let again = first
        .claim_instance("wf-1", claim("node-a", None, T0 + 3 * SEC))
        .await
        .unwrap();
    assert!(again.lease.token > lost.lease.token);
    let err = first
        .commit(waiting("wf-1", 2, lost.lease.token, 9))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    assert_eq!(
        first
            .commit(waiting("wf-1", 2, again.lease.token, 10))
            .await
            .unwrap(),
        3
    );
    assert_eq!(first.load_instance("wf-1").await.unwrap().state, doc(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_terminated_mid_commit_loses_nothing_and_the_retry_commits() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let store = storage(&url, &schema).await;
    let lease = create_leased(&store, "wf-1").await;
    let _ = store.create_instance(new_instance("wf-2")).await.unwrap();

    // Hold the instance row, so the commit stops inside its transaction.
    let mut blocker = PgConnection::connect(&database_url()).await.unwrap();
    let mut held = blocker.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM \"{schema}\".wf_instances WHERE instance_id = 'wf-1' FOR UPDATE"
    ))
    .execute(&mut *held)
    .await
    .unwrap();
    let mut commit = waiting("wf-1", 1, lease.token, 1);
    commit.timers_added = vec![workflow_runtime::store::NewTimer {
        timer_id: "t1".into(),
        kind: "delay".into(),
        due_at: T0 + SEC,
    }];
    let pending = tokio::spawn({
        let (store, commit) = (store.clone(), commit.clone());
        async move { store.commit(commit).await }
    });
    // Find the committing backend, waiting on the lock, and terminate it.
    let pid = loop {
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&schema)
        .fetch_optional(&mut admin)
        .await
        .unwrap();
        if let Some(pid) = pid {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(terminated);
    let err = pending.await.unwrap().unwrap_err();
    assert!(
        err.is_transient(),
        "a dropped connection is transient: {err:?}"
    );
    held.rollback().await.unwrap();

    // Nothing of it was written.
    let record = store.load_instance("wf-1").await.unwrap();
    assert_eq!((record.version, record.state), (1, doc(0)));
    assert!(store.list_timers("wf-1").await.unwrap().is_empty());
    // The retry, on a fresh connection of the pool, commits.
    assert_eq!(store.commit(commit).await.unwrap(), 2);
    assert_eq!(store.list_timers("wf-1").await.unwrap().len(), 1);
    assert_eq!(store.load_instance("wf-2").await.unwrap().version, 1);
}

/// ST-22 on PostgreSQL: an instance one of whose journal rows does not decode stays
/// readable: its snapshot holds the other rows' entries and names the damaged row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_with_a_journal_row_that_does_not_decode_still_reads() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let runtime = Runtime::builder()
        .store(Arc::new(open(&url, &schema).await))
        .register::<Delayed>()
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let id = runtime
        .start::<Delayed>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let sound = runtime.get_state(&id).await.unwrap().unwrap();
    assert!(sound.journal_damage.is_empty());
    assert!(!sound.journal.is_empty());
    let first: i64 = sqlx::query_scalar(&format!(
        "SELECT MIN(last_seq) FROM \"{schema}\".wf_journal WHERE instance_id = $1"
    ))
    .bind(&id)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_journal SET entries = '[[1,' WHERE instance_id = $1 AND last_seq = $2"
    ))
    .bind(&id)
    .bind(first)
    .execute(&mut conn)
    .await
    .unwrap();
    let damaged = runtime.get_state(&id).await.unwrap().unwrap();
    assert_eq!(damaged.state, sound.state, "the state reads as before");
    let kept: Vec<u64> = sound
        .journal
        .iter()
        .map(|e| e.seq)
        .filter(|seq| *seq > u64::try_from(first).unwrap())
        .collect();
    let seqs: Vec<u64> = damaged.journal.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, kept, "the other rows' entries");
    assert_eq!(
        damaged.journal_damage.len(),
        1,
        "{:?}",
        damaged.journal_damage
    );
    assert!(
        damaged.journal_damage[0].contains(&format!("{id} (entries 1 to {first})")),
        "{:?}",
        damaged.journal_damage
    );
}

/// ST-22 on PostgreSQL: a timer row whose due time is not a time (past the year 9999: the
/// column is a `BIGINT`, so no other type fits) is met by the timer driver: its instance is
/// faulted with a `damaged_timer` incident naming the row, its state readable, the other
/// timers fire; repaired and retried, it fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_whose_due_time_is_not_a_time_faults_its_instance_naming_it() {
    use workflow_runtime::{IncidentKind, ManualClock, WorkflowStatus};
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let store = storage(&url, &schema).await;
    let clock = ManualClock::new(ManualClock::DEFAULT_START);
    let runtime = Runtime::builder()
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .register::<Delayed>()
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let bad = runtime
        .start::<Delayed>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let good = runtime
        .start::<Delayed>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let timer = store.list_timers(&bad).await.unwrap()[0].timer_id.clone();
    let good_timer = store.list_timers(&good).await.unwrap()[0].timer_id.clone();
    let set_due = format!("UPDATE \"{schema}\".wf_timers SET due_at = $2 WHERE instance_id = $1");
    sqlx::query(&set_due)
        .bind(&bad)
        .bind(i64::MAX)
        .execute(&mut conn)
        .await
        .unwrap();
    let first = runtime.fire_due_timers().await.unwrap();
    assert_eq!(first.damaged, [(bad.clone(), timer.clone())], "{first:?}");
    assert!(first.fired.is_empty(), "{first:?}");
    let incidents = runtime.incidents(&bad).await.unwrap().unwrap();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert_eq!(incidents[0].kind, IncidentKind::DamagedTimer);
    let message = &incidents[0].fault.message;
    assert!(
        message.contains(&timer)
            && message.contains("due_at")
            && message.contains(&i64::MAX.to_string()),
        "{message}"
    );
    let snapshot = runtime.get_state(&bad).await.unwrap().unwrap();
    assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
    assert_eq!(snapshot.data::<Steps>().unwrap().log, ["a"]);
    // The other timer fires when due; the damaged row, parked, is not reported twice.
    clock.advance(Duration::from_secs(1));
    let second = runtime.fire_due_timers().await.unwrap();
    assert_eq!(second.fired, [(good.clone(), good_timer)], "{second:?}");
    assert!(second.damaged.is_empty(), "{second:?}");
    // Repaired and retried, it fires.
    sqlx::query(&set_due)
        .bind(&bad)
        .bind(0_i64)
        .execute(&mut conn)
        .await
        .unwrap();
    runtime.retry(&bad).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    let third = runtime.fire_due_timers().await.unwrap();
    assert_eq!(third.fired, [(bad.clone(), timer)], "{third:?}");
    let repaired = runtime.get_state(&bad).await.unwrap().unwrap();
    assert_eq!(repaired.status(), WorkflowStatus::Finished);
    assert_eq!(repaired.data::<Steps>().unwrap().log, ["a", "b"]);
}

/// ST-19 on PostgreSQL: a field the runtime does not know in a stored state document is
/// refused as a decode error naming it, and the document is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_in_a_stored_state_is_refused_not_dropped() {
    if server().await.is_none() {
        return;
    }
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let store = Arc::new(open(&url, &schema).await);
    let runtime = Runtime::builder()
        .store(Arc::clone(&store))
        .register::<Delayed>()
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let id = runtime
        .start::<Delayed>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let mut state: serde_json::Value =
        serde_json::from_str(&store.read_raw_state(&id).await.unwrap()).unwrap();
    state["operator_note"] = serde_json::json!("keep me");
    store
        .write_raw_state(&id, &state.to_string())
        .await
        .unwrap();
    let error = runtime.get_state(&id).await.unwrap_err();
    assert!(error.to_string().contains("operator_note"), "{error}");
    let kept: serde_json::Value =
        serde_json::from_str(&store.read_raw_state(&id).await.unwrap()).unwrap();
    assert_eq!(kept["operator_note"], "keep me");
}

/// The data of [`Delayed`]: which tasks ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Steps {
    log: Vec<String>,
}

async fn a(ctx: &mut TaskContext<Steps>) {
    ctx.data_mut().log.push("a".to_owned());
}

async fn b(ctx: &mut TaskContext<Steps>) {
    ctx.data_mut().log.push("b".to_owned());
}

workflow! {
    /// A task, a durable delay, a task.
    pub workflow Delayed(Steps) = sequence [
        task(a),
        wait = after(millis(700)),
        task(b),
    ];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_runtime_survives_its_connections_being_dropped() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let store = Arc::new(open(&url, &schema).await);
    let runtime = Runtime::builder()
        .store(store)
        .register::<Delayed>()
        .sweep_interval(Some(Duration::from_millis(500)))
        .build()
        .unwrap();
    let started = runtime.start::<Delayed>(Steps::default()).await.unwrap();
    // While it waits for its delay, every connection of the store is dropped (the pool's
    // and the listener's), as when the server restarts.
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1) t",
    )
    .bind(&schema)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(dropped >= 1, "no connection of the store was found");
    let done = runtime
        .await_completion(&started.instance_id, Duration::from_secs(20))
        .await
        .unwrap();
    let Completion::Finished(output) = done else {
        panic!("the instance did not finish: {done:?}");
    };
    assert_eq!(output["log"], serde_json::json!(["a", "b"]));
    runtime.shutdown(Duration::from_secs(1)).await;
}

workflow! {
    /// A task, the event `paid`, a task.
    pub workflow Paid(Steps) = sequence [
        task(a),
        paid = event("paid"),
        task(b),
    ];
}

workflow! {
    /// A task, the event `first`, the event `late`, a task.
    pub workflow Late(Steps) = sequence [
        task(a),
        first = event("first"),
        late = event("late"),
        task(b),
    ];
}

/// A process with its queue worker and every sweep every 100 ms, on its own store.
async fn sweeping_process(url: &str, schema: &str) -> (Runtime, Arc<PostgresStore>) {
    let store = Arc::new(open(url, schema).await);
    let runtime = Runtime::builder()
        .store(Arc::clone(&store))
        .register::<Paid>()
        .register::<Late>()
        .inbox_sweep(Duration::from_millis(100))
        .recovery_sweep(Some(Duration::from_millis(100)))
        .sweep_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    (runtime, store)
}

/// The write transactions `store` began during `window`.
async fn writes_during(store: &PostgresStore, window: Duration) -> u64 {
    use workflow_runtime::store::Store;
    let before = store.stats().await.unwrap().transactions;
    tokio::time::sleep(window).await;
    store.stats().await.unwrap().transactions - before
}

/// Polls `runtime` until instance `id` is finished, at most 10 s.
async fn finishes(runtime: &Runtime, id: &str) -> bool {
    for _ in 0..200 {
        let snapshot = runtime.get_state(id).await.unwrap().unwrap();
        if snapshot.status() == workflow_runtime::WorkflowStatus::Finished {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// RT-27 on PostgreSQL: a process whose queue holds a stimulus for a paused instance and one
/// no bookmark takes yet writes nothing while idle, its sweeps running every 100 ms; yet
/// what another process does that makes them deliverable (a commit adding the bookmark, an
/// enqueue, a resume) is heard through `NOTIFY`, and the stimuli are delivered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_process_with_held_stimuli_writes_nothing_yet_hears_the_others() {
    if server().await.is_none() {
        return;
    }
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let (app, store) = sweeping_process(&url, &schema).await;
    // Another process, without a queue worker of its own, running `Late` only.
    let other = Runtime::builder()
        .store(Arc::new(open(&url, &schema).await))
        .register::<Late>()
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let paused = app
        .start::<Paid>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    app.suspend(&paused).await.unwrap();
    let held = app
        .send(workflow_runtime::Stimulus::new("paid"))
        .await
        .unwrap();
    assert_eq!(held.deferred, std::slice::from_ref(&paused), "{held:?}");
    // An instance of the other process waits for `first`; `late` comes before its bookmark.
    let late = other
        .start::<Late>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    let queued = app
        .send(workflow_runtime::Stimulus::new("late"))
        .await
        .unwrap();
    assert!(queued.inbox_item.is_some(), "{queued:?}");

    // The sweeps settle: each item is looked at, put back, then left alone.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = writes_during(&store, Duration::from_secs(5)).await;
    eprintln!(
        "postgres: idle for 5 s with two queued stimuli, sweeps every 100 ms: {writes} write \
         transactions"
    );
    assert_eq!(writes, 0, "an idle process wrote to its store");

    // The other process delivers `first` itself: its commit adding the bookmark for `late`
    // is heard, and this process's worker delivers the queued `late`.
    let first = other
        .send(workflow_runtime::Stimulus::new("first").instance(late.clone()))
        .await
        .unwrap();
    assert!(
        first.resumed.iter().any(|r| r.instance_id == late),
        "{first:?}"
    );
    assert!(
        finishes(&app, &late).await,
        "the stimulus waiting for another process's bookmark was not delivered"
    );
    // Events the other process enqueues for an instance of this one are delivered.
    let mine = app
        .start::<Late>(Steps::default())
        .await
        .unwrap()
        .instance_id;
    for event in ["first", "late"] {
        let sent = other
            .send(
                workflow_runtime::Stimulus::new(event)
                    .instance(mine.clone())
                    .via_inbox(),
            )
            .await
            .unwrap();
        assert!(sent.inbox_item.is_some(), "{sent:?}");
    }
    assert!(
        finishes(&app, &mine).await,
        "another process's enqueued events were not delivered"
    );
    // It resumes the paused instance, which it does not run: the request is heard, and
    // this process resumes it and delivers the stimulus held for it.
    let resumed = other.resume(&paused).await.unwrap();
    assert!(
        matches!(resumed, workflow_runtime::Control::Requested),
        "{resumed:?}"
    );
    assert!(
        finishes(&app, &paused).await,
        "the stimulus held for a paused instance was not delivered after another process \
         resumed it"
    );
    other.shutdown(Duration::from_secs(1)).await;
    app.shutdown(Duration::from_secs(1)).await;
}

/// RT-27: on PostgreSQL a wake-up can be lost to a crash, so an idle process looks at its
/// held items once per lease TTL anyway, and no more often.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_process_looks_at_its_held_items_once_per_lease_ttl() {
    if server().await.is_none() {
        return;
    }
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let store = Arc::new(open(&url, &schema).await);
    let app = Runtime::builder()
        .store(Arc::clone(&store))
        .lease_ttl(Duration::from_secs(1))
        .inbox_sweep(Duration::from_millis(100))
        .build()
        .unwrap();
    app.run_background().unwrap();
    let queued = app
        .send(workflow_runtime::Stimulus::new("late"))
        .await
        .unwrap();
    assert!(queued.inbox_item.is_some(), "{queued:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Each look claims the item and puts it back: two or three writes. Sweeping every
    // 100 ms, it would be some sixty over these 4 s; once per second, a dozen at most.
    let writes = writes_during(&store, Duration::from_secs(4)).await;
    eprintln!("postgres: idle for 4 s with a 1 s lease TTL: {writes} write transactions");
    assert!(
        (3..=16).contains(&writes),
        "expected a look per lease TTL, {writes} write transactions in 4 s"
    );
    app.shutdown(Duration::from_secs(1)).await;
}

/// RT-27, ST-27: a listener that lost its connection may have missed notifications; once it
/// listens again, the queue worker looks at its held items once, then is idle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnected_listener_makes_the_idle_queue_worker_look_once() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let (app, store) = sweeping_process(&url, &schema).await;
    let queued = app
        .send(workflow_runtime::Stimulus::new("late"))
        .await
        .unwrap();
    assert!(queued.inbox_item.is_some(), "{queued:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(writes_during(&store, Duration::from_secs(1)).await, 0);

    let before = {
        use workflow_runtime::store::Store;
        store.stats().await.unwrap().transactions
    };
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND query LIKE 'LISTEN%') t",
    )
    .bind(&schema)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(dropped, 1, "the listener's connection was not found");
    let mut looked = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = {
            use workflow_runtime::store::Store;
            store.stats().await.unwrap().transactions
        };
        if now > before {
            looked = true;
            break;
        }
    }
    assert!(
        looked,
        "the queue worker did not look after the listener reconnected"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        writes_during(&store, Duration::from_secs(2)).await,
        0,
        "the queue worker kept passing after the reconnection"
    );
    app.shutdown(Duration::from_secs(1)).await;
}

/// The data of [`versioned`]'s instances.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ticket {
    id: String,
}

/// Two versions of one definition: each step more is another fingerprint. The instance waits
/// for `go`, then runs its tasks.
fn versioned(steps: usize) -> String {
    let tasks: Vec<String> = (0..steps)
        .map(|i| format!(r#"{{ "kind": "task", "id": "t{i}", "function": "close" }}"#))
        .collect();
    format!(
        r#"{{ "name": "Versioned", "root": {{ "kind": "sequence", "id": "root", "steps": [
            {{ "kind": "event", "id": "go", "event": "go" }}, {} ] }} }}"#,
        tasks.join(", ")
    )
}

/// A process on its own pool that runs `Versioned` with `steps` tasks.
async fn versioned_process(url: &str, schema: &str, steps: usize) -> Runtime {
    let registry = workflow_runtime::Registry::<Ticket>::new().task("close", |_cx| {
        Box::pin(async { Ok(workflow_runtime::Outcome::done()) })
    });
    let runtime = Runtime::builder()
        .store(Arc::new(open(url, schema).await))
        .register_json(versioned(steps), registry)
        .timer_driver(false)
        .build()
        .unwrap();
    runtime.start_workers().await.unwrap();
    runtime
}

/// RT-24 across processes: a stimulus for an instance pinned to a version the sending process
/// does not run is queued for that instance, not dropped; processes that cannot run it either
/// leave it alone (no pass back and forth between them), and a process that runs the version
/// delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stimulus_for_a_version_this_process_lacks_waits_for_one_that_runs_it() {
    if server().await.is_none() {
        return;
    }
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let v1 = versioned_process(&url, &schema, 1).await;
    let other_v1 = versioned_process(&url, &schema, 1).await;
    let v2 = versioned_process(&url, &schema, 2).await;
    let id = v2
        .start_by_name(
            "Versioned",
            serde_json::json!({"id": "t-1"}),
            Default::default(),
        )
        .await
        .unwrap()
        .instance_id;
    // The only process running version 2 stops for a while.
    v2.shutdown(Duration::from_secs(1)).await;
    drop(v2);

    let report = v1
        .send(workflow_runtime::Stimulus::new("go"))
        .await
        .unwrap();
    assert_eq!(report.deferred, std::slice::from_ref(&id), "{report:?}");
    assert!(report.resumed.is_empty(), "{report:?}");
    // The two version-1 processes each look at the item once at most, then leave it: over
    // two seconds they write next to nothing (each pass claims and puts back: two writes).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = (
        v1.store().stats().await.unwrap().transactions,
        other_v1.store().stats().await.unwrap().transactions,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = (
        v1.store().stats().await.unwrap().transactions,
        other_v1.store().stats().await.unwrap().transactions,
    );
    assert!(
        after.0 - before.0 <= 4 && after.1 - before.1 <= 4,
        "the version-1 processes pass the item back and forth: {before:?} -> {after:?}"
    );
    let instance = v1.store().load_instance(&id).await.unwrap();
    assert_eq!(
        instance.status,
        workflow_runtime::store::InstanceStatus::Suspended
    );

    // A process running version 2 starts: it delivers the stimulus, and the instance runs
    // its two tasks to the end.
    let v2 = versioned_process(&url, &schema, 2).await;
    let done = v2
        .await_completion(&id, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(matches!(done, Completion::Finished(_)), "{done:?}");
    let journal = v2.store().read_journal(&id, 0, 100).await.unwrap();
    let tasks = journal
        .iter()
        .filter(|r| r.node_id.as_deref() == Some("root:t1"))
        .count();
    assert!(tasks > 0, "the version-2 task did not run: {journal:?}");
    for runtime in [v1, other_v1, v2] {
        runtime.shutdown(Duration::from_secs(1)).await;
    }
}

/// The data of [`Gated`]: the gate its first task waits at, and what ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Gated {
    gate: String,
    /// The first task waits for its cancellation token instead of its gate.
    until_cancelled: bool,
    log: Vec<String>,
}

/// Gates a test opens by name: the first task says it entered, then waits to be let go.
#[derive(Default)]
struct Gate {
    entered: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

fn gate(name: &str) -> Arc<Gate> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static GATES: OnceLock<Mutex<HashMap<String, Arc<Gate>>>> = OnceLock::new();
    let mut gates = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    gates.entry(name.to_owned()).or_default().clone()
}

async fn gated(ctx: &mut TaskContext<Gated>) {
    let gate = gate(&ctx.data().gate);
    let open = gate.open.notified();
    gate.entered.notify_one();
    if ctx.data().until_cancelled {
        ctx.cancelled().await;
        return;
    }
    open.await;
    ctx.data_mut().log.push("first".to_owned());
}

async fn then(ctx: &mut TaskContext<Gated>) {
    ctx.data_mut().log.push("second".to_owned());
}

workflow! {
    /// A gated task, then another.
    pub workflow GatedSteps(Gated) = sequence [
        task(gated),
        task(then),
    ];
}

/// A process on its own pool running [`GatedSteps`].
async fn gated_process(url: &str, schema: &str, owner: &str) -> Runtime {
    let runtime = Runtime::builder()
        .store(Arc::new(open(url, schema).await))
        .owner(owner)
        .register::<GatedSteps>()
        .cancel_grace(Duration::from_millis(200))
        .lease_renewal(Duration::from_millis(100))
        .build()
        .unwrap();
    runtime.start_workers().await.unwrap();
    runtime
}

async fn log_of(runtime: &Runtime, id: &str) -> Vec<String> {
    let state = runtime.get_state(id).await.unwrap().unwrap();
    state.data::<Gated>().unwrap().log
}

/// ENG-50, FLT-15 across processes: a cancel, a suspend and a resume sent from one process
/// to an instance whose run is in progress in another are durable requests (never
/// `LeaseHeld`), honoured by the owner at the instance's next step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_requests_from_another_process_reach_a_running_instance() {
    use workflow_runtime::{Control, SubStatus, WorkflowStatus};
    if server().await.is_none() {
        return;
    }
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let owner = gated_process(&url, &schema, "process-a").await;
    let other = gated_process(&url, &schema, "process-b").await;

    // Cancel: the owner's running task sees its token fire; the instance ends cancelled.
    let name = format!("{schema}-cancel");
    let cancel_gate = gate(&name);
    let entered = cancel_gate.entered.notified();
    let running = {
        let owner = owner.clone();
        let data = Gated {
            gate: name.clone(),
            until_cancelled: true,
            ..Gated::default()
        };
        tokio::spawn(async move { owner.start::<GatedSteps>(data).await })
    };
    entered.await;
    let id = owner.list_instances(Default::default()).await.unwrap()[0]
        .instance_id
        .clone();
    let control = other.cancel(&id, Some("no longer needed".to_owned())).await;
    assert_eq!(control.unwrap(), Control::Requested);
    let started = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the owner never honoured the cancel")
        .unwrap()
        .unwrap();
    assert_eq!(started.status, WorkflowStatus::Cancelled);
    let done = other
        .await_completion(&id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        done,
        Completion::Cancelled(Some("no longer needed".to_owned()))
    );
    assert!(log_of(&other, &id).await.is_empty());

    // Suspend: the owner finishes the task it runs, then pauses the instance.
    let name = format!("{schema}-suspend");
    let gate_of = gate(&name);
    let entered = gate_of.entered.notified();
    let running = {
        let owner = owner.clone();
        let data = Gated {
            gate: name.clone(),
            ..Gated::default()
        };
        tokio::spawn(async move { owner.start::<GatedSteps>(data).await })
    };
    entered.await;
    let id = owner
        .list_instances(Default::default())
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.instance_id != id)
        .unwrap()
        .instance_id;
    assert_eq!(other.suspend(&id).await.unwrap(), Control::Requested);
    // Recorded durably: the request is in the instance's row for its owner to take.
    let record = other.store().load_instance(&id).await.unwrap();
    assert!(record.control_request.is_some(), "{record:?}");
    // The run in progress learns of it from the store's wake-up or, at the latest, from its
    // next lease renewal (every 100 ms here); then the task it runs ends.
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate_of.open.notify_one();
    let started = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the owner never honoured the suspend")
        .unwrap()
        .unwrap();
    assert_eq!(
        (started.status, started.sub_status),
        (WorkflowStatus::Suspended, Some(SubStatus::Paused))
    );
    assert_eq!(log_of(&other, &id).await, ["first"]);
    let record = other.store().load_instance(&id).await.unwrap();
    assert_eq!(
        record.control_request, None,
        "the pausing commit cleared it"
    );

    // Resume, from a process that does not run the definition (an operator's): recorded, and
    // honoured by the owner, which runs the instance on to the end.
    let operator = Runtime::builder()
        .store(Arc::new(open(&url, &schema).await))
        .owner("operator")
        .build()
        .unwrap();
    assert_eq!(operator.resume(&id).await.unwrap(), Control::Requested);
    let done = owner
        .await_completion(&id, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(matches!(done, Completion::Finished(_)), "{done:?}");
    assert_eq!(log_of(&owner, &id).await, ["first", "second"]);
    for runtime in [owner, other, operator] {
        runtime.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_of_the_wrong_type_is_a_decode_error_naming_it_not_a_transient_one() {
    let Some(mut conn) = server().await else {
        return;
    };
    let Some((store, guard)) = fresh_store().await else {
        return;
    };
    let store = Storage::new(store);
    store
        .enqueue(workflow_runtime::store::conformance::queue_item("q-1", T0))
        .await
        .unwrap();
    // A hand-edited schema: the attempts counter becomes text.
    sqlx::query(&format!(
        "ALTER TABLE \"{}\".wf_queue ALTER COLUMN attempts TYPE TEXT",
        guard.schema()
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let error = store
        .claim_queue_page("node-a", T0, TTL, 10)
        .await
        .unwrap_err();
    let StoreError::Decode { what, id, path, .. } = &error else {
        panic!("a Decode expected, got {error:?}");
    };
    // Named as the SQLite backend names it: the kind of row, its id, the column.
    assert_eq!(*what, "queue item", "{error}");
    assert_eq!(id, "q-1", "{error}");
    assert_eq!(path, "attempts", "{error}");
    assert!(!error.is_transient(), "{error:?}");
}

/// ST-22 for the queue on the server, as on SQLite: a hand-edited, undecodable queue item
/// fails alone: the claimed page holds the other items, and the bad one becomes a `Rejected`
/// dead letter that names it and keeps its raw text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_queue_item_does_not_block_the_queue() {
    let Some(mut conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let store = storage(&url, &schema).await;
    for (id, at) in [("q1", 1), ("q2", 2), ("q3", 3), ("q4", 4)] {
        store
            .enqueue(workflow_runtime::store::conformance::queue_item(
                id,
                T0 + at,
            ))
            .await
            .unwrap();
    }
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_queue SET payload = '{{broken' WHERE item_id = 'q2'"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_queue SET targets = 'not json' WHERE item_id = 'q3'"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let page = store.claim_queue_page("n", T0, TTL, 10).await.unwrap();
    let ids: Vec<&str> = page.iter().map(|q| q.item_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q4"]);
    let dead = store
        .list_dead_letters(workflow_runtime::store::DeadLetterFilter::all(10))
        .await
        .unwrap();
    let dead_ids: Vec<&str> = dead.iter().map(|d| d.item.item_id.as_str()).collect();
    assert_eq!(dead_ids.len(), 2, "{dead:?}");
    assert!(
        dead_ids.contains(&"q2") && dead_ids.contains(&"q3"),
        "{dead_ids:?}"
    );
    for letter in &dead {
        assert_eq!(
            letter.reason,
            workflow_runtime::store::DeadLetterReason::Rejected
        );
        let error = letter.error.as_deref().unwrap_or_default();
        assert!(error.contains(&letter.item.item_id), "{error}");
    }
    let q2 = dead.iter().find(|d| d.item.item_id == "q2").unwrap();
    assert_eq!(
        q2.item.payload,
        serde_json::json!({ "undecodable": "{broken" })
    );
    // Gone from the queue: the next claim does not meet them again.
    let again = store
        .claim_queue_page("m", T0 + TTL, TTL, 10)
        .await
        .unwrap();
    assert!(again.iter().all(|q| q.item_id != "q2" && q.item_id != "q3"));
}

/// A store on a small pool, several callers at once: its single statements keep their
/// connections between operations (not each given back to the pool), yet the transactions
/// (every start is one) always find a connection in the pool and none waits out its
/// acquire timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_leave_the_small_pools_transactions_a_connection() {
    if server().await.is_none() {
        return;
    }
    let schema = fresh_schema_name();
    let url = url_named(&schema);
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let options = PostgresOptions {
        max_connections: 5,
        acquire_timeout: Duration::from_secs(3),
        ..PostgresOptions::default().schema(schema.clone())
    };
    let store = Arc::new(PostgresStore::connect_with(&url, &options).await.unwrap());
    let runtime = Runtime::builder()
        .store(store)
        .register::<Paid>()
        .build()
        .unwrap();
    let mut callers = Vec::new();
    for _ in 0..8 {
        let runtime = runtime.clone();
        callers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let started = runtime.start::<Paid>(Steps::default()).await.unwrap();
                let snapshot = runtime.get_state(&started.instance_id).await.unwrap();
                assert!(snapshot.is_some(), "a started instance was not found");
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    runtime.shutdown(Duration::from_secs(1)).await;
}

// The connections a burst left kept between statements go back to the pool once the store
// has been idle for a few seconds, without another operation asking for one: an application
// sharing its pool with the store gets them back, and the pool's own timeouts apply again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_store_gives_its_kept_connections_back_to_the_pool() {
    use workflow_runtime::store::Store;
    if server().await.is_none() {
        return;
    }
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(10)
        .connect(&database_url())
        .await
        .unwrap();
    let options = PostgresOptions {
        listen: false,
        ..PostgresOptions::default().schema(schema.clone())
    };
    let store = Arc::new(
        PostgresStore::from_pool(pool.clone(), &options)
            .await
            .unwrap(),
    );
    let mut readers = Vec::new();
    for n in 0..8 {
        let store = Arc::clone(&store);
        readers.push(tokio::spawn(async move {
            for _ in 0..20 {
                let id = format!("no-such-instance-{n}");
                assert!(!store.has_receipt(&id, "s").await.unwrap());
            }
        }));
    }
    for reader in readers {
        reader.await.unwrap();
    }
    let in_use = pool.size() as usize - pool.num_idle();
    assert!(in_use > 0, "the burst kept no connection: nothing to check");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while pool.size() as usize - pool.num_idle() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an idle store still holds {} connections of the pool",
            pool.size() as usize - pool.num_idle()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(store);
    pool.close().await;
}

/// The data of [`Edited`]: the revision its event carried.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Edit {
    revision: u32,
}

workflow! {
    /// Started by each delivered `edited`: one instance per delivery.
    pub workflow Edited(Edit) {
        edited = event::<Edit>("edited").trigger();
    }
}

/// RT-35, C-44 across processes: a burst of debounced sends made through two processes
/// sharing the store collapses into one delivery, with the last payload, made by one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_sent_through_two_processes_is_delivered_once() {
    let Some(_conn) = server().await else {
        return;
    };
    let (url, schema) = (database_url(), fresh_schema_name());
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let mut processes = Vec::new();
    for _ in 0..2 {
        let store = Arc::new(open(&url, &schema).await);
        processes.push(
            Runtime::builder()
                .store(store)
                .register::<Edited>()
                .inbox_sweep(Duration::from_millis(100))
                .build()
                .unwrap(),
        );
    }
    for revision in 1..=30_u32 {
        let edit = workflow_runtime::Stimulus::new("edited")
            .key("doc-1")
            .payload(Edit { revision })
            .debounce(Duration::from_millis(300));
        let process = &processes[usize::try_from(revision % 2).unwrap()];
        let report = process.send(edit).await.unwrap();
        assert_eq!(report.debounced.unwrap().sends, u64::from(revision));
    }
    let store = processes[0].store().clone();
    let listed = || async {
        store
            .list_instances(workflow_runtime::store::InstanceFilter::default())
            .await
            .unwrap()
    };
    let mut delivered = Vec::new();
    for _ in 0..1000 {
        delivered = listed().await;
        if !delivered.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    // Generous: neither process delivers it again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let delivered = listed().await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let snapshot = processes[0]
        .get_state(&delivered[0].instance_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.data::<Edit>().unwrap(), Edit { revision: 30 });
    assert_eq!(store.earliest_debounce(i64::MAX).await.unwrap(), None);
    for process in processes {
        process.shutdown(Duration::from_secs(1)).await;
    }
}

/// The lease columns of an instance row: owner, token, whether it is wanted.
async fn lease_row(
    admin: &mut PgConnection,
    schema: &str,
    id: &str,
) -> (Option<String>, i64, bool) {
    sqlx::query_as(&format!(
        "SELECT lease_owner, lease_token, lease_wanted FROM \"{schema}\".wf_instances
         WHERE instance_id = $1"
    ))
    .bind(id)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// ST-38: the commit that leaves an instance waiting keeps its lease in the store, so the
/// next claim of the same owner on the version it committed is answered with no statement,
/// and its commit applies. A kept lease lost behind the store's back (expired by another
/// process's liveness check, say) still answers the claim, and the commit under it is
/// fenced by the commit function's guard: nothing is written, and a fresh claim follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_lease_answers_the_next_claim_from_memory_and_its_loss_is_fenced() {
    use workflow_runtime::store::ClaimKnown;
    let Some(mut admin) = server().await else {
        return;
    };
    let Some((store, guard)) = fresh_store().await else {
        return;
    };
    let schema = guard.schema().to_owned();
    let storage = Storage::new(store.clone());
    storage.create_instance(new_instance("wf-1")).await.unwrap();
    let first = storage
        .claim_instance("wf-1", claim("node-a", None, T0))
        .await
        .unwrap();
    let mut commit = waiting("wf-1", 1, first.lease.token, 1);
    commit.release_lease = true;
    assert_eq!(storage.commit(commit).await.unwrap(), 2);
    let (owner, token, wanted) = lease_row(&mut admin, &schema, "wf-1").await;
    assert_eq!(owner.as_deref(), Some("node-a"), "the lease is kept");
    assert_eq!(token, i64::try_from(first.lease.token).unwrap());
    assert!(!wanted);
    let text = PostgresStore::read_raw_state(&store, "wf-1").await.unwrap();

    let before = storage.stats().await.unwrap().transactions;
    let again = store
        .claim_instance_known("wf-1", claim("node-a", None, T0 + SEC), 2, &text)
        .await
        .unwrap();
    assert_eq!(
        storage.stats().await.unwrap().transactions,
        before,
        "answered without a statement"
    );
    assert_eq!(again.record.state, None);
    assert_eq!(again.record.version, 2);
    assert_eq!(again.lease.token, first.lease.token);
    let mut commit = waiting("wf-1", 2, again.lease.token, 2);
    commit.release_lease = true;
    assert_eq!(storage.commit(commit).await.unwrap(), 3);

    // The kept lease is lost behind the store's back.
    sqlx::query(&format!(
        "UPDATE \"{schema}\".wf_instances SET lease_owner = NULL, lease_expires_at = NULL,
            lease_nonce = NULL WHERE instance_id = 'wf-1'"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let text = PostgresStore::read_raw_state(&store, "wf-1").await.unwrap();
    let stale = store
        .claim_instance_known("wf-1", claim("node-a", None, T0 + 2 * SEC), 3, &text)
        .await
        .unwrap();
    let err = storage
        .commit(waiting("wf-1", 3, stale.lease.token, 3))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    assert_eq!(storage.load_instance("wf-1").await.unwrap().state, doc(2));
    let fresh = store
        .claim_instance_known("wf-1", claim("node-a", None, T0 + 3 * SEC), 3, &text)
        .await
        .unwrap();
    assert!(fresh.lease.token > stale.lease.token);
    assert_eq!(
        storage
            .commit(waiting("wf-1", 3, fresh.lease.token, 4))
            .await
            .unwrap(),
        4
    );
}

/// ST-38: another process's claim of an instance whose lease this one keeps idle marks the
/// row wanted and notifies; the holder gives the lease back, and the other process's claim
/// succeeds well within 2 s (not after the 30 s TTL). The holder's commits under the lease
/// it gave back are fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_gets_a_kept_lease_within_2_s() {
    let Some(mut admin) = server().await else {
        return;
    };
    let Some((store, guard)) = fresh_store().await else {
        return;
    };
    let schema = guard.schema().to_owned();
    let holder = Storage::new(store);
    let other = storage(&database_url(), &schema).await;
    holder.create_instance(new_instance("wf-1")).await.unwrap();
    let held = holder
        .claim_instance("wf-1", claim("node-a", None, T0))
        .await
        .unwrap();
    let mut commit = waiting("wf-1", 1, held.lease.token, 1);
    commit.release_lease = true;
    assert_eq!(holder.commit(commit).await.unwrap(), 2);
    assert_eq!(
        lease_row(&mut admin, &schema, "wf-1").await.0.as_deref(),
        Some("node-a")
    );

    let asked = std::time::Instant::now();
    let mut refused = 0;
    let claimed = loop {
        match other
            .claim_instance("wf-1", claim("node-b", None, T0 + SEC))
            .await
        {
            Ok(claimed) => break claimed,
            Err(StoreError::LeaseHeld { holder, .. }) => {
                assert_eq!(holder, "node-a");
                refused += 1;
                if refused == 1 {
                    // Marked wanted, unless the holder gave it back already.
                    let (owner, _, wanted) = lease_row(&mut admin, &schema, "wf-1").await;
                    assert!(wanted || owner.is_none(), "{owner:?} {wanted}");
                }
                assert!(
                    asked.elapsed() < Duration::from_secs(2),
                    "the kept lease was not given back within 2 s"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => panic!("{error:?}"),
        }
    };
    eprintln!(
        "kept lease given back {:?} after another process asked ({refused} refusals)",
        asked.elapsed()
    );
    assert!(refused >= 1, "the first claim found the lease kept");
    assert!(claimed.lease.token > held.lease.token);
    let err = holder
        .commit(waiting("wf-1", 2, held.lease.token, 5))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let mut commit = waiting("wf-1", 2, claimed.lease.token, 6);
    commit.release_lease = true;
    assert_eq!(other.commit(commit).await.unwrap(), 3);
    assert_eq!(holder.load_instance("wf-1").await.unwrap().state, doc(6));
}
