//! Compensation (FLT-10 to FLT-12): a saga `a`, `b`, `c` where `c` fails
//! permanently compensates `c`, `b`, `a`, newest first (FLT-11); with `continue` the scope
//! takes `compensated` and the instance finishes, with `fault` the instance faults with an
//! incident listing the compensations (FLT-12); a failing compensation faults naming it and
//! the original failure (FLT-13); outside a failure nothing is compensated.

mod common;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::{
    Outcome, Registry, Runtime, StartOptions, TaskContext, TaskError, WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Trip {
    fail_c: bool,
    fail_undo_b: bool,
    panic_undo_b: bool,
    log: Vec<String>,
}

fn definition(on_failure: &str) -> Definition {
    let task = |id: &str| json!({ "kind": "task", "id": id, "function": id, "compensation": format!("undo_{id}") });
    serde_json::from_value(json!({
        "name": "Trip",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "saga", "id": "booking", "on_failure": on_failure, "body":
                { "kind": "sequence", "id": "steps", "steps": [ task("a"), task("b"), task("c") ] } },
            { "kind": "task", "id": "after", "function": "after" }
        ] }
    }))
    .unwrap()
}

fn step(
    name: &'static str,
) -> impl Fn(&mut TaskContext<Trip>) -> workflow_runtime::BoxFuture<'_, workflow_runtime::TaskResult>
+ Send
+ Sync
+ 'static {
    move |cx: &mut TaskContext<Trip>| {
        Box::pin(async move {
            let fail = match name {
                "c" => cx.data().fail_c,
                "undo_b" => cx.data().fail_undo_b,
                _ => false,
            };
            if name == "undo_b" && cx.data().panic_undo_b {
                panic!("undo_b exploded");
            }
            if fail {
                cx.data_mut().log.push(format!("{name} (failed attempt)"));
                return Err(TaskError::permanent(format!("{name} failed")));
            }
            cx.data_mut().log.push(name.to_owned());
            Ok(Outcome::done())
        })
    }
}

fn registry() -> Registry<Trip> {
    ["a", "b", "c", "undo_a", "undo_b", "undo_c", "after"]
        .into_iter()
        .fold(Registry::new(), |r, name| r.task(name, step(name)))
}

async fn run(on_failure: &str, trip: Trip) -> (Runtime, String) {
    let rt = Runtime::builder()
        .register_definition(definition(on_failure), registry())
        .build()
        .unwrap();
    let id = rt
        .start_by_name(
            "Trip",
            serde_json::to_value(trip).unwrap(),
            StartOptions::default(),
        )
        .await
        .unwrap()
        .instance_id;
    (rt, id)
}

// Scenario 4 with `continue`: compensations `c`, `b`, `a`, then the flow goes on.
#[test]
fn a_continue_saga_compensates_newest_first_and_finishes() {
    block_on(async {
        let trip = Trip {
            fail_c: true,
            ..Trip::default()
        };
        let (rt, id) = run("compensate_then_continue", trip).await;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(
            snapshot.status(),
            WorkflowStatus::Finished,
            "{:?}",
            snapshot.state.incidents()
        );
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            ["a", "b", "undo_c", "undo_b", "undo_a", "after"]
        );
        assert!(snapshot.state.incidents().is_empty());
    });
}

// Scenario 4 with `fault`: the instance faults and the incident lists `c`, `b`, `a`.
#[test]
fn a_fault_saga_compensates_then_faults_listing_the_compensations() {
    block_on(async {
        let trip = Trip {
            fail_c: true,
            ..Trip::default()
        };
        let (rt, id) = run("compensate_then_fault", trip).await;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            ["a", "b", "undo_c", "undo_b", "undo_a"]
        );
        let incident = &snapshot.state.incidents()[0];
        assert_eq!(incident.node_id, "root:booking:steps:c");
        assert_eq!(incident.fault.message, "c failed (compensated: c, b, a)");
        // FLT-8: the operator's retry restarts the compensated scope from its beginning; `c`
        // still fails, so the scope compensates again and the instance faults again.
        let retried = rt.retry(&id).await.unwrap();
        assert_eq!(
            retried.applied().map(|s| s.status),
            Some(WorkflowStatus::Faulted)
        );
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            [
                "a", "b", "undo_c", "undo_b", "undo_a", "a", "b", "undo_c", "undo_b", "undo_a"
            ]
        );
    });
}

// FLT-13: a compensation that fails faults the instance naming it and the original failure;
// the rest of the list does not run.
#[test]
fn a_failing_compensation_faults_naming_it() {
    block_on(async {
        let trip = Trip {
            fail_c: true,
            fail_undo_b: true,
            ..Trip::default()
        };
        let (rt, id) = run("compensate_then_continue", trip).await;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
        let message = &snapshot.state.incidents()[0].fault.message;
        assert!(
            message.starts_with("compensation_failed: compensation `undo_b` of `b` failed"),
            "{message}"
        );
        assert!(message.contains("original failure: c failed"), "{message}");
        assert!(
            !snapshot
                .data::<Trip>()
                .unwrap()
                .log
                .contains(&"undo_a".to_owned())
        );
        // Resuming the compensation list (FLT-13) is not implemented: the retry is refused.
        assert!(matches!(
            rt.retry(&id).await,
            Err(workflow_runtime::RetryError::CompensatedFailure { .. })
        ));
    });
}

// FLT-13, ENG-17: a compensation that panics is caught by the panic guard tasks have; the
// instance faults with an incident naming it, and the runtime goes on.
#[test]
fn a_panicking_compensation_faults_naming_it() {
    block_on(async {
        let trip = Trip {
            fail_c: true,
            panic_undo_b: true,
            ..Trip::default()
        };
        let (rt, id) = run("compensate_then_continue", trip).await;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
        let incident = &snapshot.state.incidents()[0];
        let message = &incident.fault.message;
        assert!(
            message.starts_with("compensation_failed: compensation `undo_b` of `b` failed"),
            "{message}"
        );
        assert!(message.contains("panicked: undo_b exploded"), "{message}");
        assert!(message.contains("original failure: c failed"), "{message}");
        assert_eq!(
            incident.fault.kind,
            workflow_runtime::instance::FaultKind::Panicked
        );
    });
}

// Without a failure nothing is compensated.
#[test]
fn a_saga_without_failure_compensates_nothing() {
    block_on(async {
        let (rt, id) = run("compensate_then_fault", Trip::default()).await;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            ["a", "b", "c", "after"]
        );
    });
}

// ---- the macro form in a flowchart: `booking.compensated -> sorry` (FLT-12) ---------------

use workflow_runtime::workflow;

async fn reserve(ctx: &mut TaskContext<Trip>) {
    ctx.data_mut().log.push("reserve".to_owned());
}
async fn release(ctx: &mut TaskContext<Trip>) {
    ctx.data_mut().log.push("release".to_owned());
}
async fn charge(ctx: &mut TaskContext<Trip>) -> Result<(), TaskError> {
    if ctx.data().fail_c {
        return Err(TaskError::permanent("card declined"));
    }
    ctx.data_mut().log.push("charge".to_owned());
    Ok(())
}
async fn refund(ctx: &mut TaskContext<Trip>) {
    ctx.data_mut().log.push("refund".to_owned());
}
async fn ship(ctx: &mut TaskContext<Trip>) {
    ctx.data_mut().log.push("ship".to_owned());
}
async fn apologize(ctx: &mut TaskContext<Trip>) {
    ctx.data_mut().log.push("apologize".to_owned());
}

workflow! {
    /// A checkout whose booking is a saga scope that continues through `compensated`.
    pub workflow Checkout(Trip) {
        booking = saga(continue) [
            task(reserve).compensate(release),
            task(charge).compensate(refund),
        ];
        send  = task(ship);
        sorry = task(apologize);

        start -> booking -> send;
        booking.compensated -> sorry;
    }
}

#[test]
fn a_macro_saga_in_a_flowchart_routes_compensated() {
    block_on(async {
        let rt = Runtime::builder().register::<Checkout>().build().unwrap();
        let failed = rt
            .start::<Checkout>(Trip {
                fail_c: true,
                ..Trip::default()
            })
            .await
            .unwrap();
        assert_eq!(failed.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&failed.instance_id).await.unwrap().unwrap();
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            ["reserve", "refund", "release", "apologize"]
        );
        let fine = rt.start::<Checkout>(Trip::default()).await.unwrap();
        let snapshot = rt.get_state(&fine.instance_id).await.unwrap().unwrap();
        assert_eq!(
            snapshot.data::<Trip>().unwrap().log,
            ["reserve", "charge", "ship"]
        );
    });
}
