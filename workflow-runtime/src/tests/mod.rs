//! Unit tests driving the executor directly: the state-machine scenarios of
//! the state machine's scenarios, sequences, cancellation, faults and the no-recursion proof.

mod executor;
mod flowchart;
mod state_machine;
mod structured;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_model::{Activity, Definition, Event, State, StateMachine, Task, Transition};

use crate::engine::executor::{Executor, Middleware, RunEnd, RunTarget, StepError};
use crate::engine::graph::Graph;
use crate::engine::state::{
    ActivityStatus, ContextId, DefinitionRef, EntryPoint, Journal, JournalKind, JournalLevel,
    WorkItem, WorkflowState,
};
use crate::{Outcome, Registry, TaskContext};

/// Polls a future that never waits (test tasks complete at once) to completion.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

/// The data of the test workflows: a log of what ran, and a counter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Log {
    pub(crate) log: Vec<String>,
    pub(crate) count: u64,
}

/// A registry whose tasks named `log:<text>` append `<text>` to the log, plus `incr`.
pub(crate) fn logging_registry(names: &[&str]) -> Registry<Log> {
    let mut registry = Registry::new().task("incr", |cx: &mut TaskContext<Log>| {
        Box::pin(async move {
            cx.data_mut().count += 1;
            Ok(Outcome::done())
        })
    });
    for name in names {
        let text = (*name).to_owned();
        registry = registry.task(format!("log:{name}"), move |cx: &mut TaskContext<Log>| {
            let text = text.clone();
            Box::pin(async move {
                cx.data_mut().log.push(text);
                Ok(Outcome::done())
            })
        });
    }
    registry
        .condition("yes", |_: &Log| true)
        .condition("no", |_: &Log| false)
}

pub(crate) fn log_task(id: &str, text: &str) -> Activity {
    Task::new(id, format!("log:{text}")).into()
}

pub(crate) fn event(id: &str, name: &str) -> Activity {
    Event::new(id, name).into()
}

pub(crate) fn state(name: &str, entry: Option<Activity>, exit: Option<Activity>) -> State {
    let mut s = State::new(name);
    s.entry = entry;
    s.exit = exit;
    s
}

pub(crate) fn transition(
    name: Option<&str>,
    from: &str,
    to: &str,
    trigger: Option<Activity>,
    condition: Option<&str>,
    action: Option<Activity>,
) -> Transition {
    let mut t = Transition::new(from, to);
    t.name = name.map(str::to_owned);
    t.trigger = trigger;
    t.condition = condition.map(str::to_owned);
    t.action = action;
    t
}

pub(crate) fn machine(
    initial: &str,
    states: Vec<State>,
    transitions: Vec<Transition>,
) -> Definition {
    Definition::new(
        "Machine",
        StateMachine {
            id: "root".into(),
            initial: initial.into(),
            states,
            transitions,
        },
    )
}

/// An executor over a fresh instance of `definition`, driven one work item at a time.
pub(crate) struct Harness {
    pub(crate) exec: Executor<'static, Log>,
}

impl Harness {
    pub(crate) fn new(definition: &Definition, registry: Registry<Log>) -> Self {
        Self::with_state(definition, registry, None)
    }

    pub(crate) fn with_state(
        definition: &Definition,
        registry: Registry<Log>,
        state: Option<WorkflowState>,
    ) -> Self {
        let graph: &'static Graph = Box::leak(Box::new(Graph::build(definition).unwrap()));
        let registry: &'static Registry<Log> = Box::leak(Box::new(registry));
        let middleware: &'static Middleware = Box::leak(Box::default());
        let state = state.unwrap_or_else(|| {
            let data = serde_json::to_value(Log::default()).unwrap();
            WorkflowState::new(
                "01J9ZQ3K8W0000000000000000".into(),
                DefinitionRef {
                    name: definition.name.clone(),
                    version: "test".into(),
                },
                data.clone(),
                data,
                Journal::new(JournalLevel::Verbose, 100_000),
                0,
            )
        });
        Self {
            exec: Executor::new(graph, registry, state, middleware),
        }
    }

    /// Plans a fresh start (the root's execute item) without running it.
    pub(crate) fn begin(&mut self) {
        self.exec.plan_for_tests(RunTarget::None).unwrap();
    }

    /// Runs the head work item; panics on an engine abort.
    pub(crate) fn step(&mut self) {
        let item = self
            .exec
            .state
            .queue
            .pop_front()
            .expect("a queued work item");
        match block_on(self.exec.step(item)) {
            Ok(()) => {}
            Err(StepError::Fault { context, record }) => {
                panic!("context {context} faulted: {record:?}")
            }
            Err(StepError::Abort(e)) => panic!("run aborted: {e}"),
        }
    }

    /// Runs the loop to its end.
    pub(crate) fn run(&mut self) -> RunEnd {
        block_on(self.exec.run(RunTarget::None, usize::MAX)).unwrap()
    }

    /// `(node id, tag)` of every queued work item, in order.
    pub(crate) fn queue(&self) -> Vec<(String, Option<String>)> {
        self.exec
            .state
            .queue
            .iter()
            .map(|w| {
                let c = self.exec.state.context(w.context).unwrap();
                let tag = match &w.entry {
                    EntryPoint::Continue { tag, .. } => Some(tag.clone()),
                    _ => c.tag.clone(),
                };
                (c.node_id.clone(), tag)
            })
            .collect()
    }

    pub(crate) fn queued_nodes(&self) -> Vec<String> {
        self.queue().into_iter().map(|(n, _)| n).collect()
    }

    pub(crate) fn root(&self) -> ContextId {
        self.exec.state.root.unwrap()
    }

    pub(crate) fn current(&self) -> Option<String> {
        let root = self.exec.state.context(self.root())?;
        root.properties
            .get(crate::engine::names::CURRENT_STATE)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    pub(crate) fn set_current(&mut self, state: &str) {
        let root = self.root();
        self.exec
            .state
            .context_mut(root)
            .unwrap()
            .properties
            .insert(crate::engine::names::CURRENT_STATE.into(), json!(state));
    }

    pub(crate) fn root_status(&self) -> ActivityStatus {
        self.exec.state.context(self.root()).unwrap().status
    }

    pub(crate) fn log(&self) -> Vec<String> {
        serde_json::from_value::<Log>(self.exec.state.data.clone())
            .unwrap()
            .log
    }

    /// Node ids of the bookmarks, in creation order.
    pub(crate) fn bookmark_nodes(&self) -> Vec<String> {
        self.exec
            .state
            .bookmarks
            .iter()
            .map(|b| b.node_id.clone())
            .collect()
    }

    /// Resumes the bookmark of node `node` with `payload`, as the head work item, and runs it.
    pub(crate) fn fire(&mut self, node: &str, payload: Value) {
        let bookmark = self
            .exec
            .state
            .bookmarks
            .iter()
            .find(|b| b.node_id == node)
            .unwrap_or_else(|| panic!("no bookmark for {node}"))
            .clone();
        self.exec.state.queue.push_front(WorkItem {
            context: bookmark.context_id,
            entry: EntryPoint::Resume {
                bookmark: bookmark.id,
                payload,
            },
        });
        self.step();
    }

    /// Runs work items until the queue is empty.
    pub(crate) fn drain(&mut self) {
        while !self.exec.state.queue.is_empty() {
            self.step();
        }
    }

    /// Node ids of the `Completed` journal entries, in order.
    pub(crate) fn completed(&self) -> Vec<String> {
        self.journal_nodes(JournalKind::Completed)
    }

    pub(crate) fn journal_nodes(&self, kind: JournalKind) -> Vec<String> {
        self.exec
            .state
            .journal
            .entries
            .iter()
            .filter(|e| e.kind == kind)
            .filter_map(|e| e.node_id.clone())
            .collect()
    }

    /// The live contexts of node `node`.
    pub(crate) fn live(&self, node: &str) -> Vec<ContextId> {
        self.exec
            .state
            .contexts
            .values()
            .filter(|c| c.node_id == node && !c.status.is_final())
            .map(|c| c.id)
            .collect()
    }

    /// The tags of the callbacks owned by the root.
    pub(crate) fn root_callbacks(&self) -> Vec<(String, Option<String>)> {
        let root = self.root();
        self.exec
            .state
            .callbacks
            .iter()
            .filter(|e| e.owner == root)
            .map(|e| (e.callback.clone(), e.tag.clone()))
            .collect()
    }

    /// Serializes the state to JSON and back, as a store would (SM-8).
    pub(crate) fn round_trip(self, definition: &Definition, registry: Registry<Log>) -> Self {
        let json = serde_json::to_string(&self.exec.state).unwrap();
        let mut state: WorkflowState = serde_json::from_str(&json).unwrap();
        // The journal's entries are stored apart from the document (ENG-41): carry them over.
        let mut expected = self.exec.state.clone();
        let entries = std::mem::take(&mut expected.journal.entries);
        assert_eq!(state, expected);
        state.journal.entries = entries;
        Self::with_state(definition, registry, Some(state))
    }
}
