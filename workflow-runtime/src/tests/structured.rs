//! The structured activities: If, Switch, While, ForEach, ParallelForEach,
//! Parallel, Finish, Fault, Break, SetVariable and Correlate.

use serde_json::json;
use workflow_model::{
    Activity, Break, Correlate, Definition, Fault, Finish, ForEach, If, Parallel, ParallelForEach,
    ParallelMode, Sequence, SetVariable, Switch, SwitchCase, SwitchMode, Task, While,
};

use super::flowchart::chart;
use super::{Harness, Log, event, log_task};
use crate::engine::executor::RunEnd;
use crate::engine::state::{ActivityStatus, JournalKind, SubStatus, WorkflowStatus};
use crate::{Outcome, Registry, TaskContext};

fn registry() -> Registry<Log> {
    super::flowchart::registry()
        .task("record_item", |cx: &mut TaskContext<Log>| {
            Box::pin(async move {
                let item: u64 = cx.input()?;
                let index: u64 = cx.variable("index")?;
                let same: u64 = cx.variable("item")?;
                assert_eq!(item, same);
                cx.data_mut().log.push(format!("{index}:{item}"));
                cx.data_mut().count += item;
                Ok(Outcome::done())
            })
        })
        .task("read_total", |cx: &mut TaskContext<Log>| {
            Box::pin(async move {
                let total: Option<u64> = cx.variable("total")?;
                cx.data_mut().log.push(format!("total={total:?}"));
                Ok(Outcome::done())
            })
        })
        .items("three", |_: &Log| vec![10_u64, 20, 30])
        .items("none", |_: &Log| Vec::<u64>::new())
        .value("count", |d: &Log| d.count)
        .value("order_key", |_: &Log| "order-42")
        .value("empty", |_: &Log| "")
        .condition("count_ge_2", |d: &Log| d.count >= 2)
}

fn seq(steps: Vec<Activity>) -> Definition {
    let def = Definition::new(
        "Structured",
        Sequence {
            id: "root".into(),
            steps,
        },
    );
    if let Err(diagnostics) = workflow_model::validate(&def) {
        panic!("invalid test definition: {diagnostics}");
    }
    def
}

fn structured_if(
    id: &str,
    condition: &str,
    then: Option<Activity>,
    r#else: Option<Activity>,
) -> Activity {
    If {
        id: id.into(),
        condition: condition.into(),
        then: then.map(Box::new),
        r#else: r#else.map(Box::new),
    }
    .into()
}

fn run(def: &Definition) -> Harness {
    let mut h = Harness::new(def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    h
}

// ACT-13 structured: runs the chosen branch and completes with it; at once without one.
#[test]
fn act13_if_runs_the_chosen_branch() {
    let h = run(&seq(vec![
        structured_if(
            "i",
            "yes",
            Some(log_task("a", "a")),
            Some(log_task("b", "b")),
        ),
        structured_if(
            "j",
            "no",
            Some(log_task("c", "c")),
            Some(log_task("x", "x")),
        ),
        structured_if("k", "no", Some(log_task("y", "y")), None),
    ]));
    assert_eq!(h.log(), ["a", "x"]);
}

fn case(label: &str, condition: &str, body: Option<Activity>) -> SwitchCase {
    SwitchCase {
        label: label.into(),
        condition: condition.into(),
        body,
    }
}

fn switch(mode: SwitchMode, cases: Vec<SwitchCase>, default: Option<Activity>) -> Activity {
    Switch {
        id: "s".into(),
        cases,
        mode,
        default: default.map(Box::new),
    }
    .into()
}

// ACT-14 structured: `first` runs the first matching case, `any` every matching case and
// completes when all have; with no match the default runs.
#[test]
fn act14_switch_first_any_and_default() {
    let cases = || {
        vec![
            case("low", "no", Some(log_task("low", "low"))),
            case("high", "yes", Some(event("high", "go_high"))),
            case("also", "yes", Some(log_task("also", "also"))),
        ]
    };
    let h = run(&seq(vec![switch(
        SwitchMode::First,
        vec![
            case("low", "no", Some(log_task("low", "low"))),
            case("high", "yes", Some(log_task("high", "high"))),
            case("also", "yes", Some(log_task("also", "also"))),
        ],
        None,
    )]));
    assert_eq!(h.log(), ["high"]);

    let def = seq(vec![
        switch(SwitchMode::Any, cases(), None),
        log_task("a", "a"),
    ]);
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    assert_eq!(h.log(), ["also"], "both matching cases scheduled");
    h.fire("root:s:high", json!(null));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["also", "a"], "completes once all cases completed");

    let h = run(&seq(vec![switch(
        SwitchMode::First,
        vec![case("low", "no", Some(log_task("low", "low")))],
        Some(log_task("other", "other")),
    )]));
    assert_eq!(h.log(), ["other"]);
}

// ACT-15: the condition is checked before each iteration; the body is a fresh context each
// time; the iteration count is persisted.
#[test]
fn act15_while_loops_until_the_condition_is_false() {
    let h = run(&seq(vec![
        While {
            id: "w".into(),
            condition: "count_lt_3".into(),
            body: Box::new(Task::new("inc", "incr").into()),
        }
        .into(),
    ]));
    let data: Log = serde_json::from_value(h.exec.state.data.clone()).unwrap();
    assert_eq!(data.count, 3);
    assert_eq!(
        h.journal_nodes(JournalKind::Completed)
            .iter()
            .filter(|n| *n == "root:w:inc")
            .count(),
        3
    );
}

// ACT-9, ACT-29: a break deep in the body completes the enclosing composites and the loop.
#[test]
fn act9_break_completes_the_nearest_loop() {
    let body = Sequence {
        id: "body".into(),
        steps: vec![
            Task::new("inc", "incr").into(),
            structured_if("stop", "count_ge_2", Some(Break::new("brk").into()), None),
            log_task("a", "a"),
        ],
    };
    let h = run(&seq(vec![
        While {
            id: "w".into(),
            condition: "yes".into(),
            body: Box::new(body.into()),
        }
        .into(),
        log_task("b", "b"),
    ]));
    assert_eq!(h.log(), ["a", "b"], "second iteration broke before `a`");
    let data: Log = serde_json::from_value(h.exec.state.data.clone()).unwrap();
    assert_eq!(data.count, 2);
}

// ACT-9: a break inside a flowchart inside a loop completes the flowchart and the loop.
#[test]
fn act9_break_from_a_flowchart_node() {
    let inner = workflow_model::Flowchart {
        id: "fc".into(),
        start: Vec::new(),
        nodes: vec![Task::new("inc", "incr").into(), Break::new("brk").into()],
        connections: vec![workflow_model::Connection::new("inc", "done", "brk")],
    };
    let h = run(&seq(vec![
        While {
            id: "w".into(),
            condition: "yes".into(),
            body: Box::new(inner.into()),
        }
        .into(),
        log_task("b", "b"),
    ]));
    assert_eq!(h.log(), ["b"]);
    let data: Log = serde_json::from_value(h.exec.state.data.clone()).unwrap();
    assert_eq!(data.count, 1);
}

// ACT-16, ACT-8: the items are a snapshot; the body gets each item as input and the
// variables `item` and `index`; an empty list completes at once.
#[test]
fn act16_for_each_runs_the_body_per_item_in_order() {
    let h = run(&seq(vec![
        ForEach {
            id: "each".into(),
            items: "three".into(),
            body: Box::new(Task::new("rec", "record_item").into()),
        }
        .into(),
        ForEach {
            id: "empty".into(),
            items: "none".into(),
            body: Box::new(Task::new("rec", "record_item").into()),
        }
        .into(),
    ]));
    assert_eq!(h.log(), ["0:10", "1:20", "2:30"]);
}

// ACT-17: one body per item, in item order, at most `max_in_flight` live; completes when all
// have completed.
#[test]
fn act17_parallel_for_each_respects_max_in_flight() {
    let def = seq(vec![
        ParallelForEach {
            id: "pfe".into(),
            items: "three".into(),
            body: Box::new(event("wait", "go")),
            max_in_flight: Some(2),
        }
        .into(),
        log_task("a", "a"),
    ]);
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    assert_eq!(h.live("root:pfe:wait").len(), 2);
    h.fire("root:pfe:wait", json!(1));
    h.run();
    assert_eq!(h.live("root:pfe:wait").len(), 2, "the third item started");
    h.fire("root:pfe:wait", json!(2));
    h.run();
    assert_eq!(h.live("root:pfe:wait").len(), 1);
    h.fire("root:pfe:wait", json!(3));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a"]);
    // Unlimited: every body at once.
    let def = seq(vec![
        ParallelForEach {
            id: "pfe".into(),
            items: "three".into(),
            body: Box::new(event("wait", "go")),
            max_in_flight: None,
        }
        .into(),
    ]);
    let mut h = Harness::new(&def, registry());
    h.run();
    assert_eq!(h.live("root:pfe:wait").len(), 3);
}

// ACT-17, ACT-9: a break in one body cancels the others and completes the loop.
#[test]
fn act17_break_in_a_body_cancels_the_other_bodies() {
    let body = Sequence {
        id: "body".into(),
        steps: vec![event("wait", "go"), Break::new("brk").into()],
    };
    let def = seq(vec![
        ParallelForEach {
            id: "pfe".into(),
            items: "three".into(),
            body: Box::new(body.into()),
            max_in_flight: None,
        }
        .into(),
        log_task("a", "a"),
    ]);
    let mut h = Harness::new(&def, registry());
    h.run();
    assert_eq!(h.exec.state.bookmarks.len(), 3);
    h.fire("root:pfe:body:wait", json!(null));
    assert_eq!(h.run(), RunEnd::Finished);
    assert!(h.exec.state.bookmarks.is_empty());
    assert_eq!(h.log(), ["a"]);
}

// ACT-18: `all` completes when every branch has; `any` when the first does, cancelling the
// others and removing their bookmarks.
#[test]
fn act18_parallel_all_and_any() {
    let parallel = |mode| -> Activity {
        Parallel {
            id: "p".into(),
            branches: vec![event("left", "l"), event("right", "r")],
            mode,
        }
        .into()
    };
    let def = seq(vec![parallel(ParallelMode::All), log_task("a", "a")]);
    let mut h = Harness::new(&def, registry());
    h.run();
    h.fire("root:p:right", json!(null));
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    h.fire("root:p:left", json!(null));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a"]);

    let def = seq(vec![parallel(ParallelMode::Any), log_task("a", "a")]);
    let mut h = Harness::new(&def, registry());
    h.run();
    let left = h.live("root:p:left")[0];
    h.fire("root:p:right", json!(null));
    assert!(h.exec.state.bookmarks.is_empty());
    assert_eq!(
        h.exec.state.context(left).unwrap().status,
        ActivityStatus::Canceled
    );
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a"]);
}

// ACT-25, ENG-18: finish cancels everything else and ends the instance with its output.
#[test]
fn act25_finish_ends_the_instance_with_its_output() {
    let def = seq(vec![
        Parallel {
            id: "p".into(),
            branches: vec![
                event("wait", "never"),
                Sequence {
                    id: "work".into(),
                    steps: vec![
                        Task::new("inc", "incr").into(),
                        Finish {
                            id: "fin".into(),
                            output: Some("count".into()),
                        }
                        .into(),
                        log_task("a", "a"),
                    ],
                }
                .into(),
            ],
            mode: ParallelMode::All,
        }
        .into(),
        log_task("b", "b"),
    ]);
    let h = run(&def);
    assert!(h.log().is_empty(), "nothing after finish runs");
    assert!(h.exec.state.bookmarks.is_empty());
    assert_eq!(h.exec.state.status, WorkflowStatus::Finished);
    assert_eq!(h.exec.state.output, Some(json!(1)));
}

// ACT-26: fault fails at once with `{code}: {message}`, faulting the instance.
#[test]
fn act26_fault_fails_with_its_code_and_message() {
    let def = chart(
        vec![
            log_task("a", "a"),
            Fault {
                id: "oops".into(),
                code: "E42".into(),
                message: "limit exceeded".into(),
            }
            .into(),
        ],
        &[("a", "done", "oops")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Faulted);
    let incident = &h.exec.state.incidents[0];
    assert_eq!(incident.node_id, "root:oops");
    assert_eq!(incident.fault.message, "E42: limit exceeded");
}

// ACT-27: correlate sets the instance's correlation id; an empty key is a permanent error.
#[test]
fn act27_correlate_sets_the_correlation_id() {
    let h = run(&seq(vec![
        Correlate {
            id: "c".into(),
            key: "order_key".into(),
        }
        .into(),
    ]));
    assert_eq!(h.exec.state.correlation_id.as_deref(), Some("order-42"));
    let mut h = Harness::new(
        &seq(vec![
            Correlate {
                id: "c".into(),
                key: "empty".into(),
            }
            .into(),
        ]),
        registry(),
    );
    assert_eq!(h.run(), RunEnd::Faulted);
}

// ACT-28, ACT-8: set_variable assigns on the root context (no declarations in the model);
// tasks read it by name.
#[test]
fn act28_set_variable_is_visible_to_later_tasks() {
    let h = run(&seq(vec![
        Task::new("read0", "read_total").into(),
        Task::new("inc", "incr").into(),
        SetVariable {
            id: "set".into(),
            variable: "total".into(),
            value: "count".into(),
        }
        .into(),
        Task::new("read1", "read_total").into(),
    ]));
    assert_eq!(h.log(), ["total=None", "total=Some(1)"]);
}
