//! SubWorkflow in memory (ACT-24): the parent starts a child instance and waits
//! on a `wf.sub_workflow` bookmark that the child's final commit resumes with its status and
//! output; cancelling the waiting parent cancels the child; a cancelled child takes the
//! `cancelled` port or fails the parent; `detach` completes at once.

mod common;

use common::block_on;
use serde::{Deserialize, Serialize};
use workflow_runtime::model::{
    Activity, Connection, Definition, Event, Flowchart, Sequence, SubWorkflow, SubWorkflowMode,
    Task,
};
use workflow_runtime::{
    AwaitError, BuildError, Outcome, Registry, Runtime, Stimulus, TaskContext, WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Parent {
    order: String,
    tracking: Option<String>,
    log: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Shipping {
    order: String,
    tracking: Option<String>,
}

fn log(
    name: &'static str,
) -> impl Fn(&mut TaskContext<Parent>) -> workflow_runtime::BoxFuture<'_, workflow_runtime::TaskResult>
+ Send
+ Sync
+ 'static {
    move |cx: &mut TaskContext<Parent>| {
        Box::pin(async move {
            cx.data_mut().log.push(name.to_owned());
            Ok(Outcome::done())
        })
    }
}

fn parent_def(mode: SubWorkflowMode, with_cancelled_port: bool) -> Definition {
    let mut connections = vec![
        Connection::new("before", "done", "ship"),
        Connection::new("ship", "done", "after"),
    ];
    let mut nodes: Vec<Activity> = vec![
        Task::new("before", "before").into(),
        SubWorkflow {
            id: "ship".into(),
            workflow: "Shipping".into(),
            input: Some("shipping_input".into()),
            assign: Some("take_tracking".into()),
            mode,
            deadline_ms: None,
        }
        .into(),
        Task::new("after", "after").into(),
    ];
    if with_cancelled_port {
        nodes.push(Task::new("compensate", "compensate").into());
        connections.push(Connection::new("ship", "cancelled", "compensate"));
    }
    Definition::new(
        "Order",
        Flowchart {
            id: "root".into(),
            start: Vec::new(),
            nodes,
            connections,
        },
    )
}

fn child_def() -> Definition {
    Definition::new(
        "Shipping",
        Sequence {
            id: "root".into(),
            steps: vec![
                Event::new("shipped", "shipped").with_key("order").into(),
                Task::new("track", "track").into(),
            ],
        },
    )
}

fn runtime(mode: SubWorkflowMode, with_cancelled_port: bool) -> Runtime {
    let parent = Registry::<Parent>::new()
        .task("before", log("before"))
        .task("after", log("after"))
        .task("compensate", log("compensate"))
        .value("shipping_input", |p: &Parent| Shipping {
            order: p.order.clone(),
            tracking: None,
        })
        .assign("take_tracking", |p: &mut Parent, s: Shipping| {
            p.tracking = s.tracking;
        });
    let child = Registry::<Shipping>::new().task("track", |cx: &mut TaskContext<Shipping>| {
        Box::pin(async move {
            let tracking = format!("TRK-{}", cx.data().order);
            cx.data_mut().tracking = Some(tracking);
            Ok(Outcome::done())
        })
    });
    Runtime::builder()
        .register_definition(parent_def(mode, with_cancelled_port), parent)
        .register_definition(child_def(), child)
        .build()
        .unwrap()
}

fn order(id: &str) -> serde_json::Value {
    serde_json::to_value(Parent {
        order: id.into(),
        ..Parent::default()
    })
    .unwrap()
}

/// The child instance id the parent's `wf.sub_workflow` bookmark waits for.
async fn child_of(rt: &Runtime, parent: &str) -> String {
    let snapshot = rt.get_state(parent).await.unwrap().unwrap();
    let bookmark = snapshot
        .state
        .bookmarks()
        .iter()
        .find(|b| b.name == "wf.sub_workflow")
        .expect("the parent waits for its child");
    bookmark.payload["child_instance_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

// ACT-24: the child runs with the input fn's value; its final commit resumes the parent, whose
// assign fn folds the child's output into the data; the parent then goes on.
#[test]
fn act24_parent_waits_for_the_child_and_assigns_its_output() {
    block_on(async {
        let rt = runtime(SubWorkflowMode::Wait, false);
        let parent = rt
            .start_by_name("Order", order("o-1"), Default::default())
            .await
            .unwrap()
            .instance_id;
        let child = child_of(&rt, &parent).await;
        let snapshot = rt.get_state(&child).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Suspended);
        let link = snapshot.state.parent().cloned().unwrap();
        assert_eq!(link.instance_id, parent);
        assert_eq!(link.depth, 1);
        rt.send(Stimulus::new("shipped").key("o-1")).await.unwrap();
        let child_state = rt.get_state(&child).await.unwrap().unwrap();
        assert_eq!(child_state.status(), WorkflowStatus::Finished);
        let snapshot = rt.get_state(&parent).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        let data: Parent = snapshot.data().unwrap();
        assert_eq!(data.tracking.as_deref(), Some("TRK-o-1"));
        assert_eq!(data.log, ["before", "after"]);
        assert!(snapshot.state.bookmarks().is_empty());
    });
}

// ACT-24: cancelling the waiting parent cancels its child.
#[test]
fn act24_cancelling_the_parent_cancels_the_child() {
    block_on(async {
        let rt = runtime(SubWorkflowMode::Wait, false);
        let parent = rt
            .start_by_name("Order", order("o-2"), Default::default())
            .await
            .unwrap()
            .instance_id;
        let child = child_of(&rt, &parent).await;
        rt.cancel(&parent, None).await.unwrap();
        let child_state = rt.get_state(&child).await.unwrap().unwrap();
        assert_eq!(child_state.status(), WorkflowStatus::Cancelled);
        let report = rt
            .send(Stimulus::new("shipped").key("o-2").inbox(false))
            .await
            .unwrap();
        assert!(report.unmatched);
    });
}

// ACT-24: a cancelled child takes the `cancelled` port when it is connected; otherwise the
// parent fails with ``child workflow `{id}` was cancelled``.
#[test]
fn act24_cancelled_child_takes_the_cancelled_port_or_fails_the_parent() {
    block_on(async {
        let rt = runtime(SubWorkflowMode::Wait, true);
        let parent = rt
            .start_by_name("Order", order("o-3"), Default::default())
            .await
            .unwrap()
            .instance_id;
        let child = child_of(&rt, &parent).await;
        rt.cancel(&child, None).await.unwrap();
        let snapshot = rt.get_state(&parent).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        assert_eq!(
            snapshot.data::<Parent>().unwrap().log,
            ["before", "compensate"]
        );

        let rt = runtime(SubWorkflowMode::Wait, false);
        let parent = rt
            .start_by_name("Order", order("o-4"), Default::default())
            .await
            .unwrap()
            .instance_id;
        let child = child_of(&rt, &parent).await;
        rt.cancel(&child, None).await.unwrap();
        let err = rt
            .await_completion(&parent, std::time::Duration::from_secs(1))
            .await
            .unwrap_err();
        let AwaitError::Faulted { incident } = err else {
            panic!("not faulted: {err:?}")
        };
        assert_eq!(
            incident.fault.message,
            format!("child workflow `{child}` was cancelled")
        );
    });
}

// ACT-24 detach: completes once the child is started, with the child id as output.
#[test]
fn act24_detach_completes_at_once() {
    block_on(async {
        let rt = runtime(SubWorkflowMode::Detach, false);
        let parent = rt
            .start_by_name("Order", order("o-5"), Default::default())
            .await
            .unwrap();
        assert_eq!(parent.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&parent.instance_id).await.unwrap().unwrap();
        let data: Parent = snapshot.data().unwrap();
        assert_eq!(data.log, ["before", "after"]);
        assert_eq!(data.tracking, None, "no assign in detach mode");
        let sent = rt.send(Stimulus::new("shipped").key("o-5")).await.unwrap();
        assert_eq!(sent.resumed.len(), 1, "the detached child runs on its own");
        assert_eq!(sent.resumed[0].status, WorkflowStatus::Finished);
    });
}

// ACT-V10: a SubWorkflow naming an unregistered workflow fails the build.
#[test]
fn act_v10_unknown_child_workflow_fails_the_build() {
    let err = Runtime::builder()
        .register_definition(
            parent_def(SubWorkflowMode::Wait, false),
            Registry::<Parent>::new()
                .task("before", log("before"))
                .task("after", log("after"))
                .value("shipping_input", |_: &Parent| 1)
                .assign("take_tracking", |_: &mut Parent, _: Shipping| {}),
        )
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnknownWorkflow {
            workflow: "Order".into(),
            node: "root:ship".into(),
            name: "Shipping".into(),
        }
    );
}

// ENG-47: a SubWorkflow's assign fn missing from the registry fails the build, typed.
#[test]
fn missing_assign_fn_fails_the_build() {
    let err = Runtime::builder()
        .register_definition(
            parent_def(SubWorkflowMode::Wait, false),
            Registry::<Parent>::new()
                .task("before", log("before"))
                .task("after", log("after"))
                .value("shipping_input", |_: &Parent| 1),
        )
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnknownFunction {
            workflow: "Order".into(),
            node: "root:ship".into(),
            kind: "assign fn",
            name: "take_tracking".into(),
        }
    );
}

// ACT-24: a child that finishes in its first run resumes its parent before `start` returns,
// and the parent's reported status says so; nested sub-workflows chain (depth 2).
#[test]
fn act24_a_child_finishing_at_once_and_nested_children() {
    let leaf = Definition::new("Leaf", Task::new("root", "leaf"));
    let middle = Definition::new(
        "Middle",
        SubWorkflow {
            id: "root".into(),
            workflow: "Leaf".into(),
            input: None,
            assign: Some("take".into()),
            mode: SubWorkflowMode::Wait,
            deadline_ms: None,
        },
    );
    let top = Definition::new(
        "Top",
        Sequence {
            id: "root".into(),
            steps: vec![
                SubWorkflow {
                    id: "call".into(),
                    workflow: "Middle".into(),
                    input: None,
                    assign: Some("take".into()),
                    mode: SubWorkflowMode::Wait,
                    deadline_ms: None,
                }
                .into(),
            ],
        },
    );
    let leaf_registry =
        Registry::<Option<String>>::new().task("leaf", |cx: &mut TaskContext<Option<String>>| {
            Box::pin(async move {
                *cx.data_mut() = Some("leaf ran".into());
                Ok(Outcome::done())
            })
        });
    block_on(async {
        let rt = Runtime::builder()
            .register_definition(leaf, leaf_registry)
            .register_definition(
                middle,
                Registry::<Option<String>>::new()
                    .assign("take", |d: &mut Option<String>, v: Option<String>| *d = v),
            )
            .register_definition(
                top,
                Registry::<Option<String>>::new()
                    .assign("take", |d: &mut Option<String>, v: Option<String>| *d = v),
            )
            .build()
            .unwrap();
        let started = rt
            .start_by_name("Top", serde_json::Value::Null, Default::default())
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        // Each instance's output is its final data: leaf -> middle -> top.
        assert_eq!(
            snapshot.data::<Option<String>>().unwrap().as_deref(),
            Some("leaf ran")
        );
    });
}
