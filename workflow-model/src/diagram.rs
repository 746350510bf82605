//! Diagrams of a definition: Mermaid (`stateDiagram-v2` / `flowchart`) and Graphviz DOT.
//!
//! Pure and deterministic: the same definition always gives the same text, so the macros can
//! compute a diagram at compile time and the runtime can draw a definition loaded from JSON.
//!
//! A state machine is drawn with its states (declaration order, `s0`, `s1`, ... as diagram
//! ids so any state name is safe; a state's display name when it has one), an arrow from the
//! start to the initial state, one arrow per transition labelled with its display name or
//! name, what it waits for and its condition in brackets, and an arrow to the end from each
//! terminal state (one without outbound transitions).
//!
//! A flowchart is drawn with a start marker (`start`) pointing at its entry points (the start
//! node of FC-6 and every trigger), its nodes (`id (kind)`, with what an event waits for, a
//! delay's duration, a timer's interval or a decision's condition, and a deadline or attempt
//! timeout as written: `ack (event ticket.ack, timeout 30m)`) in a shape by kind, and its
//! connections labelled with their port unless it is `done`:
//!
//! | kind | Mermaid | DOT |
//! | --- | --- | --- |
//! | `if`, `switch` (decisions) | rhombus `{..}` | `diamond` |
//! | `fork` | trapezoid `[/..\]` | `trapezium` |
//! | `join` | inverted trapezoid `[\../]` | `invtrapezium` |
//! | `end`, `finish` | double circle `(((..)))` | `doublecircle` |
//! | `fault` | flag `>..]` | `octagon` |
//! | waits (`event`, `delay`, `timer`, `start_at`, `cron`) | stadium `([..])` | `ellipse` |
//! | composites (`sequence`, `sub_workflow`, loops, ...) | subroutine `[[..]]` | `box3d` |
//! | anything else (`task`, ...) | rectangle `[..]` | rounded `box` |
//!
//! Any other root is drawn as one node.
//!
//! [`mermaid_with`] and [`dot_with`] also highlight what a [`Highlight`] names: the current
//! state of a state machine instance, or the active nodes of a flowchart instance.
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

use crate::definition::{Activity, DONE, Definition, Flowchart, State, StateMachine, Transition};
use crate::duration::duration;
use crate::validate::analyze_flowchart;

/// What to emphasize in a diagram: the current state of a state machine instance, or the
/// active nodes of a flowchart instance.
///
/// For a state machine, each entry is a state name. For a flowchart, each entry is a node id
/// of the top-level flowchart, or a node path as the runtime reports it (`root:review`, or
/// `root:later:audit` for a node inside the composite node `later`, which highlights `later`).
/// Names that match nothing are ignored.
///
/// # Examples
///
/// ```
/// use workflow_model::{Connection, Definition, Event, Flowchart, Task, diagram};
/// use workflow_model::diagram::Highlight;
///
/// let chart = Flowchart {
///     id: "root".into(),
///     start: vec!["submit".into()],
///     nodes: vec![
///         Task::new("submit", "submit").into(),
///         Event::new("approval", "expense.approved").into(),
///     ],
///     connections: vec![Connection::new("submit", "done", "approval")],
/// };
/// let definition = Definition::new("Expense", chart);
/// // An instance waiting in `approval`, as the runtime names the node.
/// let current = Highlight::new(["root:approval"]);
/// let text = diagram::mermaid_with(&definition, &current);
/// assert!(text.contains("    n1([\"approval (event expense.approved)\"])\n"));
/// assert!(text.ends_with("    class n1 current\n"));
/// assert!(diagram::dot_with(&definition, &current).contains("fillcolor=\"#fff3b0\""));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Highlight {
    /// The state names or node ids (or node paths) to highlight.
    pub nodes: Vec<String>,
}

impl Highlight {
    /// A highlight of the given states or nodes.
    pub fn new<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            nodes: nodes.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether nothing is highlighted.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn has_state(&self, name: &str) -> bool {
        self.nodes.iter().any(|n| n == name)
    }

    /// `id`, `root:id` and `root:id:inner` all name the node `id` of the flowchart `root`.
    fn has_node(&self, root_id: &str, id: &str) -> bool {
        self.nodes.iter().any(|n| {
            let path = n
                .strip_prefix(root_id)
                .and_then(|rest| rest.strip_prefix(':'))
                .unwrap_or(n);
            path == id || path.split(':').next() == Some(id)
        })
    }
}

/// The fill and stroke of highlighted nodes.
const HIGHLIGHT_FILL: &str = "#fff3b0";
const HIGHLIGHT_STROKE: &str = "#e8a400";

/// The definition as a Mermaid diagram.
pub fn mermaid(definition: &Definition) -> String {
    mermaid_with(definition, &Highlight::default())
}

/// The definition as a Mermaid diagram with the states or nodes of `highlight` emphasized
/// (a `current` class); see [`Highlight`].
pub fn mermaid_with(definition: &Definition, highlight: &Highlight) -> String {
    let mut out = String::new();
    match root_body(definition) {
        Activity::StateMachine(machine) => mermaid_machine(machine, highlight, &mut out),
        Activity::Flowchart(chart) => mermaid_flowchart(chart, highlight, &mut out),
        other => {
            out.push_str("flowchart LR\n");
            let _ = writeln!(out, "    n0{}", mermaid_shape(other));
            if highlight.has_node(other.id(), other.id()) {
                mermaid_classes(&["n0".to_owned()], &mut out);
            }
        }
    }
    out
}

/// The definition as a Graphviz DOT digraph.
pub fn dot(definition: &Definition) -> String {
    dot_with(definition, &Highlight::default())
}

/// The definition as a Graphviz DOT digraph with the states or nodes of `highlight` filled
/// and drawn bold; see [`Highlight`].
pub fn dot_with(definition: &Definition, highlight: &Highlight) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_string(&definition.name));
    out.push_str("    rankdir=LR;\n    node [shape=box, style=rounded];\n");
    match root_body(definition) {
        Activity::StateMachine(machine) => dot_machine(machine, highlight, &mut out),
        Activity::Flowchart(chart) => dot_flowchart(chart, highlight, &mut out),
        other => {
            let lit = highlight.has_node(other.id(), other.id());
            let _ = writeln!(
                out,
                "    n0 [label={}{}{}];",
                dot_string(&node_label(other)),
                dot_shape(other),
                dot_highlight(lit, dot_is_box(other))
            );
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

/// What a state is shown as: its display name, else its name.
fn state_label(state: &State) -> &str {
    state.display_name.as_deref().unwrap_or(&state.name)
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
    let summary = match trigger {
        Activity::Event(e) => format!("event {}", e.event),
        Activity::Delay(d) => match (d.duration_ms, &d.until) {
            (Some(ms), _) => format!("after {}", duration(ms)),
            (None, Some(until)) => format!("until {until}"),
            (None, None) => "delay".to_owned(),
        },
        Activity::Task(t) => format!("task {}", t.function),
        other => other.kind_name().replace('_', " "),
    };
    with_timeout(trigger, summary)
}

/// `detail, timeout 30m` for an activity with a deadline (an event's or a sub-workflow's
/// `.timeout(..)`) or a task with an attempt timeout, the duration as the DSL writes it.
fn with_timeout(activity: &Activity, detail: String) -> String {
    let timeout = match activity {
        Activity::Event(e) => e.deadline_ms,
        Activity::SubWorkflow(s) => s.deadline_ms,
        Activity::Task(t) => t.attempt_timeout_ms,
        _ => None,
    };
    match timeout {
        Some(ms) => format!("{detail}, timeout {}", duration(ms)),
        None => detail,
    }
}

/// The root, or the body of a root saga scope (FLT-10).
fn root_body(definition: &Definition) -> &Activity {
    match &definition.root {
        Activity::Saga(saga) => &saga.body,
        other => other,
    }
}

/// `review (task)`, `pay (task pay_out)`, `manager (event expense.decision)`,
/// `ack (event ticket.ack, timeout 30m)`, `remind (after 30m)`, `poll (every 5m)`,
/// `check (if is_large)`.
fn node_label(activity: &Activity) -> String {
    let id = activity.id();
    let detail = match activity {
        Activity::Event(_) | Activity::Delay(_) => {
            return format!("{id} ({})", trigger_summary(activity));
        }
        Activity::Task(t) if t.function != t.id => format!("task {}", t.function),
        Activity::Timer(t) => format!("every {}", duration(t.interval_ms)),
        Activity::Cron(c) => format!("cron {}", c.expression),
        Activity::If(i) => format!("if {}", i.condition),
        Activity::SubWorkflow(w) => format!("workflow {}", w.workflow),
        Activity::Fault(f) => format!("fault {}", f.code),
        other => other.kind_name().to_owned(),
    };
    format!("{id} ({})", with_timeout(activity, detail))
}

/// How a node is drawn, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Decision,
    Fork,
    Join,
    End,
    Fault,
    Wait,
    Composite,
    Plain,
}

fn shape(activity: &Activity) -> Shape {
    match activity {
        Activity::If(i) if i.then.is_none() && i.r#else.is_none() => Shape::Decision,
        Activity::Switch(s) if s.default.is_none() && s.cases.iter().all(|c| c.body.is_none()) => {
            Shape::Decision
        }
        Activity::Fork(_) => Shape::Fork,
        Activity::Join(_) => Shape::Join,
        Activity::End(_) | Activity::Finish(_) => Shape::End,
        Activity::Fault(_) => Shape::Fault,
        Activity::Event(_)
        | Activity::Delay(_)
        | Activity::Timer(_)
        | Activity::StartAt(_)
        | Activity::Cron(_) => Shape::Wait,
        Activity::Task(_)
        | Activity::Start(_)
        | Activity::Break(_)
        | Activity::Correlate(_)
        | Activity::SetVariable(_) => Shape::Plain,
        _ => Shape::Composite,
    }
}

/// `["label"]`, `{"label"}`, ... (the label escaped).
fn mermaid_shape(activity: &Activity) -> String {
    let label = mermaid_text(&node_label(activity));
    let (open, close) = match shape(activity) {
        Shape::Decision => ("{", "}"),
        Shape::Fork => ("[/", "\\]"),
        Shape::Join => ("[\\", "/]"),
        Shape::End => ("(((", ")))"),
        Shape::Fault => (">", "]"),
        Shape::Wait => ("([", "])"),
        Shape::Composite => ("[[", "]]"),
        Shape::Plain => ("[", "]"),
    };
    format!("{open}\"{label}\"{close}")
}

/// `, shape=diamond` or nothing for the default rounded box.
fn dot_shape(activity: &Activity) -> &'static str {
    match shape(activity) {
        Shape::Decision => ", shape=diamond",
        Shape::Fork => ", shape=trapezium",
        Shape::Join => ", shape=invtrapezium",
        Shape::End => ", shape=doublecircle",
        Shape::Fault => ", shape=octagon",
        Shape::Wait => ", shape=ellipse",
        Shape::Composite => ", shape=box3d",
        Shape::Plain => "",
    }
}

fn dot_is_box(activity: &Activity) -> bool {
    shape(activity) == Shape::Plain
}

/// The attributes of a highlighted DOT node (`rounded` kept for boxes).
fn dot_highlight(lit: bool, rounded: bool) -> String {
    if !lit {
        return String::new();
    }
    let style = if rounded {
        "rounded,filled,bold"
    } else {
        "filled,bold"
    };
    format!(
        ", style=\"{style}\", fillcolor=\"{HIGHLIGHT_FILL}\", color=\"{HIGHLIGHT_STROKE}\", penwidth=2"
    )
}

/// The `current` class and the ids that have it.
fn mermaid_classes(ids: &[String], out: &mut String) {
    if ids.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "    classDef current fill:{HIGHLIGHT_FILL},stroke:{HIGHLIGHT_STROKE},stroke-width:3px"
    );
    let _ = writeln!(out, "    class {} current", ids.join(","));
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

fn mermaid_machine(machine: &StateMachine, highlight: &Highlight, out: &mut String) {
    out.push_str("stateDiagram-v2\n");
    for (i, state) in machine.states.iter().enumerate() {
        let _ = writeln!(
            out,
            "    state \"{}\" as s{i}",
            mermaid_text(state_label(state))
        );
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
    let lit: Vec<String> = machine
        .states
        .iter()
        .enumerate()
        .filter(|(_, state)| highlight.has_state(&state.name))
        .map(|(i, _)| format!("s{i}"))
        .collect();
    mermaid_classes(&lit, out);
}

fn dot_machine(machine: &StateMachine, highlight: &Highlight, out: &mut String) {
    out.push_str("    __start [shape=point];\n");
    for (i, state) in machine.states.iter().enumerate() {
        let extra = if is_terminal(machine, &state.name) {
            ", peripheries=2"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "    s{i} [label={}{extra}{}];",
            dot_string(state_label(state)),
            dot_highlight(highlight.has_state(&state.name), true)
        );
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

/// The nodes the start marker points at: the start node (FC-6) and every trigger (FC-5).
fn entry_points(chart: &Flowchart) -> Vec<usize> {
    analyze_flowchart(chart).entry_points
}

fn mermaid_flowchart(chart: &Flowchart, highlight: &Highlight, out: &mut String) {
    out.push_str("flowchart LR\n");
    let entries = entry_points(chart);
    if !entries.is_empty() {
        out.push_str("    start((\"start\"))\n");
    }
    for (i, node) in chart.nodes.iter().enumerate() {
        let _ = writeln!(out, "    n{i}{}", mermaid_shape(node));
    }
    for entry in &entries {
        let _ = writeln!(out, "    start --> n{entry}");
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
    let lit: Vec<String> = chart
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| highlight.has_node(&chart.id, node.id()))
        .map(|(i, _)| format!("n{i}"))
        .collect();
    mermaid_classes(&lit, out);
}

fn dot_flowchart(chart: &Flowchart, highlight: &Highlight, out: &mut String) {
    let entries = entry_points(chart);
    if !entries.is_empty() {
        out.push_str("    __start [shape=circle, label=\"start\", width=0.3];\n");
    }
    for (i, node) in chart.nodes.iter().enumerate() {
        let lit = highlight.has_node(&chart.id, node.id());
        let _ = writeln!(
            out,
            "    n{i} [label={}{}{}];",
            dot_string(&node_label(node)),
            dot_shape(node),
            dot_highlight(lit, dot_is_box(node))
        );
    }
    for entry in &entries {
        let _ = writeln!(out, "    __start -> n{entry};");
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
    use crate::definition::{
        Connection, Delay, End, Event, Fault, Fork, If, Join, JoinMode, Sequence, State,
        SubWorkflow, SubWorkflowMode, Task, Timer,
    };

    fn order() -> Definition {
        let mut pay = Transition::new("New", "Paid");
        pay.name = Some("pay".into());
        pay.condition = Some("covers_amount".into());
        pay.trigger = Some(Event::new("pay", "order:paid").into());
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
            "flowchart LR\n    start((\"start\"))\n    n0[\"review (task)\"]\n    n1[\"pay (task)\"]\n    start --> n0\n    n0 -->|\"ok\"| n1\n"
        );
        assert!(dot(&definition).contains("n0 -> n1 [label=\"ok\"];"));
        let single = Definition::new("One", Task::new("root", "work"));
        assert_eq!(
            mermaid(&single),
            "flowchart LR\n    n0[\"root (task work)\"]\n"
        );
    }

    /// Every shape, a start marker, event names and ports: the expense approval flowchart.
    fn expense() -> Definition {
        let mut trigger = Event::new("reopened", "expense.reopened");
        trigger.trigger = true;
        let chart = Flowchart {
            id: "root".into(),
            start: vec!["submit".into()],
            nodes: vec![
                Task::new("submit", "submit_expense").into(),
                If {
                    id: "check".into(),
                    condition: "is_large".into(),
                    then: None,
                    r#else: None,
                }
                .into(),
                Event::new("manager", "expense.decision").into(),
                Fork {
                    id: "split".into(),
                    branches: vec!["left".into(), "right".into()],
                }
                .into(),
                Delay::new("remind", 30 * 60_000).into(),
                Sequence {
                    id: "later".into(),
                    steps: vec![Task::new("audit", "audit").into()],
                }
                .into(),
                Join {
                    id: "merge".into(),
                    mode: JoinMode::All,
                }
                .into(),
                End::new("done").into(),
                Fault {
                    id: "refused".into(),
                    code: "rejected".into(),
                    message: String::new(),
                }
                .into(),
                trigger.into(),
            ],
            connections: vec![
                Connection::new("submit", DONE, "check"),
                Connection::new("check", "true", "manager"),
                Connection::new("check", "false", "split"),
                Connection::new("manager", DONE, "refused"),
                Connection::new("split", "left", "remind"),
                Connection::new("split", "right", "later"),
                Connection::new("remind", DONE, "merge"),
                Connection::new("later", DONE, "merge"),
                Connection::new("merge", DONE, "done"),
                Connection::new("reopened", DONE, "submit"),
            ],
        };
        Definition::new("Expense", chart)
    }

    #[test]
    fn flowchart_shapes_start_marker_and_event_names_in_mermaid() {
        assert_eq!(
            mermaid(&expense()),
            r#"flowchart LR
    start(("start"))
    n0["submit (task submit_expense)"]
    n1{"check (if is_large)"}
    n2(["manager (event expense.decision)"])
    n3[/"split (fork)"\]
    n4(["remind (after 30m)"])
    n5[["later (sequence)"]]
    n6[\"merge (join)"/]
    n7((("done (end)")))
    n8>"refused (fault rejected)"]
    n9(["reopened (event expense.reopened)"])
    start --> n0
    start --> n9
    n0 --> n1
    n1 -->|"true"| n2
    n1 -->|"false"| n3
    n2 --> n8
    n3 -->|"left"| n4
    n3 -->|"right"| n5
    n4 --> n6
    n5 --> n6
    n6 --> n7
    n9 --> n0
"#
        );
    }

    #[test]
    fn flowchart_shapes_and_start_marker_in_dot() {
        let text = dot(&expense());
        for line in [
            "    __start [shape=circle, label=\"start\", width=0.3];\n",
            "    n0 [label=\"submit (task submit_expense)\"];\n",
            "    n1 [label=\"check (if is_large)\", shape=diamond];\n",
            "    n2 [label=\"manager (event expense.decision)\", shape=ellipse];\n",
            "    n3 [label=\"split (fork)\", shape=trapezium];\n",
            "    n5 [label=\"later (sequence)\", shape=box3d];\n",
            "    n6 [label=\"merge (join)\", shape=invtrapezium];\n",
            "    n7 [label=\"done (end)\", shape=doublecircle];\n",
            "    n8 [label=\"refused (fault rejected)\", shape=octagon];\n",
            "    __start -> n0;\n    __start -> n9;\n",
            "    n3 -> n4 [label=\"left\"];\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn state_display_names_are_drawn() {
        let mut definition = order();
        let Activity::StateMachine(machine) = &mut definition.root else {
            unreachable!()
        };
        machine.states[3].display_name = Some("Cancelled by customer or timeout".into());
        assert!(
            mermaid(&definition).contains("    state \"Cancelled by customer or timeout\" as s3\n")
        );
        assert!(
            dot(&definition)
                .contains("    s3 [label=\"Cancelled by customer or timeout\", peripheries=2];\n")
        );
    }

    #[test]
    fn the_current_state_is_highlighted() {
        let current = Highlight::new(["Paid"]);
        let text = mermaid_with(&order(), &current);
        assert!(
            text.ends_with(
                "    s3 --> [*]\n    classDef current fill:#fff3b0,stroke:#e8a400,stroke-width:3px\n    class s1 current\n"
            ),
            "{text}"
        );
        let text = dot_with(&order(), &current);
        assert!(text.contains(
            "    s1 [label=\"Paid\", style=\"rounded,filled,bold\", fillcolor=\"#fff3b0\", color=\"#e8a400\", penwidth=2];\n"
        ), "{text}");
        assert_eq!(text.matches("fillcolor").count(), 1);
        // Nothing highlighted, or an unknown name: the plain diagram.
        assert_eq!(
            mermaid_with(&order(), &Highlight::default()),
            mermaid(&order())
        );
        assert_eq!(
            mermaid_with(&order(), &Highlight::new(["Gone"])),
            mermaid(&order())
        );
        assert_eq!(dot_with(&order(), &Highlight::new(["Gone"])), dot(&order()));
    }

    #[test]
    fn the_active_nodes_are_highlighted_by_id_or_runtime_path() {
        // Two branches of the fork are active: one by id, one inside the composite `later`.
        let current = Highlight::new(["remind", "root:later:audit"]);
        let text = mermaid_with(&expense(), &current);
        assert!(text.ends_with("    class n4,n5 current\n"), "{text}");
        let text = dot_with(&expense(), &current);
        assert!(text.contains(
            "    n4 [label=\"remind (after 30m)\", shape=ellipse, style=\"filled,bold\", fillcolor=\"#fff3b0\", color=\"#e8a400\", penwidth=2];\n"
        ), "{text}");
        assert!(
            text.contains("    n5 [label=\"later (sequence)\", shape=box3d, style=\"filled,bold\"")
        );
        assert_eq!(text.matches("fillcolor").count(), 2);
        // A path of another root does not match; a single-node root is highlighted by its id.
        assert_eq!(
            mermaid_with(&expense(), &Highlight::new(["other:remind:x"])),
            mermaid(&expense())
        );
        let single = Definition::new("One", Task::new("root", "work"));
        assert!(
            mermaid_with(&single, &Highlight::new(["root"])).ends_with("    class n0 current\n")
        );
    }

    /// An event's 30-minute deadline, a sub-workflow's deadline, a task's attempt timeout and a
    /// repeating timer are drawn with their durations as written, in both formats; the
    /// deadline's `timeout` outcome is a labelled arrow.
    #[test]
    fn deadlines_and_timers_are_drawn_with_their_durations() {
        let mut ack = Event::new("ack", "ticket.ack");
        ack.deadline_ms = Some(30 * 60_000);
        let mut escalate = Task::new("escalate", "escalate");
        escalate.attempt_timeout_ms = Some(45_000);
        let child = SubWorkflow {
            id: "review".into(),
            workflow: "Review".into(),
            input: None,
            assign: None,
            mode: SubWorkflowMode::Wait,
            deadline_ms: Some(2 * 3_600_000),
        };
        let poll = Timer {
            id: "poll".into(),
            interval_ms: 5 * 60_000,
            body: None,
            until: None,
            max_ticks: None,
            trigger: false,
            missed: crate::definition::Missed::Once,
        };
        let chart = Flowchart {
            id: "root".into(),
            start: vec!["ack".into()],
            nodes: vec![ack.into(), escalate.into(), child.into(), poll.into()],
            connections: vec![
                Connection::new("ack", DONE, "review"),
                Connection::new("ack", "timeout", "escalate"),
                Connection::new("escalate", DONE, "poll"),
            ],
        };
        let definition = Definition::new("Escalation", chart);
        let text = mermaid(&definition);
        for line in [
            "    n0([\"ack (event ticket.ack, timeout 30m)\"])\n",
            "    n1[\"escalate (task, timeout 45s)\"]\n",
            "    n2[[\"review (workflow Review, timeout 2h)\"]]\n",
            "    n3([\"poll (every 5m)\"])\n",
            "    n0 -->|\"timeout\"| n1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let text = dot(&definition);
        for line in [
            "    n0 [label=\"ack (event ticket.ack, timeout 30m)\", shape=ellipse];\n",
            "    n1 [label=\"escalate (task, timeout 45s)\"];\n",
            "    n2 [label=\"review (workflow Review, timeout 2h)\", shape=box3d];\n",
            "    n0 -> n1 [label=\"timeout\"];\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // A state machine's task trigger with an attempt timeout, on its transition.
        let mut audit = Transition::new("New", "New");
        audit.name = Some("audit".into());
        let mut task = Task::new("audit", "run_audit");
        task.attempt_timeout_ms = Some(90_000);
        audit.trigger = Some(task.into());
        let machine = StateMachine {
            id: "root".into(),
            initial: "New".into(),
            states: vec![State::new("New")],
            transitions: vec![audit],
        };
        let text = mermaid(&Definition::new("Audit", machine));
        assert!(
            text.contains("s0 --> s0 : audit (task run_audit, timeout 90s)"),
            "{text}"
        );
    }
}
