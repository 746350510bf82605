//! Middleware chains (ENG-34, ENG-37, ENG-38) and lifecycle event delivery (ENG-40).

mod common;

use std::sync::{Arc, Mutex};

use common::{OrderFlow, block_on, order};
use serde_json::{Value, json};
use workflow_runtime::model::{Definition, Sequence, Task};
use workflow_runtime::{
    ActivityInfo, ActivityMiddleware, ActivityStatus, Flow, JournalKind, Outcome, RecvError,
    Registry, RunInfo, Runtime, SubStatus, TaskContext, WorkflowMiddleware, WorkflowStatus,
};

#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
    decline: Option<&'static str>,
}

impl ActivityMiddleware for Recorder {
    fn before(&self, activity: &ActivityInfo<'_>) -> Flow {
        self.seen
            .lock()
            .unwrap()
            .push(format!("before {} {}", activity.node_id, activity.entry));
        if Some(activity.node_id) == self.decline {
            Flow::Decline
        } else {
            Flow::Continue
        }
    }

    fn after(&self, activity: &ActivityInfo<'_>, status: ActivityStatus) {
        self.seen
            .lock()
            .unwrap()
            .push(format!("after {} {status:?}", activity.node_id));
    }
}

#[derive(Clone, Default)]
struct RunCounter {
    runs: Arc<Mutex<Vec<String>>>,
}

impl WorkflowMiddleware for RunCounter {
    fn before_run(&self, run: &RunInfo<'_>) -> Flow {
        self.runs
            .lock()
            .unwrap()
            .push(format!("before {:?}/{:?}", run.status, run.sub_status));
        Flow::Continue
    }

    fn after_run(&self, run: &RunInfo<'_>) {
        self.runs
            .lock()
            .unwrap()
            .push(format!("after {:?}/{:?}", run.status, run.sub_status));
    }
}

fn two_steps() -> (Definition, Registry<Value>) {
    let def = Definition::new(
        "Two",
        Sequence {
            id: "root".into(),
            steps: vec![Task::new("a", "mark").into(), Task::new("b", "mark").into()],
        },
    );
    let registry = Registry::<Value>::new().task("mark", |cx: &mut TaskContext<Value>| {
        Box::pin(async move {
            let node = cx.node_id().to_owned();
            if let Some(list) = cx.data_mut().as_array_mut() {
                list.push(json!(node));
            }
            Ok(Outcome::done())
        })
    });
    (def, registry)
}

// ENG-34, ENG-38: user layers see every work item and every run, before and after.
#[test]
fn eng34_eng38_user_layers_wrap_every_activity_and_run() {
    let recorder = Recorder::default();
    let runs = RunCounter::default();
    let (def, registry) = two_steps();
    let rt = Runtime::builder()
        .register_definition(def, registry)
        .activity_middleware(recorder.clone())
        .workflow_middleware(runs.clone())
        .build()
        .unwrap();
    let started = block_on(rt.start_by_name("Two", json!([]), Default::default())).unwrap();
    assert_eq!(started.status, WorkflowStatus::Finished);
    assert_eq!(
        *recorder.seen.lock().unwrap(),
        [
            "before root execute",
            "after root Running",
            "before root:a execute",
            "after root:a Completed",
            "before root:b execute",
            "after root:b Completed",
        ]
    );
    assert_eq!(
        *runs.runs.lock().unwrap(),
        ["before Running/Some(Pending)", "after Finished/None"]
    );
}

// ENG-37: a layer that declines leaves the context Pending with no work item, journaled;
// with nothing else to do the instance is visibly stalled (ENG-2).
#[test]
fn eng37_declined_activity_stays_pending_and_instance_stalls() {
    let recorder = Recorder {
        decline: Some("root:b"),
        ..Recorder::default()
    };
    let (def, registry) = two_steps();
    let rt = Runtime::builder()
        .register_definition(def, registry)
        .activity_middleware(recorder)
        .build()
        .unwrap();
    block_on(async {
        let started = rt
            .start_by_name("Two", json!([]), Default::default())
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Suspended);
        assert_eq!(started.sub_status, Some(SubStatus::Stalled));
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        let b = snapshot
            .state
            .contexts()
            .values()
            .find(|c| c.node_id == "root:b")
            .unwrap();
        assert_eq!(b.status, ActivityStatus::Pending);
        assert!(snapshot.state.queue().is_empty());
        assert_eq!(*snapshot.state.data(), json!(["root:a"]));
        assert!(
            snapshot
                .journal()
                .iter()
                .any(|e| e.kind == JournalKind::Declined && e.node_id.as_deref() == Some("root:b"))
        );
    });
}

// ENG-40: a subscriber's buffer is bounded; overflow yields `Lagged { missed }` and the engine
// never waits for it.
#[test]
fn eng40_slow_subscriber_lags_instead_of_slowing_the_engine() {
    let rt = Runtime::builder()
        .register::<OrderFlow>()
        .event_buffer(2)
        .build()
        .unwrap();
    let mut events = rt.subscribe();
    block_on(async {
        rt.start::<OrderFlow>(order("o-1", 1)).await.unwrap();
        match events.try_recv() {
            Err(RecvError::Lagged { missed }) => assert!(missed > 0),
            other => panic!("expected Lagged, got {other:?}"),
        }
        // After the lag the stream continues with the newest kept events.
        assert!(events.try_recv().unwrap().is_some());
    });
}
