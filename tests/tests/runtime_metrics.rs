//! The runtime's own metrics (ENG-60) after a known workload on the manual clock: runs by the
//! status they left, task attempts, retries and failures, the attempts' durations, how late
//! timers fired, lease losses and the run path's commits, each moved by exactly what the
//! workload did, and written so in the Prometheus text format.

mod common;

use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    Outcome, Registry, Runtime, RuntimeMetrics, StartOptions, TaskContext, TaskError,
    WorkflowStatus,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Flaky {
    /// Attempts up to this number fail.
    fail_until: u32,
}

fn test_runtime() -> TestRuntime {
    let definition: Definition = serde_json::from_value(json!({
        "name": "Flaky",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "charge", "function": "charge",
              "retry": { "max_attempts": 3, "initial_delay_ms": 1000, "jitter": 0.0 } }
        ] }
    }))
    .unwrap();
    let registry = Registry::new().task("charge", |cx: &mut TaskContext<Flaky>| {
        Box::pin(async move {
            if cx.attempt() <= cx.data().fail_until {
                return Err(TaskError::new("gateway down"));
            }
            Ok(Outcome::done())
        })
    });
    TestRuntime::build(Runtime::builder().register_definition(definition, registry)).unwrap()
}

async fn start(test: &TestRuntime, fail_until: u32) -> String {
    test.start_by_name(
        "Flaky",
        json!({ "fail_until": fail_until }),
        StartOptions::default(),
    )
    .await
    .unwrap()
    .instance_id
}

fn commits(metrics: &RuntimeMetrics) -> u64 {
    let (_, commits) = metrics
        .store_calls
        .iter()
        .find(|(call, _)| *call == "commit")
        .expect("commits are timed");
    commits.count
}

// One instance succeeds at once, one after a retry whose timer fires 5 s late, one fails its
// three attempts and faults.
#[test]
fn a_known_workload_moves_every_counter_by_exactly_what_it_did() {
    block_on(async {
        let test = test_runtime();
        let before = test.runtime().metrics();
        let flaky = before
            .definition("Flaky")
            .expect("registered definitions are listed");
        assert_eq!(flaky.task_attempts, 0);
        assert_eq!(commits(&before), 0);

        let at_once = start(&test, 0).await;
        let retried = start(&test, 1).await;
        let faulted = start(&test, 99).await;

        // The retried instance's timer, fired 5 s after its due time.
        let timers = test.store().list_timers(&retried).await.unwrap();
        let due = timers.iter().find(|t| t.kind == "retry").unwrap().due_at;
        let faulted_due = test.store().list_timers(&faulted).await.unwrap()[0].due_at;
        assert_eq!(due, faulted_due, "both retry 1 s after their start");
        test.clock().set(due + 5_000_000).unwrap();
        let fired = test.runtime().fire_due_timers().await.unwrap();
        assert_eq!(fired.fired.len(), 2, "{fired:?}");
        // The faulted instance's second retry, fired on time.
        test.advance(Duration::from_secs(10)).await.unwrap();

        for (id, status) in [
            (&at_once, WorkflowStatus::Finished),
            (&retried, WorkflowStatus::Finished),
            (&faulted, WorkflowStatus::Faulted),
        ] {
            let state = test.get_state(id).await.unwrap().unwrap();
            assert_eq!(state.status(), status, "{id}");
        }

        let after = test.runtime().metrics();
        let flaky = after.definition("Flaky").unwrap();
        // Runs: the three first runs, two leaving a retry's wait; two timer runs of the
        // faulted instance (one more wait, then the fault) and one of the retried instance.
        assert_eq!(flaky.transitions_to(WorkflowStatus::Suspended), 3);
        assert_eq!(flaky.transitions_to(WorkflowStatus::Finished), 2);
        assert_eq!(flaky.transitions_to(WorkflowStatus::Faulted), 1);
        assert_eq!(flaky.transitions_to(WorkflowStatus::Running), 0);
        assert_eq!(flaky.transitions_to(WorkflowStatus::Cancelled), 0);
        // Attempts: 1 + 2 + 3; retries: 0 + 1 + 2; one failure for good.
        assert_eq!(flaky.task_attempts, 6);
        assert_eq!(flaky.task_retries, 3);
        assert_eq!(flaky.task_failures, 1);
        assert_eq!(flaky.task_durations.count, 6);
        // Three timers fired: two 5 s late, one on time.
        assert_eq!(after.timer_lateness.count, 3);
        assert_eq!(after.timer_lateness.sum, Duration::from_secs(10));
        let on_time = after.timer_lateness.buckets[0].1;
        assert_eq!(on_time, 1, "{:?}", after.timer_lateness);
        assert_eq!(after.lease_losses, 0);
        // Each run ended in one commit through the run path.
        assert_eq!(commits(&after), 6);

        let text = after.to_prometheus();
        for line in [
            "workflow_transitions_total{definition=\"Flaky\",outcome=\"suspended\"} 3",
            "workflow_transitions_total{definition=\"Flaky\",outcome=\"finished\"} 2",
            "workflow_transitions_total{definition=\"Flaky\",outcome=\"faulted\"} 1",
            "workflow_task_attempts_total{definition=\"Flaky\"} 6",
            "workflow_task_retries_total{definition=\"Flaky\"} 3",
            "workflow_task_failures_total{definition=\"Flaky\"} 1",
            "workflow_task_duration_seconds_count{definition=\"Flaky\"} 6",
            "workflow_timer_lateness_seconds_bucket{le=\"5\"} 3",
            "workflow_timer_lateness_seconds_sum 10",
            "workflow_lease_losses_total 0",
            "workflow_store_call_seconds_count{call=\"commit\"} 6",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in:\n{text}"
            );
        }
        // No instance id in any series: cardinality is bounded by the definitions.
        for id in [&at_once, &retried, &faulted] {
            assert!(!text.contains(id.as_str()));
        }
    });
}
