//! The immutable graph a definition compiles to: nodes with ancestor-path ids (ENG-3) and the
//! per-kind data the activities need, built once per registered definition.

use std::collections::HashMap;

use workflow_model::{Activity, Definition, StateMachine};

/// Index of a node in [`Graph::nodes`].
pub(crate) type NodeIndex = usize;

/// `(node id, registry name)` pairs.
pub(crate) type NamedRefs<'a> = Vec<(&'a str, &'a str)>;

/// A compiled definition.
#[derive(Debug)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    by_id: HashMap<String, NodeIndex>,
}

/// One node: its ancestor-path id (`root:review:manager`), its parent and its kind.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) parent: Option<NodeIndex>,
    pub(crate) kind: NodeKind,
}

/// What the executor needs of each kind of activity.
#[derive(Debug)]
pub(crate) enum NodeKind {
    Task { function: String },
    Event { event: String, key: Option<String> },
    Delay { duration_ms: Option<u64> },
    Sequence { steps: Vec<NodeIndex> },
    StateMachine(Box<MachineNode>),
}

/// A compiled state machine (state-machine.md section 1).
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
            by_id: HashMap::new(),
        };
        graph.add(&definition.root, None)?;
        Ok(graph)
    }

    pub(crate) fn root(&self) -> NodeIndex {
        0
    }

    pub(crate) fn node(&self, index: NodeIndex) -> Option<&Node> {
        self.nodes.get(index)
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
                NodeKind::Task { function } => tasks.push((node.id.as_str(), function.as_str())),
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
            },
            Activity::Event(e) => NodeKind::Event {
                event: e.event.clone(),
                key: e.key.clone(),
            },
            Activity::Delay(d) if d.until.is_none() => NodeKind::Delay {
                duration_ms: d.duration_ms,
            },
            Activity::Sequence(s) => {
                let mut steps = Vec::with_capacity(s.steps.len());
                for step in &s.steps {
                    steps.push(self.add(step, Some(index))?);
                }
                NodeKind::Sequence { steps }
            }
            Activity::StateMachine(m) => NodeKind::StateMachine(Box::new(self.machine(m, index)?)),
            other => {
                return Err(GraphError::Unsupported {
                    node: id,
                    kind: other.kind_name(),
                });
            }
        };
        if let Some(node) = self.nodes.get_mut(index) {
            node.kind = kind;
        }
        Ok(index)
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
    fn unsupported_kinds_are_refused_at_build() {
        let def = Definition::new(
            "D",
            workflow_model::Finish {
                id: "root".into(),
                output: None,
            },
        );
        assert_eq!(
            Graph::build(&def).unwrap_err(),
            GraphError::Unsupported {
                node: "root".into(),
                kind: "finish"
            }
        );
    }
}
