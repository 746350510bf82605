//! Retries and incidents (FLT-1 to FLT-8) on the manual clock: the durable wait
//! between attempts (FLT-3) within FLT-2's bounds, no data from failed attempts (FLT-4),
//! faulting after the last attempt with an incident naming the node, the error and the
//! attempts (FLT-5, FLT-6), the operator's retry (FLT-8), permanent errors and `retry_on`
//! (FLT-1).

mod common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    Outcome, Registry, RetryError, Runtime, StartOptions, SubStatus, TaskContext, TaskError,
    WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Flaky {
    /// Attempts up to this number fail.
    fail_until: u32,
    /// Fail with a permanent error instead.
    permanent: bool,
    /// The error's code.
    code: Option<String>,
    /// Appended by every attempt, kept only by the successful one (FLT-4).
    log: Vec<String>,
}

/// Instances whose task has been "repaired" by the operator.
static HEALED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn healed(id: &str) -> bool {
    HEALED
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|s| s.contains(id))
}

fn heal(id: &str) {
    HEALED
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(id.to_owned());
}

fn definition(retry: serde_json::Value) -> Definition {
    serde_json::from_value(json!({
        "name": "Flaky",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "charge", "function": "charge", "retry": retry }
        ] }
    }))
    .unwrap()
}

fn registry() -> Registry<Flaky> {
    Registry::new().task("charge", |cx: &mut TaskContext<Flaky>| {
        Box::pin(async move {
            let attempt = cx.attempt();
            cx.data_mut().log.push(format!("attempt {attempt}"));
            let data = cx.data().clone();
            if attempt <= data.fail_until && !healed(cx.instance_id()) {
                let error = if data.permanent {
                    TaskError::permanent("card declined")
                } else {
                    TaskError::new(format!("gateway down (attempt {attempt})"))
                };
                return Err(match data.code {
                    Some(code) => error.with_code(code),
                    None => error,
                });
            }
            Ok(Outcome::done())
        })
    })
}

fn test_runtime(retry: serde_json::Value) -> TestRuntime {
    TestRuntime::build(Runtime::builder().register_definition(definition(retry), registry()))
        .unwrap()
}

async fn start(test: &TestRuntime, data: Flaky) -> String {
    test.start_by_name(
        "Flaky",
        serde_json::to_value(data).unwrap(),
        StartOptions::default(),
    )
    .await
    .unwrap()
    .instance_id
}

async fn retry_due(test: &TestRuntime, id: &str) -> Option<i64> {
    let timers = test.store().list_timers(id).await.unwrap();
    timers.iter().find(|t| t.kind == "retry").map(|t| t.due_at)
}

// Scenario 3 (FLT-2, FLT-3, FLT-4): two retryable failures, then success. Each wait is a
// `wf.retry` bookmark with its timer, within FLT-2's bounds; the instance is
// `Suspended/Waiting` meanwhile; only the successful attempt's data remains.
#[test]
fn two_failures_then_success_wait_durably_within_the_bounds() {
    block_on(async {
        let test = test_runtime(json!({
            "max_attempts": 3, "initial_delay_ms": 1000, "multiplier": 2, "jitter": 0.2
        }));
        let id = start(
            &test,
            Flaky {
                fail_until: 2,
                ..Flaky::default()
            },
        )
        .await;
        let waiting = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(waiting.status(), WorkflowStatus::Suspended);
        assert_eq!(waiting.state.sub_status(), Some(SubStatus::Waiting));
        assert_eq!(waiting.state.bookmarks()[0].name, "wf.retry");
        assert_eq!(waiting.state.bookmarks()[0].payload["attempt"], 2);
        let wait = retry_due(&test, &id).await.unwrap() - test.now();
        assert!((800_000..=1_000_000).contains(&wait), "{wait} µs");
        assert!(waiting.data::<Flaky>().unwrap().log.is_empty());

        test.advance(Duration::from_micros(u64::try_from(wait).unwrap()))
            .await
            .unwrap();
        let wait = retry_due(&test, &id).await.unwrap() - test.now();
        assert!((1_600_000..=2_000_000).contains(&wait), "{wait} µs");
        test.advance(Duration::from_secs(2)).await.unwrap();

        let done = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(done.status(), WorkflowStatus::Finished);
        assert_eq!(done.data::<Flaky>().unwrap().log, ["attempt 3"]);
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
        assert!(test.incidents(&id).await.unwrap().unwrap().is_empty());
    });
}

// Scenario 3 (FLT-5, FLT-6, FLT-8): three failures fault the instance with an incident naming
// the node, the error and the 3 attempts; the operator's retry runs it again with a fresh
// budget and resolves the incident as `retried`.
#[test]
fn the_last_failure_faults_with_an_incident_and_the_operator_retries() {
    block_on(async {
        let test = test_runtime(json!({ "max_attempts": 3, "initial_delay_ms": 10 }));
        let id = start(
            &test,
            Flaky {
                fail_until: 99,
                ..Flaky::default()
            },
        )
        .await;
        test.advance(Duration::from_secs(1)).await.unwrap();
        let faulted = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(faulted.status(), WorkflowStatus::Faulted);
        let incidents = test.incidents(&id).await.unwrap().unwrap();
        let [incident] = incidents.as_slice() else {
            panic!("{incidents:?}")
        };
        assert_eq!(incident.node_id, "root:charge");
        assert_eq!(incident.fault.message, "gateway down (attempt 3)");
        assert_eq!(incident.fault.attempt, 3);
        assert!(incident.resolution.is_none());
        // FLT-6, ST-12: the faulting commit wrote the store's incident table too, so the
        // incidents of all instances can be listed.
        let store = test.runtime().store();
        let open = store.list_all_incidents(true, None, 0).await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].incident_id, incident.id);
        assert_eq!(open[0].instance_id, id);
        let context = faulted.state.context(incident.context_id).unwrap();
        let attempts = context.properties["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 3);
        assert_eq!(attempts[0]["error"], "gateway down (attempt 1)");

        heal(&id);
        let retried = test.retry(&id).await.unwrap();
        assert_eq!(
            retried.applied().map(|s| s.status),
            Some(WorkflowStatus::Finished)
        );
        let incidents = test.incidents(&id).await.unwrap().unwrap();
        assert_eq!(incidents[0].resolution.as_deref(), Some("retried"));
        let store = test.runtime().store();
        assert!(
            store
                .list_all_incidents(true, None, 0)
                .await
                .unwrap()
                .is_empty()
        );
        let all = store.list_all_incidents(false, None, 0).await.unwrap();
        assert_eq!(all[0].resolution.as_deref(), Some("retried"));
        let done = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(done.data::<Flaky>().unwrap().log, ["attempt 1"]);
        assert!(matches!(
            test.retry(&id).await,
            Err(RetryError::NotFaulted { .. })
        ));
    });
}

// FLT-1, FLT-5: a permanent error ends the attempts at once.
#[test]
fn a_permanent_error_is_not_retried() {
    block_on(async {
        let test = test_runtime(json!({ "max_attempts": 5 }));
        let id = start(
            &test,
            Flaky {
                fail_until: 99,
                permanent: true,
                ..Flaky::default()
            },
        )
        .await;
        let faulted = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(faulted.status(), WorkflowStatus::Faulted);
        assert_eq!(faulted.state.incidents()[0].fault.attempt, 1);
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
    });
}

// FLT-2 `retry_on`: only the listed error codes are retried.
#[test]
fn retry_on_retries_only_the_listed_codes() {
    block_on(async {
        let test = test_runtime(json!({ "max_attempts": 3, "retry_on": ["timeout"] }));
        let other = start(
            &test,
            Flaky {
                fail_until: 1,
                code: Some("declined".to_owned()),
                ..Flaky::default()
            },
        )
        .await;
        let listed = start(
            &test,
            Flaky {
                fail_until: 1,
                code: Some("timeout".to_owned()),
                ..Flaky::default()
            },
        )
        .await;
        assert_eq!(
            test.get_state(&other).await.unwrap().unwrap().status(),
            WorkflowStatus::Faulted
        );
        test.advance(Duration::from_secs(2)).await.unwrap();
        assert_eq!(
            test.get_state(&listed).await.unwrap().unwrap().status(),
            WorkflowStatus::Finished
        );
    });
}

// TM-10, FLT-7: the faulting commit parks the instance's timers; nothing fires while it is
// `Faulted`; the operator's retry unparks them and the one that fell due fires at once.
#[test]
fn a_faulted_instance_parks_its_timers_until_the_retry() {
    block_on(async {
        let definition: Definition = serde_json::from_value(json!({
            "name": "Parked",
            "root": { "kind": "parallel", "id": "root", "branches": [
                { "kind": "delay", "id": "wait", "duration_ms": 3_600_000 },
                { "kind": "task", "id": "charge", "function": "charge" }
            ] }
        }))
        .unwrap();
        let test =
            TestRuntime::build(Runtime::builder().register_definition(definition, registry()))
                .unwrap();
        let data = Flaky {
            fail_until: 99,
            ..Flaky::default()
        };
        let id = test
            .start_by_name(
                "Parked",
                serde_json::to_value(data).unwrap(),
                StartOptions::default(),
            )
            .await
            .unwrap()
            .instance_id;
        let faulted = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(faulted.status(), WorkflowStatus::Faulted);
        let timers = test.store().list_timers(&id).await.unwrap();
        assert_eq!(timers.len(), 1);
        assert!(timers[0].parked);
        let fired = test.advance(Duration::from_secs(2 * 3600)).await.unwrap();
        assert!(fired.fired.is_empty());

        heal(&id);
        test.retry(&id).await.unwrap();
        assert!(!test.store().list_timers(&id).await.unwrap()[0].parked);
        let fired = test.advance(Duration::ZERO).await.unwrap();
        assert_eq!(fired.fired.len(), 1);
        let done = test.get_state(&id).await.unwrap().unwrap();
        assert_eq!(done.status(), WorkflowStatus::Finished);
    });
}
