//! The Flowchart activity (FC-6 to FC-23): start selection (FC-6, FC-7), fresh
//! run state per run (FC-8), settling and routing (FC-9 to FC-11), the implicit join with skip
//! propagation (FC-12, FC-13), one live context per node (FC-14), loops with deferred exits
//! (FC-15, FC-16), explicit joins and forks (FC-17 to FC-19), terminal nodes (FC-20),
//! completion (FC-21) and cancelled children (FC-23). Cancelling a flowchart (FC-22) is the
//! engine's ENG-16.
//!
//! The forward/backward split, the start and the loops come from the validator's
//! [`workflow_model::FlowchartAnalysis`], computed once per flowchart when the graph is built.
//! The run state lives in the flowchart context's properties (FC-10), keyed by local node ids
//! and connection keys, so it is persisted with every commit and bounded by the size of the
//! definition, whatever the number of loop iterations (ENG-7).
//!
//! Every node is scheduled with its local id as completion tag and the callback
//! [`ON_NODE`]. Settling works on a FIFO worklist (no recursion over the graph), so a long skip
//! spread does not grow the stack. The only re-entrant calls are ENG-14/ENG-16 (`end`
//! completing the flowchart, a WaitAny join cancelling branches, whose cancellation callbacks
//! settle here again): the run state is saved before and reloaded after each of them.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_model::DONE;

use super::scope::{ChildInfo, Scope, StepError, engine_fault};
use crate::engine::graph::{FlowchartNode, NodeKind};
use crate::engine::names::{MIGRATED_TO, ON_NODE, TAG_MIGRATED};
use crate::engine::state::{ActivityStatus, ContextId, JournalKind};

/// The property keys of the run state (FC-10).
const KEYS: [&str; 7] = [
    "visits",
    "evaluations",
    "followed",
    "loop_entry",
    "deferred_exits",
    "exits_taken",
    "live",
];

/// The run state of one flowchart run (FC-10), as kept in its context's properties.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct RunState {
    /// `visits[node]`: times the node settled in forward flow.
    #[serde(default)]
    visits: BTreeMap<String, u64>,
    /// `evaluations[conn]`: times the connection was evaluated.
    #[serde(default)]
    evaluations: BTreeMap<String, u64>,
    /// `followed[conn]`: whether it was followed at its latest evaluation.
    #[serde(default)]
    followed: BTreeMap<String, bool>,
    /// `loop_entry[node]`: the live context was entered through a backward connection.
    #[serde(default)]
    loop_entry: BTreeMap<String, bool>,
    /// `deferred_exits[head]`: loop exits evaluated as not followed while the loop was active
    /// (FC-16).
    #[serde(default)]
    deferred_exits: BTreeMap<String, Vec<String>>,
    /// `exits_taken[head]`: loop exits followed since the head was last entered through a
    /// forward connection; they get no deferred not-followed evaluation (FC-16).
    #[serde(default)]
    exits_taken: BTreeMap<String, Vec<String>>,
    /// `live[node]`: the node's live context (FC-14), so that no lookup scans the contexts.
    #[serde(default)]
    live: BTreeMap<String, ContextId>,
}

/// One step of a settlement.
#[derive(Debug)]
pub(crate) enum Work {
    /// A node settled: completed with `outcomes`, or skipped or cancelled with none (FC-11,
    /// FC-13, FC-23).
    Settle {
        node: usize,
        outcomes: Vec<String>,
        /// Whether this settlement increments `visits`: not for a loop-entered context
        /// (FC-15), nor for a skip, which counts its visit when it is decided so that a
        /// later check in the same spread sees it (FC-13).
        count_visit: bool,
        output: Option<Value>,
    },
    /// Check the readiness of a node reached through a forward connection (FC-12).
    Check { node: usize, input: Option<Value> },
}

/// The Flowchart activity, for any [`Scope`].
pub(crate) trait FlowchartActivity<'g>: Scope<'g> {
    fn flow_load(&self, id: ContextId) -> RunState {
        let Some(c) = self.state().context(id) else {
            return RunState::default();
        };
        let mut map = serde_json::Map::new();
        for key in KEYS {
            if let Some(v) = c.properties.get(key) {
                map.insert(key.to_owned(), v.clone());
            }
        }
        serde_json::from_value(Value::Object(map)).unwrap_or_default()
    }

    fn flow_save(&mut self, id: ContextId, rs: &RunState) {
        let Ok(Value::Object(map)) = serde_json::to_value(rs) else {
            return;
        };
        let Some(c) = self.state_mut().context_mut(id) else {
            return;
        };
        for (key, value) in map {
            let empty = value.as_object().is_some_and(serde_json::Map::is_empty);
            if empty {
                c.properties.remove(&key);
            } else {
                c.properties.insert(key, value);
            }
        }
    }

    /// FC-6 step 1: the triggering node, when the instance was created by a trigger that is
    /// a node of this flowchart (RT-13) and has not consumed its payload yet.
    fn flow_triggering_node(&self, _id: ContextId, fc: &FlowchartNode) -> Option<usize> {
        let trigger = self.state().trigger.as_ref()?;
        let local = *fc.local.get(&trigger.node_id)?;
        fc.triggers.contains(&local).then_some(local)
    }

    /// Runs a flowchart (FC-6 to FC-8).
    fn flowchart_execute(&mut self, id: ContextId, fc: &FlowchartNode) -> Result<(), StepError> {
        // FC-8: every run starts with empty run state.
        if let Some(c) = self.state_mut().context_mut(id) {
            for key in KEYS {
                c.properties.remove(key);
            }
        }
        let start = self
            .flow_triggering_node(id, fc)
            .or(fc.analysis.default_start);
        let Some(start) = start else {
            return Err(engine_fault(id, "cannot choose a start node (FC-6, FC-V7)"));
        };
        let mut rs = RunState::default();
        // FC-7: the other trigger nodes are settled as skipped before the start runs.
        let mut work = VecDeque::new();
        for &trigger in fc.triggers.iter().filter(|&&t| t != start) {
            self.flow_skip(
                id,
                fc,
                &mut rs,
                trigger,
                "not the entry point of this run (FC-7)",
            );
            work.push_back(Work::Settle {
                node: trigger,
                outcomes: Vec::new(),
                count_visit: false,
                output: None,
            });
        }
        self.flow_propagate(id, fc, &mut rs, work)?;
        // ACT-5: the start node's input is the flowchart's own.
        let input = self.state().context(id).and_then(|c| c.input.clone());
        self.flow_schedule(id, fc, &mut rs, start, input, false)?;
        self.flow_save(id, &rs);
        Ok(())
    }

    /// The callback of every node (FC-11, FC-23).
    fn flowchart_settled(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let local = fc.local_of(&child.node_id);
        let running = self
            .state()
            .context(id)
            .is_some_and(|c| c.status == ActivityStatus::Running);
        let Some(local) = local.filter(|_| running) else {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        };
        let name = fc.names.get(local).cloned().unwrap_or_default();
        let mut rs = self.flow_load(id);
        if rs.live.get(&name) == Some(&child.id) {
            rs.live.remove(&name);
        }
        let loop_entered = rs.loop_entry.remove(&name).unwrap_or(false);
        let completed = child.status == ActivityStatus::Completed;
        let kind = fc
            .child(local)
            .and_then(|n| self.graph().node(n))
            .map(|n| &n.kind);
        // FC-20: `end` completes the flowchart, which cancels its other live children.
        if completed && matches!(kind, Some(NodeKind::End)) {
            self.flow_save(id, &rs);
            return self.complete(id, None, vec![DONE.to_owned()]);
        }
        let outcomes = if completed {
            let outcomes = self
                .state()
                .context(child.id)
                .map(|c| c.outcomes.clone())
                .unwrap_or_default();
            // FC-2: completing without naming an outcome is completing with `done`.
            if outcomes.is_empty() {
                vec![DONE.to_owned()]
            } else {
                outcomes
            }
        } else {
            // FC-23: a cancelled child settles with an empty outcome set.
            Vec::new()
        };
        let work = VecDeque::from([Work::Settle {
            node: local,
            outcomes,
            count_visit: !loop_entered,
            output: if completed {
                child.result.clone()
            } else {
                None
            },
        }]);
        self.flow_propagate(id, fc, &mut rs, work)?;
        self.flow_settle_idle(id, fc, rs)
    }

    /// Skips a node (FC-13): counts its visit at once and journals it; no context is created.
    /// The journal entry names the skipped node and carries the flowchart's context id. The
    /// caller queues its settlement, which evaluates its outbound connections.
    fn flow_skip(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        rs: &mut RunState,
        node: usize,
        reason: &str,
    ) {
        if let Some(name) = fc.names.get(node) {
            *rs.visits.entry(name.clone()).or_default() += 1;
        }
        let path = fc.child(node).map(|n| self.node_id(n)).unwrap_or_default();
        let now = self.now();
        self.state_mut().journal.record(
            JournalKind::Skipped,
            Some((id, path)),
            &json!({"reason": reason}),
            now,
        );
    }

    /// Processes settlements and readiness checks until none is left (FC-11 to FC-16).
    fn flow_propagate(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        rs: &mut RunState,
        mut work: VecDeque<Work>,
    ) -> Result<(), StepError> {
        let analysis = &fc.analysis;
        while let Some(item) = work.pop_front() {
            if self
                .state()
                .context(id)
                .is_none_or(|c| c.status != ActivityStatus::Running)
            {
                return Ok(());
            }
            match item {
                Work::Settle {
                    node,
                    outcomes,
                    count_visit,
                    output,
                } => {
                    let name = fc.names.get(node).cloned().unwrap_or_default();
                    // FC-11 step 2, FC-15: a loop-entered context stays in its round.
                    if count_visit {
                        *rs.visits.entry(name).or_default() += 1;
                    }
                    let outbound = analysis.outbound.get(node).map_or(&[][..], Vec::as_slice);
                    // FC-15: followed backward connections schedule the loop head at once.
                    // They are handled first so that the loop is active when its exits are
                    // evaluated below (FC-16).
                    for &c in outbound {
                        let Some(conn) = fc.connections.get(c) else {
                            continue;
                        };
                        let Some((_, target)) = conn.endpoints else {
                            continue;
                        };
                        if !analysis.backward.get(c).copied().unwrap_or(false) {
                            continue;
                        }
                        let followed = outcomes.contains(&conn.port);
                        *rs.evaluations.entry(conn.key.clone()).or_default() += 1;
                        rs.followed.insert(conn.key.clone(), followed);
                        if followed {
                            self.flow_schedule(id, fc, rs, target, output.clone(), true)?;
                        }
                    }
                    // FC-11 step 3: forward connections in declaration order (FC-9).
                    for &c in outbound {
                        let Some(conn) = fc.connections.get(c) else {
                            continue;
                        };
                        let Some((_, target)) = conn.endpoints else {
                            continue;
                        };
                        if analysis.backward.get(c).copied().unwrap_or(false) {
                            continue;
                        }
                        let followed = outcomes.contains(&conn.port);
                        let exit_of = analysis.loop_exit.get(c).copied().flatten();
                        let head = exit_of
                            .and_then(|l| analysis.loops.get(l))
                            .and_then(|l| fc.names.get(l.head))
                            .cloned();
                        if let Some(head) = &head {
                            if followed {
                                rs.exits_taken
                                    .entry(head.clone())
                                    .or_default()
                                    .push(conn.key.clone());
                                if let Some(d) = rs.deferred_exits.get_mut(head) {
                                    d.retain(|k| *k != conn.key);
                                }
                            } else if exit_of.is_some_and(|l| {
                                self.flow_loop_active(fc, rs, l)
                                    || continues_loop(fc, outbound, &outcomes, l)
                            }) {
                                // FC-16: not counted while the loop runs.
                                let deferred = rs.deferred_exits.entry(head.clone()).or_default();
                                if !deferred.contains(&conn.key) {
                                    deferred.push(conn.key.clone());
                                }
                                continue;
                            }
                        }
                        *rs.evaluations.entry(conn.key.clone()).or_default() += 1;
                        rs.followed.insert(conn.key.clone(), followed);
                        work.push_back(Work::Check {
                            node: target,
                            input: if followed { output.clone() } else { None },
                        });
                    }
                    // FC-14: a node that became ready while it was live is checked again.
                    if analysis
                        .forward_inbound
                        .get(node)
                        .is_some_and(|i| !i.is_empty())
                    {
                        work.push_back(Work::Check { node, input: None });
                    }
                }
                Work::Check { node, input } => {
                    self.flow_check(id, fc, rs, node, input, &mut work)?;
                }
            }
        }
        Ok(())
    }

    /// FC-12, FC-17: the readiness of `node` reached through a forward connection.
    fn flow_check(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        rs: &mut RunState,
        node: usize,
        input: Option<Value>,
        work: &mut VecDeque<Work>,
    ) -> Result<(), StepError> {
        let analysis = &fc.analysis;
        let name = fc.names.get(node).cloned().unwrap_or_default();
        if rs.live.contains_key(&name) {
            // FC-14: checked again when the live context settles.
            return Ok(());
        }
        let inbound = analysis
            .forward_inbound
            .get(node)
            .map_or(&[][..], Vec::as_slice);
        if inbound.is_empty() {
            return Ok(());
        }
        let visits = rs.visits.get(&name).copied().unwrap_or(0);
        let keys: Vec<&str> = inbound
            .iter()
            .filter_map(|&c| fc.connections.get(c))
            .map(|c| c.key.as_str())
            .collect();
        let arrived =
            |rs: &RunState, key: &str| rs.evaluations.get(key).copied().unwrap_or(0) > visits;
        let followed = |rs: &RunState, key: &str| rs.followed.get(key).copied().unwrap_or(false);
        let kind = fc
            .child(node)
            .and_then(|n| self.graph().node(n))
            .map(|n| &n.kind);
        if let Some(NodeKind::Join { any: true }) = kind {
            // FC-17 any: the first followed arrival of the round runs the join, then FC-18.
            if keys.iter().any(|k| arrived(rs, k) && followed(rs, k)) {
                self.flow_schedule(id, fc, rs, node, input, false)?;
                return self.flow_cancel_feeders(id, fc, rs, node);
            }
            if keys.iter().all(|k| arrived(rs, k)) {
                self.flow_skip(id, fc, rs, node, "no inbound connection was followed");
                work.push_back(Work::Settle {
                    node,
                    outcomes: Vec::new(),
                    count_visit: false,
                    output: None,
                });
            }
            return Ok(());
        }
        if !keys.iter().all(|k| arrived(rs, k)) {
            return Ok(());
        }
        let run = if let Some(NodeKind::Join { any: false }) = kind {
            // FC-17 all: every forward inbound connection was followed.
            keys.iter().all(|k| followed(rs, k))
        } else {
            keys.iter().any(|k| followed(rs, k))
        };
        if run {
            self.flow_schedule(id, fc, rs, node, input, false)
        } else {
            let reason = if matches!(kind, Some(NodeKind::Join { any: false })) {
                "join `all`: not every inbound connection was followed"
            } else {
                "no inbound connection was followed"
            };
            self.flow_skip(id, fc, rs, node, reason);
            work.push_back(Work::Settle {
                node,
                outcomes: Vec::new(),
                count_visit: false,
                output: None,
            });
            Ok(())
        }
    }

    /// Schedules `node` as a child (FC-9) with the output that led here as input (ACT-5);
    /// `looped` marks an entry through a backward connection (FC-15).
    fn flow_schedule(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        rs: &mut RunState,
        node: usize,
        input: Option<Value>,
        looped: bool,
    ) -> Result<(), StepError> {
        let name = fc.names.get(node).cloned().unwrap_or_default();
        if rs.live.contains_key(&name) {
            return Ok(());
        }
        let Some(graph_node) = fc.child(node) else {
            return Ok(());
        };
        let child = self.schedule_child(id, graph_node, Some(name.clone()), Some(ON_NODE), None)?;
        if let Some(c) = self.state_mut().context_mut(child) {
            c.input = input;
        }
        rs.live.insert(name.clone(), child);
        if looped {
            rs.loop_entry.insert(name, true);
        } else if fc.analysis.loops.iter().any(|l| l.head == node) {
            // FC-16: a forward entry starts the loop afresh.
            rs.deferred_exits.remove(&name);
            rs.exits_taken.remove(&name);
        }
        Ok(())
    }

    /// FC-16: whether some node of loop `l` has a live context. (A node settling right now is
    /// not live any more; [`continues_loop`] covers the loop it keeps going.)
    fn flow_loop_active(&self, fc: &FlowchartNode, rs: &RunState, l: usize) -> bool {
        fc.analysis.loops.get(l).is_some_and(|l| {
            l.members
                .iter()
                .filter_map(|&m| fc.names.get(m))
                .any(|m| rs.live.contains_key(m))
        })
    }

    /// FC-18: after a WaitAny join was scheduled, cancels every live child whose node has a
    /// forward path to the join, in creation order; each settles through FC-23.
    fn flow_cancel_feeders(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        rs: &mut RunState,
        join: usize,
    ) -> Result<(), StepError> {
        let analysis = &fc.analysis;
        let mut feeds = vec![false; fc.names.len()];
        let mut frontier = vec![join];
        while let Some(n) = frontier.pop() {
            for &c in analysis
                .forward_inbound
                .get(n)
                .map_or(&[][..], Vec::as_slice)
            {
                if let Some(Some((source, _))) = analysis.endpoints.get(c)
                    && let Some(seen) = feeds.get_mut(*source)
                    && !*seen
                {
                    *seen = true;
                    frontier.push(*source);
                }
            }
        }
        let mut victims: Vec<ContextId> = fc
            .names
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != join && feeds.get(*i).copied().unwrap_or(false))
            .filter_map(|(_, n)| rs.live.get(n).copied())
            .collect();
        victims.sort_unstable();
        if victims.is_empty() {
            return Ok(());
        }
        self.flow_save(id, rs);
        for victim in victims {
            self.cancel(victim)?;
        }
        *rs = self.flow_load(id);
        Ok(())
    }

    /// After a settlement: resolves the deferred exits of loops that became idle (FC-16),
    /// then completes the flowchart if nothing is live (FC-21).
    fn flow_settle_idle(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        mut rs: RunState,
    ) -> Result<(), StepError> {
        loop {
            let mut work = VecDeque::new();
            for (l, lp) in fc.analysis.loops.iter().enumerate() {
                let Some(head) = fc.names.get(lp.head) else {
                    continue;
                };
                if rs.deferred_exits.get(head).is_none_or(Vec::is_empty)
                    || self.flow_loop_active(fc, &rs, l)
                {
                    continue;
                }
                let deferred = rs.deferred_exits.remove(head).unwrap_or_default();
                let taken = rs.exits_taken.remove(head).unwrap_or_default();
                for key in deferred.iter().filter(|k| !taken.contains(k)) {
                    let Some(conn) = fc.connections.iter().find(|c| c.key == *key) else {
                        continue;
                    };
                    let Some((_, target)) = conn.endpoints else {
                        continue;
                    };
                    *rs.evaluations.entry(key.clone()).or_default() += 1;
                    rs.followed.insert(key.clone(), false);
                    work.push_back(Work::Check {
                        node: target,
                        input: None,
                    });
                }
            }
            if work.is_empty() {
                break;
            }
            self.flow_propagate(id, fc, &mut rs, work)?;
        }
        self.flow_save(id, &rs);
        let running = self
            .state()
            .context(id)
            .is_some_and(|c| c.status == ActivityStatus::Running);
        if running && rs.live.is_empty() {
            // FC-21: no live (or faulted) child and no queued work of its own.
            let queued = self.state().queue.iter().any(|w| w.context == id);
            if !queued {
                return self.complete(id, None, vec![DONE.to_owned()]);
            }
        }
        Ok(())
    }
}

impl<'g, S: Scope<'g> + ?Sized> FlowchartActivity<'g> for S {}

/// Where a migration places a flowchart or a sequence (ENG-55), taken from its root's
/// [`MIGRATED_TO`] property.
pub(crate) struct Placement {
    pub(crate) node: String,
    pub(crate) started_at: Option<crate::base::Micros>,
    pub(crate) input: Option<Value>,
}

/// ENG-55: takes the placement a migration left on the root `id`, when the continuation is
/// the migration's own; `None` (journalled as declined) otherwise.
pub(crate) fn take_placement<'g, S: Scope<'g> + ?Sized>(
    scope: &mut S,
    id: ContextId,
    child: &ChildInfo,
) -> Result<Option<Placement>, StepError> {
    if child.id != id || child.tag.as_deref() != Some(TAG_MIGRATED) {
        scope.record(
            JournalKind::Declined,
            Some(id),
            json!({"ignored": child.id, "tag": child.tag}),
        );
        return Ok(None);
    }
    let placed = scope
        .state_mut()
        .context_mut(id)
        .and_then(|c| c.properties.remove(MIGRATED_TO));
    let node = placed
        .as_ref()
        .and_then(|p| p.get("node"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (Some(placed), Some(node)) = (placed.as_ref(), node) else {
        return Err(engine_fault(
            id,
            "a migrated root without the node to place it at",
        ));
    };
    Ok(Some(Placement {
        node,
        started_at: placed.get("started_at").and_then(Value::as_i64),
        input: placed.get("input").filter(|v| !v.is_null()).cloned(),
    }))
}

/// The trait of ENG-55's flowchart placement, for any [`Scope`].
pub(crate) trait FlowchartMigration<'g>: FlowchartActivity<'g> {
    /// ENG-55: a migrated instance's flowchart, placed at the node its migration names. The
    /// node is scheduled afresh (its execution is its wait: an event's bookmark, a timer
    /// counted from the instant it started in the previous version). The run state is that
    /// of a run that reached the node by itself: every node the node cannot lead to counts as
    /// settled once, and each of their connections as evaluated and not followed, so that a
    /// node after it waiting for several inbound connections (FC-12, FC-17) runs on this
    /// token's arrival alone.
    fn flowchart_on_migrated(
        &mut self,
        id: ContextId,
        fc: &FlowchartNode,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let Some(placement) = take_placement(self, id, child)? else {
            return Ok(());
        };
        let Some(local) = fc.names.iter().position(|n| *n == placement.node) else {
            return Err(engine_fault(
                id,
                format!(
                    "a migration placed the flowchart at `{}`, not one of its nodes",
                    placement.node
                ),
            ));
        };
        let analysis = &fc.analysis;
        let mut reach = vec![false; fc.names.len()];
        let mut frontier = vec![local];
        if let Some(seen) = reach.get_mut(local) {
            *seen = true;
        }
        while let Some(n) = frontier.pop() {
            for &c in analysis.outbound.get(n).map_or(&[][..], Vec::as_slice) {
                if let Some(Some((_, target))) = analysis.endpoints.get(c)
                    && let Some(seen) = reach.get_mut(*target)
                    && !*seen
                {
                    *seen = true;
                    frontier.push(*target);
                }
            }
        }
        let mut rs = RunState::default();
        for (i, name) in fc.names.iter().enumerate() {
            if !reach.get(i).copied().unwrap_or(true) {
                rs.visits.insert(name.clone(), 1);
            }
        }
        for (c, conn) in fc.connections.iter().enumerate() {
            let Some((source, _)) = conn.endpoints else {
                continue;
            };
            let backward = analysis.backward.get(c).copied().unwrap_or(false);
            if !backward && !reach.get(source).copied().unwrap_or(true) {
                rs.evaluations.insert(conn.key.clone(), 1);
                rs.followed.insert(conn.key.clone(), false);
            }
        }
        self.flow_schedule(id, fc, &mut rs, local, placement.input, false)?;
        if let Some(started_at) = placement.started_at
            && let Some(&scheduled) = rs.live.get(&placement.node)
            && let Some(c) = self.state_mut().context_mut(scheduled)
        {
            c.started_at = Some(started_at);
        }
        self.flow_save(id, &rs);
        Ok(())
    }
}

impl<'g, S: Scope<'g> + ?Sized> FlowchartMigration<'g> for S {}

/// FC-16: whether the settling node, with `outcomes`, follows a forward connection to a node
/// of loop `l`: then the loop goes on even though none of its nodes is live yet (a decision
/// at the loop's head whose `true` port stays in the loop), and its exits wait.
fn continues_loop(fc: &FlowchartNode, outbound: &[usize], outcomes: &[String], l: usize) -> bool {
    let Some(members) = fc.analysis.loops.get(l).map(|l| &l.members) else {
        return false;
    };
    outbound.iter().any(|&c| {
        fc.connections.get(c).is_some_and(|conn| {
            outcomes.contains(&conn.port)
                && conn
                    .endpoints
                    .is_some_and(|(_, target)| members.contains(&target))
        })
    })
}
