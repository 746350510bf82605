//! Flowcharts end to end through the in-memory `Runtime`, which keeps every instance as JSON
//! between runs (each suspension is a persistence round trip): a JSON flowchart with a
//! decision, a WaitAny join over an event and a delay resumed by bookmark id
//! (FC-18), a loop whose run state survives many commits (FC-10, FC-16), and the
//! registration checks of the new value and items fns (ENG-47).

mod common;

use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::{Definition, Flowchart, ForEach, Task};
use workflow_runtime::{
    BuildError, Completion, JournalKind, Outcome, Registry, Runtime, Stimulus, SubStatus,
    TaskContext, WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Expense {
    amount: u64,
    log: Vec<String>,
    rounds: u32,
}

fn registry() -> Registry<Expense> {
    let mut registry = Registry::new();
    for name in ["auto_approve", "notify", "pay", "reject", "escalate"] {
        registry = registry.task(name, move |cx: &mut TaskContext<Expense>| {
            Box::pin(async move {
                cx.data_mut().log.push(name.to_owned());
                Ok(Outcome::done())
            })
        });
    }
    registry
        .task("review", |cx: &mut TaskContext<Expense>| {
            Box::pin(async move {
                cx.data_mut().rounds += 1;
                cx.data_mut().log.push("review".into());
                Ok(if cx.data().rounds < 3 {
                    Outcome::named("again")
                } else {
                    Outcome::named("approved")
                })
            })
        })
        .condition("small", |e: &Expense| e.amount < 100)
}

const EXPENSE: &str = r#"{
  "name": "Expense",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "nodes": [
      { "kind": "if", "id": "small", "condition": "small" },
      { "kind": "task", "id": "auto", "function": "auto_approve" },
      { "kind": "fork", "id": "split", "branches": ["wait", "timeout"] },
      { "kind": "event", "id": "manager", "event": "manager_approved" },
      { "kind": "delay", "id": "sla", "duration_ms": 86400000 },
      { "kind": "join", "id": "first", "mode": "any" },
      { "kind": "task", "id": "notify", "function": "notify" },
      { "kind": "task", "id": "pay", "function": "pay" }
    ],
    "connections": [
      { "source": "small", "port": "true", "target": "auto" },
      { "source": "small", "port": "false", "target": "split" },
      { "source": "split", "port": "wait", "target": "manager" },
      { "source": "split", "port": "timeout", "target": "sla" },
      { "source": "manager", "target": "first" },
      { "source": "sla", "target": "first" },
      { "source": "first", "target": "notify" },
      { "source": "auto", "target": "pay" },
      { "source": "notify", "target": "pay" }
    ]
  }
}"#;

fn runtime() -> Runtime {
    Runtime::builder()
        .register_json(EXPENSE, registry())
        .build()
        .unwrap()
}

fn expense(amount: u64) -> serde_json::Value {
    serde_json::to_value(Expense {
        amount,
        ..Expense::default()
    })
    .unwrap()
}

// FC-12, FC-13: a small expense takes the decision's `true` port; `pay` is an implicit join
// of `auto` and `notify` and runs once; the other branch is skipped.
#[test]
fn small_expense_is_auto_approved_and_paid_once() {
    block_on(async {
        let rt = runtime();
        let started = rt
            .start_by_name("Expense", expense(10), Default::default())
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        let data: Expense = snapshot.data().unwrap();
        assert_eq!(data.log, ["auto_approve", "pay"]);
        let skipped: Vec<&str> = snapshot
            .journal
            .iter()
            .filter(|e| e.kind == JournalKind::Skipped)
            .filter_map(|e| e.node_id.as_deref())
            .collect();
        assert_eq!(
            skipped,
            [
                "root:split",
                "root:manager",
                "root:sla",
                "root:first",
                "root:notify"
            ]
        );
    });
}

// Scenario 3 (FC-18, FC-23): the SLA delay, resumed by bookmark id (timers do not exist yet),
// wins the WaitAny join; in the same commit the manager's event bookmark is gone.
#[test]
fn delay_wins_the_wait_any_join_and_the_event_bookmark_is_gone() {
    block_on(async {
        let rt = runtime();
        let started = rt
            .start_by_name("Expense", expense(500), Default::default())
            .await
            .unwrap();
        assert_eq!(started.sub_status, Some(SubStatus::Waiting));
        let id = started.instance_id;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let names: Vec<&str> = snapshot
            .state
            .bookmarks()
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(names, ["manager_approved", "wf.delay"]);
        let delay = snapshot.state.bookmarks()[1].id.clone();
        let done = rt.resume_bookmark(&id, &delay, json!(null)).await.unwrap();
        assert_eq!(done.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert!(snapshot.state.bookmarks().is_empty());
        assert_eq!(snapshot.data::<Expense>().unwrap().log, ["notify", "pay"]);
        // The event can no longer be delivered: nothing waits for it.
        let report = rt
            .send(Stimulus::new("manager_approved").inbox(false))
            .await
            .unwrap();
        assert!(report.unmatched && report.resumed.is_empty());
    });
}

// Scenario 3 the other way: the manager's event arrives first; the delay is cancelled.
#[test]
fn event_wins_the_wait_any_join() {
    block_on(async {
        let rt = runtime();
        let id = rt
            .start_by_name("Expense", expense(500), Default::default())
            .await
            .unwrap()
            .instance_id;
        rt.send(Stimulus::new("manager_approved").payload(json!({"by": "ann"})))
            .await
            .unwrap();
        let completion = rt
            .await_completion(&id, Duration::from_secs(1))
            .await
            .unwrap();
        let Completion::Finished(output) = completion else {
            panic!("not finished: {completion:?}")
        };
        let data: Expense = serde_json::from_value(output).unwrap();
        assert_eq!(data.log, ["notify", "pay"]);
    });
}

// FC-15, FC-16 through the runtime: a review loop waits for an event on each round; its run
// state survives each commit (the runtime stores the instance as JSON between runs).
#[test]
fn a_loop_with_a_wait_resumes_across_commits() {
    let json = r#"{
      "name": "Review",
      "root": {
        "kind": "flowchart",
        "id": "root",
        "start": "submitted",
        "nodes": [
          { "kind": "event", "id": "submitted", "event": "submitted" },
          { "kind": "task", "id": "review", "function": "review", "ports": ["again", "approved"] },
          { "kind": "task", "id": "pay", "function": "pay" }
        ],
        "connections": [
          { "source": "submitted", "target": "review" },
          { "source": "review", "port": "again", "target": "submitted" },
          { "source": "review", "port": "approved", "target": "pay" }
        ]
      }
    }"#;
    block_on(async {
        let rt = Runtime::builder()
            .register_json(json, registry())
            .build()
            .unwrap();
        let id = rt
            .start_by_name("Review", expense(1), Default::default())
            .await
            .unwrap()
            .instance_id;
        for round in 1..=3 {
            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(
                snapshot.status(),
                WorkflowStatus::Suspended,
                "round {round}"
            );
            rt.send(Stimulus::new("submitted")).await.unwrap();
        }
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        assert_eq!(
            snapshot.data::<Expense>().unwrap().log,
            ["review", "review", "review", "pay"]
        );
    });
}

// ENG-47: an items or value fn missing from the registry fails the build, typed.
#[test]
fn missing_items_fn_fails_the_build() {
    let def = Definition::new(
        "Each",
        Flowchart {
            id: "root".into(),
            start: Vec::new(),
            nodes: vec![
                ForEach {
                    id: "each".into(),
                    items: "lines".into(),
                    body: Box::new(Task::new("pay", "pay").into()),
                }
                .into(),
            ],
            connections: Vec::new(),
        },
    );
    let err = Runtime::builder()
        .register_definition(def, registry())
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnknownFunction {
            workflow: "Each".into(),
            node: "root:each".into(),
            kind: "items fn",
            name: "lines".into(),
        }
    );
}
