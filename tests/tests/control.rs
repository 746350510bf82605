//! Operator control (ENG-50, FLT-8, FLT-15, TM-10): suspend, resume, cancel and retry, applied
//! by the runtime that runs the instance, or requested durably by another runtime on the same
//! store (or one without the application's code) and honoured by the owner at the instance's
//! next step, never refused because the instance is busy.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use workflow_runtime::store::{MemoryStore, Store};
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    CancelError, Completion, Control, ControlError, RetryError, Runtime, Stimulus, SubStatus,
    TaskContext, TaskError, WorkflowStatus, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Steps {
    /// The gate `first` waits at, when set (see [`gate`]).
    gate: String,
    /// `first` waits for its cancellation token instead of a gate.
    until_cancelled: bool,
    /// `flaky` fails while this is in [`BROKEN`].
    job: String,
    log: Vec<String>,
}

/// Gates the tests open by name: `first` announces it entered, then waits to be let go.
#[derive(Default)]
struct Gate {
    entered: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

fn gate(name: &str) -> Arc<Gate> {
    static GATES: OnceLock<Mutex<HashMap<String, Arc<Gate>>>> = OnceLock::new();
    let mut gates = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    gates.entry(name.to_owned()).or_default().clone()
}

static BROKEN: OnceLock<Mutex<Vec<String>>> = OnceLock::new();

fn broken() -> std::sync::MutexGuard<'static, Vec<String>> {
    BROKEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn first(ctx: &mut TaskContext<Steps>) {
    if ctx.data().until_cancelled {
        ctx.cancelled().await;
        return;
    }
    let name = ctx.data().gate.clone();
    if !name.is_empty() {
        let gate = gate(&name);
        let open = gate.open.notified();
        gate.entered.notify_one();
        open.await;
    }
    ctx.data_mut().log.push("first".to_owned());
}

async fn second(ctx: &mut TaskContext<Steps>) {
    ctx.data_mut().log.push("second".to_owned());
}

async fn flaky(ctx: &mut TaskContext<Steps>) -> Result<(), TaskError> {
    if broken().contains(&ctx.data().job) {
        return Err(TaskError::permanent("the gateway is down"));
    }
    ctx.data_mut().log.push("flaky".to_owned());
    Ok(())
}

workflow! {
    /// Two tasks, then an event.
    pub workflow TwoSteps(Steps) = sequence [
        task(first),
        task(second),
        paid = event("paid"),
        again = task(second),
    ];
}

workflow! {
    /// A task, a one-hour delay, a task.
    pub workflow Later(Steps) = sequence [
        task(first),
        wait = after(hours(1)),
        task(second),
    ];
}

workflow! {
    /// A task that fails while its job is broken.
    pub workflow Flaky(Steps) = sequence [task(flaky)];
}

fn steps() -> Steps {
    Steps::default()
}

async fn log_of(rt: &Runtime, id: &str) -> Vec<String> {
    rt.get_state(id)
        .await
        .unwrap()
        .unwrap()
        .data::<Steps>()
        .unwrap()
        .log
}

async fn status_of(rt: &Runtime, id: &str) -> (WorkflowStatus, Option<SubStatus>) {
    let snapshot = rt.get_state(id).await.unwrap().unwrap();
    (snapshot.status(), snapshot.sub_status())
}

/// Polls until the instance has this status, at most 5 s.
async fn until_status(rt: &Runtime, id: &str, want: (WorkflowStatus, Option<SubStatus>)) {
    for _ in 0..500 {
        if status_of(rt, id).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "`{id}` never became {want:?}: it is {:?}",
        status_of(rt, id).await
    );
}

const PAUSED: (WorkflowStatus, Option<SubStatus>) =
    (WorkflowStatus::Suspended, Some(SubStatus::Paused));

// ENG-50: a paused instance does not run; an event sent to it is held, not delivered and not
// dropped; the resume continues where it was and the held event is delivered.
#[test]
fn a_paused_instance_holds_its_events_until_it_is_resumed() {
    block_on(async {
        let rt = Runtime::builder().register::<TwoSteps>().build().unwrap();
        let id = rt.start::<TwoSteps>(steps()).await.unwrap().instance_id;
        assert_eq!(
            status_of(&rt, &id).await,
            (WorkflowStatus::Suspended, Some(SubStatus::Waiting))
        );

        let paused = rt.suspend(&id).await.unwrap();
        assert_eq!(
            paused.applied().and_then(|s| s.sub_status),
            Some(SubStatus::Paused)
        );
        assert_eq!(status_of(&rt, &id).await, PAUSED);
        // Suspending it again changes nothing.
        assert_eq!(
            rt.suspend(&id)
                .await
                .unwrap()
                .applied()
                .map(|s| s.sub_status),
            Some(Some(SubStatus::Paused))
        );

        let report = rt.send(Stimulus::new("paid")).await.unwrap();
        assert!(report.resumed.is_empty(), "{report:?}");
        assert_eq!(report.deferred, std::slice::from_ref(&id));
        assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "held while paused");
        assert_eq!(log_of(&rt, &id).await, ["first", "second"]);
        assert_eq!(status_of(&rt, &id).await, PAUSED);

        let resumed = rt.resume(&id).await.unwrap();
        assert_eq!(
            resumed.applied().map(|s| (s.status, s.sub_status)),
            Some((WorkflowStatus::Suspended, Some(SubStatus::Waiting)))
        );
        assert_eq!(rt.deliver_inbox().await.unwrap(), 1);
        assert_eq!(log_of(&rt, &id).await, ["first", "second", "second"]);
        assert_eq!(status_of(&rt, &id).await.0, WorkflowStatus::Finished);

        let journal = rt.get_state(&id).await.unwrap().unwrap().journal;
        let changes: Vec<String> = journal
            .iter()
            .filter(|e| e.detail.get("to").is_some())
            .map(|e| e.detail["to"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert!(
            changes
                .windows(2)
                .any(|w| w == ["Suspended/Paused", "Suspended/Waiting"]),
            "{changes:?}"
        );
    });
}

// ENG-50's refusals: typed, and nothing changes.
#[test]
fn suspend_and_resume_refuse_what_they_cannot_do() {
    block_on(async {
        let rt = Runtime::builder()
            .register::<TwoSteps>()
            .register::<Flaky>()
            .build()
            .unwrap();
        let id = rt.start::<TwoSteps>(steps()).await.unwrap().instance_id;
        assert!(matches!(
            rt.resume(&id).await,
            Err(ControlError::NotResumable {
                status: WorkflowStatus::Suspended,
                sub_status: Some(SubStatus::Waiting),
                ..
            })
        ));
        rt.cancel(&id, None).await.unwrap();
        assert!(matches!(
            rt.suspend(&id).await,
            Err(ControlError::AlreadyTerminal {
                status: WorkflowStatus::Cancelled,
                ..
            })
        ));
        assert!(matches!(
            rt.suspend("nope").await,
            Err(ControlError::InstanceNotFound { .. })
        ));

        broken().push("refusals".to_owned());
        let job = Steps {
            job: "refusals".to_owned(),
            ..steps()
        };
        let faulted = rt.start::<Flaky>(job).await.unwrap();
        assert_eq!(faulted.status, WorkflowStatus::Faulted);
        let refused = rt.suspend(&faulted.instance_id).await.unwrap_err();
        assert!(matches!(refused, ControlError::NotSuspendable { .. }));
        assert!(
            refused.to_string().contains("retry it or cancel it"),
            "{refused}"
        );
    });
}

// TM-10: pausing parks the timers; one that falls due while paused fires at the resume.
#[test]
fn a_timer_due_while_paused_fires_at_the_resume() {
    block_on(async {
        let test = TestRuntime::build(Runtime::builder().register::<Later>()).unwrap();
        let id = test.start::<Later>(steps()).await.unwrap().instance_id;
        test.suspend(&id).await.unwrap();
        let timers = test.store().list_timers(&id).await.unwrap();
        assert!(timers.iter().all(|t| t.parked), "{timers:?}");

        let fired = test.advance(Duration::from_secs(2 * 3600)).await.unwrap();
        assert!(fired.fired.is_empty(), "parked: {fired:?}");
        assert_eq!(log_of(&test, &id).await, ["first"]);

        test.resume(&id).await.unwrap();
        let fired = test.advance(Duration::ZERO).await.unwrap();
        assert_eq!(fired.fired.len(), 1, "{fired:?}");
        assert_eq!(log_of(&test, &id).await, ["first", "second"]);
        assert_eq!(status_of(&test, &id).await.0, WorkflowStatus::Finished);
    });
}

// ENG-50: a suspend while a task runs lets the task finish its attempt (no token fires), and
// the run stops at the next item boundary, before the next task.
#[test]
fn a_suspend_while_a_task_runs_stops_the_run_after_that_task() {
    block_on(async {
        let rt = Runtime::builder().register::<TwoSteps>().build().unwrap();
        let gate = gate("in-process");
        let entered = gate.entered.notified();
        let job = Steps {
            gate: "in-process".to_owned(),
            ..steps()
        };
        let running = {
            let rt = rt.clone();
            tokio::spawn(async move { rt.start::<TwoSteps>(job).await })
        };
        entered.await;
        let id = rt
            .list_instances(Default::default())
            .await
            .unwrap()
            .remove(0)
            .instance_id;
        let suspending = {
            let rt = rt.clone();
            let id = id.clone();
            tokio::spawn(async move { rt.suspend(&id).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.open.notify_one();

        let started = running.await.unwrap().unwrap();
        assert_eq!(started.sub_status, Some(SubStatus::Paused));
        let paused = suspending.await.unwrap().unwrap();
        assert_eq!(
            paused.applied().and_then(|s| s.sub_status),
            Some(SubStatus::Paused)
        );
        assert_eq!(log_of(&rt, &id).await, ["first"], "second did not run");

        rt.resume(&id).await.unwrap();
        assert_eq!(log_of(&rt, &id).await, ["first", "second"]);
        assert_eq!(
            status_of(&rt, &id).await,
            (WorkflowStatus::Suspended, Some(SubStatus::Waiting))
        );
    });
}

/// Two runtimes of two processes on one store (each its own lease owner).
fn two_runtimes() -> (Runtime, Runtime) {
    let store = Arc::new(MemoryStore::new());
    let build = |owner: &str| {
        Runtime::builder()
            .store(store.clone())
            .owner(owner)
            .register::<TwoSteps>()
            .register::<Flaky>()
            .cancel_grace(Duration::from_millis(100))
            .build()
            .unwrap()
    };
    (build("process-a"), build("process-b"))
}

// FLT-15: a cancel from another runtime while a task runs is recorded, not refused as
// locked; the owner fires the task's token and cancels the instance.
#[test]
fn a_cancel_from_another_runtime_reaches_the_running_task() {
    block_on(async {
        let (owner, other) = two_runtimes();
        let job = Steps {
            until_cancelled: true,
            ..steps()
        };
        let running = {
            let owner = owner.clone();
            tokio::spawn(async move { owner.start::<TwoSteps>(job).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let id = other
            .list_instances(Default::default())
            .await
            .unwrap()
            .remove(0)
            .instance_id;

        let control = other
            .cancel(&id, Some("changed my mind".to_owned()))
            .await
            .unwrap();
        assert_eq!(control, Control::Requested);
        let started = running.await.unwrap().unwrap();
        assert_eq!(started.status, WorkflowStatus::Cancelled);
        let done = other
            .await_completion(&id, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            done,
            Completion::Cancelled(Some("changed my mind".to_owned()))
        );
        let record = owner.store().load_instance(&id).await.unwrap();
        assert_eq!(
            record.control_request, None,
            "the honouring commit cleared it"
        );
        assert!(log_of(&owner, &id).await.is_empty());
        assert!(matches!(
            other.cancel(&id, None).await,
            Err(CancelError::AlreadyTerminal { .. })
        ));
    });
}

// ENG-50: a suspend from another runtime while a task runs pauses the instance at the owner's
// next item boundary; the other runtime can then resume it itself (its lease is free).
#[test]
fn a_suspend_from_another_runtime_pauses_the_instance_at_its_next_step() {
    block_on(async {
        let (owner, other) = two_runtimes();
        let gate = gate("two-runtimes");
        let entered = gate.entered.notified();
        let job = Steps {
            gate: "two-runtimes".to_owned(),
            ..steps()
        };
        let running = {
            let owner = owner.clone();
            tokio::spawn(async move { owner.start::<TwoSteps>(job).await })
        };
        entered.await;
        let id = other
            .list_instances(Default::default())
            .await
            .unwrap()
            .remove(0)
            .instance_id;
        assert_eq!(other.suspend(&id).await.unwrap(), Control::Requested);
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.open.notify_one();

        let started = running.await.unwrap().unwrap();
        assert_eq!((started.status, started.sub_status), PAUSED);
        assert_eq!(log_of(&owner, &id).await, ["first"]);
        assert_eq!(
            owner
                .store()
                .load_instance(&id)
                .await
                .unwrap()
                .control_request,
            None
        );

        let resumed = other.resume(&id).await.unwrap();
        assert_eq!(
            resumed.applied().map(|s| s.sub_status),
            Some(Some(SubStatus::Waiting))
        );
        assert_eq!(log_of(&owner, &id).await, ["first", "second"]);
    });
}

// FLT-8 through a request: a runtime without the workflow's code (an operator's) records the
// retry; the owner's queue worker honours it.
#[test]
fn a_retry_requested_without_the_code_is_honoured_by_the_owner() {
    block_on(async {
        let store = Arc::new(MemoryStore::new());
        let owner = Runtime::builder()
            .store(store.clone())
            .owner("app")
            .register::<Flaky>()
            .build()
            .unwrap();
        let operator = Runtime::builder()
            .store(store.clone())
            .owner("operator")
            .inbox_worker(false)
            .recovery_sweep(None)
            .build()
            .unwrap();
        broken().push("retried".to_owned());
        let job = Steps {
            job: "retried".to_owned(),
            ..steps()
        };
        let id = owner.start::<Flaky>(job).await.unwrap().instance_id;
        assert_eq!(status_of(&owner, &id).await.0, WorkflowStatus::Faulted);
        broken().retain(|j| j != "retried");

        assert!(matches!(
            operator.resume(&id).await,
            Err(ControlError::NotResumable {
                status: WorkflowStatus::Faulted,
                ..
            })
        ));
        assert_eq!(operator.retry(&id).await.unwrap(), Control::Requested);
        until_status(&owner, &id, (WorkflowStatus::Finished, None)).await;
        assert_eq!(log_of(&owner, &id).await, ["flaky"]);
        let incidents = owner.incidents(&id).await.unwrap().unwrap();
        assert_eq!(incidents[0].resolution.as_deref(), Some("retried"));
        assert!(matches!(
            operator.retry(&id).await,
            Err(RetryError::NotFaulted { .. })
        ));
    });
}

// ENG-50 through a request: the operator's suspend and resume of an idle instance, each
// recorded and then applied by the owner (woken by the store in this process; the periodic
// pass that serves other processes is tested with the command-line tool).
#[test]
fn requests_for_an_idle_instance_are_honoured_by_the_owner() {
    block_on(async {
        let store = Arc::new(MemoryStore::new());
        let owner = Runtime::builder()
            .store(store.clone())
            .owner("app")
            .register::<TwoSteps>()
            .inbox_sweep(Duration::from_millis(20))
            .build()
            .unwrap();
        let operator = Runtime::builder()
            .store(store.clone())
            .owner("operator")
            .inbox_worker(false)
            .recovery_sweep(None)
            .build()
            .unwrap();
        let id = owner.start::<TwoSteps>(steps()).await.unwrap().instance_id;
        assert_eq!(operator.suspend(&id).await.unwrap(), Control::Requested);
        until_status(&owner, &id, PAUSED).await;
        assert_eq!(operator.resume(&id).await.unwrap(), Control::Requested);
        until_status(
            &owner,
            &id,
            (WorkflowStatus::Suspended, Some(SubStatus::Waiting)),
        )
        .await;
        assert_eq!(
            store.load_instance(&id).await.unwrap().control_request,
            None
        );
    });
}
