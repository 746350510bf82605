//! An instance stored by the previous release keeps working (ST-19): its state document is
//! of format 1, whose instants were milliseconds since the epoch, while this release counts
//! microseconds everywhere. The runtime reads the old document, converts every instant it
//! holds, and the instance's timer fires when it was due. A journal the previous schema kept
//! one row per entry reads the same once the file is migrated to one row per commit.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use workflow_runtime::model::Definition;
use workflow_runtime::store::{STATE_FORMAT, SqliteStore, Storage};
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    ManualClock, Outcome, Registry, Runtime, StartOptions, TaskContext, WorkflowStatus,
};

/// 2026-01-01T00:00:00Z in µs, when the old release started the instance.
const T0_US: i64 = 1_767_225_600_000_000;
/// The same instant in ms, as the old release wrote it in the document.
const T0_MS: i64 = 1_767_225_600_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Steps {
    log: Vec<String>,
}

const LATER: &str = r#"{
  "name": "Later",
  "root": { "kind": "sequence", "id": "root", "steps": [
    { "kind": "delay", "id": "wait", "duration_ms": 60000 },
    { "kind": "task", "id": "b", "function": "b" }
  ] }
}"#;

/// The document the previous release stored for `Later` started at T0 and waiting on its
/// one-minute delay (format 1: every instant in ms). Only the definition version, the
/// bookmark id and its hash are filled in from the rows of this store.
const FORMAT_1_DOCUMENT: &str = r#"{"format":1,"instance_id":"old-1","definition":{"name":"Later","version":"VERSION"},"created_at":1767225600000,"updated_at":1767225600000,"status":"Suspended","sub_status":"Waiting","contexts":{"1":{"id":1,"node_id":"root","parent":null,"status":"Running","is_executing":false,"properties":{"index":0},"input":{"log":[]},"execution_count":1,"started_at":1767225600000},"2":{"id":2,"node_id":"root:wait","parent":1,"status":"Running","is_executing":false,"tag":"0","input":{"log":[]},"execution_count":1,"started_at":1767225600000}},"root":1,"next_context_id":3,"queue":[],"callbacks":[{"owner":1,"child":2,"callback":"step_completed","tag":"0"}],"bookmarks":[{"id":"BOOKMARK","name":"wf.delay","hash":"HASH","node_id":"root:wait","context_id":2,"payload":{"due_at":1767225660000},"auto_burn":true,"created_at":1767225600000}],"data":{"log":[]},"input":{"log":[]},"completion_seq":0,"event_seq":0,"journal":{"level":"Activities","max_entries":1000,"next_seq":3}}"#;

fn registry() -> Registry<Steps> {
    Registry::new().task("b", |cx: &mut TaskContext<Steps>| {
        Box::pin(async move {
            cx.data_mut().log.push("b".to_owned());
            Ok(Outcome::done())
        })
    })
}

fn runtime_at(path: &Path, now: i64) -> TestRuntime {
    let store = Storage::new(Arc::new(SqliteStore::open(path).unwrap()));
    let builder = Runtime::builder()
        .store(store)
        .register_definition(Definition::from_json(LATER).unwrap(), registry());
    TestRuntime::build_at(builder, ManualClock::new(now)).unwrap()
}

// ST-19: a format-1 document (ms) left by the previous release is read, its instants made µs,
// and the instance resumes: its delay fires at T0 + 60 s, not before, and then finishes.
#[test]
fn st19_an_instance_stored_in_the_previous_format_resumes_with_its_times_converted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("previous.db");
    // The rows the previous release wrote: the store's own columns were µs already.
    let (version, bookmark, hash) = block_on(async {
        let old = runtime_at(&path, T0_US);
        let started = old
            .start_by_name(
                "Later",
                serde_json::json!({ "log": [] }),
                StartOptions {
                    instance_id: Some("old-1".to_owned()),
                    ..StartOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Suspended);
        let record = old.store().load_instance("old-1").await.unwrap();
        let rows = old.store().list_bookmarks("old-1").await.unwrap();
        assert_eq!(rows.len(), 1);
        (
            record.definition_version,
            rows[0].bookmark_id.clone(),
            rows[0].hash.clone(),
        )
    });
    let document = FORMAT_1_DOCUMENT
        .replace("VERSION", &version)
        .replace("BOOKMARK", &bookmark)
        .replace("HASH", &hash);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let changed = conn
        .execute(
            "UPDATE wf_instances SET state = ?1 WHERE instance_id = 'old-1'",
            [&document],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);

    block_on(async {
        // This release opens the file ten seconds later.
        let test = runtime_at(&path, T0_US + 10_000_000);
        let snapshot = test.get_state("old-1").await.unwrap().unwrap();
        let state = &snapshot.state;
        assert_eq!(u64::from(state.format_version()), STATE_FORMAT);
        assert_eq!(state.created_at_micros(), T0_US);
        assert_eq!(state.updated_at_micros(), T0_US);
        assert_eq!(state.context(2).unwrap().started_at, Some(T0_US));
        let [delay] = state.bookmarks() else {
            panic!("one bookmark: {:?}", state.bookmarks())
        };
        assert_eq!(delay.created_at, T0_US);
        assert_eq!(delay.payload["due_at"], T0_US + 60_000_000);
        assert_ne!(delay.payload["due_at"], T0_MS + 60_000, "still in ms");
        let timers = test.store().list_timers("old-1").await.unwrap();
        assert_eq!(timers.len(), 1);
        assert_eq!(timers[0].due_at, T0_US + 60_000_000);

        // Nothing at T0 + 59 s; the delay fires at T0 + 60 s and the task runs.
        let early = test.advance(Duration::from_secs(49)).await.unwrap();
        assert!(early.fired.is_empty(), "{early:?}");
        let fired = test.advance(Duration::from_secs(1)).await.unwrap();
        assert_eq!(fired.fired.len(), 1, "{fired:?}");
        let done = test.get_state("old-1").await.unwrap().unwrap();
        assert_eq!(done.status(), WorkflowStatus::Finished);
        assert_eq!(done.data::<Steps>().unwrap().log, vec!["b".to_owned()]);
        assert_eq!(done.state.created_at_micros(), T0_US);
        assert_eq!(done.state.updated_at_micros(), T0_US + 60_000_000);
        // The commit wrote the document back in this release's format.
        let record = test.store().load_instance("old-1").await.unwrap();
        assert_eq!(record.state["format"], STATE_FORMAT);
        assert_eq!(record.state["created_at"], T0_US);
    });
}

/// What the previous release's schema (8) kept of a journal: one row per entry. Rewrites the
/// file's journal into that form, entry for entry, and forgets migration 9, as a file the
/// previous release left.
const JOURNAL_OF_SCHEMA_8: &str = "
CREATE TABLE wf_journal_entries (
    instance_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    context_id  INTEGER,
    node_id     TEXT,
    detail      TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
) WITHOUT ROWID;
INSERT INTO wf_journal_entries
SELECT j.instance_id, j.last_seq - json_array_length(j.entries) + 1 + e.key,
       json_extract(e.value, '$[0]'), json_extract(e.value, '$[1]'),
       json_extract(e.value, '$[2]'), json_extract(e.value, '$[3]'),
       json_extract(e.value, '$[4]')
  FROM wf_journal j, json_each(j.entries) e
 WHERE j.last_seq - json_array_length(j.entries) + 1 + e.key >= j.first_seq;
DROP TABLE wf_journal;
ALTER TABLE wf_journal_entries RENAME TO wf_journal;
DELETE FROM wf_schema_migrations WHERE version = 9;
";

// ST-10, ST-29: a file whose journal the previous release wrote one row per entry opens
// (migration 9 turns its rows into the per-commit form), shows the same journal, and the
// instance resumes, its next entries numbered after the old ones.
#[test]
fn st10_a_journal_of_the_previous_schema_reads_the_same_and_grows_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("previous.db");
    let before = block_on(async {
        let old = runtime_at(&path, T0_US);
        old.start_by_name(
            "Later",
            serde_json::json!({ "log": [] }),
            StartOptions {
                instance_id: Some("old-1".to_owned()),
                ..StartOptions::default()
            },
        )
        .await
        .unwrap();
        old.store().read_journal("old-1", 0, 0).await.unwrap()
    });
    assert!(!before.is_empty());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch(JOURNAL_OF_SCHEMA_8).unwrap();
    let rows: usize = conn
        .query_row("SELECT count(*) FROM wf_journal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows,
        before.len(),
        "one row per entry, as schema 8 kept them"
    );
    drop(conn);

    block_on(async {
        let test = runtime_at(&path, T0_US + 10_000_000);
        let after = test.store().read_journal("old-1", 0, 0).await.unwrap();
        assert_eq!(after, before);
        let from_second: Vec<u64> = test
            .store()
            .read_journal("old-1", before[1].seq, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(
            from_second,
            before[1..].iter().map(|e| e.seq).collect::<Vec<_>>()
        );
        // The delay fires and the instance finishes; its new entries follow the old ones.
        let fired = test.advance(Duration::from_secs(50)).await.unwrap();
        assert_eq!(fired.fired.len(), 1, "{fired:?}");
        let done = test.get_state("old-1").await.unwrap().unwrap();
        assert_eq!(done.status(), WorkflowStatus::Finished);
        let all = test.store().read_journal("old-1", 0, 0).await.unwrap();
        assert_eq!(all[..before.len()], before[..]);
        assert!(all.len() > before.len(), "{all:?}");
        let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (before[0].seq..).take(all.len()).collect();
        assert_eq!(seqs, expected, "numbered on without a gap");
    });
}
