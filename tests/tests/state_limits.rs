//! The state size limit (ST-24) end to end: a run whose state grows over the store's limit
//! faults its instance from the last committed state with a `state_too_large` incident, and
//! the stimulus that led there is dead-lettered, not lost; a start whose first run is too
//! large before it committed anything is refused to the caller and leaves nothing behind,
//! one that had committed stays faulted. Every scenario runs on the
//! `MemoryStore` and on a `SqliteStore` in a temporary file.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::block_on;
use serde::{Deserialize, Serialize};
use workflow_runtime::model::Definition;
use workflow_runtime::store::{
    DeadLetterFilter, DeadLetterReason, InstanceFilter, MemoryStore, SqliteStore, Storage,
};
use workflow_runtime::{
    IncidentKind, Outcome, Registry, Rejection, RunError, Runtime, StartError, StartOptions,
    Stimulus, TaskContext, WorkflowStatus,
};

/// The store's limit in these tests; a `grow` adds three times as much to the data.
const LIMIT: usize = 8 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Notes {
    notes: Vec<String>,
}

/// `head` -> waits for `grow` -> `grow` (adds 24 KB to the data) -> `tail`.
const GROWER: &str = r#"{
  "name": "Grower",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "event", "id": "wait", "event": "grow" },
      { "kind": "task", "id": "grow", "function": "grow" },
      { "kind": "task", "id": "tail", "function": "tail" }
    ],
    "connections": [
      { "source": "head", "target": "wait" },
      { "source": "wait", "target": "grow" },
      { "source": "grow", "target": "tail" }
    ]
  }
}"#;

/// Its first task adds 24 KB to the data at once.
const BIG_START: &str = r#"{
  "name": "BigStart",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "grow",
    "nodes": [ { "kind": "task", "id": "grow", "function": "grow" } ],
    "connections": []
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
        .task("grow", |cx: &mut TaskContext<Notes>| {
            Box::pin(async move {
                cx.data_mut().notes.push("x".repeat(3 * LIMIT));
                Ok(Outcome::done())
            })
        })
        .value("leaf_input", |_: &Notes| Notes::default())
}

/// Both stores; the temporary directory lives as long as the store is used.
fn stores() -> Vec<(&'static str, Storage, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("limits.db")).unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()).into(), None),
        ("sqlite", Arc::new(sqlite).into(), Some(dir)),
    ]
}

fn runtime(store: &Storage, limit: usize) -> Runtime {
    Runtime::builder()
        .store(store.clone().with_max_state_bytes(limit))
        .register_definition(Definition::from_json(GROWER).unwrap(), registry())
        .register_definition(Definition::from_json(BIG_START).unwrap(), registry())
        .inbox_worker(false)
        .timer_driver(false)
        .recovery_sweep(None)
        .build()
        .unwrap()
}

async fn start_grower(rt: &Runtime) -> String {
    let started = rt
        .start_by_name("Grower", serde_json::json!({}), StartOptions::default())
        .await
        .unwrap();
    assert_eq!(started.status, WorkflowStatus::Suspended);
    started.instance_id
}

async fn notes(rt: &Runtime, id: &str) -> Vec<String> {
    let snapshot = rt.get_state(id).await.unwrap().unwrap();
    snapshot.data::<Notes>().unwrap().notes
}

async fn waiting_for(rt: &Runtime, id: &str) -> Vec<String> {
    let snapshot = rt.get_state(id).await.unwrap().unwrap();
    snapshot
        .state
        .bookmarks()
        .iter()
        .map(|b| b.name.clone())
        .collect()
}

/// ST-24, FLT-5, FLT-6: an event whose run makes the state too large faults the instance
/// with a `state_too_large` incident naming the stimulus; the last committed state (data and
/// bookmark) is kept; the stimulus is dead-lettered `Rejected` for that instance and
/// reported as rejected. After a retry under a larger limit, replaying the dead letter
/// completes the instance: nothing was lost.
#[test]
fn st24_a_resumed_run_over_the_limit_faults_the_instance_and_dead_letters_its_stimulus() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, LIMIT);
            let id = start_grower(&rt).await;

            let report = rt.send(Stimulus::new("grow")).await.unwrap();
            assert!(report.resumed.is_empty(), "{label}: {report:?}");
            let [
                Rejection::StateTooLarge {
                    instance,
                    size,
                    limit,
                    incident,
                    ..
                },
            ] = report.rejected.as_slice()
            else {
                panic!("{label}: one rejection expected: {report:?}");
            };
            assert_eq!(instance, &id, "{label}");
            assert_eq!(*limit, LIMIT, "{label}");
            assert!(*size > LIMIT, "{label}: {size}");

            // Faulted at its last commit: the data and the bookmark are as before the event.
            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(snapshot.status(), WorkflowStatus::Faulted, "{label}");
            assert_eq!(notes(&rt, &id).await, ["head"], "{label}");
            assert_eq!(waiting_for(&rt, &id).await, ["grow"], "{label}");
            let incidents = rt.incidents(&id).await.unwrap().unwrap();
            assert_eq!(incidents.len(), 1, "{label}: {incidents:?}");
            assert_eq!(incidents[0].id, *incident, "{label}");
            assert_eq!(incidents[0].kind, IncidentKind::StateTooLarge, "{label}");
            assert_eq!(
                incidents[0].stimulus_id.as_deref(),
                Some(report.stimulus_id.as_str()),
                "{label}"
            );
            assert!(
                incidents[0].fault.message.contains(&LIMIT.to_string()),
                "{label}: {}",
                incidents[0].fault.message
            );
            // The store's incident table lists it with its kind.
            let listed = store.list_all_incidents(true, None, 0).await.unwrap();
            assert_eq!(listed.len(), 1, "{label}: {listed:?}");
            assert_eq!(listed[0].kind, "state_too_large", "{label}");
            assert_eq!(listed[0].instance_id, id, "{label}");

            // The stimulus is a dead letter for this instance, with its id.
            let letters = rt.dead_letters(DeadLetterFilter::default()).await.unwrap();
            assert_eq!(letters.len(), 1, "{label}: {letters:?}");
            assert_eq!(letters[0].reason, DeadLetterReason::Rejected, "{label}");
            assert_eq!(letters[0].item.stimulus_id, report.stimulus_id, "{label}");
            assert!(
                !store.has_receipt(&id, &report.stimulus_id).await.unwrap(),
                "{label}: the stimulus was not consumed"
            );

            // An operator raises the limit, retries, then replays the stimulus.
            let larger = runtime(&store, 16 * LIMIT);
            let retried = larger.retry(&id).await.unwrap();
            assert_eq!(
                retried.applied().unwrap().status,
                WorkflowStatus::Suspended,
                "{label}"
            );
            assert_eq!(waiting_for(&larger, &id).await, ["grow"], "{label}");
            larger
                .replay_dead_letter(&letters[0].item.item_id)
                .await
                .unwrap();
            larger.deliver_inbox().await.unwrap();
            let snapshot = larger.get_state(&id).await.unwrap().unwrap();
            assert_eq!(snapshot.status(), WorkflowStatus::Finished, "{label}");
            assert_eq!(notes(&larger, &id).await.len(), 3, "{label}");
        });
    }
}

/// ST-24 for a queued stimulus: delivered by the queue, its run over the limit faults the
/// instance; the item becomes a dead letter instead of being retried into the same fault.
#[test]
fn st24_a_queued_stimulus_over_the_limit_becomes_a_dead_letter() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, LIMIT);
            let id = start_grower(&rt).await;
            let report = rt.send(Stimulus::new("grow").via_inbox()).await.unwrap();
            assert!(report.inbox_item.is_some(), "{label}: {report:?}");
            rt.deliver_inbox().await.unwrap();

            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(snapshot.status(), WorkflowStatus::Faulted, "{label}");
            assert_eq!(notes(&rt, &id).await, ["head"], "{label}");
            let incidents = rt.incidents(&id).await.unwrap().unwrap();
            assert_eq!(incidents.len(), 1, "{label}: {incidents:?}");
            assert_eq!(incidents[0].kind, IncidentKind::StateTooLarge, "{label}");
            let letters = rt.dead_letters(DeadLetterFilter::default()).await.unwrap();
            assert_eq!(letters.len(), 1, "{label}: {letters:?}");
            assert_eq!(letters[0].item.stimulus_id, report.stimulus_id, "{label}");
            // Nothing is left queued for the instance, so no pass faults it again.
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            assert_eq!(
                rt.incidents(&id).await.unwrap().unwrap().len(),
                1,
                "{label}"
            );
        });
    }
}

/// ST-24 for a start: the caller gets `StartError::StateTooLarge` with the size and the
/// limit, and no instance, incident or bookmark is left in the store.
#[test]
fn st24_a_start_whose_first_run_is_too_large_is_refused_and_leaves_nothing() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, LIMIT);
            let error = rt
                .start_by_name("BigStart", serde_json::json!({}), StartOptions::default())
                .await
                .unwrap_err();
            let StartError::StateTooLarge { size, limit, .. } = &error else {
                panic!("{label}: StateTooLarge expected, got {error:?}");
            };
            assert_eq!(*limit, LIMIT, "{label}");
            assert!(*size > LIMIT, "{label}: {size}");
            assert!(error.to_string().contains("too large"), "{label}: {error}");
            let left = store
                .list_instances(InstanceFilter::default())
                .await
                .unwrap();
            assert!(left.is_empty(), "{label}: {left:?}");
            let incidents = store.list_all_incidents(false, None, 0).await.unwrap();
            assert!(incidents.is_empty(), "{label}: {incidents:?}");
        });
    }
}

/// ST-24 at creation: an input larger than the limit is refused the same way, before any
/// run.
#[test]
fn st24_a_start_with_an_input_over_the_limit_is_refused() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, LIMIT);
            let input = serde_json::json!({ "notes": ["y".repeat(2 * LIMIT)] });
            let error = rt
                .start_by_name("Grower", input, StartOptions::default())
                .await
                .unwrap_err();
            assert!(
                matches!(error, StartError::StateTooLarge { limit: LIMIT, .. }),
                "{label}: {error:?}"
            );
            let left = store
                .list_instances(InstanceFilter::default())
                .await
                .unwrap();
            assert!(left.is_empty(), "{label}: {left:?}");
        });
    }
}

/// `head` -> starts a `Leaf` child (detached) -> `tail` -> `grow` (adds 24 KB to the data).
/// With a small step budget, its first run commits in slices (ENG-10), the child with the
/// first, before it grows too large.
const COMMITS_FIRST: &str = r#"{
  "name": "CommitsFirst",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "sub_workflow", "id": "child", "workflow": "Leaf", "mode": "detach",
        "input": "leaf_input" },
      { "kind": "task", "id": "tail", "function": "tail" },
      { "kind": "task", "id": "grow", "function": "grow" }
    ],
    "connections": [
      { "source": "head", "target": "child" },
      { "source": "child", "target": "tail" },
      { "source": "tail", "target": "grow" }
    ]
  }
}"#;

/// The child: one task.
const LEAF: &str = r#"{
  "name": "Leaf",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "tail",
    "nodes": [ { "kind": "task", "id": "tail", "function": "tail" } ],
    "connections": []
  }
}"#;

/// ST-24 for a start whose first run committed before it grew too large: what it committed
/// has been seen (its state, anything that commit wrote), so the start is not undone; the
/// instance stays, faulted from its last commit with a `state_too_large` incident, and the
/// caller is told so. (Before, the instance was deleted after its commits.)
#[test]
fn st24_a_start_that_committed_before_growing_too_large_stays_faulted() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone().with_max_state_bytes(LIMIT))
                .register_definition(Definition::from_json(COMMITS_FIRST).unwrap(), registry())
                .register_definition(Definition::from_json(LEAF).unwrap(), registry())
                .max_steps_per_run(2)
                .inbox_worker(false)
                .timer_driver(false)
                .recovery_sweep(None)
                .build()
                .unwrap();
            let options = StartOptions {
                instance_id: Some("early-1".to_owned()),
                ..StartOptions::default()
            };
            let error = rt
                .start_by_name("CommitsFirst", serde_json::json!({}), options)
                .await
                .unwrap_err();
            let StartError::Run(RunError::StateTooLarge {
                instance, limit, ..
            }) = &error
            else {
                panic!("{label}: a faulted instance expected, got {error:?}");
            };
            assert_eq!(instance, "early-1", "{label}");
            assert_eq!(*limit, LIMIT, "{label}");
            let snapshot = rt.get_state("early-1").await.unwrap();
            let snapshot = snapshot.unwrap_or_else(|| panic!("{label}: the instance was removed"));
            assert_eq!(snapshot.status(), WorkflowStatus::Faulted, "{label}");
            let notes = snapshot.data::<Notes>().unwrap().notes;
            assert!(notes.contains(&"head".to_owned()), "{label}: {notes:?}");
            assert!(notes.iter().all(|n| n.len() < LIMIT), "{label}: {notes:?}");
            let incidents = rt.incidents("early-1").await.unwrap().unwrap();
            assert_eq!(incidents.len(), 1, "{label}: {incidents:?}");
            assert_eq!(incidents[0].kind, IncidentKind::StateTooLarge, "{label}");
            // The child its first commit started is kept with it.
            let children = store
                .list_instances(InstanceFilter {
                    definition_name: Some("Leaf".to_owned()),
                    ..InstanceFilter::default()
                })
                .await
                .unwrap();
            assert_eq!(
                children.len(),
                1,
                "{label}: the child was removed: {children:?}"
            );
        });
    }
}

/// `head` -> waits for `grow` -> three `tail` tasks -> `grow` (adds 24 KB to the data). With
/// a small step budget, the run the event resumes commits a slice (consuming the event)
/// before it grows too large.
const LATE_GROWER: &str = r#"{
  "name": "LateGrower",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "event", "id": "wait", "event": "grow" },
      { "kind": "task", "id": "t1", "function": "tail" },
      { "kind": "task", "id": "t2", "function": "tail" },
      { "kind": "task", "id": "t3", "function": "tail" },
      { "kind": "task", "id": "grow", "function": "grow" }
    ],
    "connections": [
      { "source": "head", "target": "wait" },
      { "source": "wait", "target": "t1" },
      { "source": "t1", "target": "t2" },
      { "source": "t2", "target": "t3" },
      { "source": "t3", "target": "grow" }
    ]
  }
}"#;

/// ST-24, RT-19: a stimulus that an earlier commit of its run consumed is not dead-lettered
/// when the run then grows too large: replaying it would apply it twice. So whether the send
/// wrote a receipt (with an idempotency key) or not (without one, the send's own id), the
/// instance faults with an incident that names no stimulus, and no dead letter is left.
#[test]
fn st24_a_stimulus_consumed_before_its_run_grew_too_large_is_not_dead_lettered() {
    for (label, store, _dir) in stores() {
        for keyed in [false, true] {
            block_on(async {
                let rt = Runtime::builder()
                    .store(store.clone().with_max_state_bytes(LIMIT))
                    .register_definition(Definition::from_json(LATE_GROWER).unwrap(), registry())
                    .max_steps_per_run(2)
                    .inbox_worker(false)
                    .timer_driver(false)
                    .recovery_sweep(None)
                    .build()
                    .unwrap();
                let id = rt
                    .start_by_name("LateGrower", serde_json::json!({}), StartOptions::default())
                    .await
                    .unwrap()
                    .instance_id;
                let mut stimulus = Stimulus::new("grow").instance(&id);
                if keyed {
                    stimulus = stimulus.idempotency_key(format!("{id}/grow"));
                }
                let report = rt.send(stimulus).await.unwrap();
                assert!(report.rejected.is_empty(), "{label}, {keyed}: {report:?}");
                assert_eq!(report.resumed.len(), 1, "{label}, {keyed}: {report:?}");
                assert_eq!(
                    report.resumed[0].status,
                    WorkflowStatus::Faulted,
                    "{label}, {keyed}"
                );
                let notes = notes(&rt, &id).await;
                assert!(
                    notes.contains(&"tail".to_owned()),
                    "{label}, {keyed}: the slice before the growth was committed: {notes:?}"
                );
                let incidents = rt.incidents(&id).await.unwrap().unwrap();
                assert_eq!(incidents.len(), 1, "{label}, {keyed}: {incidents:?}");
                assert_eq!(incidents[0].kind, IncidentKind::StateTooLarge);
                assert_eq!(incidents[0].stimulus_id, None, "{label}, {keyed}");
                let letters = rt.dead_letters(DeadLetterFilter::default()).await.unwrap();
                let for_it: Vec<_> = letters
                    .iter()
                    .filter(|l| l.item.stimulus_id == report.stimulus_id)
                    .collect();
                assert!(for_it.is_empty(), "{label}, {keyed}: {for_it:?}");
            });
        }
    }
}
