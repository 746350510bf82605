//! End to end through the `Runtime`: an order state machine written by hand is suspended on
//! its events and driven to a terminal state by `send` with typed payloads (ENG-48..51, RT-5).
//! Every case runs on `MemoryStore`, then again on `SqliteStore` in a child process
//! (`every_case_also_runs_on_sqlite`): the runtime behaves the same on both backends.

mod common;

use std::time::Duration;

use common::{OrderFlow, OrderState, Payment, Shipment, block_on, order};
use workflow_runtime::{
    AwaitError, CancelError, Completion, EventKind, JournalKind, Runtime, SendError, Stimulus,
    SubStatus, Workflow, WorkflowStatus,
};

/// Set to a directory: the runtimes of this process run on `SqliteStore` files in it.
const SQLITE_DIR: &str = "ORDER_E2E_SQLITE_DIR";

fn runtime() -> Runtime {
    let builder = Runtime::builder().register::<OrderFlow>();
    let builder = match std::env::var_os(SQLITE_DIR) {
        Some(dir) => {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::path::Path::new(&dir).join(format!("e2e-{n}.db"));
            let store = workflow_runtime::SqliteStore::open(path).unwrap();
            builder.store(std::sync::Arc::new(store))
        }
        None => builder,
    };
    builder.build().unwrap()
}

#[test]
fn every_case_also_runs_on_sqlite() {
    if std::env::var_os(SQLITE_DIR).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--skip",
            "every_case_also_runs_on_sqlite",
            "--test-threads",
            "2",
        ])
        .env(SQLITE_DIR, dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "on SqliteStore:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("test result: ok"), "{stdout}");
}

#[test]
fn order_machine_is_driven_to_shipped_by_typed_stimuli() {
    block_on(async {
        let rt = runtime();
        let mut events = rt.subscribe();
        let started = rt.start::<OrderFlow>(order("o-42", 100)).await.unwrap();
        assert_eq!(started.status, WorkflowStatus::Suspended);
        assert_eq!(started.sub_status, Some(SubStatus::Waiting));
        let id = started.instance_id.clone();
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::New)
        );
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let names: Vec<&str> = snapshot
            .state
            .bookmarks()
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(names, ["payment", "cancel", "wf.delay"]);
        assert!(snapshot.data::<common::Order>().unwrap().confirmation_sent);

        // Another order waits on the same events with another key: never touched.
        let other = rt.start::<OrderFlow>(order("o-43", 10)).await.unwrap();

        // SM-4: too little money -> condition false, trigger re-armed, still New.
        let report = rt
            .send(
                Stimulus::new("payment")
                    .key("o-42")
                    .payload(Payment { amount: 40 }),
            )
            .await
            .unwrap();
        assert_eq!(report.resumed.len(), 1);
        assert_eq!(report.resumed[0].instance_id, id);
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::New)
        );

        // Enough: exit, action with the payload, Paid, entry.
        rt.send(
            Stimulus::new("payment")
                .key("o-42")
                .payload(Payment { amount: 100 }),
        )
        .await
        .unwrap();
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::Paid)
        );
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let data: common::Order = snapshot.data().unwrap();
        assert_eq!(data.paid, 100, "only the accepted payment ran the action");
        assert!(data.stock_reserved);
        let names: Vec<&str> = snapshot
            .state
            .bookmarks()
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(names, ["shipped"], "SM-5.1: cancel and expire withdrawn");

        // The withdrawn cancel no longer matches; a wrong key never did.
        let report = rt
            .send(Stimulus::new("cancel").key("o-42").inbox(false))
            .await
            .unwrap();
        assert!(report.unmatched && report.resumed.is_empty(), "{report:?}");
        let report = rt
            .send(Stimulus::new("shipped").key("o-99").inbox(false))
            .await
            .unwrap();
        assert!(report.unmatched);

        let report = rt
            .send(Stimulus::new("shipped").key("o-42").payload(Shipment {
                tracking: "TRK-1".into(),
            }))
            .await
            .unwrap();
        assert_eq!(report.resumed[0].status, WorkflowStatus::Finished);
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::Shipped)
        );

        let Completion::Finished(output) = rt
            .await_completion(&id, Duration::from_secs(1))
            .await
            .unwrap()
        else {
            panic!("not finished")
        };
        assert_eq!(output["tracking"], "TRK-1");
        assert_eq!(output["paid"], 100);

        // The journal tells the story: the state changes, with transition keys.
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let changes: Vec<String> = snapshot
            .journal()
            .iter()
            .filter(|e| e.kind == JournalKind::StateChanged)
            .map(|e| {
                format!(
                    "{}->{}",
                    e.detail["from"].as_str().unwrap_or("*"),
                    e.detail["to"].as_str().unwrap_or("?")
                )
            })
            .collect();
        assert_eq!(changes, ["*->New", "New->Paid", "Paid->Shipped"]);
        assert!(snapshot.state.bookmarks().is_empty() && snapshot.state.queue().is_empty());

        // Lifecycle events, in order, exactly one final event (ENG-39, ENG-40).
        let mut kinds = Vec::new();
        while let Some(event) = events.try_recv().unwrap() {
            if event.instance_id == id {
                match event.kind {
                    EventKind::WorkflowStarted => kinds.push("started"),
                    EventKind::WorkflowSuspended { .. } => kinds.push("suspended"),
                    EventKind::WorkflowResumed => kinds.push("resumed"),
                    EventKind::WorkflowFinished => kinds.push("finished"),
                    _ => {}
                }
            }
        }
        assert_eq!(
            kinds,
            [
                "started",
                "suspended",
                "resumed",
                "suspended",
                "resumed",
                "suspended",
                "resumed",
                "finished"
            ]
        );

        // The other order is untouched.
        let other = rt.get_state(&other.instance_id).await.unwrap().unwrap();
        assert_eq!(other.current_state(), Some("New"));
        assert_eq!(other.state.bookmarks().len(), 3);
    });
}

#[test]
fn cancel_ends_an_order_and_await_reports_it_eng50() {
    block_on(async {
        let rt = runtime();
        let id = rt
            .start::<OrderFlow>(order("o-1", 5))
            .await
            .unwrap()
            .instance_id;
        let err = rt
            .await_completion(&id, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            AwaitError::Timeout {
                instance: id.clone(),
                status: WorkflowStatus::Suspended
            }
        );
        rt.cancel(&id, Some("customer changed their mind".into()))
            .await
            .unwrap();
        assert_eq!(
            rt.await_completion(&id, Duration::from_secs(1))
                .await
                .unwrap(),
            Completion::Cancelled(Some("customer changed their mind".into()))
        );
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Cancelled);
        assert!(snapshot.state.bookmarks().is_empty());
        assert_eq!(
            rt.cancel(&id, None).await.unwrap_err(),
            CancelError::AlreadyTerminal {
                status: WorkflowStatus::Cancelled
            }
        );
        // A cancelled instance's bookmarks are gone from the index too.
        let report = rt
            .send(
                Stimulus::new("payment")
                    .key("o-1")
                    .payload(Payment { amount: 5 })
                    .inbox(false),
            )
            .await
            .unwrap();
        assert!(report.unmatched);
        assert!(matches!(
            rt.await_completion("nope", Duration::from_millis(1))
                .await
                .unwrap_err(),
            AwaitError::InstanceNotFound { .. }
        ));
    });
}

#[test]
fn a_failing_action_faults_the_instance_and_await_reports_the_incident_eng17() {
    block_on(async {
        let rt = runtime();
        let id = rt
            .start::<OrderFlow>(order("o-2", 5))
            .await
            .unwrap()
            .instance_id;
        rt.send(
            Stimulus::new("payment")
                .key("o-2")
                .payload(Payment { amount: 5 }),
        )
        .await
        .unwrap();
        let report = rt
            .send(Stimulus::new("shipped").key("o-2").payload(Shipment {
                tracking: String::new(),
            }))
            .await
            .unwrap();
        assert_eq!(report.resumed[0].status, WorkflowStatus::Faulted);
        let AwaitError::Faulted { incident } = rt
            .await_completion(&id, Duration::from_secs(1))
            .await
            .unwrap_err()
        else {
            panic!("not faulted")
        };
        assert_eq!(incident.node_id, "root:ship_action");
        assert_eq!(incident.fault.message, "empty tracking number");
        // Still Paid: the state changes only after the action (SM-5.4).
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::Paid)
        );
        // RT-22: a payload of the wrong type for the condition `covers_amount` (it reads a
        // `Payment`) is rejected for the instance, naming the type, not a panic and not a
        // fault: nothing is committed, the machine still waits in `New` with its bookmarks.
        let id = rt
            .start::<OrderFlow>(order("o-3", 5))
            .await
            .unwrap()
            .instance_id;
        let before = rt.get_state(&id).await.unwrap().unwrap();
        let report = rt
            .send(Stimulus::new("payment").key("o-3").payload("not a payment"))
            .await
            .unwrap();
        assert!(report.resumed.is_empty(), "{report:?}");
        let [workflow_runtime::Rejection::PayloadDecode { payload_type, .. }] =
            report.rejected.as_slice()
        else {
            panic!("{report:?}")
        };
        assert!(payload_type.contains("Payment"), "{payload_type}");
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Suspended);
        assert!(snapshot.state.incidents().is_empty());
        assert_eq!(snapshot.state.bookmarks(), before.state.bookmarks());
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::New)
        );
        // The other transitions still fire.
        let report = rt.send(Stimulus::new("cancel").key("o-3")).await.unwrap();
        assert_eq!(report.resumed.len(), 1, "{report:?}");
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::Cancelled)
        );
    });
}

#[test]
fn a_delay_bookmark_can_be_resumed_by_id_and_takes_its_transition() {
    block_on(async {
        let rt = runtime();
        let id = rt
            .start::<OrderFlow>(order("o-4", 5))
            .await
            .unwrap()
            .instance_id;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let delay = snapshot
            .state
            .bookmarks()
            .iter()
            .find(|b| b.name == "wf.delay")
            .unwrap();
        assert!(delay.payload["due_at"].as_i64().unwrap() > snapshot.state.created_at_micros());
        let done = rt
            .resume_bookmark(&id, &delay.id.clone(), serde_json::Value::Null)
            .await
            .unwrap();
        assert_eq!(done.status, WorkflowStatus::Finished);
        assert_eq!(
            rt.current_state::<OrderFlow>(&id).await.unwrap(),
            Some(OrderState::Cancelled)
        );
    });
}

#[test]
fn the_same_order_registered_from_json_runs_the_same_way() {
    let json = OrderFlow::definition().to_json_pretty();
    block_on(async {
        let registry = OrderFlow::registry();
        let rt = Runtime::builder()
            .register_json(json, registry)
            .build()
            .unwrap();
        let input = serde_json::to_value(order("o-5", 7)).unwrap();
        let started = rt
            .start_by_name("OrderFlow", input, Default::default())
            .await
            .unwrap();
        rt.send(
            Stimulus::new("payment")
                .key("o-5")
                .payload(Payment { amount: 7 }),
        )
        .await
        .unwrap();
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.current_state(), Some("Paid"));
        assert_eq!(snapshot.state.definition().version, OrderFlow::version());
    });
}

#[test]
fn registration_errors_are_typed_eng47() {
    use workflow_runtime::BuildError;
    use workflow_runtime::model::{Definition, Task};
    let def = Definition::new("Broken", Task::new("root", "missing_fn"));
    let err = Runtime::builder()
        .register_definition(def, workflow_runtime::Registry::<serde_json::Value>::new())
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnknownActivity {
            workflow: "Broken".into(),
            node: "root".into(),
            name: "missing_fn".into()
        }
    );
    block_on(async {
        let rt = runtime();
        let err = rt
            .start_by_name("Nope", serde_json::Value::Null, Default::default())
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            workflow_runtime::StartError::DefinitionNotRegistered { .. }
        ));
        let err = rt.send(Stimulus::new("wf.delay")).await.unwrap_err();
        assert!(matches!(
            err,
            SendError::Routing(workflow_runtime::RoutingError::ReservedName { .. })
        ));
    });
}

#[test]
fn runtime_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let rt = runtime();
    let start = rt.start::<OrderFlow>(order("o-6", 1));
    assert_send(&start);
    let send = rt.send(Stimulus::new("payment"));
    assert_send(&send);
    fn assert_shared<T: Send + Sync + Clone>() {}
    assert_shared::<Runtime>();
}

#[test]
fn a_key_that_does_not_serialize_is_a_typed_send_error() {
    let mut key = std::collections::HashMap::new();
    key.insert((1, 2), 3);
    let err = block_on(runtime().send(Stimulus::new("payment").key(key))).unwrap_err();
    assert!(matches!(err, SendError::Payload { .. }), "{err}");
    let err = block_on(runtime().send(Stimulus::new("payment").key(1.5))).unwrap_err();
    assert!(
        matches!(
            err,
            SendError::Routing(workflow_runtime::RoutingError::UnhashableKey { .. })
        ),
        "{err}"
    );
}
