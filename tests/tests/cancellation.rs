//! Cancelling running work (FLT-15 to FLT-17): the token in the task's context fires
//! when the instance is cancelled while the task runs, which is not refused (FLT-15,
//! FLT-16, scenario 6), and when an attempt times out, which counts as a retryable failure
//! (FLT-17); a task that ignores its token is dropped after the grace (ENG-52).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::{
    ActivityStatus, Completion, Outcome, Registry, Runtime, StartOptions, TaskContext,
    WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Job {
    /// Whether the task waits for its token (else it ignores it and sleeps).
    cooperative: bool,
    /// Attempts up to this one hang.
    hang_until: u32,
    log: Vec<String>,
}

static HANG_ONCE: AtomicBool = AtomicBool::new(true);

fn definition(task: serde_json::Value) -> Definition {
    serde_json::from_value(json!({
        "name": "Job",
        "root": { "kind": "sequence", "id": "root", "steps": [ task ] }
    }))
    .unwrap()
}

fn registry() -> Registry<Job> {
    Registry::new().task("work", |cx: &mut TaskContext<Job>| {
        Box::pin(async move {
            let attempt = cx.attempt();
            cx.data_mut().log.push(format!("attempt {attempt}"));
            // The shutdown test's instance hangs in its first process only.
            let once = cx.instance_id() != "s-1" || HANG_ONCE.swap(false, Ordering::SeqCst);
            if attempt <= cx.data().hang_until && once {
                if cx.data().cooperative {
                    cx.cancelled().await;
                    assert!(cx.is_cancelled());
                    cx.data_mut().log.push("saw the token".to_owned());
                } else {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
            Ok(Outcome::done())
        })
    })
}

fn runtime(task: serde_json::Value) -> Runtime {
    Runtime::builder()
        .register_definition(definition(task), registry())
        .cancel_grace(Duration::from_millis(50))
        .build()
        .unwrap()
}

async fn start(rt: &Runtime, id: &str, job: Job) -> tokio::task::JoinHandle<()> {
    let rt = rt.clone();
    let id = id.to_owned();
    let handle = tokio::spawn(async move {
        let options = StartOptions {
            instance_id: Some(id),
            ..StartOptions::default()
        };
        rt.start_by_name("Job", serde_json::to_value(job).unwrap(), options)
            .await
            .unwrap();
    });
    // Let the task start and block.
    tokio::time::sleep(Duration::from_millis(30)).await;
    handle
}

// Scenario 6 (FLT-15, FLT-16): cancelling while a task awaits fires its token; the instance is
// `Cancelled`, the activity `Canceled`, with no incident, no retry, and no data from it.
#[test]
fn cancelling_while_a_task_runs_fires_its_token() {
    block_on(async {
        let rt = runtime(json!({ "kind": "task", "id": "work", "function": "work",
                                  "retry": { "max_attempts": 3 } }));
        let job = Job {
            cooperative: true,
            hang_until: 9,
            ..Job::default()
        };
        let running = start(&rt, "c-1", job).await;
        rt.cancel("c-1", Some("operator".to_owned())).await.unwrap();
        running.await.unwrap();
        let snapshot = rt.get_state("c-1").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Cancelled);
        assert!(snapshot.state.incidents().is_empty());
        assert!(snapshot.data::<Job>().unwrap().log.is_empty());
        let work = snapshot
            .state
            .contexts()
            .values()
            .find(|c| c.node_id == "root:work");
        assert!(
            work.is_none_or(|c| c.status == ActivityStatus::Canceled),
            "{work:?}"
        );
        assert!(rt.store().list_timers("c-1").await.unwrap().is_empty());
        let done = rt
            .await_completion("c-1", Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(done, Completion::Cancelled(Some("operator".to_owned())));
    });
}

// ENG-52: a task that ignores its token is dropped after the grace.
#[test]
fn a_task_ignoring_its_token_is_dropped_after_the_grace() {
    block_on(async {
        let rt = runtime(json!({ "kind": "task", "id": "work", "function": "work" }));
        let job = Job {
            hang_until: 9,
            ..Job::default()
        };
        let running = start(&rt, "c-2", job).await;
        let begun = Instant::now();
        rt.cancel("c-2", None).await.unwrap();
        running.await.unwrap();
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "{:?}",
            begun.elapsed()
        );
        let snapshot = rt.get_state("c-2").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Cancelled);
    });
}

// FLT-17: the token fires when the attempt times out; the attempt fails with a retryable
// error that counts, and the next attempt runs from the data as it was (FLT-4).
#[test]
fn an_attempt_timeout_fires_the_token_and_counts_as_a_retryable_failure() {
    block_on(async {
        let rt = runtime(json!({ "kind": "task", "id": "work", "function": "work",
                                  "attempt_timeout_ms": 50,
                                  "retry": { "max_attempts": 2, "initial_delay_ms": 10 } }));
        let job = Job {
            cooperative: true,
            hang_until: 1,
            ..Job::default()
        };
        let options = StartOptions::default();
        let started = rt.start_by_name("Job", serde_json::to_value(job).unwrap(), options);
        let id = started.await.unwrap().instance_id;
        let waiting = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(waiting.state.bookmarks()[0].name, "wf.retry");
        let work = waiting
            .state
            .contexts()
            .values()
            .find(|c| c.node_id == "root:work")
            .unwrap();
        assert_eq!(
            work.properties["attempts"][0]["error"],
            "attempt timed out after `50ms`"
        );
        assert!(waiting.data::<Job>().unwrap().log.is_empty());
        let done = rt
            .await_completion(&id, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(done, Completion::Finished(_)), "{done:?}");
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.data::<Job>().unwrap().log, ["attempt 2"]);
    });
}

// FLT-17 without attempts left: the instance faults naming the timeout.
#[test]
fn a_timed_out_last_attempt_faults() {
    block_on(async {
        let rt = runtime(json!({ "kind": "task", "id": "work", "function": "work",
                                  "attempt_timeout_ms": 30 }));
        let job = Job {
            cooperative: true,
            hang_until: 9,
            ..Job::default()
        };
        let started = rt
            .start_by_name(
                "Job",
                serde_json::to_value(job).unwrap(),
                StartOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Faulted);
        let incidents = rt.incidents(&started.instance_id).await.unwrap().unwrap();
        assert_eq!(incidents[0].fault.message, "attempt timed out after `30ms`");
    });
}

// ENG-52: at shutdown the token fires and the run is interrupted: nothing of it is committed,
// no attempt is counted, and the next process runs the task again.
#[test]
fn shutdown_interrupts_running_tasks_without_counting_an_attempt() {
    block_on(async {
        let store: std::sync::Arc<dyn workflow_runtime::Store> =
            std::sync::Arc::new(workflow_runtime::MemoryStore::new());
        let build = || {
            Runtime::builder()
                .register_definition(
                    definition(json!({ "kind": "task", "id": "work", "function": "work",
                                       "retry": { "max_attempts": 1 } })),
                    registry(),
                )
                .store(store.clone())
                .cancel_grace(Duration::from_millis(50))
                .build()
                .unwrap()
        };
        let first = build();
        let job = Job {
            cooperative: true,
            hang_until: 1,
            ..Job::default()
        };
        let running = start(&first, "s-1", job).await;
        first.shutdown().await;
        running.await.unwrap();
        let snapshot = first.get_state("s-1").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Running);
        assert!(snapshot.state.incidents().is_empty());
        drop(first);

        let second = build();
        let report = second.recover().await.unwrap();
        assert_eq!(report.recovered.len(), 1, "{report:?}");
        let snapshot = second.get_state("s-1").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        // Attempt 1 again: the interrupted one was not counted.
        assert_eq!(snapshot.data::<Job>().unwrap().log, ["attempt 1"]);
    });
}
