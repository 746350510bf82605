//! The immutable graph a definition compiles to: nodes with ancestor-path ids (ENG-3) and the
//! per-kind data the activities need, built once per registered definition.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use workflow_model::cron::Zone;
use workflow_model::{
    Activity, Definition, Flowchart, FlowchartAnalysis, JoinMode, Missed, ParallelMode,
    RetryPolicy, SagaOnFailure, StateMachine, SubWorkflowMode, SwitchMode, analyze_flowchart,
};

/// A map keyed by node ids. A run looks a node up by its id at nearly every step; the ids are
/// short strings of the definition, which the program registers, so FNV-1a serves them (a
/// fraction of SipHash's cost per lookup) without the keyed hash's protection against chosen
/// collisions, which keys a program chose itself do not need.
pub(crate) type NodeIds<V> = HashMap<String, V, BuildHasherDefault<NodeIdHasher>>;

/// FNV-1a over the bytes written (64 bits).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeIdHasher(u64);

impl Default for NodeIdHasher {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NodeIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Index of a node in [`Graph::nodes`].
pub(crate) type NodeIndex = usize;

/// `(node id, registry name)` pairs.
pub(crate) type NamedRefs<'a> = Vec<(&'a str, &'a str)>;

/// A compiled definition.
#[derive(Debug)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    by_id: NodeIds<NodeIndex>,
    /// The workflow's retry policy, which a task's own overrides field by field (FLT-2).
    default_retry: Option<RetryPolicy>,
    /// The definition's commit strategy (ENG-32); `None`: the runtime's.
    pub(crate) commit_strategy: Option<workflow_model::CommitStrategy>,
}

/// One node: its ancestor-path id (`root:review:manager`), its parent and its kind.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) parent: Option<NodeIndex>,
    pub(crate) kind: NodeKind,
}

/// An event's declared outcomes and the payload type whose mapping chooses one (ACT-19).
#[derive(Debug)]
pub(crate) struct EventChoice {
    /// The payload type name, the key of the mapping in the registry.
    pub(crate) payload: Option<String>,
    /// The declared ports (FC-4).
    pub(crate) ports: Vec<String>,
}

/// The flow-control queue of a task (QU-10): each attempt takes a slot of `name` with
/// `priority`, under the partition key read from the data at the dotted path `key`.
#[derive(Debug, Clone)]
pub(crate) struct TaskQueue {
    pub(crate) name: String,
    pub(crate) priority: u8,
    pub(crate) key: Option<String>,
}

/// What the executor needs of each kind of activity.
#[derive(Debug)]
pub(crate) enum NodeKind {
    /// A task (ACT-11); `ports` is its declared outcome list, `None` when open (FC-2, FC-4).
    Task {
        function: String,
        ports: Option<Vec<String>>,
        /// The declared retry policy, merged with the workflow's (FLT-2); `None`: one attempt.
        retry: Option<RetryPolicy>,
        /// The time one attempt may take (FLT-17).
        attempt_timeout_ms: Option<u64>,
        /// The registry name of the task that undoes this one inside a saga (FLT-10).
        compensation: Option<String>,
        /// When the runtime commits around this task (ENG-32); `None`: `default`.
        commit: Option<workflow_model::NodeCommit>,
        /// The flow-control queue each attempt takes a slot of, with the attempt's priority
        /// (QU-10).
        queue: Option<TaskQueue>,
    },
    /// A saga scope (FLT-10): its body, compensated newest first when something inside fails
    /// for good; then the failure passes on (`fault`) or the scope takes `compensated`.
    Saga {
        body: NodeIndex,
        continue_after: bool,
    },
    /// ACT-19; `choice` is the payload type name whose registered outcome mapping chooses
    /// among `ports` (ACT-V8), `None` when the event completes with `done`.
    Event {
        event: String,
        key: Option<String>,
        choice: Option<EventChoice>,
        look_back: Option<workflow_model::LookBack>,
        /// TM-14: the wait's deadline from its start.
        deadline_ms: Option<u64>,
        /// ACT-19: how the payload is folded into the data.
        assign: Option<workflow_model::PayloadAssign>,
    },
    /// ACT-20: a constant duration, or a value fn giving the instant (ms since the epoch).
    Delay {
        duration_ms: Option<u64>,
        until: Option<String>,
    },
    /// ACT-21 (not as trigger): ticks every `interval_ms` from the moment it started; as a
    /// trigger, `missed` says what it does with ticks missed while no process ran (TM-19).
    Timer {
        interval_ms: u64,
        body: Option<NodeIndex>,
        until: Option<String>,
        max_ticks: Option<u64>,
        missed: Missed,
    },
    /// ACT-22 (not as trigger): a constant instant (ms since the epoch), or a value fn giving
    /// it; a local date and time the fn gives is read in `zone` (TM-16).
    StartAt {
        at_ms: Option<u64>,
        at_fn: Option<String>,
        zone: Option<Zone>,
    },
    /// ACT-23 (not as trigger): the parsed expression, the zone it is read in (TM-16) and, as
    /// a trigger, what it does with missed occurrences (TM-19).
    Cron {
        expression: String,
        schedule: workflow_model::cron::Schedule,
        zone: Zone,
        missed: Missed,
    },
    Sequence {
        steps: Vec<NodeIndex>,
    },
    StateMachine(Box<MachineNode>),
    Flowchart(Box<FlowchartNode>),
    /// ACT-13: structured when it has a branch, else a decision node (`true`/`false`).
    If {
        condition: String,
        then: Option<NodeIndex>,
        otherwise: Option<NodeIndex>,
        structured: bool,
    },
    /// ACT-14.
    Switch(Box<SwitchNode>),
    /// ACT-15.
    While {
        condition: String,
        body: NodeIndex,
    },
    /// ACT-16.
    ForEach {
        items: String,
        body: NodeIndex,
    },
    /// ACT-17.
    ParallelForEach {
        items: String,
        body: NodeIndex,
        max_in_flight: Option<u32>,
    },
    /// ACT-18: the structured fork.
    Parallel {
        branches: Vec<NodeIndex>,
        any: bool,
    },
    /// FC-19: the flowchart fork node.
    Fork {
        branches: Vec<String>,
    },
    /// FC-17: the flowchart join node.
    Join {
        any: bool,
    },
    /// FC-6 step 3: a no-op milestone.
    Start,
    /// FC-20: completes its flowchart.
    End,
    /// ACT-25.
    Finish {
        output: Option<String>,
    },
    /// ACT-29.
    Break,
    /// ACT-26.
    Fault {
        code: String,
        message: String,
    },
    /// ACT-27.
    Correlate {
        key: String,
    },
    /// ACT-28.
    SetVariable {
        variable: String,
        value: String,
    },
    /// ACT-24, in memory: a child instance of the workflow registered as `workflow`.
    SubWorkflow {
        workflow: String,
        input: Option<String>,
        assign: Option<String>,
        detach: bool,
        /// TM-14: the wait's deadline from its start (ignored when detached).
        deadline_ms: Option<u64>,
    },
}

/// A compiled flowchart (FC-1 to FC-5): its nodes by local index (the model's
/// declaration order), its connections, and the validator's analysis computed once (FC-5).
#[derive(Debug)]
pub(crate) struct FlowchartNode {
    /// Graph index of each node, by local index.
    pub(crate) children: Vec<NodeIndex>,
    /// Local id of each node (`review`), by local index: the keys of its run state (FC-10).
    pub(crate) names: Vec<String>,
    /// Local index by the node's full path id.
    pub(crate) local: NodeIds<usize>,
    /// Each connection, in declaration order (same indexes as the analysis).
    pub(crate) connections: Vec<FlowConnection>,
    /// The validator's analysis (start, forward/backward split, loops).
    pub(crate) analysis: FlowchartAnalysis,
    /// Local indexes of the trigger nodes (ACT-7), in declaration order.
    pub(crate) triggers: Vec<usize>,
}

/// One connection of a compiled flowchart (FC-3).
#[derive(Debug)]
pub(crate) struct FlowConnection {
    /// `source.port->target`, the key of its run state (FC-10).
    pub(crate) key: String,
    pub(crate) port: String,
    /// `(source, target)` local indexes; `None` when it names an unknown node (never after
    /// validation).
    pub(crate) endpoints: Option<(usize, usize)>,
}

impl NodeKind {
    /// The kind's name, for `UnknownCallback` (ENG-12).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            NodeKind::Task { .. } => "task",
            NodeKind::Event { .. } => "event",
            NodeKind::Delay { .. } => "delay",
            NodeKind::Timer { .. } => "timer",
            NodeKind::StartAt { .. } => "start_at",
            NodeKind::Cron { .. } => "cron",
            NodeKind::Sequence { .. } => "sequence",
            NodeKind::StateMachine(_) => "state_machine",
            NodeKind::Flowchart(_) => "flowchart",
            NodeKind::If { .. } => "if",
            NodeKind::Switch(_) => "switch",
            NodeKind::While { .. } => "while",
            NodeKind::ForEach { .. } => "for_each",
            NodeKind::ParallelForEach { .. } => "parallel_for_each",
            NodeKind::Parallel { .. } => "parallel",
            NodeKind::Fork { .. } => "fork",
            NodeKind::Join { .. } => "join",
            NodeKind::Start => "start",
            NodeKind::End => "end",
            NodeKind::Finish { .. } => "finish",
            NodeKind::Break => "break",
            NodeKind::Fault { .. } => "fault",
            NodeKind::Correlate { .. } => "correlate",
            NodeKind::SetVariable { .. } => "set_variable",
            NodeKind::SubWorkflow { .. } => "sub_workflow",
            NodeKind::Saga { .. } => "saga",
        }
    }

    /// Whether this kind is a loop a `break` completes (ACT-9).
    pub(crate) fn is_loop(&self) -> bool {
        matches!(
            self,
            NodeKind::While { .. }
                | NodeKind::ForEach { .. }
                | NodeKind::ParallelForEach { .. }
                | NodeKind::Timer { .. }
        )
    }
}

/// Where an instance waits and can be migrated (ENG-54, ENG-55), by the kind of the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Positions {
    /// A state machine: its states.
    Machine(Vec<String>),
    /// A flowchart or a sequence: its top-level waiting nodes (ENG-55).
    Flow(Vec<String>),
    /// Another root kind, which no migration moves.
    Other(&'static str),
}

/// The last segment of a node's path id (`root:review` is `review`).
pub(crate) fn local_name(path: &str) -> &str {
    path.rsplit(':').next().unwrap_or(path)
}

impl NodeKind {
    /// ENG-55: a node whose execution is its wait, so that a migration can place an instance
    /// there by running it afresh: an event, a delay, a start-at or a cron (not as triggers).
    pub(crate) fn is_migratable_wait(&self) -> bool {
        matches!(
            self,
            NodeKind::Event { .. }
                | NodeKind::Delay { .. }
                | NodeKind::StartAt { .. }
                | NodeKind::Cron { .. }
        )
    }
}

impl FlowchartNode {
    /// The local index of the node `path`.
    pub(crate) fn local_of(&self, path: &str) -> Option<usize> {
        self.local.get(path).copied()
    }

    /// The graph index of the local node `local`.
    pub(crate) fn child(&self, local: usize) -> Option<NodeIndex> {
        self.children.get(local).copied()
    }
}

/// A compiled switch (ACT-14).
#[derive(Debug)]
pub(crate) struct SwitchNode {
    /// `(label, condition, body)` in case order.
    pub(crate) cases: Vec<(String, String, Option<NodeIndex>)>,
    pub(crate) any: bool,
    pub(crate) default: Option<NodeIndex>,
    pub(crate) structured: bool,
}

/// A compiled state machine (`docs/reference/state-machines.md`).
#[derive(Debug)]
pub(crate) struct MachineNode {
    pub(crate) initial: String,
    pub(crate) states: Vec<StateNode>,
    pub(crate) transitions: Vec<TransitionNode>,
}

#[derive(Debug)]
pub(crate) struct StateNode {
    pub(crate) name: String,
    pub(crate) entry: Option<NodeIndex>,
    pub(crate) exit: Option<NodeIndex>,
    /// Whether the state can reach itself through triggerless transitions, conditions ignored
    /// (SM-6): entering it then yields to the scheduler.
    pub(crate) reaches_itself_automatically: bool,
}

#[derive(Debug)]
pub(crate) struct TransitionNode {
    /// The transition key, `"{index}:{name}"` or `"{index}:{from}->{to}"`.
    pub(crate) key: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) trigger: Option<NodeIndex>,
    pub(crate) condition: Option<String>,
    pub(crate) action: Option<NodeIndex>,
}

impl MachineNode {
    pub(crate) fn state(&self, name: &str) -> Option<&StateNode> {
        self.states.iter().find(|s| s.name == name)
    }
}

/// A time trigger's schedule (TM-11 to TM-13).
#[derive(Debug, Clone)]
pub(crate) enum TimeTrigger {
    Timer {
        interval_ms: u64,
        missed: Missed,
    },
    StartAt {
        at_ms: u64,
    },
    Cron {
        expression: String,
        schedule: workflow_model::cron::Schedule,
        zone: Zone,
        missed: Missed,
    },
}

/// Why a definition cannot be compiled for this engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GraphError {
    DuplicateNode { node: String },
    Unsupported { node: String, kind: &'static str },
}

impl Graph {
    /// Compiles `definition`. Kinds this engine does not run yet are refused here, before any
    /// instance exists, rather than failing at run time.
    pub(crate) fn build(definition: &Definition) -> Result<Self, GraphError> {
        let mut graph = Graph {
            nodes: Vec::new(),
            by_id: NodeIds::default(),
            default_retry: definition.retry.clone(),
            commit_strategy: definition.commit_strategy,
        };
        graph.add(&definition.root, None)?;
        Ok(graph)
    }

    pub(crate) fn root(&self) -> NodeIndex {
        0
    }

    /// Where an instance of this definition waits and can be migrated (ENG-54, ENG-55), by
    /// the kind of its root.
    pub(crate) fn positions(&self) -> Positions {
        let Some(root) = self.node(self.root()) else {
            return Positions::Other("empty");
        };
        match &root.kind {
            NodeKind::StateMachine(m) => {
                Positions::Machine(m.states.iter().map(|s| s.name.clone()).collect())
            }
            NodeKind::Flowchart(fc) => Positions::Flow(
                fc.names
                    .iter()
                    .enumerate()
                    .filter(|(local, _)| !fc.triggers.contains(local))
                    .filter(|(local, _)| {
                        fc.child(*local)
                            .and_then(|n| self.node(n))
                            .is_some_and(|n| n.kind.is_migratable_wait())
                    })
                    .map(|(_, name)| name.clone())
                    .collect(),
            ),
            NodeKind::Sequence { steps } => Positions::Flow(
                steps
                    .iter()
                    .filter_map(|&s| self.node(s))
                    .filter(|n| n.kind.is_migratable_wait())
                    .map(|n| local_name(&n.id).to_owned())
                    .collect(),
            ),
            other => Positions::Other(other.name()),
        }
    }

    pub(crate) fn node(&self, index: NodeIndex) -> Option<&Node> {
        self.nodes.get(index)
    }

    /// The event nodes marked as triggers of every flowchart (ACT-7, RT-9):
    /// `(node path id, event name)`, in graph order.
    pub(crate) fn event_triggers(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let NodeKind::Flowchart(fc) = &node.kind else {
                continue;
            };
            for &local in &fc.triggers {
                let Some(child) = fc.children.get(local).and_then(|&c| self.nodes.get(c)) else {
                    continue;
                };
                if let NodeKind::Event { event, .. } = &child.kind {
                    out.push((child.id.clone(), event.clone()));
                }
            }
        }
        out
    }

    /// The time trigger nodes of every flowchart (ACT-7, TM-11 to TM-13), in graph order.
    pub(crate) fn time_triggers(&self) -> Vec<(String, TimeTrigger)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let NodeKind::Flowchart(fc) = &node.kind else {
                continue;
            };
            for &local in &fc.triggers {
                let Some(child) = fc.children.get(local).and_then(|&c| self.nodes.get(c)) else {
                    continue;
                };
                let trigger = match &child.kind {
                    NodeKind::Timer {
                        interval_ms,
                        missed,
                        ..
                    } => TimeTrigger::Timer {
                        interval_ms: *interval_ms,
                        missed: *missed,
                    },
                    NodeKind::StartAt {
                        at_ms: Some(at_ms), ..
                    } => TimeTrigger::StartAt { at_ms: *at_ms },
                    NodeKind::Cron {
                        expression,
                        schedule,
                        zone,
                        missed,
                    } => TimeTrigger::Cron {
                        expression: expression.clone(),
                        schedule: schedule.clone(),
                        zone: zone.clone(),
                        missed: *missed,
                    },
                    _ => continue,
                };
                out.push((child.id.clone(), trigger));
            }
        }
        out
    }

    pub(crate) fn index_of(&self, id: &str) -> Option<NodeIndex> {
        self.by_id.get(id).copied()
    }

    /// Every `(node id, registry name)` of a task, and every condition name, for registration
    /// checks (ENG-47).
    pub(crate) fn functions(&self) -> (NamedRefs<'_>, NamedRefs<'_>) {
        let mut tasks = Vec::new();
        let mut conditions = Vec::new();
        for node in &self.nodes {
            match &node.kind {
                NodeKind::Task {
                    function,
                    compensation,
                    ..
                } => {
                    tasks.push((node.id.as_str(), function.as_str()));
                    if let Some(c) = compensation {
                        tasks.push((node.id.as_str(), c.as_str()));
                    }
                }
                NodeKind::If { condition, .. }
                | NodeKind::While { condition, .. }
                | NodeKind::Timer {
                    until: Some(condition),
                    ..
                } => {
                    conditions.push((node.id.as_str(), condition.as_str()));
                }
                NodeKind::Switch(s) => conditions.extend(
                    s.cases
                        .iter()
                        .map(|(_, c, _)| (node.id.as_str(), c.as_str())),
                ),
                NodeKind::StateMachine(m) => conditions.extend(
                    m.transitions
                        .iter()
                        .filter_map(|t| t.condition.as_deref())
                        .map(|c| (node.id.as_str(), c)),
                ),
                _ => {}
            }
        }
        (tasks, conditions)
    }

    /// `(node id, payload type name)` of every event that declares its outcomes (ACT-V8): each
    /// needs an outcome mapping registered under its payload type name.
    pub(crate) fn event_choices(&self) -> Vec<(&str, Option<&str>)> {
        self.nodes
            .iter()
            .filter_map(|node| match &node.kind {
                NodeKind::Event {
                    choice: Some(choice),
                    ..
                } => Some((node.id.as_str(), choice.payload.as_deref())),
                _ => None,
            })
            .collect()
    }

    /// `(node id, workflow name)` of every SubWorkflow node (ACT-V10).
    /// Every `(node id, queue name)` of a task taking flow-control slots (QU-10), for the
    /// build's check that each queue is declared.
    pub(crate) fn task_queues(&self) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Task {
                    queue: Some(queue), ..
                } => Some((n.id.clone(), queue.name.clone())),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn sub_workflows(&self) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::SubWorkflow { workflow, .. } => Some((n.id.clone(), workflow.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every `(node id, registry name)` of an items fn (ForEach, ParallelForEach), of a value
    /// fn (SetVariable, Finish output, Correlate key, SubWorkflow input) and of an assign fn
    /// (SubWorkflow), for registration checks (ENG-47).
    pub(crate) fn data_functions(&self) -> [NamedRefs<'_>; 3] {
        let mut items = Vec::new();
        let mut values = Vec::new();
        let mut assigns = Vec::new();
        for node in &self.nodes {
            let id = node.id.as_str();
            match &node.kind {
                NodeKind::ForEach { items: f, .. } | NodeKind::ParallelForEach { items: f, .. } => {
                    items.push((id, f.as_str()));
                }
                NodeKind::SetVariable { value: f, .. }
                | NodeKind::Finish { output: Some(f) }
                | NodeKind::Correlate { key: f }
                | NodeKind::Delay { until: Some(f), .. }
                | NodeKind::StartAt { at_fn: Some(f), .. }
                | NodeKind::SubWorkflow { input: Some(f), .. } => values.push((id, f.as_str())),
                _ => {}
            }
            match &node.kind {
                NodeKind::SubWorkflow {
                    assign: Some(f), ..
                }
                | NodeKind::Event {
                    assign: Some(workflow_model::PayloadAssign::Function(f)),
                    ..
                } => assigns.push((id, f.as_str())),
                _ => {}
            }
        }
        [items, values, assigns]
    }

    fn add(
        &mut self,
        activity: &Activity,
        parent: Option<NodeIndex>,
    ) -> Result<NodeIndex, GraphError> {
        let id = match parent.and_then(|p| self.nodes.get(p)) {
            Some(p) => format!("{}:{}", p.id, activity.id()),
            None => activity.id().to_owned(),
        };
        if self.by_id.contains_key(&id) {
            return Err(GraphError::DuplicateNode { node: id });
        }
        let index = self.nodes.len();
        self.by_id.insert(id.clone(), index);
        // Placeholder kind, replaced once the children have indices.
        self.nodes.push(Node {
            id: id.clone(),
            parent,
            kind: NodeKind::Sequence { steps: Vec::new() },
        });
        let kind = match activity {
            Activity::Task(t) => NodeKind::Task {
                function: t.function.clone(),
                ports: t.ports.clone(),
                retry: match (&t.retry, &self.default_retry) {
                    (Some(own), Some(workflow)) => Some(own.or(workflow)),
                    (own, workflow) => own.clone().or_else(|| workflow.clone()),
                },
                attempt_timeout_ms: t.attempt_timeout_ms,
                compensation: t.compensation.clone(),
                commit: t.commit,
                queue: t.queue.clone().map(|name| TaskQueue {
                    name,
                    priority: t.priority.unwrap_or_default(),
                    key: t.queue_key.clone(),
                }),
            },
            Activity::Saga(saga) => NodeKind::Saga {
                body: self.add(&saga.body, Some(index))?,
                continue_after: saga.on_failure == SagaOnFailure::CompensateThenContinue,
            },
            Activity::Event(e) => NodeKind::Event {
                event: e.event.clone(),
                key: e.key.clone(),
                look_back: e.look_back,
                choice: e.ports.as_ref().map(|ports| EventChoice {
                    payload: e.payload.clone(),
                    ports: ports.clone(),
                }),
                deadline_ms: e.deadline_ms,
                assign: e.assign.clone(),
            },
            Activity::Delay(d) => NodeKind::Delay {
                duration_ms: d.duration_ms,
                until: d.until.clone(),
            },
            // TM-13: a StartAt trigger is scheduled at registration, before any data exists.
            Activity::StartAt(a) if a.trigger && a.at.is_none() => {
                return Err(GraphError::Unsupported {
                    node: id,
                    kind: "start_at trigger without a constant instant",
                });
            }
            Activity::Timer(t) => NodeKind::Timer {
                interval_ms: t.interval_ms,
                body: match t.body.as_deref() {
                    Some(body) => Some(self.add(body, Some(index))?),
                    None => None,
                },
                until: t.until.clone(),
                max_ticks: t.max_ticks,
                missed: t.missed,
            },
            Activity::StartAt(a) => {
                let zone = match a.time_zone.as_deref() {
                    Some(name) => Some(Zone::parse(name).map_err(|_| GraphError::Unsupported {
                        node: id.clone(),
                        kind: "start_at in an unknown time zone",
                    })?),
                    None => None,
                };
                NodeKind::StartAt {
                    at_ms: match &a.at {
                        Some(at) => Some(instant_ms(at, zone.as_ref()).ok_or_else(|| {
                            GraphError::Unsupported {
                                node: id.clone(),
                                kind: "start_at with an instant that is not RFC 3339 (with an \
                                       offset, or local with a time zone)",
                            }
                        })?),
                        None => None,
                    },
                    at_fn: a.at_fn.clone(),
                    zone,
                }
            }
            Activity::Cron(c) => {
                let unsupported = |kind| GraphError::Unsupported {
                    node: id.clone(),
                    kind,
                };
                let schedule = workflow_model::cron::Schedule::parse(&c.expression)
                    .map_err(|_| unsupported("cron with an invalid expression"))?;
                let zone = match c.time_zone.as_deref() {
                    None => Zone::utc(),
                    Some(zone) => Zone::parse(zone)
                        .map_err(|_| unsupported("cron in an unknown time zone"))?,
                };
                NodeKind::Cron {
                    expression: c.expression.clone(),
                    schedule,
                    zone,
                    missed: c.missed,
                }
            }
            Activity::Sequence(s) => {
                let mut steps = Vec::with_capacity(s.steps.len());
                for step in &s.steps {
                    steps.push(self.add(step, Some(index))?);
                }
                NodeKind::Sequence { steps }
            }
            Activity::StateMachine(m) => NodeKind::StateMachine(Box::new(self.machine(m, index)?)),
            Activity::Flowchart(f) => NodeKind::Flowchart(Box::new(self.flowchart(f, index)?)),
            Activity::If(i) => NodeKind::If {
                condition: i.condition.clone(),
                then: self.add_opt(i.then.as_deref(), index)?,
                otherwise: self.add_opt(i.r#else.as_deref(), index)?,
                structured: i.then.is_some() || i.r#else.is_some(),
            },
            Activity::Switch(s) => {
                let mut cases = Vec::with_capacity(s.cases.len());
                for case in &s.cases {
                    let body = self.add_opt(case.body.as_ref(), index)?;
                    cases.push((case.label.clone(), case.condition.clone(), body));
                }
                let default = self.add_opt(s.default.as_deref(), index)?;
                let structured = default.is_some() || cases.iter().any(|c| c.2.is_some());
                NodeKind::Switch(Box::new(SwitchNode {
                    cases,
                    any: s.mode == SwitchMode::Any,
                    default,
                    structured,
                }))
            }
            Activity::While(w) => NodeKind::While {
                condition: w.condition.clone(),
                body: self.add(&w.body, Some(index))?,
            },
            Activity::ForEach(f) => NodeKind::ForEach {
                items: f.items.clone(),
                body: self.add(&f.body, Some(index))?,
            },
            Activity::ParallelForEach(f) => NodeKind::ParallelForEach {
                items: f.items.clone(),
                body: self.add(&f.body, Some(index))?,
                max_in_flight: f.max_in_flight,
            },
            Activity::Parallel(p) => {
                let mut branches = Vec::with_capacity(p.branches.len());
                for branch in &p.branches {
                    branches.push(self.add(branch, Some(index))?);
                }
                NodeKind::Parallel {
                    branches,
                    any: p.mode == ParallelMode::Any,
                }
            }
            Activity::Fork(f) => NodeKind::Fork {
                branches: f.branches.clone(),
            },
            Activity::Join(j) => NodeKind::Join {
                any: j.mode == JoinMode::Any,
            },
            Activity::Start(_) => NodeKind::Start,
            Activity::End(_) => NodeKind::End,
            Activity::Finish(f) => NodeKind::Finish {
                output: f.output.clone(),
            },
            Activity::Break(_) => NodeKind::Break,
            Activity::Fault(f) => NodeKind::Fault {
                code: f.code.clone(),
                message: f.message.clone(),
            },
            Activity::Correlate(c) => NodeKind::Correlate { key: c.key.clone() },
            Activity::SetVariable(v) => NodeKind::SetVariable {
                variable: v.variable.clone(),
                value: v.value.clone(),
            },
            Activity::SubWorkflow(w) => NodeKind::SubWorkflow {
                workflow: w.workflow.clone(),
                input: w.input.clone(),
                assign: w.assign.clone(),
                detach: w.mode == SubWorkflowMode::Detach,
                deadline_ms: w.deadline_ms,
            },
        };
        if let Some(node) = self.nodes.get_mut(index) {
            node.kind = kind;
        }
        Ok(index)
    }

    fn add_opt(
        &mut self,
        activity: Option<&Activity>,
        parent: NodeIndex,
    ) -> Result<Option<NodeIndex>, GraphError> {
        match activity {
            Some(a) => Ok(Some(self.add(a, Some(parent))?)),
            None => Ok(None),
        }
    }

    /// Compiles a flowchart: its nodes as children, its connections resolved to local
    /// indexes, and the validator's analysis computed once (FC-5, FC-6, FC-16).
    fn flowchart(&mut self, f: &Flowchart, index: NodeIndex) -> Result<FlowchartNode, GraphError> {
        let mut children = Vec::with_capacity(f.nodes.len());
        let mut local = NodeIds::default();
        let mut triggers = Vec::new();
        let names = f.nodes.iter().map(|n| n.id().to_owned()).collect();
        for (i, node) in f.nodes.iter().enumerate() {
            let child = self.add(node, Some(index))?;
            if let Some(n) = self.nodes.get(child) {
                local.insert(n.id.clone(), i);
            }
            if node.is_trigger() {
                triggers.push(i);
            }
            children.push(child);
        }
        let analysis = analyze_flowchart(f);
        let connections = f
            .connections
            .iter()
            .enumerate()
            .map(|(i, c)| FlowConnection {
                key: c.key(),
                port: c.port.clone(),
                endpoints: analysis.endpoints.get(i).copied().flatten(),
            })
            .collect();
        Ok(FlowchartNode {
            children,
            names,
            local,
            connections,
            analysis,
            triggers,
        })
    }

    fn machine(&mut self, m: &StateMachine, index: NodeIndex) -> Result<MachineNode, GraphError> {
        let mut states = Vec::with_capacity(m.states.len());
        for state in &m.states {
            let entry = match &state.entry {
                Some(a) => Some(self.add(a, Some(index))?),
                None => None,
            };
            let exit = match &state.exit {
                Some(a) => Some(self.add(a, Some(index))?),
                None => None,
            };
            states.push(StateNode {
                name: state.name.clone(),
                entry,
                exit,
                reaches_itself_automatically: false,
            });
        }
        let mut transitions = Vec::with_capacity(m.transitions.len());
        for (i, t) in m.transitions.iter().enumerate() {
            let trigger = match &t.trigger {
                Some(a) => Some(self.add(a, Some(index))?),
                None => None,
            };
            let action = match &t.action {
                Some(a) => Some(self.add(a, Some(index))?),
                None => None,
            };
            transitions.push(TransitionNode {
                key: StateMachine::transition_key(i, t),
                from: t.from.clone(),
                to: t.to.clone(),
                trigger,
                condition: t.condition.clone(),
                action,
            });
        }
        let reach: Vec<bool> = states
            .iter()
            .map(|s| reaches_itself(&s.name, &transitions))
            .collect();
        for (state, r) in states.iter_mut().zip(reach) {
            state.reaches_itself_automatically = r;
        }
        Ok(MachineNode {
            initial: m.initial.clone(),
            states,
            transitions,
        })
    }
}

/// An RFC 3339 instant in ms since the Unix epoch, or, with a zone, a local date and time
/// without an offset read in that zone (TM-16 to TM-18); `None` if it is neither.
pub(crate) fn instant_ms(text: &str, zone: Option<&Zone>) -> Option<u64> {
    parse_rfc3339_ms(text).or_else(|| {
        zone.and_then(|z| z.instant_of_local_text(text))
            .and_then(|ms| u64::try_from(ms).ok())
    })
}

/// An RFC 3339 instant (`2026-11-29T20:15:00Z`, `...T20:15:00.250+02:00`) in ms since the
/// Unix epoch; `None` if it does not parse or is before the epoch.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let byte = |at: usize| text.as_bytes().get(at).copied();
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(at, c)| byte(at) != Some(c))
        || !matches!(byte(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = text.get(19..)?;
    let mut millis = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", fraction.get(..digits.min(3))?);
        millis = padded.parse().ok()?;
        rest = fraction.get(digits..)?;
    }
    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes().get(3) != Some(&b':') {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    u64::try_from(seconds.checked_mul(1000)?.checked_add(millis)?).ok()
}

/// Whether `start` reaches itself through one or more triggerless transitions (SM-6).
fn reaches_itself(start: &str, transitions: &[TransitionNode]) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    let mut frontier: Vec<&str> = vec![start];
    while let Some(state) = frontier.pop() {
        for t in transitions
            .iter()
            .filter(|t| t.trigger.is_none() && t.from == state)
        {
            if t.to == start {
                return true;
            }
            if !seen.contains(&t.to.as_str()) {
                seen.push(&t.to);
                frontier.push(&t.to);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use workflow_model::{Event, Sequence, State, Task, Transition};

    #[test]
    fn eng3_node_ids_are_ancestor_paths() {
        let seq = Sequence {
            id: "root".into(),
            steps: vec![Task::new("a", "a").into(), Event::new("b", "go").into()],
        };
        let graph = Graph::build(&Definition::new("D", seq)).unwrap();
        let ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["root", "root:a", "root:b"]);
        assert_eq!(graph.index_of("root:b"), Some(2));
    }

    #[test]
    fn sm6_self_reaching_states_are_found_conditions_ignored() {
        let mut machine = StateMachine {
            id: "root".into(),
            initial: "A".into(),
            states: vec![State::new("A"), State::new("B"), State::new("C")],
            transitions: vec![Transition::new("A", "B"), Transition::new("B", "A")],
        };
        let mut t = Transition::new("A", "C");
        t.trigger = Some(Event::new("go", "go").into());
        machine.transitions.push(t);
        let graph = Graph::build(&Definition::new("D", machine)).unwrap();
        let NodeKind::StateMachine(m) = &graph.nodes[0].kind else {
            panic!("not a machine")
        };
        let reach: Vec<bool> = m
            .states
            .iter()
            .map(|s| s.reaches_itself_automatically)
            .collect();
        assert_eq!(reach, [true, true, false]);
    }

    #[test]
    fn a_start_at_trigger_without_a_constant_instant_is_refused_at_build() {
        let def = Definition::new(
            "D",
            workflow_model::StartAt {
                id: "root".into(),
                at: None,
                at_fn: Some("at".into()),
                time_zone: None,
                trigger: true,
            },
        );
        assert_eq!(
            Graph::build(&def).unwrap_err(),
            GraphError::Unsupported {
                node: "root".into(),
                kind: "start_at trigger without a constant instant"
            }
        );
    }

    #[test]
    fn act22_rfc3339_instants_parse_to_ms() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-11-29T20:15:00.25Z"),
            Some(1_795_983_300_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-29T22:15:00+02:00"),
            Some(1_795_983_300_000)
        );
        assert_eq!(parse_rfc3339_ms("2026-11-29 20:15"), None);
        assert_eq!(parse_rfc3339_ms("2026-13-29T20:15:00Z"), None);
    }
}
