//! Corrupt rows in a SQLite file (ST-22): a bookmark, timer or queue row with a column of the
//! wrong type is a typed `Decode` naming that row and column, never a transient failure naming
//! nothing (a queue row, met by a claim, becomes a `Rejected` dead letter with that error, so
//! the rest of the queue is delivered); a journal entry whose detail does not decode keeps its place with an
//! `{"undecodable": ...}` marker, and the rest of the instance stays readable; a journal row
//! (one commit's entries, ST-10) that does not decode is a `Decode` naming the instance and
//! the entries it holds, and hides no other row's entries. A state document
//! rewritten in place (same version) is what the next run resumes, never the state the runtime
//! kept from its own commit (ENG-53). A timer row whose due time does not decode is met by
//! the timer driver: a `warn` event and a `damaged_timer` incident naming it fault its
//! instance, whose state stays readable, and the other timers fire.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::block_on;
use serde::{Deserialize, Serialize};
use workflow_runtime::model::Definition;
use workflow_runtime::store::{DeadLetterReason, SqliteStore, Storage, StoreError};
use workflow_runtime::{
    IncidentKind, ManualClock, Outcome, Registry, Runtime, StartOptions, Stimulus, TaskContext,
    WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Notes {
    notes: Vec<String>,
}

/// `head` -> waits for `go` -> `tail`.
const WAITER: &str = r#"{
  "name": "Waiter",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "event", "id": "wait", "event": "go" },
      { "kind": "task", "id": "tail", "function": "tail" }
    ],
    "connections": [
      { "source": "head", "target": "wait" },
      { "source": "wait", "target": "tail" }
    ]
  }
}"#;

/// `head` -> sleeps an hour -> `tail`.
const SLEEPER: &str = r#"{
  "name": "Sleeper",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "delay", "id": "nap", "duration_ms": 3600000 },
      { "kind": "task", "id": "tail", "function": "tail" }
    ],
    "connections": [
      { "source": "head", "target": "nap" },
      { "source": "nap", "target": "tail" }
    ]
  }
}"#;

fn registry() -> Registry<Notes> {
    let mut registry = Registry::new();
    for name in ["head", "tail"] {
        registry = registry.task(name, move |cx: &mut TaskContext<Notes>| {
            Box::pin(async move {
                cx.data_mut().notes.push(name.to_owned());
                Ok(Outcome::done())
            })
        });
    }
    registry
}

fn runtime(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register_definition(Definition::from_json(WAITER).unwrap(), registry())
        .register_definition(Definition::from_json(SLEEPER).unwrap(), registry())
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap()
}

async fn start(rt: &Runtime, name: &str) -> String {
    rt.start_by_name(name, serde_json::json!({}), StartOptions::default())
        .await
        .unwrap()
        .instance_id
}

/// Changes the file behind the open store, as a damaged disk or a stray tool would.
fn corrupt(path: &Path, sql: &str, id: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    let changed = conn.execute(sql, [id]).unwrap();
    assert!(changed > 0, "the corruption changed no row: {sql}");
}

fn now_micros() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

fn opened(dir: &tempfile::TempDir) -> (std::path::PathBuf, Storage) {
    let path = dir.path().join("corrupt.db");
    let store = Storage::new(Arc::new(SqliteStore::open(&path).unwrap()));
    (path, store)
}

#[test]
fn st22_a_bookmark_row_with_a_wrong_column_type_is_a_decode_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let bad = start(&rt, "Waiter").await;
        let good = start(&rt, "Waiter").await;
        let bookmark = store.list_bookmarks(&bad).await.unwrap()[0]
            .bookmark_id
            .clone();
        corrupt(
            &path,
            "UPDATE wf_bookmarks SET context_id = 'not a number' WHERE instance_id = ?1",
            &bad,
        );
        let error = store.list_bookmarks(&bad).await.unwrap_err();
        let StoreError::Decode { what, id, path, .. } = &error else {
            panic!("a Decode expected, got {error:?}");
        };
        assert_eq!(*what, "bookmark");
        assert!(id.contains(&bookmark) && id.contains(&bad), "{id}");
        assert_eq!(path, "context_id");
        assert!(!error.is_transient(), "{error:?}");
        // The other instance's bookmarks read as before.
        assert_eq!(store.list_bookmarks(&good).await.unwrap().len(), 1);
    });
}

#[test]
fn st22_a_timer_row_with_a_non_numeric_due_time_is_a_decode_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let bad = start(&rt, "Sleeper").await;
        let good = start(&rt, "Sleeper").await;
        let timer = store.list_timers(&bad).await.unwrap()[0].timer_id.clone();
        corrupt(
            &path,
            "UPDATE wf_timers SET due_at = 'soon' WHERE instance_id = ?1",
            &bad,
        );
        let error = store.list_timers(&bad).await.unwrap_err();
        let StoreError::Decode { what, id, path, .. } = &error else {
            panic!("a Decode expected, got {error:?}");
        };
        assert_eq!(*what, "timer");
        assert!(id.contains(&timer) && id.contains(&bad), "{id}");
        assert_eq!(path, "due_at");
        assert!(!error.is_transient(), "{error:?}");
        assert_eq!(store.list_timers(&good).await.unwrap().len(), 1);
    });
}

#[test]
fn st22_a_queue_row_with_a_wrong_column_type_fails_alone_as_a_dead_letter_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let mut items = Vec::new();
        for _ in 0..3 {
            let report = rt
                .send(Stimulus::new("nobody.waits").via_inbox())
                .await
                .unwrap();
            items.push(report.inbox_item.unwrap());
        }
        let bad = items[1].clone();
        corrupt(
            &path,
            "UPDATE wf_queue SET attempts = 'many', payload = x'00ff' WHERE item_id = ?1",
            &bad,
        );
        // The page is claimed without the bad row: its neighbours are not held back.
        let page = store
            .claim_queue_page("inspector", now_micros(), 1, 10)
            .await
            .unwrap();
        let claimed: Vec<&str> = page.iter().map(|i| i.item_id.as_str()).collect();
        assert_eq!(claimed, [items[0].as_str(), items[2].as_str()]);
        // The bad row is a `Rejected` dead letter whose error names the row and the column,
        // and it decodes, keeping what was there.
        let dead = store.list_dead_letters(Default::default()).await.unwrap();
        assert_eq!(dead.len(), 1, "{dead:?}");
        let letter = &dead[0];
        assert_eq!(letter.item.item_id, bad);
        assert_eq!(letter.reason, DeadLetterReason::Rejected);
        let error = letter.error.as_deref().unwrap();
        assert!(
            error.contains("queue item") && error.contains(&bad) && error.contains("attempts"),
            "{error}"
        );
        assert_eq!(letter.item.name, "nobody.waits");
        assert_eq!(letter.item.attempts, 0);
        assert!(
            letter.item.payload.get("undecodable").is_some(),
            "{:?}",
            letter.item.payload
        );
        // It is gone from the queue, so the next claim does not meet it again.
        assert!(
            store
                .claim_queue_page("inspector-2", now_micros() + 10_000_000, 1, 10)
                .await
                .unwrap()
                .iter()
                .all(|i| i.item_id != bad)
        );
    });
}

#[test]
fn st22_a_journal_row_whose_detail_does_not_decode_is_marked_and_the_instance_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let id = start(&rt, "Waiter").await;
        let before = store.read_journal(&id, 0, 0).await.unwrap();
        assert!(before.len() > 1, "{before:?}");
        corrupt(
            &path,
            "UPDATE wf_journal SET entries = json_set(entries, '$[0][4]', '{not json')
             WHERE instance_id = ?1
               AND last_seq = (SELECT MIN(last_seq) FROM wf_journal WHERE instance_id = ?1)",
            &id,
        );
        let after = store.read_journal(&id, 0, 0).await.unwrap();
        assert_eq!(after.len(), before.len(), "no entry is hidden");
        assert!(
            after[0].detail.get("undecodable").is_some(),
            "{:?}",
            after[0].detail
        );
        assert_eq!(after[0].seq, before[0].seq);
        assert_eq!(after[1..], before[1..]);
        // The instance itself reads, its journal included, and still runs.
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.journal().len(), before.len());
        assert_eq!(snapshot.data::<Notes>().unwrap().notes, ["head"]);
        let report = rt.send(Stimulus::new("go")).await.unwrap();
        assert_eq!(report.resumed.len(), 1, "{report:?}");
    });
}

#[test]
fn st22_a_journal_row_that_does_not_decode_is_a_decode_error_naming_it_and_hides_no_other_row() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let id = start(&rt, "Waiter").await;
        let first = store.read_journal(&id, 0, 0).await.unwrap();
        let report = rt.send(Stimulus::new("go")).await.unwrap();
        assert_eq!(report.resumed.len(), 1, "{report:?}");
        let before = store.read_journal(&id, 0, 0).await.unwrap();
        assert!(before.len() > first.len(), "{before:?}");
        // The start's row is damaged: the page from its first entry is its error, naming it.
        corrupt(
            &path,
            "UPDATE wf_journal SET entries = '[[1, \"half' WHERE instance_id = ?1
               AND last_seq = (SELECT MIN(last_seq) FROM wf_journal WHERE instance_id = ?1)",
            &id,
        );
        let error = store.read_journal(&id, 0, 0).await.unwrap_err();
        assert!(!error.is_transient(), "{error}");
        let StoreError::Decode { what, id: row, .. } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(*what, "journal row");
        let last = first.last().unwrap().seq;
        assert_eq!(
            *row,
            format!("{id} (entries {} to {last})", first[0].seq),
            "{error}"
        );
        // The entries after it read, paging on from past it.
        let after = store.read_journal(&id, last + 1, 0).await.unwrap();
        assert_eq!(after[..], before[first.len()..]);
        // The instance's state stays readable: its snapshot holds the other row's entries and
        // names the damaged row.
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let seqs: Vec<u64> = snapshot.journal().iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = after.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, expected);
        assert_eq!(
            snapshot.journal_damage.len(),
            1,
            "{:?}",
            snapshot.journal_damage
        );
        assert!(
            snapshot.journal_damage[0]
                .contains(&format!("{id} (entries {} to {last})", first[0].seq)),
            "{:?}",
            snapshot.journal_damage
        );
        // Damaging the newer row instead: the older row's entries read, the page ends there.
        corrupt(
            &path,
            "UPDATE wf_journal SET entries = '{}' WHERE instance_id = ?1
               AND last_seq = (SELECT MAX(last_seq) FROM wf_journal WHERE instance_id = ?1)",
            &id,
        );
        assert!(store.read_journal(&id, last + 1, 0).await.is_err());
    });
}

#[test]
fn eng53_a_state_edited_in_the_file_at_the_same_version_is_what_the_next_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let id = start(&rt, "Waiter").await;
        let version = store.load_instance(&id).await.unwrap().version;
        // A tool rewrites the document in place: same version, other text. The runtime
        // ran this instance last and kept its state; the edit must not be shadowed by it.
        corrupt(
            &path,
            "UPDATE wf_instances SET state = json_set(state, '$.data.notes[#]', 'edited')
               WHERE instance_id = ?1",
            &id,
        );
        assert_eq!(store.load_instance(&id).await.unwrap().version, version);
        let edited = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(edited.data::<Notes>().unwrap().notes, ["head", "edited"]);
        let report = rt.send(Stimulus::new("go")).await.unwrap();
        assert_eq!(report.resumed.len(), 1, "{report:?}");
        let done = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(
            done.data::<Notes>().unwrap().notes,
            ["head", "edited", "tail"]
        );
    });
}

/// ST-19: a field the runtime does not know in a stored state document (a bad migration's
/// leftover) is refused as a decode error naming it, never dropped: the document stays as
/// it is, and a send to the instance fails instead of committing a state without it.
#[test]
fn st19_an_unknown_field_in_a_stored_state_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    block_on(async {
        let rt = runtime(&store);
        let id = start(&rt, "Waiter").await;
        corrupt(
            &path,
            "UPDATE wf_instances SET state = json_set(state, '$.operator_note', 'keep me')
             WHERE instance_id = ?1",
            &id,
        );
        let error = rt.get_state(&id).await.unwrap_err();
        assert!(error.to_string().contains("operator_note"), "{error}");
        assert!(rt.send(Stimulus::new("go")).await.is_err());
        let conn = rusqlite::Connection::open(&path).unwrap();
        let note: String = conn
            .query_row(
                "SELECT json_extract(state, '$.operator_note') FROM wf_instances
                 WHERE instance_id = ?1",
                [&id],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(note, "keep me");
    });
}

/// `warn` events, captured process-wide (a thread-local subscriber races with the callsite
/// interest other tests of this binary register without one).
mod warnings {
    use std::collections::BTreeMap;
    use std::fmt::Debug;
    use std::sync::{Arc, Mutex, OnceLock};

    use tracing::field::{Field, Visit};
    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt};

    #[derive(Clone, Default)]
    pub struct Capture(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }

        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    impl<S: Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            if *event.metadata().level() != Level::WARN {
                return;
            }
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push(fields);
        }
    }

    pub fn global() -> Capture {
        static GLOBAL: OnceLock<Capture> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let capture = Capture::default();
                let subscriber = tracing_subscriber::registry().with(capture.clone());
                tracing::subscriber::set_global_default(subscriber).unwrap();
                capture
            })
            .clone()
    }

    impl Capture {
        /// The `warn` events whose `timer` field is `timer`.
        pub fn about_timer(&self, timer: &str) -> Vec<BTreeMap<String, String>> {
            let events = self.0.lock().unwrap();
            events
                .iter()
                .filter(|e| e.get("timer").map(String::as_str) == Some(timer))
                .cloned()
                .collect()
        }
    }
}

/// ST-22: a timer row whose due time does not decode (text where a number belongs) is not a
/// silent forever-sleep: the timer driver claims it, a `warn` event names it, and its
/// instance is faulted with a `damaged_timer` incident naming the row, its state readable;
/// the other instance's timer fires in the same pass. Repaired and retried, it fires.
#[test]
fn st22_a_timer_whose_due_time_does_not_decode_faults_its_instance_naming_it() {
    let warnings = warnings::global();
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    let clock = ManualClock::new(ManualClock::DEFAULT_START);
    block_on(async {
        let rt = Runtime::builder()
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .register_definition(Definition::from_json(SLEEPER).unwrap(), registry())
            .inbox_worker(false)
            .timer_driver(false)
            .recovery_sweep(None)
            .build()
            .unwrap();
        let bad = start(&rt, "Sleeper").await;
        let good = start(&rt, "Sleeper").await;
        let timer = store.list_timers(&bad).await.unwrap()[0].timer_id.clone();
        let good_timer = store.list_timers(&good).await.unwrap()[0].timer_id.clone();
        corrupt(
            &path,
            "UPDATE wf_timers SET due_at = 'garbage' WHERE instance_id = ?1",
            &bad,
        );
        // Nothing is due yet but the damaged row: it is reported at once.
        let first = rt.fire_due_timers().await.unwrap();
        assert_eq!(first.damaged, [(bad.clone(), timer.clone())], "{first:?}");
        assert!(first.fired.is_empty(), "{first:?}");
        let incidents = rt.incidents(&bad).await.unwrap().unwrap();
        assert_eq!(incidents.len(), 1, "{incidents:?}");
        assert_eq!(incidents[0].kind, IncidentKind::DamagedTimer);
        let message = &incidents[0].fault.message;
        assert!(
            message.contains(&timer) && message.contains("due_at") && message.contains("garbage"),
            "{message}"
        );
        assert!(incidents[0].node_id.ends_with("nap"), "{incidents:?}");
        let warned = warnings.about_timer(&timer);
        assert!(
            warned.iter().any(|e| e.get("instance") == Some(&bad)
                && e.get("error").is_some_and(|m| m.contains("due_at"))),
            "{warned:?}"
        );
        // The state reads; the instance is faulted, not asleep.
        let snapshot = rt.get_state(&bad).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
        assert_eq!(snapshot.data::<Notes>().unwrap().notes, ["head"]);
        // The other timer fires when due; the damaged row, parked, is not reported twice.
        clock.advance(std::time::Duration::from_secs(2 * 3600));
        let second = rt.fire_due_timers().await.unwrap();
        assert_eq!(second.fired, [(good.clone(), good_timer)], "{second:?}");
        assert!(second.damaged.is_empty(), "{second:?}");
        let done = rt.get_state(&good).await.unwrap().unwrap();
        assert_eq!(done.status(), WorkflowStatus::Finished);
        // Repaired by the operator and retried, the timer fires.
        corrupt(
            &path,
            "UPDATE wf_timers SET due_at = 0 WHERE instance_id = ?1",
            &bad,
        );
        rt.retry(&bad).await.unwrap();
        let third = rt.fire_due_timers().await.unwrap();
        assert_eq!(third.fired, [(bad.clone(), timer)], "{third:?}");
        let repaired = rt.get_state(&bad).await.unwrap().unwrap();
        assert_eq!(repaired.status(), WorkflowStatus::Finished);
        assert_eq!(repaired.data::<Notes>().unwrap().notes, ["head", "tail"]);
    });
}

/// ST-22: a due time past the year 9999 (a number, but not a time) is damage too, and a
/// retry that did not repair it faults the instance again once the row's claim expires.
#[test]
fn st22_a_due_time_past_the_last_representable_year_is_damage_too() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = opened(&dir);
    let clock = ManualClock::new(ManualClock::DEFAULT_START);
    block_on(async {
        let rt = Runtime::builder()
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .register_definition(Definition::from_json(SLEEPER).unwrap(), registry())
            .inbox_worker(false)
            .timer_driver(false)
            .recovery_sweep(None)
            .build()
            .unwrap();
        let bad = start(&rt, "Sleeper").await;
        let timer = store.list_timers(&bad).await.unwrap()[0].timer_id.clone();
        corrupt(
            &path,
            "UPDATE wf_timers SET due_at = 9223372036854775807 WHERE instance_id = ?1",
            &bad,
        );
        let first = rt.fire_due_timers().await.unwrap();
        assert_eq!(first.damaged, [(bad.clone(), timer.clone())], "{first:?}");
        rt.retry(&bad).await.unwrap();
        // The row stays claimed by the pass that reported it until the claim expires.
        let early = rt.fire_due_timers().await.unwrap();
        assert!(early.damaged.is_empty(), "{early:?}");
        clock.advance(std::time::Duration::from_secs(3600));
        let again = rt.fire_due_timers().await.unwrap();
        assert_eq!(again.damaged, [(bad.clone(), timer)], "{again:?}");
        let incidents = rt.incidents(&bad).await.unwrap().unwrap();
        assert_eq!(incidents.len(), 2, "{incidents:?}");
        assert_eq!(incidents[0].resolution.as_deref(), Some("retried"));
        assert!(incidents[1].resolution.is_none());
        assert!(
            incidents[1].fault.message.contains("9223372036854775807"),
            "{}",
            incidents[1].fault.message
        );
    });
}
