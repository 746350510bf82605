//! Flowchart execution (FC-6 to FC-23) and the acceptance scenarios of
//! section 9, each citing the rules it pins.

use serde_json::{Value, json};
use workflow_model::{
    Activity, Connection, Definition, Delay, End, Event, Flowchart, Fork, If, Join, JoinMode,
    Switch, SwitchCase, SwitchMode, Task,
};

use super::{Harness, Log, block_on, event, log_task, logging_registry};
use crate::engine::executor::{RunEnd, RunTarget};
use crate::engine::state::{ActivityStatus, JournalKind, SubStatus, WorkflowStatus};
use crate::{Outcome, Registry, TaskContext};

/// A flowchart `root` over `nodes` and `source.port -> target` connections, checked by the
/// shared validator first (the runtime only runs valid definitions, FC-24).
pub(super) fn chart(nodes: Vec<Activity>, connections: &[(&str, &str, &str)]) -> Definition {
    chart_with_start(nodes, connections, None)
}

fn chart_with_start(
    nodes: Vec<Activity>,
    connections: &[(&str, &str, &str)],
    start: Option<&str>,
) -> Definition {
    let def = Definition::new(
        "Flow",
        Flowchart {
            id: "root".into(),
            start: start.map(|s| vec![s.to_owned()]).unwrap_or_default(),
            nodes,
            connections: connections
                .iter()
                .map(|(s, p, t)| Connection::new(*s, *p, *t))
                .collect(),
        },
    );
    if let Err(diagnostics) = workflow_model::validate(&def) {
        panic!("invalid test definition: {diagnostics}");
    }
    def
}

/// Logging tasks (`log:<name>`), plus `check`: increments the counter and completes with
/// `again` while `count < 3`, else `exit`; and `maybe`, which completes with `maybe`.
pub(super) fn registry() -> Registry<Log> {
    logging_registry(&[
        "a", "b", "c", "x", "y", "z", "w", "head", "body", "after", "j", "n", "t", "low", "high",
        "also", "other",
    ])
    .task("check", |cx: &mut TaskContext<Log>| {
        Box::pin(async move {
            cx.data_mut().count += 1;
            cx.data_mut().log.push("check".into());
            Ok(if cx.data().count < 3 {
                Outcome::named("again")
            } else {
                Outcome::named("exit")
            })
        })
    })
    .task("maybe", |_cx: &mut TaskContext<Log>| {
        Box::pin(async move { Ok(Outcome::named("maybe")) })
    })
    .condition("count_lt_3", |d: &Log| d.count < 3)
}

fn decision(id: &str, condition: &str) -> Activity {
    If {
        id: id.into(),
        condition: condition.into(),
        then: None,
        r#else: None,
    }
    .into()
}

fn check_task() -> Activity {
    Task::new("check", "check")
        .with_ports(["again", "exit"])
        .into()
}

fn count(h: &Harness, kind: JournalKind, node: &str) -> usize {
    h.journal_nodes(kind).iter().filter(|n| *n == node).count()
}

// Scenario 1 (FC-11, FC-21): `a -> b -> c` runs each node once, in order, and completes.
#[test]
fn fc_scenario1_linear_runs_each_node_once_and_completes() {
    let def = chart(
        vec![log_task("a", "a"), log_task("b", "b"), log_task("c", "c")],
        &[("a", "done", "b"), ("b", "done", "c")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a", "b", "c"]);
    assert_eq!(h.completed(), ["root:a", "root:b", "root:c", "root"]);
    assert_eq!(h.exec.state.status, WorkflowStatus::Finished);
    assert_eq!(h.exec.state.contexts.len(), 1, "ENG-7: children pruned");
}

// Scenario 1 (FC-6 step 5): a single node without connections runs and completes.
#[test]
fn fc6_single_node_without_connections_runs_and_completes() {
    let def = chart(vec![log_task("a", "a")], &[]);
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a"]);
}

// FC-6 step 2: an explicit start wins over declaration order.
#[test]
fn fc6_explicit_start_is_used() {
    let def = chart_with_start(
        vec![log_task("a", "a"), log_task("b", "b")],
        &[("b", "done", "a")],
        Some("b"),
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["b", "a"]);
}

// FC-10: the run state lives in the flowchart context's properties, keyed by node ids and
// connection keys, so every commit persists it.
#[test]
fn fc10_run_state_is_kept_in_properties() {
    let def = chart(
        vec![log_task("a", "a"), event("e", "go"), log_task("b", "b")],
        &[("a", "done", "e"), ("e", "done", "b")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    let root = h.exec.state.context(h.root()).unwrap();
    assert_eq!(root.properties["visits"], json!({"a": 1}));
    assert_eq!(root.properties["evaluations"], json!({"a.done->e": 1}));
    assert_eq!(root.properties["followed"], json!({"a.done->e": true}));
    assert_eq!(root.properties["live"]["e"], json!(h.live("root:e")[0]));
}

// Scenario 2 (FC-12, FC-13): decision diamond; `z` runs once, `y` is journaled as skipped.
#[test]
fn fc_scenario2_decision_diamond_implicit_join_and_skip() {
    let def = chart(
        vec![
            decision("d", "yes"),
            log_task("x", "x"),
            log_task("y", "y"),
            log_task("z", "z"),
        ],
        &[
            ("d", "true", "x"),
            ("d", "false", "y"),
            ("x", "done", "z"),
            ("y", "done", "z"),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["x", "z"]);
    assert_eq!(count(&h, JournalKind::Completed, "root:z"), 1);
    assert_eq!(h.journal_nodes(JournalKind::Skipped), ["root:y"]);
    let skip = h
        .exec
        .state
        .journal
        .entries
        .iter()
        .find(|e| e.kind == JournalKind::Skipped)
        .unwrap();
    assert_eq!(
        skip.detail.to_value()["reason"],
        "no inbound connection was followed"
    );
    // The decision node's output is the bool (ACT-13).
    assert_eq!(h.exec.state.status, WorkflowStatus::Finished);
}

// Scenario 2 with an explicit `all` join (FC-17): `z` and everything after it are skipped and
// the flowchart completes.
#[test]
fn fc_scenario2_join_all_after_a_decision_skips_everything_after_it() {
    let def = chart(
        vec![
            decision("d", "yes"),
            log_task("x", "x"),
            log_task("y", "y"),
            Join {
                id: "z".into(),
                mode: JoinMode::All,
            }
            .into(),
            log_task("w", "w"),
        ],
        &[
            ("d", "true", "x"),
            ("d", "false", "y"),
            ("x", "done", "z"),
            ("y", "done", "z"),
            ("z", "done", "w"),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["x"]);
    assert_eq!(
        h.journal_nodes(JournalKind::Skipped),
        ["root:y", "root:z", "root:w"]
    );
    assert_eq!(h.root_status(), ActivityStatus::Completed);
}

// FC-17 all, FC-19: after a fork both branches are followed, so the `all` join runs once.
#[test]
fn fc17_join_all_after_a_fork_runs_once_both_branches_done() {
    let def = chart(
        vec![
            Fork {
                id: "f".into(),
                branches: vec!["left".into(), "right".into()],
            }
            .into(),
            log_task("x", "x"),
            log_task("y", "y"),
            Join {
                id: "j".into(),
                mode: JoinMode::All,
            }
            .into(),
            log_task("z", "z"),
        ],
        &[
            ("f", "left", "x"),
            ("f", "right", "y"),
            ("x", "done", "j"),
            ("y", "done", "j"),
            ("j", "done", "z"),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["x", "y", "z"], "FC-9: FIFO interleaving");
    assert_eq!(count(&h, JournalKind::Completed, "root:j"), 1);
}

fn wait_any_chart() -> Definition {
    chart(
        vec![
            Fork {
                id: "f".into(),
                branches: vec!["left".into(), "right".into()],
            }
            .into(),
            Event::new("wait_event", "approved").into(),
            Delay::new("delay", 3_600_000).into(),
            Join {
                id: "j".into(),
                mode: JoinMode::Any,
            }
            .into(),
            log_task("after", "after"),
        ],
        &[
            ("f", "left", "wait_event"),
            ("f", "right", "delay"),
            ("wait_event", "done", "j"),
            ("delay", "done", "j"),
            ("j", "done", "after"),
        ],
    )
}

// Scenario 3 (FC-18, FC-23): fork to an event and a 1h delay, join `any`. The event arrives
// first: in that same step the join is scheduled first and the delay is cancelled, its
// bookmark gone; the join runs exactly once.
#[test]
fn fc_scenario3_wait_any_schedules_join_first_then_cancels_the_delay() {
    let def = wait_any_chart();
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    assert_eq!(h.bookmark_nodes(), ["root:wait_event", "root:delay"]);
    let delay = h.live("root:delay")[0];
    h.fire("root:wait_event", json!({"by": "ann"}));
    // One step: the join was scheduled and the delay cancelled, bookmark and all.
    assert!(
        h.exec.state.bookmarks.is_empty(),
        "the delay's bookmark is gone"
    );
    assert_eq!(h.queued_nodes(), ["root:j"]);
    assert_eq!(
        h.exec.state.context(delay).unwrap().status,
        ActivityStatus::Canceled
    );
    let scheduled: Vec<String> = h.journal_nodes(JournalKind::Scheduled);
    let canceled = h.journal_nodes(JournalKind::Canceled);
    assert!(scheduled.contains(&"root:j".to_owned()));
    assert_eq!(canceled, ["root:delay"]);
    let seq_of = |kind: JournalKind, node: &str| {
        h.exec
            .state
            .journal
            .entries
            .iter()
            .find(|e| e.kind == kind && e.node_id.as_deref() == Some(node))
            .map(|e| e.seq)
            .unwrap()
    };
    assert!(
        seq_of(JournalKind::Scheduled, "root:j") < seq_of(JournalKind::Canceled, "root:delay"),
        "FC-18: the join is scheduled before the branches are cancelled"
    );
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(count(&h, JournalKind::Completed, "root:j"), 1);
    assert_eq!(h.log(), ["after"]);
    // The join's input is the output of the arrival that made it ready (ACT-5).
}

// Scenario 3, the other way round: the delay (resumed by bookmark id, timers do not exist
// yet) fires first and the event's bookmark is removed.
#[test]
fn fc_scenario3_delay_first_cancels_the_event_wait() {
    let def = wait_any_chart();
    let mut h = Harness::new(&def, registry());
    h.run();
    h.fire("root:delay", json!(null));
    assert!(h.exec.state.bookmarks.is_empty());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(count(&h, JournalKind::Completed, "root:j"), 1);
    assert_eq!(h.journal_nodes(JournalKind::Canceled), ["root:wait_event"]);
}

/// Scenario 4's loop: `f` forks to the loop `head -> body -> check` (`check.again -> head`,
/// `check.exit -> after`) and to a parallel branch `x`; `after` and `x` feed the implicit
/// join `j`.
fn loop_chart(body: Activity) -> Definition {
    chart(
        vec![
            Fork {
                id: "f".into(),
                branches: vec!["looping".into(), "side".into()],
            }
            .into(),
            log_task("head", "head"),
            body,
            check_task(),
            log_task("after", "after"),
            log_task("x", "x"),
            log_task("j", "j"),
        ],
        &[
            ("f", "looping", "head"),
            ("f", "side", "x"),
            ("head", "done", "body"),
            ("body", "done", "check"),
            ("check", "again", "head"),
            ("check", "exit", "after"),
            ("after", "done", "j"),
            ("x", "done", "j"),
        ],
    )
}

// Scenario 4 (FC-15, FC-16): the loop's exit is deferred while the loop runs, so `j` runs only
// after the exit is taken, once; `after` runs once and is never skipped.
#[test]
fn fc_scenario4_loop_exit_is_deferred_and_the_join_waits_for_it() {
    let def = loop_chart(log_task("body", "body"));
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(
        h.log(),
        [
            "head", "x", "body", "check", "head", "body", "check", "head", "body", "check",
            "after", "j"
        ]
    );
    assert_eq!(count(&h, JournalKind::Completed, "root:j"), 1);
    assert_eq!(count(&h, JournalKind::Completed, "root:after"), 1);
    assert!(h.journal_nodes(JournalKind::Skipped).is_empty());
}

// FC-16, FC-12: a loop whose exit is never taken (it ends by an `end`... here: a body that
// waits) keeps its exit deferred; the join does not run while the loop is active.
#[test]
fn fc16_join_waits_while_the_loop_waits() {
    let def = loop_chart(event("body", "tick"));
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    h.fire("root:body", json!(1));
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    let root = h.exec.state.context(h.root()).unwrap();
    assert_eq!(
        root.properties["deferred_exits"],
        json!({"head": ["check.exit->after"]}),
        "FC-10, FC-16: the not-followed exit is deferred, not counted"
    );
    assert!(h.live("root:j").is_empty() && !h.log().contains(&"j".to_owned()));
    // Persistence round trip mid-flowchart (SM-8 style): the run state survives.
    let mut h = h.round_trip(&def, registry());
    h.fire("root:body", json!(2));
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    h.fire("root:body", json!(3));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(count(&h, JournalKind::Completed, "root:j"), 1);
    assert_eq!(count(&h, JournalKind::Completed, "root:after"), 1);
}

// Scenario 5 (FC-7, FC-6 step 4): two triggers both lead to `n`. Trigger-created instances
// (RT-13, FC-6 step 1) do not exist yet, so this pins the plain start: it begins at the first
// trigger, which waits as an ordinary event (ACT-7); the other trigger is skipped, and `n`
// runs once.
#[test]
fn fc_scenario5_two_triggers_to_one_node_plain_start() {
    let mut t1 = Event::new("t1", "paid");
    t1.trigger = true;
    let mut t2 = Event::new("t2", "shipped");
    t2.trigger = true;
    let def = chart(
        vec![t1.into(), t2.into(), log_task("n", "n")],
        &[("t1", "done", "n"), ("t2", "done", "n")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Waiting));
    assert_eq!(h.bookmark_nodes(), ["root:t1"]);
    assert_eq!(h.journal_nodes(JournalKind::Skipped), ["root:t2"]);
    h.fire("root:t1", json!({}));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["n"]);
}

// Scenario 6 (FC-20, ENG-14): `end` reached while another branch waits on an event: the
// flowchart completes and the event's bookmark is removed.
#[test]
fn fc_scenario6_end_completes_the_flowchart_and_removes_the_bookmark() {
    let def = chart(
        vec![
            Fork {
                id: "f".into(),
                branches: vec!["wait".into(), "work".into()],
            }
            .into(),
            event("e", "never"),
            log_task("t", "t"),
            End::new("done").into(),
            log_task("z", "z"),
        ],
        &[
            ("f", "wait", "e"),
            ("f", "work", "t"),
            ("t", "done", "done"),
            ("e", "done", "z"),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert!(h.exec.state.bookmarks.is_empty());
    assert_eq!(h.journal_nodes(JournalKind::Canceled), ["root:e"]);
    assert_eq!(h.log(), ["t"]);
    assert_eq!(h.exec.state.status, WorkflowStatus::Finished);
}

// FC-4: a node with declared ports that completes with another outcome fails for good.
#[test]
fn fc4_undeclared_outcome_fails_with_a_permanent_error() {
    let def = chart(
        vec![
            Task::new("review", "maybe")
                .with_ports(["approved", "rejected"])
                .into(),
            log_task("a", "a"),
        ],
        &[("review", "approved", "a")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Faulted);
    let incident = &h.exec.state.incidents[0];
    assert_eq!(incident.node_id, "root:review");
    assert_eq!(
        incident.fault.message,
        "node `review` completed with undeclared outcome `maybe`"
    );
}

// FC-2, FC-4: an open task (JSON, no `ports`) may complete with any outcome; a followed port
// with no connection ends that path.
#[test]
fn fc4_open_ports_accept_any_outcome() {
    let def = chart(
        vec![Task::new("review", "maybe").into(), log_task("a", "a")],
        &[("review", "approved", "a")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert!(h.log().is_empty());
    assert_eq!(h.journal_nodes(JournalKind::Skipped), ["root:a"]);
}

// FC-22: cancelling the instance cancels the flowchart and its waiting children; no outcome
// is routed.
#[test]
fn fc22_cancelling_a_flowchart_cancels_its_children() {
    let def = chart(
        vec![event("e", "go"), log_task("a", "a")],
        &[("e", "done", "a")],
    );
    let mut h = Harness::new(&def, registry());
    h.run();
    h.exec.cancel_instance(None).unwrap();
    assert_eq!(h.root_status(), ActivityStatus::Canceled);
    assert!(h.exec.state.bookmarks.is_empty());
    assert!(h.log().is_empty());
}

// FC-23: a faulted child routes nothing and the flowchart cannot complete.
#[test]
fn fc23_faulted_child_keeps_the_flowchart_running() {
    let def = chart(
        vec![
            Task::new("review", "maybe").with_ports(["approved"]).into(),
            log_task("a", "a"),
        ],
        &[("review", "approved", "a")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Faulted);
    assert_eq!(h.root_status(), ActivityStatus::Running);
    assert_eq!(h.exec.state.callbacks.len(), 1, "ENG-15: entry kept");
}

// ACT-14 node form: a switch routes by its first matching label, or `default`.
#[test]
fn act14_switch_node_routes_by_label() {
    let switch = |mode: SwitchMode| -> Activity {
        Switch {
            id: "s".into(),
            cases: vec![
                SwitchCase {
                    label: "low".into(),
                    condition: "no".into(),
                    body: None,
                },
                SwitchCase {
                    label: "high".into(),
                    condition: "yes".into(),
                    body: None,
                },
                SwitchCase {
                    label: "also".into(),
                    condition: "yes".into(),
                    body: None,
                },
            ],
            mode,
            default: None,
        }
        .into()
    };
    let conns = [
        ("s", "low", "low"),
        ("s", "high", "high"),
        ("s", "also", "also"),
        ("s", "default", "other"),
    ];
    let nodes = |mode| {
        vec![
            switch(mode),
            log_task("low", "low"),
            log_task("high", "high"),
            log_task("also", "also"),
            log_task("other", "other"),
        ]
    };
    let mut h = Harness::new(&chart(nodes(SwitchMode::First), &conns), registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["high"]);
    let mut h = Harness::new(&chart(nodes(SwitchMode::Any), &conns), registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["high", "also"]);
}

// ENG-7, ENG-10: a flowchart loop of 10,000 iterations keeps the state bounded: the run state
// holds counters, not history, and each budget slice prunes finished contexts.
#[test]
fn eng7_ten_thousand_loop_iterations_keep_the_state_bounded() {
    let registry = registry().task("check10k", |cx: &mut TaskContext<Log>| {
        Box::pin(async move {
            cx.data_mut().count += 1;
            Ok(if cx.data().count < 10_000 {
                Outcome::named("again")
            } else {
                Outcome::named("exit")
            })
        })
    });
    let def = chart(
        vec![
            workflow_model::Start::new("head").into(),
            Task::new("check", "check10k")
                .with_ports(["again", "exit"])
                .into(),
            End::new("done").into(),
        ],
        &[
            ("head", "done", "check"),
            ("check", "again", "head"),
            ("check", "exit", "done"),
        ],
    );
    let mut h = Harness::new(&def, registry);
    let mut sizes = Vec::new();
    let end = loop {
        let end = block_on(h.exec.run(RunTarget::None, 1_000)).unwrap();
        sizes.push(serde_json::to_string(&h.exec.state).unwrap().len());
        if end != RunEnd::Budget {
            break end;
        }
    };
    assert_eq!(end, RunEnd::Finished);
    let data: Log = serde_json::from_value(h.exec.state.data.clone()).unwrap();
    assert_eq!(data.count, 10_000, "10,000 iterations");
    assert!(sizes.len() > 10);
    let (first, max) = (sizes[1], sizes.iter().copied().max().unwrap());
    assert!(
        max <= first + 64,
        "state grew from {first} to {max} bytes over the loop: {sizes:?}"
    );
}

// ACT-5: a node scheduled by a completion gets that completion's output as input.
#[test]
fn act5_output_becomes_the_next_nodes_input() {
    let registry = registry().task("read_input", |cx: &mut TaskContext<Log>| {
        Box::pin(async move {
            let input: Value = cx.input()?;
            cx.data_mut().log.push(input.to_string());
            Ok(Outcome::done())
        })
    });
    let def = chart(
        vec![event("e", "go"), Task::new("r", "read_input").into()],
        &[("e", "done", "r")],
    );
    let mut h = Harness::new(&def, registry);
    h.run();
    h.fire("root:e", json!({"amount": 5}));
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), [r#"{"amount":5}"#]);
}

// FC-13: a skip spread that reaches a node through two skipped sources skips it once (its
// visit is counted when the skip is decided, before the second check).
#[test]
fn fc13_a_skip_reaching_a_node_twice_skips_it_once() {
    let def = chart(
        vec![
            decision("d", "yes"),
            log_task("a", "a"),
            Fork {
                id: "f".into(),
                branches: vec!["l".into(), "r".into()],
            }
            .into(),
            log_task("x", "x"),
            log_task("y", "y"),
            Join {
                id: "j".into(),
                mode: JoinMode::Any,
            }
            .into(),
            log_task("z", "z"),
            log_task("w", "w"),
        ],
        &[
            ("d", "true", "a"),
            ("d", "false", "f"),
            ("f", "l", "x"),
            ("f", "r", "y"),
            ("x", "done", "j"),
            ("y", "done", "j"),
            ("j", "done", "z"),
            ("a", "done", "w"),
            ("z", "done", "w"),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a", "w"]);
    assert_eq!(
        h.journal_nodes(JournalKind::Skipped),
        ["root:f", "root:x", "root:y", "root:j", "root:z"]
    );
}

fn inner_chart(id: &str) -> Activity {
    Flowchart {
        id: id.into(),
        start: Vec::new(),
        nodes: vec![Task::new("inc", "incr").into(), log_task("y", "y")],
        connections: vec![Connection::new("inc", "done", "y")],
    }
    .into()
}

// FC-8, FC-9: a flowchart is a node of another, and a nested flowchart that its parent runs
// again (a loop body) starts with fresh run state each time.
#[test]
fn fc8_nested_flowchart_runs_afresh_each_time() {
    let def = chart(
        vec![log_task("a", "a"), inner_chart("inner"), log_task("b", "b")],
        &[("a", "done", "inner"), ("inner", "done", "b")],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["a", "y", "b"]);

    let def = Definition::new(
        "Loop",
        workflow_model::While {
            id: "root".into(),
            condition: "count_lt_3".into(),
            body: Box::new(inner_chart("body")),
        },
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["y", "y", "y"]);
}

// FC-15, FC-16 with nested loops: an inner self-loop inside an outer loop. `ih.bail -> after`
// leaves both loops, so the outer loop decides when its deferred evaluation counts; `after`
// (an implicit join of the outer exit and the bail path) runs once, after the outer loop.
#[test]
fn fc16_nested_loops_outermost_loop_decides() {
    let registry = registry()
        .task("inner", |cx: &mut TaskContext<Log>| {
            Box::pin(async move {
                cx.data_mut().count += 1;
                cx.data_mut().log.push("ih".into());
                Ok(if cx.data().count % 2 == 1 {
                    Outcome::named("again")
                } else {
                    Outcome::named("next")
                })
            })
        })
        .task("outer", |cx: &mut TaskContext<Log>| {
            Box::pin(async move {
                cx.data_mut().log.push("oc".into());
                let rounds = cx.data().log.iter().filter(|l| *l == "oc").count();
                Ok(if rounds < 2 {
                    Outcome::named("again")
                } else {
                    Outcome::named("exit")
                })
            })
        });
    let def = chart_with_start(
        vec![
            log_task("oh", "head"),
            Task::new("ih", "inner")
                .with_ports(["again", "next", "bail"])
                .into(),
            Task::new("oc", "outer")
                .with_ports(["again", "exit"])
                .into(),
            log_task("after", "after"),
        ],
        &[
            ("oh", "done", "ih"),
            ("ih", "again", "ih"),
            ("ih", "next", "oc"),
            ("ih", "bail", "after"),
            ("oc", "again", "oh"),
            ("oc", "exit", "after"),
        ],
        Some("oh"),
    );
    let analysis = match &def.root {
        Activity::Flowchart(f) => workflow_model::analyze_flowchart(f),
        _ => unreachable!(),
    };
    assert_eq!(analysis.loops.len(), 2, "{analysis:?}");
    let mut h = Harness::new(&def, registry);
    h.begin();
    h.step(); // the flowchart schedules `oh`
    h.step(); // `oh` schedules `ih`
    h.step(); // `ih` takes `again`: its exits are deferred, `bail` on the outer loop's head
    let root = h.exec.state.context(h.root()).unwrap();
    assert_eq!(
        root.properties["deferred_exits"],
        json!({"ih": ["ih.next->oc"], "oh": ["ih.bail->after"]})
    );
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(
        h.log(),
        ["head", "ih", "ih", "oc", "head", "ih", "ih", "oc", "after"]
    );
    assert_eq!(count(&h, JournalKind::Completed, "root:after"), 1);
    assert!(h.journal_nodes(JournalKind::Skipped).is_empty());
}
