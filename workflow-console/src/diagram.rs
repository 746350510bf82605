//! A definition drawn as SVG on the server: its states or nodes laid out left to right in
//! layers from the start, the current ones highlighted and the path taken marked.
//!
//! The layout is the console's own (no layout engine to compile): each node's layer is its
//! distance from the start, nodes keep their declaration order within a layer, forward
//! edges are curves between layers and edges back to an earlier layer (loops) are drawn
//! under the nodes.

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write as _;

use workflow_model::{Activity, Definition};

use crate::html::escape;

/// Where an instance is and where it has been, by the names its definition uses: state
/// names, or the ids of the root's nodes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Marks {
    /// The current state or nodes.
    pub(crate) current: BTreeSet<String>,
    /// States or nodes it has been in.
    pub(crate) visited: BTreeSet<String>,
    /// Edges it has taken, as `(from, to)`.
    pub(crate) taken: BTreeSet<(String, String)>,
    /// Whether it has begun (the start edge is taken).
    pub(crate) started: bool,
    /// Whether it has ended (the edges to the end from where it ended are taken).
    pub(crate) ended: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Start,
    End,
    Box,
    Wait,
    Decision,
}

#[derive(Debug)]
struct Node {
    key: String,
    title: String,
    detail: Option<String>,
    shape: Shape,
}

#[derive(Debug)]
struct Edge {
    from: usize,
    to: usize,
    label: String,
}

#[derive(Debug, Default)]
struct Graph {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
}

const START: &str = "\u{0}start";
const END: &str = "\u{0}end";

impl Graph {
    fn add(&mut self, key: &str, title: &str, detail: Option<String>, shape: Shape) -> usize {
        self.nodes.push(Node {
            key: key.to_owned(),
            title: title.to_owned(),
            detail,
            shape,
        });
        self.nodes.len() - 1
    }

    fn index(&self, key: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.key == key)
    }

    fn connect(&mut self, from: &str, to: &str, label: String) {
        if let (Some(from), Some(to)) = (self.index(from), self.index(to)) {
            self.edges.push(Edge { from, to, label });
        }
    }
}

/// The root, or the body of a root saga scope.
fn root_body(definition: &Definition) -> &Activity {
    match &definition.root {
        Activity::Saga(saga) => &saga.body,
        other => other,
    }
}

/// The graph of a definition: a state machine's states and transitions, a flowchart's nodes
/// and connections, a sequence's steps in a chain, or the root alone.
fn graph(definition: &Definition) -> Graph {
    let mut g = Graph::default();
    g.add(START, "start", None, Shape::Start);
    match root_body(definition) {
        Activity::StateMachine(machine) => {
            for state in &machine.states {
                let title = state.display_name.as_deref().unwrap_or(&state.name);
                let detail = (title != state.name).then(|| state.name.clone());
                g.add(&state.name, title, detail, Shape::Box);
            }
            g.add(END, "end", None, Shape::End);
            g.connect(START, &machine.initial, String::new());
            for t in &machine.transitions {
                g.connect(&t.from, &t.to, transition_label(t));
            }
            for state in &machine.states {
                if !machine.transitions.iter().any(|t| t.from == state.name) {
                    g.connect(&state.name, END, String::new());
                }
            }
        }
        Activity::Flowchart(chart) => {
            for node in &chart.nodes {
                g.add(node.id(), node.id(), Some(detail(node)), shape(node));
            }
            let entries: Vec<&str> = if chart.start.is_empty() {
                chart
                    .nodes
                    .iter()
                    .map(Activity::id)
                    .filter(|id| !chart.connections.iter().any(|c| c.target == *id))
                    .collect()
            } else {
                chart.start.iter().map(String::as_str).collect()
            };
            for entry in entries {
                g.connect(START, entry, String::new());
            }
            for c in &chart.connections {
                let label = if c.port == "done" {
                    String::new()
                } else {
                    c.port.clone()
                };
                g.connect(&c.source, &c.target, label);
            }
        }
        Activity::Sequence(sequence) => {
            let mut previous = START.to_owned();
            for step in &sequence.steps {
                g.add(step.id(), step.id(), Some(detail(step)), shape(step));
                g.connect(&previous, step.id(), String::new());
                previous = step.id().to_owned();
            }
            g.add(END, "end", None, Shape::End);
            g.connect(&previous, END, String::new());
        }
        other => {
            g.add(other.id(), other.id(), Some(detail(other)), shape(other));
            g.add(END, "end", None, Shape::End);
            g.connect(START, other.id(), String::new());
            g.connect(other.id(), END, String::new());
        }
    }
    g
}

fn transition_label(t: &workflow_model::Transition) -> String {
    let title = t.display_name.as_deref().or(t.name.as_deref());
    let waits = t.trigger.as_ref().map(detail);
    let mut label = match (title, waits) {
        (Some(title), Some(waits)) => format!("{title} ({waits})"),
        (Some(title), None) => title.to_owned(),
        (None, Some(waits)) => waits,
        (None, None) => String::new(),
    };
    if let Some(condition) = &t.condition {
        let _ = write!(label, " [{condition}]");
    }
    label.trim().to_owned()
}

/// `task pay_out`, `event payment`, `if is_large`: what a node is, in a few words.
fn detail(activity: &Activity) -> String {
    match activity {
        Activity::Task(t) => format!("task {}", t.function),
        Activity::Event(e) => format!("event {}", e.event),
        Activity::Delay(d) => match (d.duration_ms, &d.until) {
            (Some(ms), _) => format!("after {}", crate::html::duration(millis(ms))),
            (None, Some(until)) => format!("until {until}"),
            (None, None) => "delay".to_owned(),
        },
        Activity::Timer(t) => format!("every {}", crate::html::duration(millis(t.interval_ms))),
        Activity::Cron(c) => format!("cron {}", c.expression),
        Activity::If(i) => format!("if {}", i.condition),
        Activity::SubWorkflow(w) => format!("workflow {}", w.workflow),
        Activity::Fault(f) => format!("fault {}", f.code),
        other => other.kind_name().replace('_', " "),
    }
}

fn millis(ms: u64) -> i64 {
    i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn shape(activity: &Activity) -> Shape {
    match activity {
        Activity::If(_) | Activity::Switch(_) => Shape::Decision,
        Activity::End(_) | Activity::Finish(_) => Shape::End,
        Activity::Event(_)
        | Activity::Delay(_)
        | Activity::Timer(_)
        | Activity::StartAt(_)
        | Activity::Cron(_) => Shape::Wait,
        _ => Shape::Box,
    }
}

/// The layer of each node: its distance from the start; nodes the start does not reach go
/// in a layer after the last.
fn layers(g: &Graph) -> Vec<usize> {
    let mut layer = vec![usize::MAX; g.nodes.len()];
    let mut queue = VecDeque::from([0usize]);
    if let Some(first) = layer.first_mut() {
        *first = 0;
    }
    while let Some(at) = queue.pop_front() {
        let next = layer.get(at).copied().unwrap_or(0) + 1;
        for edge in g.edges.iter().filter(|e| e.from == at) {
            if let Some(l) = layer.get_mut(edge.to)
                && *l == usize::MAX
            {
                *l = next;
                queue.push_back(edge.to);
            }
        }
    }
    let last = layer.iter().filter(|l| **l != usize::MAX).max().copied();
    // The end marker goes after everything else.
    let end = last.unwrap_or(0) + 1;
    for (i, l) in layer.iter_mut().enumerate() {
        let is_end = g.nodes.get(i).is_some_and(|n| n.key == END);
        if is_end || *l == usize::MAX {
            *l = end;
        }
    }
    layer
}

const NODE_HEIGHT: f64 = 40.0;
const ROW: f64 = 66.0;
const GAP: f64 = 90.0;
const MARGIN: f64 = 24.0;

fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.6
}

fn node_width(node: &Node) -> f64 {
    match node.shape {
        Shape::Start => 18.0,
        Shape::End => 30.0,
        shape => {
            let text = text_width(&node.title, 12.0)
                .max(node.detail.as_deref().map_or(0.0, |d| text_width(d, 11.0)));
            let pad = if shape == Shape::Decision { 60.0 } else { 28.0 };
            (text + pad).max(70.0)
        }
    }
}

/// The definition as an SVG element, with `marks` drawn on it.
pub(crate) fn svg(definition: &Definition, marks: &Marks) -> String {
    let g = graph(definition);
    let layer = layers(&g);
    let columns = layer.iter().max().map_or(1, |m| m + 1);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); columns];
    for (i, l) in layer.iter().enumerate() {
        if let Some(column) = members.get_mut(*l) {
            column.push(i);
        }
    }
    let tallest = members.iter().map(Vec::len).max().unwrap_or(1);
    // The gap after each column fits the labels of the edges that cross it.
    let mut gaps = vec![GAP; columns];
    for edge in &g.edges {
        let (Some(&from), Some(&to)) = (layer.get(edge.from), layer.get(edge.to)) else {
            continue;
        };
        if to == from + 1
            && let Some(gap) = gaps.get_mut(from)
        {
            *gap = gap.max(text_width(&edge.label, 11.0) + 36.0);
        }
    }
    let mut pos = vec![(0.0, 0.0, 0.0); g.nodes.len()]; // x (left), y (centre), width
    let mut x = MARGIN;
    let mut last_gap = GAP;
    for (c, column) in members.iter().enumerate() {
        let width = column
            .iter()
            .filter_map(|i| g.nodes.get(*i))
            .map(node_width)
            .fold(0.0, f64::max);
        let offset = (tallest - column.len()) as f64 * ROW / 2.0;
        for (row, i) in column.iter().enumerate() {
            let w = g.nodes.get(*i).map_or(width, node_width);
            if let Some(p) = pos.get_mut(*i) {
                *p = (
                    x + (width - w) / 2.0,
                    MARGIN + offset + row as f64 * ROW + NODE_HEIGHT / 2.0,
                    w,
                );
            }
        }
        last_gap = gaps.get(c).copied().unwrap_or(GAP);
        x += width + last_gap;
    }
    let width = x - last_gap + MARGIN;
    let loops = g
        .edges
        .iter()
        .filter(|e| layer.get(e.to) <= layer.get(e.from))
        .count();
    let height = MARGIN * 2.0 + tallest as f64 * ROW + loops.min(4) as f64 * 18.0;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"workflow-diagram\" role=\"img\" \
         aria-label=\"diagram of {}\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\"><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" \
         refX=\"10\" refY=\"5\" markerWidth=\"9\" markerHeight=\"9\" markerUnits=\"userSpaceOnUse\" orient=\"auto-start-reverse\">\
         <path class=\"marker\" d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>",
        escape(&definition.name)
    );
    let key = |i: usize| g.nodes.get(i).map_or("", |n| n.key.as_str());
    let visited = |i: usize| {
        let k = key(i);
        (k == START && marks.started)
            || (k == END && marks.ended)
            || marks.visited.contains(k)
            || marks.current.contains(k)
    };
    let mut below = 0.0;
    for edge in &g.edges {
        let (Some(&(x1, y1, w1)), Some(&(x2, y2, w2))) = (pos.get(edge.from), pos.get(edge.to))
        else {
            continue;
        };
        let (from, to) = (key(edge.from), key(edge.to));
        let taken = marks.taken.contains(&(from.to_owned(), to.to_owned()))
            || (from == START && marks.started && visited(edge.to))
            || (to == END && marks.ended && visited(edge.from));
        let forward = layer.get(edge.to) > layer.get(edge.from);
        let (path, lx, ly) = if edge.from == edge.to {
            let (cx, top) = (x1 + w1 / 2.0, y1 - NODE_HEIGHT / 2.0);
            (
                format!(
                    "M{:.1},{top:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{top:.1}",
                    cx - 12.0,
                    cx - 30.0,
                    top - 34.0,
                    cx + 30.0,
                    top - 34.0,
                    cx + 12.0
                ),
                cx,
                top - 30.0,
            )
        } else if forward {
            let (sx, ex) = (x1 + w1, x2);
            let mid = (sx + ex) / 2.0;
            (
                format!("M{sx:.1},{y1:.1} C{mid:.1},{y1:.1} {mid:.1},{y2:.1} {ex:.1},{y2:.1}"),
                mid,
                (y1 + y2) / 2.0 - 6.0,
            )
        } else {
            below += 18.0;
            let (sx, ex) = (x1 + w1 / 2.0, x2 + w2 / 2.0);
            let sy = y1 + NODE_HEIGHT / 2.0;
            let ey = y2 + NODE_HEIGHT / 2.0;
            let dip = sy.max(ey) + 24.0 + below;
            (
                format!("M{sx:.1},{sy:.1} C{sx:.1},{dip:.1} {ex:.1},{dip:.1} {ex:.1},{ey:.1}"),
                (sx + ex) / 2.0,
                dip - 8.0,
            )
        };
        let class = if taken { "edge taken" } else { "edge" };
        let _ = write!(
            out,
            "<g class=\"{class}\" data-from=\"{}\" data-to=\"{}\"><path d=\"{path}\" \
             marker-end=\"url(#arrow)\"/>",
            escape(from),
            escape(to)
        );
        if !edge.label.is_empty() {
            let _ = write!(
                out,
                "<text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\" \
                 style=\"paint-order:stroke;stroke:#fff;stroke-width:3px\">{}</text>",
                escape(&edge.label)
            );
        }
        out.push_str("</g>");
    }
    for (i, node) in g.nodes.iter().enumerate() {
        let Some(&(x, y, w)) = pos.get(i) else {
            continue;
        };
        let current = marks.current.contains(&node.key);
        let class = match (current, visited(i)) {
            (true, _) => "node current",
            (false, true) => "node visited",
            (false, false) => "node",
        };
        let name = match node.shape {
            Shape::Start | Shape::End => "",
            _ => node.key.as_str(),
        };
        let _ = write!(
            out,
            "<g class=\"{class}\" data-node=\"{}\"><title>{}{}</title>",
            escape(name),
            escape(&node.title),
            if current { " (current)" } else { "" }
        );
        let top = y - NODE_HEIGHT / 2.0;
        match node.shape {
            Shape::Start => {
                let _ = write!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"9\" fill=\"#1d2430\"/>",
                    x + 9.0
                );
            }
            Shape::End => {
                let cx = x + 15.0;
                let _ = write!(
                    out,
                    "<circle cx=\"{cx:.1}\" cy=\"{y:.1}\" r=\"14\" fill=\"#fff\" stroke=\"#1d2430\" \
                     stroke-width=\"1.5\"/><circle cx=\"{cx:.1}\" cy=\"{y:.1}\" r=\"9\" \
                     fill=\"#1d2430\"/>"
                );
            }
            Shape::Decision => {
                let cx = x + w / 2.0;
                let _ = write!(
                    out,
                    "<polygon points=\"{x:.1},{y:.1} {cx:.1},{top:.1} {:.1},{y:.1} {cx:.1},{:.1}\"/>",
                    x + w,
                    y + NODE_HEIGHT / 2.0
                );
            }
            Shape::Box | Shape::Wait => {
                let rx = if node.shape == Shape::Wait { 20 } else { 6 };
                let _ = write!(
                    out,
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{w:.1}\" height=\"{NODE_HEIGHT}\" \
                     rx=\"{rx}\"/>"
                );
            }
        }
        if !matches!(node.shape, Shape::Start | Shape::End) {
            let cx = x + w / 2.0;
            match &node.detail {
                Some(detail) => {
                    let _ = write!(
                        out,
                        "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                         font-weight=\"600\">{}</text><text x=\"{cx:.1}\" y=\"{:.1}\" \
                         text-anchor=\"middle\" font-size=\"11\" fill=\"#5b6575\">{}</text>",
                        y - 3.0,
                        escape(&node.title),
                        y + 12.0,
                        escape(detail)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                         font-weight=\"600\">{}</text>",
                        y + 4.0,
                        escape(&node.title)
                    );
                }
            }
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use workflow_model::{Event, State, StateMachine, Transition};

    fn order() -> Definition {
        let mut pay = Transition::new("New", "Paid");
        pay.name = Some("pay".into());
        pay.trigger = Some(Event::new("pay", "payment").into());
        let mut back = Transition::new("Paid", "New");
        back.name = Some("refund".into());
        Definition::new(
            "Order<script>",
            StateMachine {
                id: "root".into(),
                initial: "New".into(),
                states: vec![State::new("New"), State::new("Paid"), State::new("Gone")],
                transitions: vec![pay, back],
            },
        )
    }

    #[test]
    fn the_current_state_is_highlighted_and_the_path_taken_marked() {
        let marks = Marks {
            current: BTreeSet::from(["Paid".to_owned()]),
            visited: BTreeSet::from(["New".to_owned()]),
            taken: BTreeSet::from([("New".to_owned(), "Paid".to_owned())]),
            started: true,
            ended: false,
        };
        let svg = svg(&order(), &marks);
        assert!(svg.contains("<g class=\"node current\" data-node=\"Paid\">"));
        assert!(svg.contains("<g class=\"node visited\" data-node=\"New\">"));
        assert!(svg.contains("<g class=\"node\" data-node=\"Gone\">"));
        assert!(svg.contains("<g class=\"edge taken\" data-from=\"New\" data-to=\"Paid\">"));
        assert!(svg.contains("<g class=\"edge\" data-from=\"Paid\" data-to=\"New\">"));
        assert!(svg.contains(">pay (event payment)</text>"));
        assert!(svg.contains("aria-label=\"diagram of Order&lt;script&gt;\""));
        assert!(!svg.contains("<script>"));
    }

    #[test]
    fn layers_follow_the_distance_from_the_start() {
        let g = graph(&order());
        let layer = layers(&g);
        let of = |key: &str| g.index(key).and_then(|i| layer.get(i)).copied();
        assert_eq!(of(START), Some(0));
        assert_eq!(of("New"), Some(1));
        assert_eq!(of("Paid"), Some(2));
        // Unreached from the start: after the others, with the end.
        assert_eq!(of("Gone"), of(END));
    }
}
