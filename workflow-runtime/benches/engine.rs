//! Engine overhead in memory, beside the same steps written as a
//! hand-written `match` over an enum. Run with:
//!
//! ```text
//! cargo bench -p workflow-runtime --bench engine
//! ```
//!
//! Prints one table; not a timed test. The runtime's futures never wait here (uncontended
//! locks, tasks that complete at once), so they are polled with a no-op waker and the numbers
//! are the engine's, not an async executor's.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use workflow_runtime::model::{Definition, Event, Sequence, State, StateMachine, Task, Transition};
use workflow_runtime::{
    Outcome, Registry, Runtime, Stimulus, TaskContext, Workflow, WorkflowStatus,
};

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Counter {
    id: String,
    count: u64,
}

fn incr(
    cx: &mut TaskContext<Counter>,
) -> workflow_runtime::BoxFuture<'_, workflow_runtime::TaskResult> {
    Box::pin(async move {
        cx.data_mut().count += 1;
        Ok(Outcome::done())
    })
}

struct Seq3;

impl Workflow for Seq3 {
    type Data = Counter;
    fn name() -> &'static str {
        "Seq3"
    }
    fn definition() -> &'static Definition {
        static D: OnceLock<Definition> = OnceLock::new();
        D.get_or_init(|| {
            Definition::new(
                "Seq3",
                Sequence {
                    id: "root".into(),
                    steps: vec![
                        Task::new("a", "incr").into(),
                        Task::new("b", "incr").into(),
                        Task::new("c", "incr").into(),
                    ],
                },
            )
        })
    }
    fn registry() -> Registry<Counter> {
        Registry::new().task("incr", incr)
    }
}

struct PingPong;

impl Workflow for PingPong {
    type Data = Counter;
    fn name() -> &'static str {
        "PingPong"
    }
    fn definition() -> &'static Definition {
        static D: OnceLock<Definition> = OnceLock::new();
        D.get_or_init(|| {
            let mut go = Transition::new("Idle", "Idle");
            go.name = Some("go".into());
            go.trigger = Some(Event::new("go", "go").with_key("id").into());
            Definition::new(
                "PingPong",
                StateMachine {
                    id: "root".into(),
                    initial: "Idle".into(),
                    states: vec![State::new("Idle")],
                    transitions: vec![go],
                },
            )
        })
    }
    fn registry() -> Registry<Counter> {
        Registry::new()
    }
}

/// The same three steps as a hand-written state enum and `match`.
#[derive(Clone, Copy)]
enum SeqStep {
    A,
    B,
    C,
    Done,
}

fn hand_sequence(data: &mut Counter) {
    let mut step = SeqStep::A;
    loop {
        step = match step {
            SeqStep::A => {
                data.count += 1;
                SeqStep::B
            }
            SeqStep::B => {
                data.count += 1;
                SeqStep::C
            }
            SeqStep::C => {
                data.count += 1;
                SeqStep::Done
            }
            SeqStep::Done => return,
        };
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Machine {
    Idle,
}

enum Input<'a> {
    Go { key: &'a str },
}

fn hand_transition(state: Machine, input: &Input<'_>, id: &str) -> Machine {
    match (state, input) {
        (Machine::Idle, Input::Go { key }) if *key == id => Machine::Idle,
        (s, _) => s,
    }
}

fn time<F: FnMut()>(iterations: u32, mut f: F) -> f64 {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(iterations)
}

fn main() {
    let rt = Runtime::builder()
        .register::<Seq3>()
        .register::<PingPong>()
        .build()
        .unwrap();
    let n = 20_000;

    let sequence = time(n, || {
        let started = block_on(rt.start::<Seq3>(Counter::default())).unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished);
        block_on(rt.purge(&started.instance_id)).unwrap();
    });
    let hand_seq = time(n * 100, || {
        let mut data = black_box(Counter::default());
        hand_sequence(&mut data);
        black_box(data);
    });

    let id = block_on(rt.start::<PingPong>(Counter {
        id: "k-1".into(),
        count: 0,
    }))
    .unwrap()
    .instance_id;
    let stimulus = Stimulus::new("go").key("k-1");
    let transition = time(n, || {
        let report = block_on(rt.send(stimulus.clone())).unwrap();
        assert_eq!(report.resumed.len(), 1);
    });
    let snapshot = block_on(rt.get_state(&id)).unwrap().unwrap();
    assert_eq!(snapshot.current_state(), Some("Idle"));
    let persisted = snapshot.state.clone();
    let round_trip = time(n, || {
        let json = serde_json::to_string(black_box(&persisted)).unwrap();
        let back: workflow_runtime::WorkflowState = serde_json::from_str(&json).unwrap();
        black_box(back);
    });
    let mut state = Machine::Idle;
    let hand_tr = time(n * 100, || {
        state = hand_transition(
            black_box(state),
            &Input::Go {
                key: black_box("k-1"),
            },
            "k-1",
        );
        black_box(state);
    });

    println!(
        "| benchmark (in memory, one core)                         | engine ns/op | hand-written match ns/op | target |"
    );
    println!(
        "|---------------------------------------------------------|-------------:|-------------------------:|-------:|"
    );
    println!(
        "| 3-activity sequence, start to finish (start + purge)    | {sequence:>12.0} | {hand_seq:>24.1} | 10 µs |"
    );
    println!(
        "| state-machine transition resumed by a stimulus (send)   | {transition:>12.0} | {hand_tr:>24.1} |  5 µs |"
    );
    println!(
        "|   of which: the instance's JSON encode + decode         | {round_trip:>12.0} |                          |        |"
    );
    println!();
    println!(
        "engine rows include: JSON decode + encode of the instance (a persistence round trip),"
    );
    println!(
        "stimulus hashing (SHA-256), bookmark index diff, journal; no subscriber, so no events; {n} iterations each."
    );
}
