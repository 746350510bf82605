//! Property test of the engine: a generated definition that validates (a state machine, a
//! flowchart of tasks, events, delays, decisions, forks and joins, or a sequence of structured
//! activities: `if`, `while`, `for_each`, `parallel_for_each`, `parallel` all or any, nested
//! sequences), run on a `TestRuntime`
//! over the in-memory store under a random sequence of stimuli and clock advances, never gets
//! an engine error, and always ends finished or cleanly suspended (waiting on a bookmark, with
//! no incident).
//!
//! The case count is kept small so it runs in seconds; `PROPTEST_CASES` raises it.

mod common;

use std::time::Duration;

use common::block_on;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_runtime::model::Definition;
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    Outcome, Registry, Runtime, SendError, Stimulus, TaskContext, TaskError, WorkflowStatus,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Data {
    log: Vec<String>,
    flag: bool,
}

/// The user code every generated definition may name: `work` succeeds, `flaky` fails its
/// first attempt (a retry through a durable timer), `toggle` flips `flag`, the condition
/// `flag` reads it, the items fn `pair` lists two items.
fn registry() -> Registry<Data> {
    Registry::new()
        .task("work", |cx: &mut TaskContext<Data>| {
            Box::pin(async move {
                cx.data_mut().log.push("work".into());
                Ok(Outcome::done())
            })
        })
        .task("flaky", |cx: &mut TaskContext<Data>| {
            Box::pin(async move {
                if cx.attempt() == 1 {
                    return Err(TaskError::new("first attempt fails"));
                }
                cx.data_mut().log.push("flaky".into());
                Ok(Outcome::done())
            })
        })
        .task("toggle", |cx: &mut TaskContext<Data>| {
            Box::pin(async move {
                cx.data_mut().flag = !cx.data().flag;
                Ok(Outcome::done())
            })
        })
        .condition("flag", |data: &Data| data.flag)
        .items("pair", |_data: &Data| vec![1, 2])
}

const EVENTS: usize = 3;

/// The workflow's retry policy: `flaky` succeeds on its second attempt, a second later
/// (without a policy a task has one attempt, FLT-2, and `flaky` would fault the instance).
fn retry() -> Value {
    json!({"max_attempts": 2, "initial_delay_ms": 1_000, "jitter": 0})
}
const TASKS: [&str; 3] = ["work", "flaky", "toggle"];

/// What a transition of a generated state machine waits for.
#[derive(Debug, Clone)]
enum Trigger {
    Event(usize),
    Delay(u64),
}

/// How a generated state is left.
#[derive(Debug, Clone)]
enum Exit {
    /// One automatic transition to a later state.
    Automatic(usize),
    /// Triggered transitions: (trigger, target, conditional).
    Triggered(Vec<(Trigger, usize, bool)>),
    /// None: a terminal state.
    Terminal,
}

#[derive(Debug, Clone)]
struct MachineSpec {
    entries: Vec<Option<usize>>,
    exits: Vec<Exit>,
}

fn trigger() -> impl Strategy<Value = Trigger> {
    prop_oneof![
        3 => (0..EVENTS).prop_map(Trigger::Event),
        1 => (1..5u64).prop_map(|s| Trigger::Delay(s * 1_000)),
    ]
}

fn machine() -> impl Strategy<Value = MachineSpec> {
    (2..6usize).prop_flat_map(|n| {
        let entries = prop::collection::vec(prop::option::of(0..TASKS.len()), n);
        let exit = prop_oneof![
            1 => (0..n).prop_map(Exit::Automatic),
            3 => prop::collection::vec((trigger(), 0..n, prop::bool::weighted(0.2)), 1..4)
                .prop_map(Exit::Triggered),
            1 => Just(Exit::Terminal),
        ];
        (entries, prop::collection::vec(exit, n))
            .prop_map(|(entries, exits)| MachineSpec { entries, exits })
    })
}

/// The JSON of a generated state machine: state `i` always has a way to `i + 1`, so every
/// state is reachable; automatic transitions only go forward, so they never loop; the events
/// of one state are distinct and it has at most one delay.
fn machine_json(spec: &MachineSpec) -> Value {
    let n = spec.exits.len();
    let mut states = Vec::new();
    let mut transitions = Vec::new();
    for (i, (entry, exit)) in spec.entries.iter().zip(&spec.exits).enumerate() {
        let mut state = json!({ "name": format!("S{i}") });
        if let Some(task) = entry {
            state["entry"] = json!({"kind": "task", "id": format!("S{i}_entry"),
                "function": TASKS[*task]});
        }
        states.push(state);
        let last = i + 1 == n;
        let mut exit = exit.clone();
        if let Exit::Automatic(target) = exit {
            exit = if target > i {
                Exit::Automatic(target)
            } else if last {
                Exit::Terminal
            } else {
                Exit::Automatic(i + 1)
            };
        }
        if matches!(exit, Exit::Terminal) && !last {
            exit = Exit::Automatic(i + 1);
        }
        match exit {
            Exit::Automatic(target) => {
                transitions.push(json!({"from": format!("S{i}"), "to": format!("S{target}")}));
            }
            Exit::Triggered(ways) => {
                let mut events = [false; EVENTS];
                let mut delay = false;
                for (k, (trigger, target, conditional)) in ways.into_iter().enumerate() {
                    // The first way leads on (unconditionally), so the next state is reachable.
                    let target = if k == 0 && !last { i + 1 } else { target };
                    let trigger = match trigger {
                        Trigger::Event(e) if !events[e] => {
                            events[e] = true;
                            json!({"kind": "event", "id": format!("S{i}_t{k}"),
                                "event": format!("e{e}")})
                        }
                        Trigger::Delay(ms) if !delay => {
                            delay = true;
                            json!({"kind": "delay", "id": format!("S{i}_t{k}"), "duration_ms": ms})
                        }
                        _ => continue,
                    };
                    let mut transition = json!({"name": format!("S{i}_{k}"),
                        "from": format!("S{i}"), "to": format!("S{target}"), "trigger": trigger});
                    if conditional && k > 0 {
                        transition["condition"] = json!("flag");
                    }
                    transitions.push(transition);
                }
            }
            Exit::Terminal => {}
        }
    }
    json!({"name": "Generated", "retry": retry(), "root": {"kind": "state_machine", "id": "root",
        "initial": "S0", "states": states, "transitions": transitions}})
}

/// A step of a generated flowchart: one node, or a fork of two one-node branches and a join.
#[derive(Debug, Clone)]
enum Block {
    Task(usize),
    Event(usize),
    Delay(u64),
    /// An `if flag` whose two ports both lead on.
    Decide,
    Fork(Box<Block>, Box<Block>, bool),
}

fn leaf_block() -> impl Strategy<Value = Block> {
    prop_oneof![
        (0..TASKS.len()).prop_map(Block::Task),
        (0..EVENTS).prop_map(Block::Event),
        (1..5u64).prop_map(|s| Block::Delay(s * 1_000)),
    ]
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        4 => leaf_block(),
        1 => Just(Block::Decide),
        1 => (leaf_block(), leaf_block(), any::<bool>())
            .prop_map(|(a, b, all)| Block::Fork(Box::new(a), Box::new(b), all)),
    ]
}

/// The JSON of a generated flowchart: the blocks in a chain, then an `end`.
fn flowchart_json(blocks: &[Block]) -> Value {
    struct Chart {
        nodes: Vec<Value>,
        connections: Vec<Value>,
    }
    fn leaf(chart: &mut Chart, block: &Block) -> String {
        let id = format!("n{}", chart.nodes.len());
        chart.nodes.push(match block {
            Block::Task(t) => json!({"kind": "task", "id": id, "function": TASKS[*t]}),
            Block::Event(e) => json!({"kind": "event", "id": id, "event": format!("e{e}")}),
            Block::Delay(ms) => json!({"kind": "delay", "id": id, "duration_ms": ms}),
            Block::Decide | Block::Fork(..) => {
                json!({"kind": "task", "id": id, "function": "work"})
            }
        });
        id
    }
    let connect = |chart: &mut Chart, from: &str, port: &str, to: &str| {
        chart
            .connections
            .push(json!({"source": from, "port": port, "target": to}));
    };
    let mut chart = Chart {
        nodes: Vec::new(),
        connections: Vec::new(),
    };
    // Each block's (entry node, [(exit node, port)]).
    let mut previous: Vec<(String, &str)> = Vec::new();
    for block in blocks {
        let (entry, exits): (String, Vec<(String, &str)>) = match block {
            Block::Decide => {
                let id = format!("n{}", chart.nodes.len());
                chart
                    .nodes
                    .push(json!({"kind": "if", "id": id, "condition": "flag"}));
                (id.clone(), vec![(id.clone(), "true"), (id, "false")])
            }
            Block::Fork(a, b, all) => {
                let fork = format!("n{}", chart.nodes.len());
                chart
                    .nodes
                    .push(json!({"kind": "fork", "id": fork, "branches": ["left", "right"]}));
                let left = leaf(&mut chart, a);
                let right = leaf(&mut chart, b);
                let join = format!("n{}", chart.nodes.len());
                chart.nodes.push(json!({"kind": "join", "id": join,
                    "mode": if *all { "all" } else { "any" }}));
                connect(&mut chart, &fork, "left", &left);
                connect(&mut chart, &fork, "right", &right);
                connect(&mut chart, &left, "done", &join);
                connect(&mut chart, &right, "done", &join);
                (fork, vec![(join, "done")])
            }
            leaf_kind => {
                let id = leaf(&mut chart, leaf_kind);
                (id.clone(), vec![(id, "done")])
            }
        };
        for (from, port) in previous.drain(..) {
            connect(&mut chart, &from, port, &entry);
        }
        previous = exits;
    }
    let end = format!("n{}", chart.nodes.len());
    chart.nodes.push(json!({"kind": "end", "id": end}));
    for (from, port) in previous.drain(..) {
        connect(&mut chart, &from, port, &end);
    }
    json!({"name": "Generated", "retry": retry(), "root": {"kind": "flowchart", "id": "root", "start": "n0",
        "nodes": chart.nodes, "connections": chart.connections}})
}

/// A step of a generated structured sequence.
#[derive(Debug, Clone)]
enum Step {
    Task(usize),
    Event(usize),
    Delay(u64),
    /// `if flag [then] else [else]`, the `else` optional.
    If(Vec<Step>, Option<Vec<Step>>),
    /// `while flag [toggle, body..]`: the body starts by clearing the flag it set, so the loop
    /// runs at most once (the body holds no other `toggle`).
    While(Vec<Step>),
    /// `for_each(pair) [body]` or, when parallel, `parallel_for_each(pair)`.
    ForEach(Vec<Step>, bool),
    /// `parallel` all (`true`) or any, each branch a sequence.
    Parallel(Vec<Vec<Step>>, bool),
}

/// A leaf step; `toggle` only where `allow_toggle`.
fn leaf_step(allow_toggle: bool) -> impl Strategy<Value = Step> {
    let tasks = if allow_toggle { TASKS.len() } else { 2 };
    prop_oneof![
        3 => (0..tasks).prop_map(Step::Task),
        2 => (0..EVENTS).prop_map(Step::Event),
        1 => (1..5u64).prop_map(|s| Step::Delay(s * 1_000)),
    ]
}

/// Steps nested at most two levels deep; no `toggle` inside a loop body, and no `while` where
/// it could run concurrently with another (in a `parallel` branch or a `parallel_for_each`
/// body, `allow_loop` false): two such loops sharing `flag` and stepping in lockstep each undo
/// the other's `toggle` (`flag` true -> false -> true) and so loop forever, which is the
/// definition's doing, not the engine's.
fn steps(depth: u32, allow_toggle: bool, allow_loop: bool) -> BoxedStrategy<Vec<Step>> {
    if depth == 0 {
        return prop::collection::vec(leaf_step(allow_toggle), 1..3).boxed();
    }
    let inner = move |toggle: bool, loops: bool| steps(depth - 1, toggle, loops);
    let branching = prop_oneof![
        4 => leaf_step(allow_toggle),
        1 => (inner(allow_toggle, allow_loop), prop::option::of(inner(allow_toggle, allow_loop)))
            .prop_map(|(then, other)| Step::If(then, other)),
        1 => inner(false, allow_loop).prop_map(|body| Step::ForEach(body, false)),
        1 => inner(false, false).prop_map(|body| Step::ForEach(body, true)),
        1 => (prop::collection::vec(inner(allow_toggle, false), 1..3), any::<bool>())
            .prop_map(|(branches, all)| Step::Parallel(branches, all)),
    ];
    let step = if allow_loop {
        prop_oneof![7 => branching, 1 => inner(false, true).prop_map(Step::While)].boxed()
    } else {
        branching.boxed()
    };
    prop::collection::vec(step, 1..4).boxed()
}

/// The JSON of a generated structured sequence.
fn sequence_json(root: &[Step]) -> Value {
    fn sequence(next: &mut usize, steps: &[Step]) -> Value {
        let id = format!("s{next}");
        *next += 1;
        let steps: Vec<Value> = steps.iter().map(|s| step(next, s)).collect();
        json!({"kind": "sequence", "id": id, "steps": steps})
    }
    fn step(next: &mut usize, step: &Step) -> Value {
        let id = format!("s{next}");
        *next += 1;
        match step {
            Step::Task(t) => json!({"kind": "task", "id": id, "function": TASKS[*t]}),
            Step::Event(e) => json!({"kind": "event", "id": id, "event": format!("e{e}")}),
            Step::Delay(ms) => json!({"kind": "delay", "id": id, "duration_ms": ms}),
            Step::If(then, other) => {
                let mut node = json!({"kind": "if", "id": id, "condition": "flag",
                    "then": sequence(next, then)});
                if let Some(other) = other {
                    node["else"] = sequence(next, other);
                }
                node
            }
            Step::While(body) => {
                let mut body = body.clone();
                body.insert(0, Step::Task(2));
                json!({"kind": "while", "id": id, "condition": "flag",
                    "body": sequence(next, &body)})
            }
            Step::ForEach(body, parallel) => {
                let kind = if *parallel {
                    "parallel_for_each"
                } else {
                    "for_each"
                };
                json!({"kind": kind, "id": id, "items": "pair", "body": sequence(next, body)})
            }
            Step::Parallel(branches, all) => {
                let branches: Vec<Value> = branches.iter().map(|b| sequence(next, b)).collect();
                json!({"kind": "parallel", "id": id, "branches": branches,
                    "mode": if *all { "all" } else { "any" }})
            }
        }
    }
    let mut next = 0;
    json!({"name": "Generated", "retry": retry(), "root": sequence(&mut next, root)})
}

/// What the test does to the running instance.
#[derive(Debug, Clone)]
enum Op {
    /// Send event `e{k}` to the instance; queued when nothing waits for it, or not.
    Send(usize, bool),
    /// Move the clock forward.
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => ((0..EVENTS), any::<bool>()).prop_map(|(e, queue)| Op::Send(e, queue)),
        2 => (0..6_000u64).prop_map(Op::Advance),
    ]
}

/// Runs `definition` under `ops`, checking every answer of the engine and the end state.
fn run(definition: Value, ops: &[Op]) -> Result<(), TestCaseError> {
    let text = definition.to_string();
    if let Err(err) = Definition::from_json(&text) {
        // The generators aim at valid definitions; one that is not is not this property's.
        return Err(TestCaseError::reject(format!("invalid: {err}")));
    }
    block_on(async {
        let builder = Runtime::builder().register_json(text.clone(), registry());
        let test = TestRuntime::build(builder).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let started = test
            .start_by_name("Generated", json!({}), Default::default())
            .await;
        let id = match started {
            Ok(started) => started.instance_id,
            Err(err) => return Err(TestCaseError::fail(format!("start: {err}\n{text}"))),
        };
        for op in ops {
            match *op {
                Op::Send(event, queue) => {
                    let stimulus = Stimulus::new(format!("e{event}"))
                        .instance(id.clone())
                        .inbox(queue);
                    let report = test.send(stimulus).await;
                    let report = match report {
                        Ok(report) => report,
                        // A send aimed at a finished instance says so (typed, not an engine
                        // error); the end state below must then be final.
                        Err(SendError::InstanceTerminal { .. }) => continue,
                        Err(err) => {
                            return Err(TestCaseError::fail(format!("send {op:?}: {err}\n{text}")));
                        }
                    };
                    prop_assert!(
                        report.not_delivered.is_empty() && report.rejected.is_empty(),
                        "{op:?}: {report:?}\n{text}"
                    );
                }
                Op::Advance(ms) => {
                    let fired = test.advance(Duration::from_millis(ms)).await;
                    let fired = match fired {
                        Ok(fired) => fired,
                        Err(err) => {
                            return Err(TestCaseError::fail(format!("advance: {err}\n{text}")));
                        }
                    };
                    // A timer claimed in the same batch as one whose firing withdrew its
                    // bookmark (the other branch of a wait-any join) is reported as failed
                    // though it is only obsolete; anything else failed for real.
                    let state = test
                        .get_state(&id)
                        .await
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    for (instance, timer) in &fired.failed {
                        let live = state
                            .as_ref()
                            .is_some_and(|s| s.state.bookmarks().iter().any(|b| &b.id == timer));
                        prop_assert!(
                            instance == &id && !live,
                            "timer {timer} failed: {fired:?}\n{text}"
                        );
                    }
                }
            }
        }
        let snapshot = test
            .get_state(&id)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(snapshot.is_some(), "the instance is gone\n{text}");
        let Some(snapshot) = snapshot else {
            return Ok(());
        };
        let state = &snapshot.state;
        prop_assert!(
            state.incidents().is_empty(),
            "incidents: {:?}\n{text}",
            state.incidents()
        );
        match snapshot.status() {
            WorkflowStatus::Finished => {
                prop_assert!(state.bookmarks().is_empty());
                // Nothing is left to fire: an hour later (past every claim), no timer fires
                // and none fails.
                let later = test
                    .advance(Duration::from_secs(3_600))
                    .await
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    later.fired.is_empty() && later.failed.is_empty(),
                    "{later:?}\n{text}"
                );
            }
            WorkflowStatus::Suspended => prop_assert!(
                !state.bookmarks().is_empty(),
                "suspended on nothing: {:?}\n{text}",
                snapshot.sub_status()
            ),
            other => {
                return Err(TestCaseError::fail(format!(
                    "ended {other}: {:?}\n{text}",
                    snapshot.journal
                )));
            }
        }
        Ok(())
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(64),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn generated_state_machines_finish_or_wait_cleanly(
        spec in machine(),
        ops in prop::collection::vec(op(), 0..16),
    ) {
        run(machine_json(&spec), &ops)?;
    }

    #[test]
    fn generated_flowcharts_finish_or_wait_cleanly(
        blocks in prop::collection::vec(block(), 1..6),
        ops in prop::collection::vec(op(), 0..16),
    ) {
        run(flowchart_json(&blocks), &ops)?;
    }

    #[test]
    fn generated_structured_sequences_finish_or_wait_cleanly(
        root in steps(2, true, true),
        ops in prop::collection::vec(op(), 0..16),
    ) {
        run(sequence_json(&root), &ops)?;
    }
}

/// The generators make valid definitions (a property that rejects every case would test
/// nothing): a few fixed ones validate.
#[test]
fn generated_definitions_validate() {
    let spec = MachineSpec {
        entries: vec![Some(1), None, Some(2)],
        exits: vec![
            Exit::Triggered(vec![
                (Trigger::Event(0), 2, false),
                (Trigger::Delay(1_000), 0, true),
            ]),
            Exit::Automatic(2),
            Exit::Terminal,
        ],
    };
    Definition::from_json(&machine_json(&spec).to_string()).unwrap();
    let blocks = [
        Block::Task(1),
        Block::Decide,
        Block::Fork(
            Box::new(Block::Event(0)),
            Box::new(Block::Delay(1_000)),
            false,
        ),
        Block::Event(2),
    ];
    Definition::from_json(&flowchart_json(&blocks).to_string()).unwrap();
    let root = [
        Step::Task(0),
        Step::If(vec![Step::Event(1)], Some(vec![Step::Delay(1_000)])),
        Step::While(vec![Step::Task(1)]),
        Step::ForEach(vec![Step::Task(0), Step::Event(0)], true),
        Step::ForEach(vec![Step::Task(1)], false),
        Step::Parallel(vec![vec![Step::Event(2)], vec![Step::Task(2)]], false),
    ];
    Definition::from_json(&sequence_json(&root).to_string()).unwrap();
}
