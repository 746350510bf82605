//! Runtime API edges: caller-chosen ids and correlation (ENG-1, ENG-48), the step budget
//! through the runtime (ENG-10), bad stored data (ENG-43), JSON definitions (ENG-47).

mod common;

use common::{OrderFlow, block_on, order};
use serde_json::{Value, json};
use workflow_runtime::model::{Definition, State, StateMachine, Task, Transition};
use workflow_runtime::{
    BuildError, Outcome, Registry, Runtime, StartError, StartOptions, TaskContext, WorkflowStatus,
};

#[test]
fn eng48_caller_chosen_id_and_correlation_id_and_duplicate_start() {
    let rt = Runtime::builder().register::<OrderFlow>().build().unwrap();
    block_on(async {
        let options = StartOptions {
            instance_id: Some("order-o-9".into()),
            correlation_id: Some("customer-7".into()),
            traceparent: None,
        };
        let started = rt
            .start_with::<OrderFlow>(order("o-9", 1), options.clone())
            .await
            .unwrap();
        assert_eq!(started.instance_id, "order-o-9");
        let snapshot = rt.get_state("order-o-9").await.unwrap().unwrap();
        assert_eq!(snapshot.state.correlation_id(), Some("customer-7"));
        let err = rt
            .start_with::<OrderFlow>(order("o-9", 1), options)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            StartError::InstanceExists {
                instance: "order-o-9".into()
            }
        );
        assert!(rt.get_state("unknown").await.unwrap().is_none());
        // Input that does not fit the data type is refused before anything exists.
        let err = rt
            .start_by_name(
                "OrderFlow",
                json!({"total": "many"}),
                StartOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StartError::Input { path: Some(path), .. } if path == "total"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with("input does not fit the workflow data at `total`: invalid type"),
            "{text}"
        );
    });
}

#[test]
fn a_bad_instance_id_is_reported_as_a_bad_id() {
    let rt = Runtime::builder().register::<OrderFlow>().build().unwrap();
    block_on(async {
        for bad in ["has spaces".to_owned(), "x".repeat(129), String::new()] {
            let options = StartOptions {
                instance_id: Some(bad.clone()),
                ..StartOptions::default()
            };
            let err = rt
                .start_with::<OrderFlow>(order("o-1", 1), options)
                .await
                .unwrap_err();
            assert!(
                matches!(&err, StartError::InvalidInstanceId { id, .. } if *id == bad),
                "{err:?}"
            );
            assert!(
                err.to_string().starts_with("invalid instance id `"),
                "{err}"
            );
            assert!(rt.get_state(&bad).await.unwrap_or(None).is_none());
        }
    });
}

/// A machine looping automatically `n` times through a counting entry.
fn looping(limit: u64) -> (Definition, Registry<Value>) {
    let mut looping = State::new("Loop");
    looping.entry = Some(Task::new("tick", "tick").into());
    let mut again = Transition::new("Loop", "Loop");
    again.condition = Some("below".into());
    let def = Definition::new(
        "Looping",
        StateMachine {
            id: "root".into(),
            initial: "Loop".into(),
            states: vec![looping, State::new("Done")],
            transitions: vec![again, Transition::new("Loop", "Done")],
        },
    );
    let registry = Registry::<Value>::new()
        .task("tick", |cx: &mut TaskContext<Value>| {
            Box::pin(async move {
                let n = cx.data()["n"].as_u64().unwrap_or(0);
                cx.data_mut()["n"] = json!(n + 1);
                Ok(Outcome::done())
            })
        })
        .condition("below", move |d: &Value| {
            d["n"].as_u64().unwrap_or(0) < limit
        });
    (def, registry)
}

// ENG-10: a run stops at its step budget, commits with the queue intact, and the runtime
// continues it in further runs until it ends; the result is the same.
#[test]
fn eng10_step_budget_splits_runs_and_the_instance_still_finishes() {
    let (def, registry) = looping(50);
    let rt = Runtime::builder()
        .register_definition(def, registry)
        .max_steps_per_run(7)
        .build()
        .unwrap();
    block_on(async {
        let started = rt
            .start_by_name("Looping", json!({"n": 0}), StartOptions::default())
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.state.data()["n"], 50);
        assert_eq!(snapshot.current_state(), Some("Done"));
        assert!(snapshot.state.contexts().len() <= 1, "ENG-7");
    });
}

// ENG-47: a JSON definition that does not load, and an activity kind not run yet, are typed
// build errors, not panics at run time.
#[test]
fn eng47_bad_json_and_unsupported_kinds_fail_the_build() {
    let err = Runtime::builder()
        .register_json("{ not json", Registry::<Value>::new())
        .build()
        .unwrap_err();
    assert!(matches!(err, BuildError::Load { .. }), "{err}");
    let def = Definition::new(
        "Flow",
        workflow_runtime::model::Flowchart {
            id: "root".into(),
            ..Default::default()
        },
    );
    let err = Runtime::builder()
        .register_definition(def, Registry::<Value>::new())
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            BuildError::UnsupportedActivity {
                kind: "flowchart",
                ..
            } | BuildError::Invalid { .. }
        ),
        "{err}"
    );
}
