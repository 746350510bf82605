//! Diagrams of a definition: Mermaid (`stateDiagram-v2` / `flowchart`) and Graphviz DOT.
//!
//! Pure and deterministic: the same definition always gives the same text, so the macros can
//! compute a diagram at compile time and the runtime can draw a definition loaded from JSON.
//!
//! A state machine is drawn with its states (declaration order, `s0`, `s1`, ... as diagram
//! ids so any state name is safe), an arrow from the start to the initial state, one arrow per
//! transition labelled with its display name or name, what it waits for and its condition in
//! brackets, and an arrow to the end from each terminal state (one without outbound
//! transitions). A flowchart is drawn with its nodes (`id (kind)`) and its connections
//! labelled with their port unless it is `done`. Any other root is drawn as one node.
//!
//! ```
//! use workflow_model::{Definition, Event, State, StateMachine, Transition, diagram};
//!
//! let mut pay = Transition::new("New", "Paid");
//! pay.name = Some("pay".into());
//! pay.trigger = Some(Event::new("pay", "payment").into());
//! let machine = StateMachine {
//!     id: "root".into(),
//!     initial: "New".into(),
//!     states: vec![State::new("New"), State::new("Paid")],
//!     transitions: vec![pay],
//! };
//! let definition = Definition::new("Order", machine);
//! assert_eq!(
//!     diagram::mermaid(&definition),
//!     "stateDiagram-v2\n    state \"New\" as s0\n    state \"Paid\" as s1\n    [*] --> s0\n    s0 --> s1 : pay (event payment)\n    s1 --> [*]\n"
//! );
//! assert!(diagram::dot(&definition).contains("s0 -> s1 [label=\"pay (event payment)\"];"));
//! ```

use std::fmt::Write as _;

use crate::definition::{Activity, DONE, Definition, Flowchart, StateMachine, Transition};

/// The definition as a Mermaid diagram.
pub fn mermaid(definition: &Definition) -> String {
    let mut out = String::new();
    match root_body(definition) {
        Activity::StateMachine(machine) => mermaid_machine(machine, &mut out),
        Activity::Flowchart(chart) => mermaid_flowchart(chart, &mut out),
        other => {
            out.push_str("flowchart LR\n");
            let _ = writeln!(out, "    n0[\"{}\"]", mermaid_text(&node_label(other)));
        }
    }
    out
}

/// The definition as a Graphviz DOT digraph.
pub fn dot(definition: &Definition) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_string(&definition.name));
    out.push_str("    rankdir=LR;\n    node [shape=box, style=rounded];\n");
    match root_body(definition) {
        Activity::StateMachine(machine) => dot_machine(machine, &mut out),
        Activity::Flowchart(chart) => dot_flowchart(chart, &mut out),
        other => {
            let _ = writeln!(out, "    n0 [label={}];", dot_string(&node_label(other)));
        }
    }
    out.push_str("}\n");
    out
}

fn state_index(machine: &StateMachine, name: &str) -> Option<usize> {
    machine.states.iter().position(|s| s.name == name)
}

fn is_terminal(machine: &StateMachine, name: &str) -> bool {
    !machine.transitions.iter().any(|t| t.from == name)
}

/// `pay (event payment) [covers_amount]`.
fn transition_label(transition: &Transition) -> String {
    let title = transition
        .display_name
        .as_deref()
        .or(transition.name.as_deref());
    let waits = transition.trigger.as_ref().map(trigger_summary);
    let mut label = match (title, waits) {
        (Some(title), Some(waits)) => format!("{title} ({waits})"),
        (Some(title), None) => title.to_owned(),
        (None, Some(waits)) => waits,
        (None, None) => String::new(),
    };
    if let Some(condition) = &transition.condition {
        if !label.is_empty() {
            label.push(' ');
        }
        let _ = write!(label, "[{condition}]");
    }
    label
}

fn trigger_summary(trigger: &Activity) -> String {
    match trigger {
        Activity::Event(e) => format!("event {}", e.event),
        Activity::Delay(d) => match (d.duration_ms, &d.until) {
            (Some(ms), _) => format!("after {}", duration(ms)),
            (None, Some(until)) => format!("until {until}"),
            (None, None) => "delay".to_owned(),
        },
        Activity::Task(t) => format!("task {}", t.function),
        other => other.kind_name().replace('_', " "),
    }
}

/// The root, or the body of a root saga scope (FLT-10).
fn root_body(definition: &Definition) -> &Activity {
    match &definition.root {
        Activity::Saga(saga) => &saga.body,
        other => other,
    }
}

/// `48h`, `5m`, `30s`, `1500ms`, `2d`: the largest unit that divides it.
pub(crate) fn duration(ms: u64) -> String {
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

fn node_label(activity: &Activity) -> String {
    format!("{} ({})", activity.id(), activity.kind_name())
}

/// Mermaid text inside quotes or after ` : `: entity codes for the characters it reads.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            ':' => out.push_str("#58;"),
            ';' => out.push_str("#59;"),
            '#' => out.push_str("#35;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn dot_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn mermaid_machine(machine: &StateMachine, out: &mut String) {
    out.push_str("stateDiagram-v2\n");
    for (i, state) in machine.states.iter().enumerate() {
        let _ = writeln!(out, "    state \"{}\" as s{i}", mermaid_text(&state.name));
    }
    if let Some(initial) = state_index(machine, &machine.initial) {
        let _ = writeln!(out, "    [*] --> s{initial}");
    }
    for transition in &machine.transitions {
        let (Some(from), Some(to)) = (
            state_index(machine, &transition.from),
            state_index(machine, &transition.to),
        ) else {
            continue;
        };
        let label = transition_label(transition);
        if label.is_empty() {
            let _ = writeln!(out, "    s{from} --> s{to}");
        } else {
            let _ = writeln!(out, "    s{from} --> s{to} : {}", mermaid_text(&label));
        }
    }
    for (i, state) in machine.states.iter().enumerate() {
        if is_terminal(machine, &state.name) {
            let _ = writeln!(out, "    s{i} --> [*]");
        }
    }
}

fn dot_machine(machine: &StateMachine, out: &mut String) {
    out.push_str("    __start [shape=point];\n");
    for (i, state) in machine.states.iter().enumerate() {
        let extra = if is_terminal(machine, &state.name) {
            ", peripheries=2"
        } else {
            ""
        };
        let _ = writeln!(out, "    s{i} [label={}{extra}];", dot_string(&state.name));
    }
    if let Some(initial) = state_index(machine, &machine.initial) {
        let _ = writeln!(out, "    __start -> s{initial};");
    }
    for transition in &machine.transitions {
        let (Some(from), Some(to)) = (
            state_index(machine, &transition.from),
            state_index(machine, &transition.to),
        ) else {
            continue;
        };
        let label = transition_label(transition);
        if label.is_empty() {
            let _ = writeln!(out, "    s{from} -> s{to};");
        } else {
            let _ = writeln!(out, "    s{from} -> s{to} [label={}];", dot_string(&label));
        }
    }
}

fn node_index(chart: &Flowchart, id: &str) -> Option<usize> {
    chart.nodes.iter().position(|n| n.id() == id)
}

fn mermaid_flowchart(chart: &Flowchart, out: &mut String) {
    out.push_str("flowchart LR\n");
    for (i, node) in chart.nodes.iter().enumerate() {
        let _ = writeln!(out, "    n{i}[\"{}\"]", mermaid_text(&node_label(node)));
    }
    for connection in &chart.connections {
        let (Some(from), Some(to)) = (
            node_index(chart, &connection.source),
            node_index(chart, &connection.target),
        ) else {
            continue;
        };
        if connection.port == DONE {
            let _ = writeln!(out, "    n{from} --> n{to}");
        } else {
            let _ = writeln!(
                out,
                "    n{from} -->|\"{}\"| n{to}",
                mermaid_text(&connection.port)
            );
        }
    }
}

fn dot_flowchart(chart: &Flowchart, out: &mut String) {
    for (i, node) in chart.nodes.iter().enumerate() {
        let _ = writeln!(out, "    n{i} [label={}];", dot_string(&node_label(node)));
    }
    for connection in &chart.connections {
        let (Some(from), Some(to)) = (
            node_index(chart, &connection.source),
            node_index(chart, &connection.target),
        ) else {
            continue;
        };
        if connection.port == DONE {
            let _ = writeln!(out, "    n{from} -> n{to};");
        } else {
            let _ = writeln!(
                out,
                "    n{from} -> n{to} [label={}];",
                dot_string(&connection.port)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{Connection, Delay, State, Task};

    fn order() -> Definition {
        let mut pay = Transition::new("New", "Paid");
        pay.name = Some("pay".into());
        pay.condition = Some("covers_amount".into());
        pay.trigger = Some(crate::Event::new("pay", "order:paid").into());
        let mut expire = Transition::new("New", "Cancelled");
        expire.trigger = Some(Delay::new("New_1", 48 * 3_600_000).into());
        let mut ship = Transition::new("Paid", "Shipped \"fast\"");
        ship.display_name = Some("Ship it".into());
        let machine = StateMachine {
            id: "root".into(),
            initial: "New".into(),
            states: vec![
                State::new("New"),
                State::new("Paid"),
                State::new("Shipped \"fast\""),
                State::new("Cancelled"),
            ],
            transitions: vec![pay, expire, ship, Transition::new("Paid", "Nowhere")],
        };
        Definition::new("Order \"flow\"", machine)
    }

    #[test]
    fn mermaid_of_a_state_machine() {
        assert_eq!(
            mermaid(&order()),
            "stateDiagram-v2
    state \"New\" as s0
    state \"Paid\" as s1
    state \"Shipped #quot;fast#quot;\" as s2
    state \"Cancelled\" as s3
    [*] --> s0
    s0 --> s1 : pay (event order#58;paid) [covers_amount]
    s0 --> s3 : after 2d
    s1 --> s2 : Ship it
    s2 --> [*]
    s3 --> [*]
"
        );
    }

    #[test]
    fn dot_of_a_state_machine() {
        assert_eq!(
            dot(&order()),
            "digraph \"Order \\\"flow\\\"\" {
    rankdir=LR;
    node [shape=box, style=rounded];
    __start [shape=point];
    s0 [label=\"New\"];
    s1 [label=\"Paid\"];
    s2 [label=\"Shipped \\\"fast\\\"\", peripheries=2];
    s3 [label=\"Cancelled\", peripheries=2];
    __start -> s0;
    s0 -> s1 [label=\"pay (event order:paid) [covers_amount]\"];
    s0 -> s3 [label=\"after 2d\"];
    s1 -> s2 [label=\"Ship it\"];
}
"
        );
    }

    #[test]
    fn flowcharts_and_other_roots() {
        let chart = Flowchart {
            id: "root".into(),
            start: vec![],
            nodes: vec![
                Task::new("review", "review")
                    .with_ports(["ok", "no"])
                    .into(),
                Task::new("pay", "pay").into(),
            ],
            connections: vec![Connection::new("review", "ok", "pay")],
        };
        let definition = Definition::new("Expense", chart);
        assert_eq!(
            mermaid(&definition),
            "flowchart LR\n    n0[\"review (task)\"]\n    n1[\"pay (task)\"]\n    n0 -->|\"ok\"| n1\n"
        );
        assert!(dot(&definition).contains("n0 -> n1 [label=\"ok\"];"));
        let single = Definition::new("One", Task::new("root", "work"));
        assert_eq!(mermaid(&single), "flowchart LR\n    n0[\"root (task)\"]\n");
        assert_eq!(duration(1_500), "1500ms");
        assert_eq!(duration(300_000), "5m");
    }
}
