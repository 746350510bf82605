//! Flowchart rules FC-V1..FC-V15 and the analysis the engine uses
//! (FC-5, FC-6, FC-16).
//!
//! [`check`] runs the structural rules (FC-V1..FC-V7, FC-V13, FC-V15) first and the graph rules
//! (FC-V8..FC-V12, FC-V14) only when the structural rules found nothing in the flowchart, so one
//! typo gives one diagnostic (FC-26). The graph rules work on the same [`FlowchartAnalysis`] that
//! [`analyze_flowchart`] hands to the engine and the diagrams, so all of them agree (FC-5).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::Hash;

use super::is_valid_id;
use crate::definition::{Activity, Connection, DONE, Event, Flowchart, Ports, Task};
use crate::diagnostics::{Diagnostic, Diagnostics, Location, backticked, did_you_mean};

/// What the validator computes once about a flowchart (FC-5, FC-6, FC-16), for the engine and
/// the diagrams.
///
/// Nodes are named by their index in [`Flowchart::nodes`] and connections by their index in
/// [`Flowchart::connections`]. Every per-node vector has one entry per node and every
/// per-connection vector one entry per connection. For a flowchart that passed validation the
/// forward/backward split, the loops and the reachability do not depend on the order in which
/// nodes and connections are declared (FC-5); orders *within* a list follow declaration order.
///
/// On an invalid flowchart the analysis never panics and returns what it can: a connection that
/// names an unknown node has no endpoints and is neither forward nor backward, and a duplicated
/// id resolves to its first declaration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowchartAnalysis {
    /// The default start node (FC-6 steps 2-5), by node index; `None` when no start can be
    /// chosen (FC-V7).
    pub default_start: Option<usize>,
    /// The entry points (FC-5): the default start first, then every trigger node (ACT-7) in
    /// declaration order, without repeats.
    pub entry_points: Vec<usize>,
    /// For each connection, whether it is backward (FC-5): it closes a cycle in the depth-first
    /// walk from the entry points. Every other connection with known endpoints is forward.
    pub backward: Vec<bool>,
    /// For each connection, its `(source, target)` node indexes; `None` when it names an
    /// unknown node (FC-V2).
    pub endpoints: Vec<Option<(usize, usize)>>,
    /// For each node, its outbound connections in declaration order, the order in which they
    /// are evaluated when the node settles (FC-9, FC-11).
    pub outbound: Vec<Vec<usize>>,
    /// For each node, its forward inbound connections in declaration order (FC-5): the
    /// connections its readiness waits for (FC-12) and a join counts (FC-17, FC-V9).
    pub forward_inbound: Vec<Vec<usize>>,
    /// For each node, its backward inbound connections in declaration order: the valid ones are
    /// the loops that lead back to it as their head (FC-15).
    pub backward_inbound: Vec<Vec<usize>>,
    /// For each node, whether it can be reached from an entry point (FC-V8).
    pub reachable: Vec<bool>,
    /// Every node once, in a topological order of the forward connections: a forward connection
    /// always goes from an earlier to a later node in this list. Useful to find the nodes with a
    /// forward path to a node (FC-18) and to lay out diagrams.
    pub forward_order: Vec<usize>,
    /// The loops (FC-16), one per loop head, ordered by the head's node index.
    pub loops: Vec<FlowchartLoop>,
    /// For each node, the innermost loop it belongs to, by index into [`Self::loops`].
    pub innermost_loop: Vec<Option<usize>>,
    /// For each connection, the outermost loop it leaves when it is a loop exit (FC-16): a
    /// forward connection from a node inside the loop to a node outside it. That loop decides
    /// when a deferred not-followed evaluation of the exit is counted. `None` for other
    /// connections.
    pub loop_exit: Vec<Option<usize>>,
}

/// One loop of a flowchart (FC-16): a head and the nodes that lead back to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowchartLoop {
    /// The loop head: the target of the loop's valid backward connections, which dominates
    /// every member (FC-5).
    pub head: usize,
    /// The valid backward connections into the head, in declaration order.
    pub backward: Vec<usize>,
    /// The head plus every node that can reach the source of one of [`Self::backward`] without
    /// passing through the head, in ascending node index.
    pub members: Vec<usize>,
    /// The forward connections from a member to a node outside the loop, in declaration order.
    /// An exit that also leaves an enclosing loop is listed in both loops; [`FlowchartAnalysis::
    /// loop_exit`] names the outermost one.
    pub exits: Vec<usize>,
    /// The innermost enclosing loop, by index into [`FlowchartAnalysis::loops`].
    pub parent: Option<usize>,
}

/// Computes the start, the entry points, the forward/backward split and the loops of a
/// flowchart (FC-5, FC-6, FC-16). Meant for a flowchart that passed validation; on any other it
/// returns what it can and never panics.
pub fn analyze_flowchart(chart: &Flowchart) -> FlowchartAnalysis {
    analyze(chart).analysis
}

/// Checks one flowchart located at `at`, adding every violation to `cx`. `workflow` is the
/// definition's name, for FC-V13 on the top-level flowchart.
pub(super) fn check(chart: &Flowchart, at: &Location, workflow: &str, cx: &mut Diagnostics) {
    let top_level = *at == Location::root().field("root");
    let before = cx.len();
    check_structure(chart, at, top_level, workflow, cx);
    // FC-26: the graph rules run only on a structurally sound flowchart. An invalid node id
    // (FC-V16) is structural too; the walker reports it.
    let ids_valid = chart.nodes.iter().all(|node| is_valid_id(node.id()));
    if cx.len() == before && ids_valid {
        check_graph(chart, at, top_level, cx);
    }
}

// ---------------------------------------------------------------------------------------------
// Structural rules: FC-V1..FC-V7, FC-V13, FC-V15.
// ---------------------------------------------------------------------------------------------

fn check_structure(
    chart: &Flowchart,
    at: &Location,
    top_level: bool,
    workflow: &str,
    cx: &mut Diagnostics,
) {
    let nodes_at = at.field("nodes");
    let connections_at = at.field("connections");
    let index = node_index(chart);
    let ids: Vec<&str> = chart.nodes.iter().map(Activity::id).collect();

    // FC-V13: a flowchart without nodes.
    if chart.nodes.is_empty() {
        let message = if top_level {
            format!("workflow `{workflow}` has no nodes")
        } else {
            format!("flowchart `{}` has no nodes", chart.id)
        };
        cx.push(Diagnostic::new("FC-V13", at.clone(), message));
    }

    // FC-V1: two nodes with the same id.
    report_duplicates(
        "FC-V1",
        ids.iter().map(|id| Some(*id)),
        |i| nodes_at.index(i).field("id"),
        |i| {
            format!(
                "duplicate node `{}`",
                ids.get(i).copied().unwrap_or_default()
            )
        },
        cx,
    );

    // FC-V4 (declared port lists) and FC-V15 (fork branches), node by node.
    for (i, node) in chart.nodes.iter().enumerate() {
        let node_at = nodes_at.index(i);
        match node {
            Activity::Task(Task {
                ports: Some(ports), ..
            })
            | Activity::Event(Event {
                ports: Some(ports), ..
            }) => {
                let ports_at = node_at.field("ports");
                report_duplicates(
                    "FC-V4",
                    ports.iter().map(|p| Some(p.as_str())),
                    |j| ports_at.index(j),
                    |j| {
                        format!(
                            "duplicate outcome `{}` on node `{}`",
                            ports.get(j).map(String::as_str).unwrap_or_default(),
                            node.id()
                        )
                    },
                    cx,
                );
            }
            Activity::Fork(fork) => {
                let branches_at = node_at.field("branches");
                if fork.branches.is_empty() {
                    cx.push(Diagnostic::new(
                        "FC-V15",
                        branches_at.clone(),
                        format!("fork `{}` has no branches", fork.id),
                    ));
                }
                report_duplicates(
                    "FC-V15",
                    fork.branches.iter().map(|b| Some(b.as_str())),
                    |j| branches_at.index(j),
                    |j| {
                        format!(
                            "duplicate branch `{}` in fork `{}`",
                            fork.branches.get(j).map(String::as_str).unwrap_or_default(),
                            fork.id
                        )
                    },
                    cx,
                );
            }
            _ => {}
        }
    }

    // FC-V2 on the explicit start, FC-V6: more than one explicit start.
    for (i, name) in chart.start.iter().enumerate() {
        if !index.contains_key(name.as_str()) {
            unknown_node(name, &ids, start_location(at, chart, i), cx);
        }
    }
    if chart.start.len() > 1 {
        let message = format!(
            "more than one start: {}",
            and_list(chart.start.iter().map(String::as_str))
        );
        for i in 0..chart.start.len() {
            let mut diagnostic = Diagnostic::new("FC-V6", start_location(at, chart, i), &*message);
            for j in (0..chart.start.len()).filter(|&j| j != i) {
                diagnostic = diagnostic.with_related(start_location(at, chart, j), "another start");
            }
            cx.push(diagnostic);
        }
    }

    // FC-V2 and FC-V3 on each connection.
    for (i, connection) in chart.connections.iter().enumerate() {
        let connection_at = connections_at.index(i);
        match index.get(connection.source.as_str()) {
            None => unknown_node(&connection.source, &ids, connection_at.field("source"), cx),
            Some(&source) => {
                if let Some(node) = chart.nodes.get(source) {
                    check_port(node, &connection.port, connection_at.field("port"), cx);
                }
            }
        }
        if !index.contains_key(connection.target.as_str()) {
            unknown_node(&connection.target, &ids, connection_at.field("target"), cx);
        }
    }

    // FC-V5: the same (source, port, target) twice.
    report_duplicates(
        "FC-V5",
        chart
            .connections
            .iter()
            .map(|c| Some((c.source.as_str(), c.port.as_str(), c.target.as_str()))),
        |i| connections_at.index(i),
        |i| {
            format!(
                "duplicate connection `{}`",
                chart
                    .connections
                    .get(i)
                    .map(connection_text)
                    .unwrap_or_default()
            )
        },
        cx,
    );

    // FC-V7: no start can be chosen (FC-6 steps 2-5). Skipped when a connection names an
    // unknown target (FC-V2 reported it): which nodes have inbound connections is unknown then.
    let targets_known = chart
        .connections
        .iter()
        .all(|c| index.contains_key(c.target.as_str()));
    if chart.start.is_empty()
        && !chart.nodes.is_empty()
        && targets_known
        && default_start(chart, &index).is_none()
    {
        let without = nodes_without_inbound(chart);
        let message = if without.is_empty() {
            "no start node: every node has an inbound connection".to_owned()
        } else {
            let names: Vec<&str> = without
                .iter()
                .filter_map(|&i| ids.get(i).copied())
                .collect();
            let listed = if names.len() <= 3 {
                and_list(names.iter().copied())
            } else {
                format!(
                    "{} and {} others",
                    backticked(names.iter().take(2).copied()),
                    names.len() - 2
                )
            };
            format!(
                "cannot choose a start node: {listed} have no inbound connection; add `start -> <node>`"
            )
        };
        let mut diagnostic = Diagnostic::new("FC-V7", at.clone(), message);
        for &i in &without {
            diagnostic = diagnostic.with_related(
                nodes_at.index(i).field("id"),
                format!(
                    "`{}` has no inbound connection",
                    ids.get(i).copied().unwrap_or_default()
                ),
            );
        }
        cx.push(diagnostic);
    }
}

/// FC-V2: a connection or the start names an unknown node.
fn unknown_node(name: &str, ids: &[&str], at: Location, cx: &mut Diagnostics) {
    let (mut hint, suggestion) = did_you_mean(name, ids.iter().copied());
    if suggestion.is_none() && !ids.is_empty() {
        // No close name: the choices, as for an unknown port (FC-V3).
        hint = format!(
            "; expected one of {}",
            crate::diagnostics::choices(ids.iter().copied())
        );
    }
    let mut diagnostic = Diagnostic::new("FC-V2", at, format!("unknown node `{name}`{hint}"));
    diagnostic.suggestion = suggestion;
    cx.push(diagnostic);
}

/// FC-V3: a connection from `node` through `port`, which `node` does not declare. Terminal nodes
/// are left to FC-V10 and forks without branches to FC-V15, so one mistake gives one diagnostic.
fn check_port(node: &Activity, port: &str, at: Location, cx: &mut Diagnostics) {
    let Ports::Declared(declared) = node.ports() else {
        return;
    };
    if declared.contains(&port)
        || node.is_terminal()
        || matches!(node, Activity::Fork(f) if f.branches.is_empty())
    {
        return;
    }
    let (mut hint, suggestion) = did_you_mean(port, declared.iter().copied());
    if suggestion.is_none() {
        hint = if declared.is_empty() {
            "; it declares no outcomes".to_owned()
        } else {
            format!(
                "; expected one of {}",
                crate::diagnostics::choices(declared.iter().copied())
            )
        };
    }
    let mut diagnostic = Diagnostic::new(
        "FC-V3",
        at,
        format!("node `{}` has no outcome `{port}`{hint}", node.id()),
    );
    diagnostic.suggestion = suggestion;
    cx.push(diagnostic);
}

/// The location of the `i`th explicit start. JSON writes a single start as a plain string, so
/// then the pointer names the field itself (`/root/start`), else the list element.
fn start_location(at: &Location, chart: &Flowchart, i: usize) -> Location {
    if chart.start.len() == 1 {
        at.field("start")
    } else {
        at.field("start").index(i)
    }
}

/// Reports each repeated key among `items` (`None` items are skipped): the first repeat of a key
/// puts the same message on both occurrences (FC-25); any further repeat gets it too, related to
/// the first occurrence.
pub(super) fn report_duplicates<K, I, L, M>(
    rule: &'static str,
    items: I,
    location: L,
    message: M,
    cx: &mut Diagnostics,
) where
    K: Eq + Hash,
    I: IntoIterator<Item = Option<K>>,
    L: Fn(usize) -> Location,
    M: Fn(usize) -> String,
{
    let mut first: HashMap<K, (usize, bool)> = HashMap::new();
    for (i, key) in items.into_iter().enumerate() {
        let Some(key) = key else { continue };
        match first.get_mut(&key) {
            None => {
                first.insert(key, (i, false));
            }
            Some((j, paired)) => {
                let text = message(i);
                if *paired {
                    cx.push(
                        Diagnostic::new(rule, location(i), text)
                            .with_related(location(*j), "first used here"),
                    );
                } else {
                    *paired = true;
                    cx.push_pair(rule, location(*j), location(i), &text);
                }
            }
        }
    }
}

/// For an invalid backward connection `source -> head` (FC-V11), the forward connection by
/// which a path from an entry point reaches `source` without passing through `head` first
/// enters what `head` leads to: the connection that bypasses the loop's entry.
fn loop_bypass(analysis: &FlowchartAnalysis, source: usize, head: usize) -> Option<usize> {
    let next = |node: usize| {
        analysis
            .outbound
            .get(node)
            .into_iter()
            .flatten()
            .filter(|&&c| !analysis.backward.get(c).copied().unwrap_or(false))
            .filter_map(|&c| Some((c, analysis.endpoints.get(c).copied().flatten()?.1)))
    };
    // What the head leads to, through forward connections.
    let mut below = vec![false; analysis.outbound.len()];
    let mut pending = vec![head];
    while let Some(node) = pending.pop() {
        for (_, to) in next(node) {
            if let Some(seen @ false) = below.get_mut(to) {
                *seen = true;
                pending.push(to);
            }
        }
    }
    // A breadth-first walk from the entry points that never enters the head, keeping the
    // connection each node was first reached by.
    let mut reached_by: Vec<Option<Option<usize>>> = vec![None; analysis.outbound.len()];
    let mut queue = VecDeque::new();
    for &entry in &analysis.entry_points {
        if entry == head {
            continue;
        }
        if let Some(slot @ None) = reached_by.get_mut(entry) {
            *slot = Some(None);
            queue.push_back(entry);
        }
    }
    while let Some(node) = queue.pop_front() {
        for (c, to) in next(node) {
            if to == head {
                continue;
            }
            if let Some(slot @ None) = reached_by.get_mut(to) {
                *slot = Some(Some(c));
                queue.push_back(to);
            }
        }
    }
    // Back from the source to the entry point: the earliest connection on that path whose
    // target is below the head.
    let mut bypass = None;
    let mut node = source;
    for _ in 0..analysis.outbound.len() {
        let Some(Some(c)) = reached_by.get(node).copied().flatten() else {
            break;
        };
        let (from, to) = analysis.endpoints.get(c).copied().flatten()?;
        if below.get(to).copied().unwrap_or(false) {
            bypass = Some(c);
        }
        node = from;
    }
    bypass
}

/// `` `a` ``, `` `a` and `b` ``, `` `a`, `b` and `c` ``.
fn and_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => format!("`{last}`"),
        Some((last, rest)) => format!("{} and `{last}`", backticked(rest.iter().copied())),
    }
}

/// A connection as the DSL writes it: `a -> b` for the port `done`, else `a.port -> b`.
fn connection_text(connection: &Connection) -> String {
    if connection.port == DONE {
        format!("{} -> {}", connection.source, connection.target)
    } else {
        format!(
            "{}.{} -> {}",
            connection.source, connection.port, connection.target
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Graph rules: FC-V8..FC-V12, FC-V14.
// ---------------------------------------------------------------------------------------------

fn check_graph(chart: &Flowchart, at: &Location, top_level: bool, cx: &mut Diagnostics) {
    let nodes_at = at.field("nodes");
    let connections_at = at.field("connections");
    let Analyzed {
        analysis,
        valid_backward,
    } = analyze(chart);
    let node_id = |i: usize| chart.nodes.get(i).map(Activity::id).unwrap_or_default();

    // FC-V8: a node unreachable from every entry point.
    for (i, node) in chart.nodes.iter().enumerate() {
        if !analysis.reachable.get(i).copied().unwrap_or(true) {
            cx.push(Diagnostic::new(
                "FC-V8",
                nodes_at.index(i).field("id"),
                format!("node `{}` is unreachable from the start", node.id()),
            ));
        }
    }

    // FC-V9: a join with fewer than two forward inbound connections.
    for (i, node) in chart.nodes.iter().enumerate() {
        if let Activity::Join(join) = node {
            let count = analysis.forward_inbound.get(i).map_or(0, Vec::len);
            if count < 2 {
                cx.push(Diagnostic::new(
                    "FC-V9",
                    nodes_at.index(i).field("id"),
                    format!(
                        "join `{}` has {count} inbound connection{}; a join needs at least 2",
                        join.id,
                        if count == 1 { "" } else { "s" }
                    ),
                ));
            }
        }
    }

    // FC-V10: a terminal node with outbound connections.
    for (c, endpoints) in analysis.endpoints.iter().enumerate() {
        let Some((source, _)) = *endpoints else {
            continue;
        };
        let Some(node) = chart.nodes.get(source) else {
            continue;
        };
        if node.is_terminal() {
            cx.push(Diagnostic::new(
                "FC-V10",
                connections_at.index(c).field("source"),
                format!(
                    "{} node `{}` cannot have outbound connections",
                    node.kind_name(),
                    node.id()
                ),
            ));
        }
    }

    // FC-V11: a backward connection whose target does not dominate its source. One from an
    // unreachable node is left to FC-V8.
    for (c, connection) in chart.connections.iter().enumerate() {
        let Some((source, target)) = analysis.endpoints.get(c).copied().flatten() else {
            continue;
        };
        let backward = analysis.backward.get(c).copied().unwrap_or(false);
        let valid = valid_backward.get(c).copied().unwrap_or(false);
        let reachable = analysis.reachable.get(source).copied().unwrap_or(false);
        if backward && !valid && reachable {
            let mut diagnostic = Diagnostic::new(
                "FC-V11",
                connections_at.index(c),
                format!(
                    "invalid loop: `{}` returns to `{}`, but `{}` can be reached without passing through `{}`",
                    connection_text(connection),
                    node_id(target),
                    node_id(source),
                    node_id(target)
                ),
            );
            let bypass = loop_bypass(&analysis, source, target).and_then(|c| {
                let entered = analysis.endpoints.get(c).copied().flatten()?.1;
                Some((c, chart.connections.get(c)?, entered))
            });
            if let Some((c, bypassing, entered)) = bypass {
                diagnostic = diagnostic.with_related(
                    connections_at.index(c),
                    format!(
                        "`{}` enters the loop at `{}`, bypassing `{}`",
                        connection_text(bypassing),
                        node_id(entered),
                        node_id(target)
                    ),
                );
            }
            cx.push(diagnostic);
        }
    }

    // FC-V12: a cycle none of whose nodes can wait or change data (FC-27).
    for (c, &valid) in valid_backward.iter().enumerate() {
        if !valid {
            continue;
        }
        let Some((source, head)) = analysis.endpoints.get(c).copied().flatten() else {
            continue;
        };
        if let Some(cycle) = inert_cycle(chart, &analysis, head, source) {
            let mut names: Vec<&str> = cycle.iter().map(|&i| node_id(i)).collect();
            names.push(node_id(head));
            cx.push(Diagnostic::new(
                "FC-V12",
                connections_at.index(c),
                format!(
                    "loop `{}` can neither wait nor change data, so it would never end",
                    names.join(" -> ")
                ),
            ));
        }
    }

    // FC-V14: a trigger of the top-level flowchart with a forward inbound connection. A trigger
    // in a nested flowchart is reported once, by the walker.
    if top_level {
        for (i, node) in chart.nodes.iter().enumerate() {
            if !node.is_trigger() {
                continue;
            }
            for &c in analysis.forward_inbound.get(i).into_iter().flatten() {
                cx.push(
                    Diagnostic::new(
                        "FC-V14",
                        connections_at.index(c).field("target"),
                        format!(
                            "trigger `{}` must be an entry point of the top-level flowchart; only a loop may lead back to it",
                            node.id()
                        ),
                    )
                    .with_related(
                        nodes_at.index(i).field("id"),
                        format!("`{}` is declared a trigger here", node.id()),
                    ),
                );
            }
        }
    }
}

/// The shortest path `head -> ... -> source` over forward connections through nodes that can
/// neither wait nor change data (FC-27), if there is one; with the backward connection
/// `source -> head` it closes a loop that would never end (FC-V12).
fn inert_cycle(
    chart: &Flowchart,
    analysis: &FlowchartAnalysis,
    head: usize,
    source: usize,
) -> Option<Vec<usize>> {
    let inert = |i: usize| {
        chart
            .nodes
            .get(i)
            .is_some_and(|node| !node.can_wait_or_change_data())
    };
    if !inert(head) {
        return None;
    }
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([head]);
    let mut seen = HashSet::from([head]);
    while let Some(node) = queue.pop_front() {
        if node == source {
            let mut path = vec![node];
            let mut at = node;
            while let Some(&previous) = parent.get(&at) {
                path.push(previous);
                at = previous;
            }
            path.reverse();
            return Some(path);
        }
        for &c in analysis.outbound.get(node).into_iter().flatten() {
            if analysis.backward.get(c).copied().unwrap_or(true) {
                continue;
            }
            let Some((_, next)) = analysis.endpoints.get(c).copied().flatten() else {
                continue;
            };
            if inert(next) && seen.insert(next) {
                parent.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Analysis: FC-5, FC-6, FC-16.
// ---------------------------------------------------------------------------------------------

/// The analysis plus what only the validator needs.
struct Analyzed {
    analysis: FlowchartAnalysis,
    /// For each connection, whether it is backward and its target dominates its source (FC-5).
    valid_backward: Vec<bool>,
}

/// Each node id's index; a repeated id resolves to its first declaration.
fn node_index(chart: &Flowchart) -> HashMap<&str, usize> {
    let mut index = HashMap::with_capacity(chart.nodes.len());
    for (i, node) in chart.nodes.iter().enumerate() {
        index.entry(node.id()).or_insert(i);
    }
    index
}

/// The nodes that no connection targets, in declaration order.
fn nodes_without_inbound(chart: &Flowchart) -> Vec<usize> {
    let targets: HashSet<&str> = chart
        .connections
        .iter()
        .map(|c| c.target.as_str())
        .collect();
    chart
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| !targets.contains(node.id()))
        .map(|(i, _)| i)
        .collect()
}

/// FC-6 steps 2-5: the explicit start, else the first `start` node, else the first trigger,
/// else the one node without inbound connections.
fn default_start(chart: &Flowchart, index: &HashMap<&str, usize>) -> Option<usize> {
    if let Some(first) = chart.start.first() {
        return index.get(first.as_str()).copied();
    }
    if let Some(i) = chart
        .nodes
        .iter()
        .position(|node| matches!(node, Activity::Start(_)))
    {
        return Some(i);
    }
    if let Some(i) = chart.nodes.iter().position(Activity::is_trigger) {
        return Some(i);
    }
    match nodes_without_inbound(chart).as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

/// The connections as adjacency lists over node indexes.
struct Graph {
    nodes: usize,
    endpoints: Vec<Option<(usize, usize)>>,
    outbound: Vec<Vec<usize>>,
    inbound: Vec<Vec<usize>>,
}

impl Graph {
    fn new(chart: &Flowchart, index: &HashMap<&str, usize>) -> Self {
        let nodes = chart.nodes.len();
        let endpoints: Vec<Option<(usize, usize)>> = chart
            .connections
            .iter()
            .map(|c| {
                Some((
                    *index.get(c.source.as_str())?,
                    *index.get(c.target.as_str())?,
                ))
            })
            .collect();
        let mut outbound = vec![Vec::new(); nodes];
        let mut inbound = vec![Vec::new(); nodes];
        for (c, pair) in endpoints.iter().enumerate() {
            let Some((source, target)) = *pair else {
                continue;
            };
            if let Some(list) = outbound.get_mut(source) {
                list.push(c);
            }
            if let Some(list) = inbound.get_mut(target) {
                list.push(c);
            }
        }
        Self {
            nodes,
            endpoints,
            outbound,
            inbound,
        }
    }

    fn source(&self, connection: usize) -> Option<usize> {
        self.endpoints
            .get(connection)
            .copied()
            .flatten()
            .map(|(s, _)| s)
    }

    fn target(&self, connection: usize) -> Option<usize> {
        self.endpoints
            .get(connection)
            .copied()
            .flatten()
            .map(|(_, t)| t)
    }

    /// The sources of the connections into `node`.
    fn predecessors(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.inbound
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|&c| self.source(c))
    }
}

/// Where a node is in the depth-first walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visit {
    New,
    /// On the current path.
    Active,
    Done,
}

/// The result of the depth-first walks.
struct Walk {
    backward: Vec<bool>,
    reachable: Vec<bool>,
    /// The nodes reachable from the entry points, in postorder of the walk from them.
    reachable_postorder: Vec<usize>,
    /// Every node, in postorder: the reachable ones first, then the walks from the unreachable
    /// ones in declaration order.
    postorder: Vec<usize>,
}

/// FC-5: a depth-first walk from the entry points in order, following outbound connections in
/// declaration order; a connection to a node on the current path is backward. Unreachable nodes
/// are then walked from in declaration order, so that the forward connections are acyclic
/// everywhere.
fn walk(graph: &Graph, entries: &[usize]) -> Walk {
    let mut state = vec![Visit::New; graph.nodes];
    let mut backward = vec![false; graph.endpoints.len()];
    let mut postorder = Vec::with_capacity(graph.nodes);
    for &root in entries {
        dfs(graph, root, &mut state, &mut backward, &mut postorder);
    }
    let reachable: Vec<bool> = state.iter().map(|s| *s != Visit::New).collect();
    let reachable_postorder = postorder.clone();
    for root in 0..graph.nodes {
        dfs(graph, root, &mut state, &mut backward, &mut postorder);
    }
    Walk {
        backward,
        reachable,
        reachable_postorder,
        postorder,
    }
}

fn dfs(
    graph: &Graph,
    root: usize,
    state: &mut [Visit],
    backward: &mut [bool],
    postorder: &mut Vec<usize>,
) {
    match state.get_mut(root) {
        Some(visit) if *visit == Visit::New => *visit = Visit::Active,
        _ => return,
    }
    // An explicit stack of (node, position in its outbound list): no recursion, so no stack
    // overflow on a long chain.
    let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
    while let Some((node, position)) = stack.last_mut() {
        let node = *node;
        let next = graph
            .outbound
            .get(node)
            .and_then(|list| list.get(*position))
            .copied();
        let Some(connection) = next else {
            stack.pop();
            if let Some(visit) = state.get_mut(node) {
                *visit = Visit::Done;
            }
            postorder.push(node);
            continue;
        };
        *position += 1;
        let Some(target) = graph.target(connection) else {
            continue;
        };
        match state.get_mut(target) {
            Some(visit @ Visit::New) => {
                *visit = Visit::Active;
                stack.push((target, 0));
            }
            Some(Visit::Active) => {
                if let Some(flag) = backward.get_mut(connection) {
                    *flag = true;
                }
            }
            _ => {}
        }
    }
}

/// Immediate dominators over the nodes reachable from a virtual root that leads to every entry
/// point (Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm").
struct Dominators {
    /// Indexed by node, plus the virtual root at index `root`; `None` for unreachable nodes.
    idom: Vec<Option<usize>>,
    root: usize,
}

impl Dominators {
    fn new(graph: &Graph, entries: &[usize], reachable_postorder: &[usize]) -> Self {
        let root = graph.nodes;
        let mut order: Vec<Option<usize>> = vec![None; graph.nodes + 1];
        for (number, &node) in reachable_postorder.iter().enumerate() {
            if let Some(slot) = order.get_mut(node) {
                *slot = Some(number);
            }
        }
        if let Some(slot) = order.get_mut(root) {
            *slot = Some(reachable_postorder.len());
        }
        let mut idom: Vec<Option<usize>> = vec![None; graph.nodes + 1];
        if let Some(slot) = idom.get_mut(root) {
            *slot = Some(root);
        }
        let entry_set: HashSet<usize> = entries.iter().copied().collect();
        // Each pass only lowers dominators in the tree, so this settles; the bound is a guard.
        for _ in 0..=graph.nodes + 1 {
            let mut changed = false;
            for &node in reachable_postorder.iter().rev() {
                let virtual_root = entry_set.contains(&node).then_some(root);
                let mut new_idom: Option<usize> = None;
                for pred in graph.predecessors(node).chain(virtual_root) {
                    if idom.get(pred).copied().flatten().is_none() {
                        continue;
                    }
                    new_idom = Some(match new_idom {
                        None => pred,
                        Some(current) => intersect(&idom, &order, pred, current, root),
                    });
                }
                if let Some(slot) = idom.get_mut(node)
                    && *slot != new_idom
                {
                    *slot = new_idom;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Self { idom, root }
    }

    /// Whether every path from an entry point to `node` passes through `dominator`.
    fn dominates(&self, dominator: usize, node: usize) -> bool {
        let mut at = node;
        for _ in 0..self.idom.len() {
            if at == dominator {
                return true;
            }
            match self.idom.get(at).copied().flatten() {
                Some(up) if up != at && at != self.root => at = up,
                _ => return false,
            }
        }
        false
    }
}

/// The nearest common dominator of `a` and `b` in the tree built so far.
fn intersect(
    idom: &[Option<usize>],
    order: &[Option<usize>],
    a: usize,
    b: usize,
    root: usize,
) -> usize {
    let number = |n: usize| order.get(n).copied().flatten().unwrap_or(usize::MAX);
    let up = |n: usize| idom.get(n).copied().flatten().unwrap_or(root);
    let (mut a, mut b) = (a, b);
    for _ in 0..2 * idom.len() * idom.len() + 2 {
        if a == b {
            return a;
        }
        while number(a) < number(b) {
            a = up(a);
        }
        while number(b) < number(a) {
            b = up(b);
        }
    }
    root
}

fn analyze(chart: &Flowchart) -> Analyzed {
    let index = node_index(chart);
    let graph = Graph::new(chart, &index);
    let default_start = default_start(chart, &index);
    let mut entry_points: Vec<usize> = default_start.into_iter().collect();
    for (i, node) in chart.nodes.iter().enumerate() {
        if node.is_trigger() && !entry_points.contains(&i) {
            entry_points.push(i);
        }
    }

    let walk = walk(&graph, &entry_points);
    let dominators = Dominators::new(&graph, &entry_points, &walk.reachable_postorder);
    let is_backward = |c: usize| walk.backward.get(c).copied().unwrap_or(false);
    let is_reachable = |n: usize| walk.reachable.get(n).copied().unwrap_or(false);

    let valid_backward: Vec<bool> = (0..graph.endpoints.len())
        .map(|c| {
            is_backward(c)
                && graph
                    .endpoints
                    .get(c)
                    .copied()
                    .flatten()
                    .is_some_and(|(source, target)| {
                        is_reachable(source) && dominators.dominates(target, source)
                    })
        })
        .collect();

    let mut forward_inbound = vec![Vec::new(); graph.nodes];
    let mut backward_inbound = vec![Vec::new(); graph.nodes];
    for (node, inbound) in graph.inbound.iter().enumerate() {
        for &c in inbound {
            let list = if is_backward(c) {
                backward_inbound.get_mut(node)
            } else {
                forward_inbound.get_mut(node)
            };
            if let Some(list) = list {
                list.push(c);
            }
        }
    }

    // FC-16: one loop per head with valid backward connections.
    let mut heads: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (c, &valid) in valid_backward.iter().enumerate() {
        if let (true, Some(head)) = (valid, graph.target(c)) {
            heads.entry(head).or_default().push(c);
        }
    }
    let mut loops: Vec<FlowchartLoop> = heads
        .into_iter()
        .map(|(head, backward)| {
            let mut members = BTreeSet::from([head]);
            let mut pending: Vec<usize> =
                backward.iter().filter_map(|&c| graph.source(c)).collect();
            while let Some(node) = pending.pop() {
                if is_reachable(node) && dominators.dominates(head, node) && members.insert(node) {
                    pending.extend(graph.predecessors(node));
                }
            }
            let exits = (0..graph.endpoints.len())
                .filter(|&c| !is_backward(c))
                .filter(|&c| {
                    graph
                        .endpoints
                        .get(c)
                        .copied()
                        .flatten()
                        .is_some_and(|(s, t)| members.contains(&s) && !members.contains(&t))
                })
                .collect();
            FlowchartLoop {
                head,
                backward,
                members: members.into_iter().collect(),
                exits,
                parent: None,
            }
        })
        .collect();
    let contains = |l: &FlowchartLoop, node: usize| l.members.binary_search(&node).is_ok();
    // The innermost loop containing `node` (other than `except`): the smallest one.
    let innermost = |loops: &[FlowchartLoop], node: usize, except: Option<usize>| {
        loops
            .iter()
            .enumerate()
            .filter(|&(k, l)| Some(k) != except && contains(l, node))
            .min_by_key(|&(k, l)| (l.members.len(), k))
            .map(|(k, _)| k)
    };
    let parents: Vec<Option<usize>> = loops
        .iter()
        .enumerate()
        .map(|(k, l)| innermost(&loops, l.head, Some(k)))
        .collect();
    for (l, parent) in loops.iter_mut().zip(parents) {
        l.parent = parent;
    }
    let innermost_loop = (0..graph.nodes)
        .map(|node| innermost(&loops, node, None))
        .collect();
    let loop_exit = (0..graph.endpoints.len())
        .map(|c| {
            if is_backward(c) {
                return None;
            }
            let (source, target) = graph.endpoints.get(c).copied().flatten()?;
            loops
                .iter()
                .enumerate()
                .filter(|&(_, l)| contains(l, source) && !contains(l, target))
                .max_by_key(|&(k, l)| (l.members.len(), std::cmp::Reverse(k)))
                .map(|(k, _)| k)
        })
        .collect();

    let forward_order = walk.postorder.iter().rev().copied().collect();
    Analyzed {
        analysis: FlowchartAnalysis {
            default_start,
            entry_points,
            backward: walk.backward,
            endpoints: graph.endpoints,
            outbound: graph.outbound,
            forward_inbound,
            backward_inbound,
            reachable: walk.reachable,
            forward_order,
            loops,
            innermost_loop,
            loop_exit,
        },
        valid_backward,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{
        Definition, End, Fork, If, Join, JoinMode, Start, Switch, SwitchCase, SwitchMode,
    };
    use crate::validate::validate;

    /// `(rule, JSON pointer, message)` of every diagnostic, in order.
    fn problems(definition: &Definition) -> Vec<(&'static str, String, String)> {
        match validate(definition) {
            Ok(()) => Vec::new(),
            Err(diagnostics) => diagnostics
                .iter()
                .map(|d| (d.rule, d.at.json_pointer(), d.message.clone()))
                .collect(),
        }
    }

    /// Asserts exactly these diagnostics, and that the good flowchart still validates cleanly.
    fn expect(definition: &Definition, expected: &[(&str, &str, &str)]) {
        let _ = expense();
        let expected: Vec<(&str, String, String)> = expected
            .iter()
            .map(|&(rule, at, message)| (rule, at.to_owned(), message.to_owned()))
            .collect();
        let found = problems(definition);
        let found: Vec<(&str, String, String)> = found
            .iter()
            .map(|(rule, at, message)| (*rule, at.clone(), message.clone()))
            .collect();
        assert_eq!(found, expected);
    }

    /// The good flowchart of the docs; asserts that it validates cleanly.
    fn expense() -> Definition {
        let definition = Definition::from_json(include_str!("../../docs/expense.json")).unwrap();
        assert_eq!(problems(&definition), Vec::new());
        definition
    }

    fn expense_chart() -> Flowchart {
        match expense().root {
            Activity::Flowchart(chart) => chart,
            other => panic!("expected a flowchart, found {}", other.kind_name()),
        }
    }

    fn definition(chart: Flowchart) -> Definition {
        Definition::new("Expense", chart)
    }

    fn task(id: &str) -> Activity {
        Task::new(id, id).with_ports([DONE]).into()
    }

    fn decision(id: &str) -> Activity {
        If {
            id: id.into(),
            condition: id.into(),
            then: None,
            r#else: None,
        }
        .into()
    }

    fn trigger(id: &str) -> Activity {
        let mut event = Event::new(id, id);
        event.trigger = true;
        event.into()
    }

    fn conn(source: &str, target: &str) -> Connection {
        Connection::new(source, DONE, target)
    }

    fn via(source: &str, port: &str, target: &str) -> Connection {
        Connection::new(source, port, target)
    }

    fn chart(start: &[&str], nodes: Vec<Activity>, connections: Vec<Connection>) -> Flowchart {
        Flowchart {
            id: "root".into(),
            start: start.iter().map(|s| (*s).to_owned()).collect(),
            nodes,
            connections,
        }
    }

    /// The keys of the backward connections.
    fn backward_keys(chart: &Flowchart) -> BTreeSet<String> {
        let analysis = analyze_flowchart(chart);
        chart
            .connections
            .iter()
            .zip(&analysis.backward)
            .filter(|(_, backward)| **backward)
            .map(|(c, _)| c.key())
            .collect()
    }

    // --- FC-V1 .. FC-V15 -------------------------------------------------------------------

    #[test]
    fn fc_v1_duplicate_node_on_both() {
        let mut chart = expense_chart();
        chart.nodes.push(task("review"));
        chart.connections.push(conn("pay", "review"));
        let definition = definition(chart);
        expect(
            &definition,
            &[
                ("FC-V1", "/root/nodes/1/id", "duplicate node `review`"),
                ("FC-V1", "/root/nodes/5/id", "duplicate node `review`"),
            ],
        );
        let diagnostics = validate(&definition).unwrap_err();
        let first = diagnostics.iter().next().unwrap();
        assert_eq!(first.related[0].at.json_pointer(), "/root/nodes/5/id");
    }

    #[test]
    fn fc_v1_third_occurrence_is_reported_once_more() {
        let chart = chart(&["a"], vec![task("a"), task("a"), task("a")], Vec::new());
        expect(
            &definition(chart),
            &[
                ("FC-V1", "/root/nodes/0/id", "duplicate node `a`"),
                ("FC-V1", "/root/nodes/1/id", "duplicate node `a`"),
                ("FC-V1", "/root/nodes/2/id", "duplicate node `a`"),
            ],
        );
    }

    #[test]
    fn fc_v2_unknown_target_suggests_node() {
        let mut chart = expense_chart();
        chart.connections[0].target = "reveiw".into();
        let definition = definition(chart);
        expect(
            &definition,
            &[(
                "FC-V2",
                "/root/connections/0/target",
                "unknown node `reveiw`; did you mean `review`?",
            )],
        );
        let diagnostics = validate(&definition).unwrap_err();
        assert_eq!(
            diagnostics.iter().next().unwrap().suggestion.as_deref(),
            Some("review")
        );
    }

    #[test]
    fn fc_v2_unknown_source_without_close_match() {
        let mut chart = expense_chart();
        chart.connections[5].source = "nobody".into();
        expect(
            &definition(chart),
            &[(
                "FC-V2",
                "/root/connections/5/source",
                "unknown node `nobody`; expected one of `submit`, `review`, `manager`, `pay`, `reject`",
            )],
        );
    }

    #[test]
    fn fc_v2_unknown_start() {
        let mut chart = expense_chart();
        chart.start = vec!["sbumit".into()];
        expect(
            &definition(chart),
            &[(
                "FC-V2",
                "/root/start",
                "unknown node `sbumit`; did you mean `submit`?",
            )],
        );
    }

    #[test]
    fn fc_v3_unknown_port_suggests_declared_port() {
        let mut chart = expense_chart();
        chart.connections[1].port = "aproved".into();
        let definition = definition(chart);
        expect(
            &definition,
            &[(
                "FC-V3",
                "/root/connections/1/port",
                "node `review` has no outcome `aproved`; did you mean `approved`?",
            )],
        );
        let diagnostics = validate(&definition).unwrap_err();
        assert_eq!(
            diagnostics.iter().next().unwrap().suggestion.as_deref(),
            Some("approved")
        );
    }

    #[test]
    fn fc_v3_unknown_port_lists_declared_ports() {
        let mut chart = expense_chart();
        chart.connections[1].port = "maybe".into();
        expect(
            &definition(chart),
            &[(
                "FC-V3",
                "/root/connections/1/port",
                "node `review` has no outcome `maybe`; expected one of `approved`, `rejected`, `manual`",
            )],
        );
    }

    #[test]
    fn fc_v3_builtin_ports_and_open_ports() {
        // An `if` declares `true` and `false`; the default port `done` is not one of them.
        let chart = chart(&["d"], vec![decision("d"), task("x")], vec![conn("d", "x")]);
        expect(
            &definition(chart),
            &[(
                "FC-V3",
                "/root/connections/0/port",
                "node `d` has no outcome `done`; expected one of `true`, `false`",
            )],
        );
        // A JSON task without `ports` is open: any port may be connected.
        let mut chart = expense_chart();
        chart.nodes[3] = Task::new("pay", "pay_out").into();
        chart.connections.push(via("pay", "anything", "reject"));
        expect(&definition(chart), &[]);
    }

    #[test]
    fn fc_v4_duplicate_outcome_on_both() {
        let mut chart = expense_chart();
        chart.nodes[1] = Task::new("review", "auto_review")
            .with_ports(["approved", "rejected", "manual", "approved"])
            .into();
        expect(
            &definition(chart),
            &[
                (
                    "FC-V4",
                    "/root/nodes/1/ports/0",
                    "duplicate outcome `approved` on node `review`",
                ),
                (
                    "FC-V4",
                    "/root/nodes/1/ports/3",
                    "duplicate outcome `approved` on node `review`",
                ),
            ],
        );
    }

    #[test]
    fn fc_v5_duplicate_connection_on_both() {
        let mut chart = expense_chart();
        chart.connections.push(via("review", "approved", "pay"));
        chart.connections.push(conn("submit", "review"));
        expect(
            &definition(chart),
            &[
                (
                    "FC-V5",
                    "/root/connections/1",
                    "duplicate connection `review.approved -> pay`",
                ),
                (
                    "FC-V5",
                    "/root/connections/6",
                    "duplicate connection `review.approved -> pay`",
                ),
                (
                    "FC-V5",
                    "/root/connections/0",
                    "duplicate connection `submit -> review`",
                ),
                (
                    "FC-V5",
                    "/root/connections/7",
                    "duplicate connection `submit -> review`",
                ),
            ],
        );
    }

    #[test]
    fn fc_v6_more_than_one_start_on_both() {
        let mut chart = expense_chart();
        chart.start = vec!["submit".into(), "review".into()];
        expect(
            &definition(chart),
            &[
                (
                    "FC-V6",
                    "/root/start/0",
                    "more than one start: `submit` and `review`",
                ),
                (
                    "FC-V6",
                    "/root/start/1",
                    "more than one start: `submit` and `review`",
                ),
            ],
        );
    }

    #[test]
    fn fc_v7_two_nodes_without_inbound_connection() {
        let mut chart = expense_chart();
        chart.start.clear();
        chart.nodes.push(task("audit"));
        chart.connections.push(conn("audit", "pay"));
        let definition = definition(chart);
        expect(
            &definition,
            &[(
                "FC-V7",
                "/root",
                "cannot choose a start node: `submit` and `audit` have no inbound connection; add `start -> <node>`",
            )],
        );
        let diagnostics = validate(&definition).unwrap_err();
        let related: Vec<String> = diagnostics
            .iter()
            .next()
            .unwrap()
            .related
            .iter()
            .map(|r| r.at.json_pointer())
            .collect();
        assert_eq!(related, ["/root/nodes/0/id", "/root/nodes/5/id"]);
    }

    #[test]
    fn fc_v7_many_nodes_without_inbound_connection() {
        let chart = chart(
            &[],
            vec![task("a"), task("b"), task("c"), task("d"), task("e")],
            vec![conn("a", "e")],
        );
        expect(
            &definition(chart),
            &[(
                "FC-V7",
                "/root",
                "cannot choose a start node: `a`, `b` and 2 others have no inbound connection; add `start -> <node>`",
            )],
        );
    }

    #[test]
    fn fc_v7_every_node_has_an_inbound_connection() {
        let chart = chart(
            &[],
            vec![task("a"), task("b")],
            vec![conn("a", "b"), conn("b", "a")],
        );
        expect(
            &definition(chart),
            &[(
                "FC-V7",
                "/root",
                "no start node: every node has an inbound connection",
            )],
        );
    }

    #[test]
    fn fc_v8_unreachable_node() {
        let mut chart = expense_chart();
        chart.nodes.push(task("audit"));
        chart.connections.push(conn("audit", "pay"));
        expect(
            &definition(chart),
            &[(
                "FC-V8",
                "/root/nodes/5/id",
                "node `audit` is unreachable from the start",
            )],
        );
    }

    #[test]
    fn fc_v8_a_trigger_is_an_entry_point() {
        // `paid` is reachable only from itself: as a trigger it is an entry point.
        let mut chart = expense_chart();
        chart.nodes.push(trigger("paid"));
        chart.connections.push(conn("paid", "pay"));
        expect(&definition(chart), &[]);
    }

    #[test]
    fn fc_v9_join_with_one_inbound_connection() {
        let mut chart = expense_chart();
        chart.nodes.push(
            Join {
                id: "merge".into(),
                mode: JoinMode::All,
            }
            .into(),
        );
        chart.connections.push(conn("pay", "merge"));
        expect(
            &definition(chart.clone()),
            &[(
                "FC-V9",
                "/root/nodes/5/id",
                "join `merge` has 1 inbound connection; a join needs at least 2",
            )],
        );
        chart.connections.push(conn("reject", "merge"));
        expect(&definition(chart), &[]);
    }

    #[test]
    fn fc_v9_backward_inbound_connections_do_not_count() {
        // `merge` has two inbound connections, but one of them leads back to it.
        let chart = chart(
            &["a"],
            vec![
                task("a"),
                Join {
                    id: "merge".into(),
                    mode: JoinMode::Any,
                }
                .into(),
                task("b"),
            ],
            vec![conn("a", "merge"), conn("merge", "b"), conn("b", "merge")],
        );
        expect(
            &definition(chart),
            &[(
                "FC-V9",
                "/root/nodes/1/id",
                "join `merge` has 1 inbound connection; a join needs at least 2",
            )],
        );
    }

    #[test]
    fn fc_v10_terminal_node_with_outbound_connection() {
        let mut chart = expense_chart();
        chart.nodes.push(End::new("done").into());
        chart.connections.push(conn("pay", "done"));
        chart.connections.push(conn("done", "reject"));
        expect(
            &definition(chart),
            &[(
                "FC-V10",
                "/root/connections/7/source",
                "end node `done` cannot have outbound connections",
            )],
        );
    }

    #[test]
    fn fc_v11_invalid_backward_connection() {
        let mut chart = expense_chart();
        // `reject -> manager` and `manager.rejected -> reject` form a cycle with two entries.
        chart.connections.push(conn("reject", "manager"));
        expect(
            &definition(chart),
            &[(
                "FC-V11",
                "/root/connections/5",
                "invalid loop: `manager.rejected -> reject` returns to `reject`, but `manager` can be reached without passing through `reject`",
            )],
        );
        let diagnostics = validate(&definition(chart_with_bypass())).unwrap_err();
        let bypass = &diagnostics.iter().next().unwrap().related;
        assert_eq!(bypass.len(), 1);
        assert_eq!(bypass[0].at.json_pointer(), "/root/connections/3");
        assert_eq!(
            bypass[0].label,
            "`review.manual -> manager` enters the loop at `manager`, bypassing `reject`"
        );
    }

    fn chart_with_bypass() -> Flowchart {
        let mut chart = expense_chart();
        chart.connections.push(conn("reject", "manager"));
        chart
    }

    #[test]
    fn fc_v11_valid_backward_connection() {
        let mut chart = expense_chart();
        chart.connections.push(conn("pay", "review"));
        expect(&definition(chart), &[]);
    }

    #[test]
    fn fc_v12_loop_that_can_neither_wait_nor_change_data() {
        let chart = chart(
            &["submit"],
            vec![
                task("submit"),
                decision("check"),
                decision("route"),
                task("pay"),
            ],
            vec![
                conn("submit", "check"),
                via("check", "true", "route"),
                via("check", "false", "pay"),
                via("route", "true", "check"),
                via("route", "false", "pay"),
            ],
        );
        expect(
            &definition(chart.clone()),
            &[(
                "FC-V12",
                "/root/connections/3",
                "loop `check -> route -> check` can neither wait nor change data, so it would never end",
            )],
        );
        // One branch of the loop that does something is not enough: the other still spins.
        let mut spins = chart.clone();
        spins.nodes.push(task("work"));
        spins.connections.push(via("check", "true", "work"));
        spins.connections.push(conn("work", "check"));
        expect(
            &definition(spins),
            &[(
                "FC-V12",
                "/root/connections/3",
                "loop `check -> route -> check` can neither wait nor change data, so it would never end",
            )],
        );
        // A task in the loop changes data.
        let mut fixed = chart;
        fixed.nodes[2] = Task::new("route", "route")
            .with_ports(["true", "false"])
            .into();
        expect(&definition(fixed), &[]);
    }

    #[test]
    fn fc_v12_self_loop() {
        let chart = chart(
            &["a"],
            vec![task("a"), decision("spin")],
            vec![conn("a", "spin"), via("spin", "true", "spin")],
        );
        expect(
            &definition(chart),
            &[(
                "FC-V12",
                "/root/connections/1",
                "loop `spin -> spin` can neither wait nor change data, so it would never end",
            )],
        );
    }

    #[test]
    fn fc_v13_top_level_flowchart_without_nodes() {
        let mut chart = expense_chart();
        chart.start.clear();
        chart.nodes.clear();
        chart.connections.clear();
        expect(
            &definition(chart),
            &[("FC-V13", "/root", "workflow `Expense` has no nodes")],
        );
    }

    #[test]
    fn fc_v13_nested_flowchart_without_nodes() {
        let mut chart = expense_chart();
        chart.nodes.push(
            Flowchart {
                id: "inner".into(),
                ..Flowchart::default()
            }
            .into(),
        );
        chart.connections.push(conn("pay", "inner"));
        expect(
            &definition(chart),
            &[("FC-V13", "/root/nodes/5", "flowchart `inner` has no nodes")],
        );
    }

    #[test]
    fn fc_v14_trigger_with_forward_inbound_connection() {
        let mut chart = expense_chart();
        let Activity::Event(manager) = &mut chart.nodes[2] else {
            panic!("expected the manager event");
        };
        manager.trigger = true;
        expect(
            &definition(chart),
            &[(
                "FC-V14",
                "/root/connections/3/target",
                "trigger `manager` must be an entry point of the top-level flowchart; only a loop may lead back to it",
            )],
        );
    }

    #[test]
    fn fc_v14_a_loop_may_lead_back_to_a_trigger() {
        let chart = chart(
            &[],
            vec![
                trigger("paid"),
                Task::new("book", "book")
                    .with_ports(["again", "done"])
                    .into(),
            ],
            vec![conn("paid", "book"), via("book", "again", "paid")],
        );
        expect(&definition(chart), &[]);
    }

    #[test]
    fn fc_v14_nested_trigger_is_reported_once() {
        let inner = chart(
            &["a"],
            vec![task("a"), trigger("paid")],
            vec![conn("a", "paid")],
        );
        let mut inner = inner;
        inner.id = "inner".into();
        let outer = chart(&["inner"], vec![inner.into()], Vec::new());
        expect(
            &definition(outer),
            &[(
                "FC-V14",
                "/root/nodes/0/nodes/1/trigger",
                "trigger `paid` must be an entry point of the top-level flowchart; only a loop may lead back to it",
            )],
        );
    }

    #[test]
    fn fc_v15_fork_without_branches() {
        let mut chart = expense_chart();
        chart.nodes.push(
            Fork {
                id: "split".into(),
                branches: Vec::new(),
            }
            .into(),
        );
        chart.connections.push(conn("pay", "split"));
        chart.connections.push(conn("split", "reject"));
        expect(
            &definition(chart),
            &[(
                "FC-V15",
                "/root/nodes/5/branches",
                "fork `split` has no branches",
            )],
        );
    }

    #[test]
    fn fc_v15_duplicate_branch_on_both() {
        let mut chart = expense_chart();
        chart.nodes.push(
            Fork {
                id: "split".into(),
                branches: vec!["left".into(), "right".into(), "left".into()],
            }
            .into(),
        );
        chart.connections.push(conn("pay", "split"));
        chart.connections.push(via("split", "left", "reject"));
        expect(
            &definition(chart),
            &[
                (
                    "FC-V15",
                    "/root/nodes/5/branches/0",
                    "duplicate branch `left` in fork `split`",
                ),
                (
                    "FC-V15",
                    "/root/nodes/5/branches/2",
                    "duplicate branch `left` in fork `split`",
                ),
            ],
        );
    }

    // --- Several at once; FC-26 --------------------------------------------------------------

    #[test]
    fn several_violations_are_reported_together() {
        let mut chart = expense_chart();
        chart.start = vec!["submit".into(), "review".into()];
        chart.nodes.push(task("pay"));
        chart.connections[0].target = "reveiw".into();
        chart.connections[1].port = "aproved".into();
        chart.connections.push(conn("reject", "pay"));
        let definition = definition(chart);
        expect(
            &definition,
            &[
                ("FC-V1", "/root/nodes/3/id", "duplicate node `pay`"),
                ("FC-V1", "/root/nodes/5/id", "duplicate node `pay`"),
                (
                    "FC-V6",
                    "/root/start/0",
                    "more than one start: `submit` and `review`",
                ),
                (
                    "FC-V6",
                    "/root/start/1",
                    "more than one start: `submit` and `review`",
                ),
                (
                    "FC-V2",
                    "/root/connections/0/target",
                    "unknown node `reveiw`; did you mean `review`?",
                ),
                (
                    "FC-V3",
                    "/root/connections/1/port",
                    "node `review` has no outcome `aproved`; did you mean `approved`?",
                ),
            ],
        );
        assert_eq!(
            validate(&definition)
                .unwrap_err()
                .to_string()
                .lines()
                .next(),
            Some("6 problems in the definition")
        );
    }

    #[test]
    fn fc_26_structural_rules_suppress_graph_rules() {
        // The typo leaves `review` without inbound flow, an unreachable join and an end with an
        // outbound connection: only the typo is reported.
        let mut chart = expense_chart();
        chart.connections[0].target = "reveiw".into();
        chart.nodes.push(
            Join {
                id: "merge".into(),
                mode: JoinMode::All,
            }
            .into(),
        );
        chart.nodes.push(End::new("done").into());
        chart.connections.push(conn("done", "merge"));
        let broken = definition(chart.clone());
        expect(
            &broken,
            &[(
                "FC-V2",
                "/root/connections/0/target",
                "unknown node `reveiw`; did you mean `review`?",
            )],
        );
        // Fixing the typo lets the graph rules speak.
        chart.connections[0].target = "review".into();
        expect(
            &definition(chart),
            &[
                (
                    "FC-V8",
                    "/root/nodes/5/id",
                    "node `merge` is unreachable from the start",
                ),
                (
                    "FC-V8",
                    "/root/nodes/6/id",
                    "node `done` is unreachable from the start",
                ),
                (
                    "FC-V9",
                    "/root/nodes/5/id",
                    "join `merge` has 1 inbound connection; a join needs at least 2",
                ),
                (
                    "FC-V10",
                    "/root/connections/6/source",
                    "end node `done` cannot have outbound connections",
                ),
            ],
        );
    }

    #[test]
    fn fc_26_an_invalid_node_id_suppresses_graph_rules() {
        let mut chart = expense_chart();
        chart.nodes.push(task("a:b"));
        expect(
            &definition(chart),
            &[(
                "FC-V16",
                "/root/nodes/5/id",
                "invalid node id `a:b`; expected a letter or `_` followed by letters, digits or `_`",
            )],
        );
    }

    #[test]
    fn nested_flowchart_is_checked_on_its_own() {
        // A typo in the nested flowchart does not suppress the outer graph rules.
        let mut inner = chart(&["a"], vec![task("a"), task("b")], vec![conn("a", "bb")]);
        inner.id = "inner".into();
        let mut outer = expense_chart();
        outer.nodes.push(inner.into());
        expect(
            &definition(outer),
            &[
                (
                    "FC-V8",
                    "/root/nodes/5/id",
                    "node `inner` is unreachable from the start",
                ),
                (
                    "FC-V2",
                    "/root/nodes/5/connections/0/target",
                    "unknown node `bb`; did you mean `b`?",
                ),
            ],
        );
    }

    // --- Analysis: FC-5, FC-6, FC-16 ---------------------------------------------------------

    #[test]
    fn analysis_of_the_expense_flowchart() {
        let chart = expense_chart();
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.default_start, Some(0));
        assert_eq!(analysis.entry_points, [0]);
        assert_eq!(analysis.backward, [false; 6]);
        assert_eq!(analysis.reachable, [true; 5]);
        assert_eq!(analysis.forward_inbound[3], [1, 4]);
        assert_eq!(analysis.outbound[1], [1, 2, 3]);
        assert_eq!(analysis.endpoints[3], Some((1, 2)));
        assert!(analysis.loops.is_empty());
        assert_eq!(analysis.loop_exit, [None; 6]);
    }

    #[test]
    fn start_step_2_explicit_start() {
        let chart = chart(
            &["b"],
            vec![Start::new("s").into(), task("a"), task("b")],
            vec![conn("s", "a")],
        );
        assert_eq!(analyze_flowchart(&chart).default_start, Some(2));
    }

    #[test]
    fn start_step_3_first_start_node() {
        let chart = chart(
            &[],
            vec![
                task("a"),
                trigger("t"),
                Start::new("s1").into(),
                Start::new("s2").into(),
            ],
            vec![conn("s1", "a"), conn("s2", "a")],
        );
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.default_start, Some(2));
        assert_eq!(analysis.entry_points, [2, 1]);
    }

    #[test]
    fn start_step_4_first_trigger() {
        let chart = chart(
            &[],
            vec![task("a"), trigger("t1"), trigger("t2")],
            vec![conn("t1", "a"), conn("t2", "a")],
        );
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.default_start, Some(1));
        assert_eq!(analysis.entry_points, [1, 2]);
    }

    #[test]
    fn start_step_5_the_one_node_without_inbound_connection() {
        let chart = chart(
            &[],
            vec![task("b"), task("a"), task("c")],
            vec![conn("a", "b"), conn("b", "c")],
        );
        assert_eq!(analyze_flowchart(&chart).default_start, Some(1));
        assert_eq!(problems(&definition(chart)), Vec::new());
        // A single node without connections starts there (FC-6).
        let single = self::chart(&[], vec![task("only")], Vec::new());
        assert_eq!(analyze_flowchart(&single).default_start, Some(0));
    }

    #[test]
    fn no_start_when_no_step_applies() {
        let chart = chart(&[], vec![task("a"), task("b")], Vec::new());
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.default_start, None);
        assert!(analysis.entry_points.is_empty());
        assert_eq!(analysis.reachable, [false, false]);
    }

    fn loop_chart() -> Flowchart {
        chart(
            &["head"],
            vec![
                task("head"),
                task("body"),
                Task::new("check", "check")
                    .with_ports(["again", "exit"])
                    .into(),
                task("after"),
            ],
            vec![
                conn("head", "body"),
                conn("body", "check"),
                via("check", "again", "head"),
                via("check", "exit", "after"),
            ],
        )
    }

    #[test]
    fn loop_has_exactly_its_backward_connection() {
        let chart = loop_chart();
        assert_eq!(problems(&definition(chart.clone())), Vec::new());
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.backward, [false, false, true, false]);
        assert_eq!(analysis.forward_inbound[0], Vec::<usize>::new());
        assert_eq!(analysis.backward_inbound[0], [2]);
        assert_eq!(
            analysis.loops,
            [FlowchartLoop {
                head: 0,
                backward: vec![2],
                members: vec![0, 1, 2],
                exits: vec![3],
                parent: None,
            }]
        );
        assert_eq!(analysis.innermost_loop, [Some(0), Some(0), Some(0), None]);
        assert_eq!(analysis.loop_exit, [None, None, None, Some(0)]);
    }

    #[test]
    fn split_does_not_depend_on_declaration_order() {
        let chart = loop_chart();
        let expected: BTreeSet<String> = BTreeSet::from(["check.again->head".to_owned()]);
        assert_eq!(backward_keys(&chart), expected);
        let mut reordered = chart.clone();
        reordered.nodes.reverse();
        reordered.connections.reverse();
        assert_eq!(backward_keys(&reordered), expected);
        reordered.connections.rotate_left(1);
        assert_eq!(backward_keys(&reordered), expected);
        let analysis = analyze_flowchart(&reordered);
        let members: Vec<&str> = analysis.loops[0]
            .members
            .iter()
            .map(|&i| reordered.nodes[i].id())
            .collect();
        assert_eq!(members, ["check", "body", "head"]);
    }

    /// Nested loops, a loop exit that leaves both, a second entry through a trigger and an
    /// implicit join after the loops.
    fn nested_loops() -> Flowchart {
        chart(
            &["start"],
            vec![
                task("start"),
                task("outer"),
                task("inner"),
                Task::new("inner_check", "c")
                    .with_ports(["again", "next", "abort"])
                    .into(),
                Task::new("outer_check", "c")
                    .with_ports(["again", "exit"])
                    .into(),
                task("after"),
                trigger("poke"),
                task("j"),
            ],
            vec![
                conn("start", "outer"),
                conn("outer", "inner"),
                conn("inner", "inner_check"),
                via("inner_check", "again", "inner"),
                via("inner_check", "next", "outer_check"),
                via("inner_check", "abort", "j"),
                via("outer_check", "again", "outer"),
                via("outer_check", "exit", "after"),
                conn("after", "j"),
                conn("poke", "j"),
            ],
        )
    }

    #[test]
    fn nested_loops_analysis() {
        let chart = nested_loops();
        assert_eq!(problems(&definition(chart.clone())), Vec::new());
        let analysis = analyze_flowchart(&chart);
        assert_eq!(analysis.entry_points, [0, 6]);
        assert_eq!(
            backward_keys(&chart),
            BTreeSet::from([
                "inner_check.again->inner".to_owned(),
                "outer_check.again->outer".to_owned()
            ])
        );
        assert_eq!(analysis.loops.len(), 2);
        let (outer, inner) = (&analysis.loops[0], &analysis.loops[1]);
        assert_eq!((outer.head, inner.head), (1, 2));
        assert_eq!(outer.members, [1, 2, 3, 4]);
        assert_eq!(inner.members, [2, 3]);
        assert_eq!((outer.parent, inner.parent), (None, Some(0)));
        assert_eq!(inner.exits, [4, 5]);
        assert_eq!(outer.exits, [5, 7]);
        // `inner_check.abort -> j` leaves both loops: the outer one decides (FC-16).
        assert_eq!(analysis.loop_exit[5], Some(0));
        assert_eq!(analysis.loop_exit[4], Some(1));
        assert_eq!(analysis.loop_exit[7], Some(0));
        assert_eq!(analysis.forward_inbound[7], [5, 8, 9]);
        assert_eq!(
            analysis.innermost_loop,
            [None, Some(0), Some(1), Some(1), Some(0), None, None, None]
        );
    }

    #[test]
    fn nested_loops_split_is_the_same_in_every_rotation() {
        let chart = nested_loops();
        let expected = backward_keys(&chart);
        for n in 0..chart.nodes.len() {
            for c in 0..chart.connections.len() {
                let mut reordered = chart.clone();
                reordered.nodes.rotate_left(n);
                reordered.connections.rotate_left(c);
                assert_eq!(backward_keys(&reordered), expected, "rotation ({n}, {c})");
                let mut reversed = reordered.clone();
                reversed.nodes.reverse();
                reversed.connections.reverse();
                assert_eq!(backward_keys(&reversed), expected, "reversed ({n}, {c})");
            }
        }
    }

    #[test]
    fn forward_order_is_topological() {
        for chart in [expense_chart(), loop_chart(), nested_loops()] {
            let analysis = analyze_flowchart(&chart);
            let mut sorted = analysis.forward_order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..chart.nodes.len()).collect::<Vec<_>>());
            let position = |n: usize| analysis.forward_order.iter().position(|&x| x == n);
            for (c, endpoints) in analysis.endpoints.iter().enumerate() {
                let (s, t) = endpoints.unwrap();
                if !analysis.backward[c] {
                    assert!(position(s) < position(t), "{}", chart.connections[c].key());
                }
            }
        }
    }

    #[test]
    fn analysis_never_panics_on_invalid_charts() {
        let empty = Flowchart::default();
        assert_eq!(analyze_flowchart(&empty), FlowchartAnalysis::default());

        let broken = chart(
            &["nobody"],
            vec![task("a"), task("a"), task("b")],
            vec![
                conn("a", "zz"),
                conn("b", "a"),
                conn("a", "b"),
                conn("qq", "b"),
            ],
        );
        let analysis = analyze_flowchart(&broken);
        assert_eq!(analysis.default_start, None);
        assert_eq!(analysis.endpoints, [None, Some((2, 0)), Some((0, 2)), None]);
        assert_eq!(analysis.backward.len(), 4);
        assert_eq!(analysis.reachable, [false, false, false]);
        assert_eq!(analysis.forward_order.len(), 3);

        // An irreducible graph: one of the two connections is backward, and invalid.
        let irreducible = chart(
            &["s"],
            vec![decision("s"), task("a"), task("b")],
            vec![
                via("s", "true", "a"),
                via("s", "false", "b"),
                conn("a", "b"),
                conn("b", "a"),
            ],
        );
        let analysis = analyze_flowchart(&irreducible);
        assert_eq!(analysis.backward, [false, false, false, true]);
        assert!(analysis.loops.is_empty());
        expect(
            &definition(irreducible),
            &[(
                "FC-V11",
                "/root/connections/3",
                "invalid loop: `b -> a` returns to `a`, but `b` can be reached without passing through `a`",
            )],
        );
    }

    #[test]
    fn switch_ports_are_its_labels_and_default() {
        let switch = Switch {
            id: "route".into(),
            cases: vec![SwitchCase {
                label: "high".into(),
                condition: "is_high".into(),
                body: None,
            }],
            mode: SwitchMode::First,
            default: None,
        };
        let chart = chart(
            &["route"],
            vec![switch.into(), task("a")],
            vec![via("route", "hgih", "a"), via("route", "default", "a")],
        );
        expect(
            &definition(chart),
            &[(
                "FC-V3",
                "/root/connections/0/port",
                "node `route` has no outcome `hgih`; did you mean `high`?",
            )],
        );
    }
}
