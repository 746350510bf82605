//! The executor: the FIFO run loop (ENG-8, ENG-9), scheduling, completion, cancellation and
//! faults (ENG-11 to ENG-17), the resume paths (ENG-24 to ENG-26), the step budget (ENG-10)
//! and the middleware chains (ENG-34, ENG-38).
//!
//! One [`Executor`] runs one run of one instance over an owned [`WorkflowState`]. It never
//! recurses on work items: an activity schedules children as work items and the loop takes
//! them one at a time, so automatic cycles (SM-6) do not grow the stack.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::{Value, json};
use tracing::Instrument;

use crate::base::BoxFuture;
use crate::base::{Micros, new_ulid, now_micros};
pub(crate) use crate::engine::activities::scope::{
    ChildInfo, DeclinedTransition, Link, Scope, StepError, UserFailure, engine_fault,
};
use crate::engine::activities::{Activities, EventActivity, Execution};
pub use crate::engine::error::RunError;
use crate::engine::events::{ActivityRef, EventKind, LifecycleEvent};
use crate::engine::graph::{Graph, NodeIndex, NodeKind};
use crate::engine::guard::panic_message;
use crate::engine::names::{CURRENT_STATE, ENTERED_AT, MIGRATED_TO, ON_MIGRATED, TAG_MIGRATED};
use crate::engine::registry::Registry;
use crate::engine::state::{
    ActivityContext, ActivityStatus, Bookmark, CallbackEntry, ContextId, Detail, EntryPoint,
    FaultKind, FaultRecord, Incident, JournalKind, SubStatus, WorkItem, WorkflowState,
    WorkflowStatus,
};

/// The default step budget of one run (ENG-10).
pub const DEFAULT_MAX_STEPS_PER_RUN: usize = 10_000;

/// When a run commits besides its mandatory commits (ENG-31, ENG-32), runtime-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitStrategy {
    /// Only the mandatory commits: a run that suspends or finishes costs one commit.
    #[default]
    RunEnd,
    /// Also before each task runs, with the context marked `is_executing` (ENG-5): a crash
    /// during the task re-runs exactly that task on recovery.
    BeforeEachActivity,
    /// Also after each task completes: a crash later does not lose its effect on the data.
    AfterEachActivity,
    /// Also after a task completes when this long has passed since the run's last commit.
    Periodic(std::time::Duration),
}

impl From<workflow_model::CommitStrategy> for CommitStrategy {
    fn from(strategy: workflow_model::CommitStrategy) -> Self {
        match strategy {
            workflow_model::CommitStrategy::RunEnd => CommitStrategy::RunEnd,
            workflow_model::CommitStrategy::BeforeEachActivity => {
                CommitStrategy::BeforeEachActivity
            }
            workflow_model::CommitStrategy::AfterEachActivity => CommitStrategy::AfterEachActivity,
            workflow_model::CommitStrategy::Periodic { interval_ms } => {
                CommitStrategy::Periodic(std::time::Duration::from_millis(interval_ms))
            }
        }
    }
}

/// A commit inside a run (ENG-32), made by the runtime that drives it.
pub(crate) trait Checkpoint: Send + Sync {
    /// Commits `state` as it is (status `Running/Executing`), moving its pending journal
    /// entries to the store.
    fn checkpoint<'b>(
        &'b self,
        state: &'b mut WorkflowState,
    ) -> BoxFuture<'b, Result<(), RunError>>;
}

/// What a run was asked to do first (ENG-24).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RunTarget {
    /// Start, recovery or continuation of a restored queue.
    None,
    /// Resume these bookmarks with this payload, in creation order.
    Bookmarks { ids: Vec<String>, payload: Value },
    /// ENG-54: a migrated instance's fresh state, its root state machine placed in `state`
    /// (entered at `entered_at`, RT-30) without running the state's entry again: the run
    /// arms the state's transitions.
    Migrated {
        state: String,
        entered_at: Option<Value>,
    },
    /// ENG-55: a migrated instance's fresh state, its root flowchart or sequence placed at
    /// `node` (scheduled afresh, its wait counted from `started_at`, the instant the node
    /// started in the previous version, with `input` as input), the rest of the run state as
    /// if the run had reached `node` by itself.
    MigratedFlow {
        node: String,
        started_at: Option<Micros>,
        input: Option<Value>,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// The root completed.
    Finished,
    /// The queue drained with unfinished activities.
    Suspended(SubStatus),
    /// An activity failed for good.
    Faulted,
    /// The step budget ran out with work queued (ENG-10).
    Budget,
}

/// `Running/Executing`, or `Finished` without a sub-status (the `Display` forms, joined
/// without the formatting machinery: a run writes two of them per status change).
fn status_name(status: WorkflowStatus, sub: Option<SubStatus>) -> String {
    let status = match status {
        WorkflowStatus::Running => "Running",
        WorkflowStatus::Suspended => "Suspended",
        WorkflowStatus::Faulted => "Faulted",
        WorkflowStatus::Finished => "Finished",
        WorkflowStatus::Cancelled => "Cancelled",
    };
    let Some(sub) = sub else {
        return status.to_owned();
    };
    let sub = match sub {
        SubStatus::Pending => "Pending",
        SubStatus::Executing => "Executing",
        SubStatus::Waiting => "Waiting",
        SubStatus::Paused => "Paused",
        SubStatus::Stalled => "Stalled",
        SubStatus::WaitingForSlot => "WaitingForSlot",
    };
    let mut name = String::with_capacity(status.len() + 1 + sub.len());
    name.push_str(status);
    name.push('/');
    name.push_str(sub);
    name
}

/// What an activity middleware layer decides before the activity runs (ENG-34, ENG-37).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on to the next layer and the activity.
    Continue,
    /// Do not run it: the context stays as it is with no work item, journaled (ENG-37).
    Decline,
}

/// The activity a middleware layer sees.
#[derive(Debug, Clone, Copy)]
pub struct ActivityInfo<'a> {
    /// The instance.
    pub instance_id: &'a str,
    /// The node.
    pub node_id: &'a str,
    /// The context.
    pub context_id: ContextId,
    /// `"execute"`, `"resume"` or `"continue"`.
    pub entry: &'static str,
}

/// A user layer of the activity middleware chain (ENG-34), run in registration order inside
/// the built-in layers (fault capture, journal, lifecycle events, the `workflow.activity`
/// tracing span). `before` runs outermost first, `after` in reverse order.
pub trait ActivityMiddleware: Send + Sync + 'static {
    /// Called before the activity runs; [`Flow::Decline`] declines it (ENG-37).
    fn before(&self, activity: &ActivityInfo<'_>) -> Flow {
        let _ = activity;
        Flow::Continue
    }

    /// Called after the activity's entry point returned, with its context's status.
    fn after(&self, activity: &ActivityInfo<'_>, status: ActivityStatus) {
        let _ = (activity, status);
    }
}

/// What a workflow middleware layer sees of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunInfo<'a> {
    /// The instance.
    pub instance_id: &'a str,
    /// Its definition name.
    pub definition: &'a str,
    /// Its status when the run starts (or ends, in `after_run`).
    pub status: WorkflowStatus,
    /// Its sub-status.
    pub sub_status: Option<SubStatus>,
    /// How many work items are queued.
    pub queued: usize,
}

/// A user layer of the workflow middleware chain (ENG-38), around each run, inside the
/// built-in fault capture and the `workflow.run` tracing span.
pub trait WorkflowMiddleware: Send + Sync + 'static {
    /// Called before the run loop; [`Flow::Decline`] skips the run (nothing changes).
    fn before_run(&self, run: &RunInfo<'_>) -> Flow {
        let _ = run;
        Flow::Continue
    }

    /// Called after the run loop, before the commit.
    fn after_run(&self, run: &RunInfo<'_>) {
        let _ = run;
    }
}

/// The user middleware of a runtime.
#[derive(Clone, Default)]
pub(crate) struct Middleware {
    pub(crate) activity: Vec<Arc<dyn ActivityMiddleware>>,
    pub(crate) workflow: Vec<Arc<dyn WorkflowMiddleware>>,
}

impl std::fmt::Debug for Middleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Middleware")
            .field("activity", &self.activity.len())
            .field("workflow", &self.workflow.len())
            .finish()
    }
}

/// One run of one instance.
pub(crate) struct Executor<'a, D> {
    pub(crate) graph: &'a Graph,
    pub(crate) registry: &'a Registry<D>,
    pub(crate) state: WorkflowState,
    /// The decoded data; always equal to `state.data` when `Some` (decoded lazily).
    pub(crate) data: Option<D>,
    pub(crate) events: Vec<LifecycleEvent>,
    /// Whether anyone listens: without subscribers no event is built (they are process-local
    /// and never persisted, ENG-40).
    pub(crate) emit_events: bool,
    middleware: &'a Middleware,
    pub(crate) now: Micros,
    /// What caused this run, when it delivers a stimulus (its send time) or fires a timer
    /// (its due time): the instant a state machine's `since_entered` waits look back to
    /// (RT-30).
    pub(crate) caused_at: Option<Micros>,
    /// The transitions whose condition declined their trigger in this run (SM-4).
    pub(crate) declined: Vec<DeclinedTransition>,
    faulted: bool,
    /// Child instances to start or cancel once this run commits (ACT-24).
    pub(crate) links: Vec<Link>,
    /// The commits inside the run, if any, with the runtime's strategy (ENG-32).
    pub(crate) checkpoint: Option<(&'a dyn Checkpoint, CommitStrategy)>,
    /// When the run last committed (its start, or its last checkpoint), for `Periodic`.
    last_commit: std::time::Instant,
    /// The clock, grace and instance token of task attempts (FLT-16, FLT-17).
    pub(crate) attempts: AttemptSettings,
    /// The bookmark and node being resumed by an outside stimulus (not one of the engine's
    /// reserved `wf.` stimuli), while its entry point runs: a payload that does not decode
    /// then rejects the run (RT-22) instead of faulting.
    resuming: Option<(String, &'a str)>,
    /// The bookmark, node and payload of the stimulus (an event, not one of the engine's
    /// reserved `wf.` stimuli) this run resumed, until the run first commits: a task of this
    /// run that cannot read that payload with `ctx.payload()` or `ctx.input()` rejects the run
    /// (RT-22), since nothing of it is stored yet. After a commit inside the run the bookmark
    /// is consumed in the store, so the failure faults the task as any permanent error.
    stimulus: Option<(String, &'a str, Value)>,
}

impl<D> std::fmt::Debug for Executor<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("instance", &self.state.instance_id)
            .finish_non_exhaustive()
    }
}

impl<'a, D> Executor<'a, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    pub(crate) fn new(
        graph: &'a Graph,
        registry: &'a Registry<D>,
        state: WorkflowState,
        middleware: &'a Middleware,
    ) -> Self {
        Self {
            graph,
            registry,
            state,
            data: None,
            events: Vec::new(),
            emit_events: true,
            middleware,
            now: now_micros(),
            caused_at: None,
            declined: Vec::new(),
            faulted: false,
            links: Vec::new(),
            checkpoint: None,
            last_commit: std::time::Instant::now(),
            attempts: AttemptSettings::default(),
            resuming: None,
            stimulus: None,
        }
    }

    /// RT-22: a stimulus payload that did not decode while a bookmark is being resumed
    /// rejects the run; `None` otherwise (the error stays a fault).
    pub(crate) fn payload_rejection(
        &self,
        error: &crate::engine::task::TaskError,
    ) -> Option<StepError> {
        let payload_type = error.decode_type()?;
        let (bookmark, node) = self.resuming.clone()?;
        Some(StepError::Abort(RunError::PayloadDecode {
            instance: self.state.instance_id.clone(),
            bookmark,
            node: node.to_owned(),
            payload_type: payload_type.to_owned(),
            message: error.message().to_owned(),
        }))
    }

    /// RT-22: task `id` failed reading the payload of the stimulus this run resumed, before
    /// the run committed anything: the run is rejected (the bookmark and the instance stay as
    /// they were); `None` when the error is another one, or the payload is not the stimulus's.
    pub(crate) fn task_payload_rejection(
        &self,
        id: ContextId,
        error: &crate::engine::task::TaskError,
    ) -> Option<StepError> {
        let payload_type = error.decode_type()?;
        let (bookmark, node, payload) = self.stimulus.as_ref()?;
        // The payload reaches the task as its payload (an action) or as its input (the task
        // after an event in a sequence or a flowchart).
        let context = self.state.context(id)?;
        if context.payload.as_ref() != Some(payload) && context.input.as_ref() != Some(payload) {
            return None;
        }
        Some(StepError::Abort(RunError::PayloadDecode {
            instance: self.state.instance_id.clone(),
            bookmark: bookmark.clone(),
            node: (*node).to_owned(),
            payload_type: payload_type.to_owned(),
            message: error.message().to_owned(),
        }))
    }

    /// Commits inside the run at this boundary of task `id` (`BeforeEachActivity` for before
    /// it runs, `AfterEachActivity` for after it completed) if the settings ask for it
    /// (ENG-32): the node's `commit` decides first; `default` defers to the definition's
    /// strategy, else the runtime's. `never` suppresses the strategy for this node; mandatory
    /// commits are not made here and are never suppressed.
    pub(crate) async fn checkpoint_at(
        &mut self,
        id: ContextId,
        at: CommitStrategy,
    ) -> Result<(), RunError> {
        use workflow_model::NodeCommit;
        let Some((checkpoint, runtime)) = self.checkpoint else {
            return Ok(());
        };
        let before = at == CommitStrategy::BeforeEachActivity;
        let node = self
            .state
            .context(id)
            .and_then(|c| self.graph.index_of(&c.node_id))
            .and_then(|i| self.graph.node(i))
            .and_then(|n| match &n.kind {
                NodeKind::Task { commit, .. } => *commit,
                _ => None,
            })
            .unwrap_or_default();
        let strategy = self
            .graph
            .commit_strategy
            .map_or(runtime, CommitStrategy::from);
        let commit = match node {
            NodeCommit::Before => before,
            NodeCommit::After => !before,
            NodeCommit::BeforeAndAfter => true,
            NodeCommit::Never => false,
            NodeCommit::Default => match strategy {
                CommitStrategy::RunEnd => false,
                CommitStrategy::BeforeEachActivity => before,
                CommitStrategy::AfterEachActivity => !before,
                CommitStrategy::Periodic(interval) => {
                    !before && self.last_commit.elapsed() >= interval
                }
            },
        };
        if !commit {
            return Ok(());
        }
        checkpoint.checkpoint(&mut self.state).await?;
        self.last_commit = std::time::Instant::now();
        // The resumed bookmark is consumed in the store now: no rejection past this point.
        self.stimulus = None;
        Ok(())
    }

    // ---- run loop -----------------------------------------------------------------------

    /// One run (ENG-9): builds the initial queue (ENG-25, ENG-26), takes items in FIFO order
    /// until the queue is empty, an activity faults, or `max_steps` items ran (ENG-10).
    pub(crate) async fn run(
        &mut self,
        target: RunTarget,
        max_steps: usize,
    ) -> Result<RunEnd, RunError> {
        let span = tracing::info_span!(
            "workflow.run",
            instance = %self.state.instance_id,
            definition = %self.state.definition.name
        );
        self.run_inner(target, max_steps).instrument(span).await
    }

    async fn run_inner(&mut self, target: RunTarget, max_steps: usize) -> Result<RunEnd, RunError> {
        self.state
            .check_invariants()
            .map_err(|reason| RunError::StateCorrupt {
                instance: self.state.instance_id.clone(),
                reason,
            })?;
        let before = (self.state.status, self.state.sub_status);
        self.plan(target)?;

        let middleware = self.middleware;
        for layer in &middleware.workflow {
            if layer.before_run(&run_info(&self.state)) == Flow::Decline {
                self.record(JournalKind::Declined, None, &json!({"run": "declined"}));
                return Ok(self.end_for_idle());
            }
        }

        if before == (WorkflowStatus::Running, Some(SubStatus::Pending)) {
            self.publish(EventKind::WorkflowStarted);
        } else if before.0 == WorkflowStatus::Suspended {
            self.publish(EventKind::WorkflowResumed);
        }
        self.set_status(WorkflowStatus::Running, Some(SubStatus::Executing));

        let mut steps = 0usize;
        let end = loop {
            if self.faulted {
                break RunEnd::Faulted;
            }
            if steps >= max_steps && !self.state.queue.is_empty() {
                break RunEnd::Budget;
            }
            // ENG-50: a requested pause stops the run at this item boundary; the queue is
            // kept for the resume.
            if self.attempts.pause_requested() && !self.state.queue.is_empty() {
                break RunEnd::Budget;
            }
            let Some(item) = self.state.queue.pop_front() else {
                break self.end_for_idle();
            };
            steps += 1;
            match self.step(item).await {
                Ok(()) => {}
                Err(StepError::Fault { context, record }) => self.fail(context, record).await,
                Err(StepError::Abort(error)) => return Err(error),
            }
        };
        self.finish(end);
        for layer in middleware.workflow.iter().rev() {
            layer.after_run(&run_info(&self.state));
        }
        Ok(end)
    }

    /// ENG-25, ENG-26: interrupted contexts first, then the restored queue, then the target's
    /// work; a fresh start only for `Running/Pending`.
    fn plan(&mut self, target: RunTarget) -> Result<(), RunError> {
        let interrupted: Vec<WorkItem> = self
            .state
            .contexts
            .values()
            .filter(|c| c.is_executing)
            .map(|c| WorkItem {
                context: c.id,
                entry: c.executing_entry.clone().unwrap_or(EntryPoint::Execute),
            })
            .collect();
        for item in interrupted.into_iter().rev() {
            if let Some(c) = self.state.context_mut(item.context) {
                c.is_executing = false;
            }
            self.state.queue.push_front(item);
        }
        match target {
            RunTarget::Bookmarks { ids, payload } => {
                let mut found = 0;
                let mut items = Vec::new();
                for bookmark in &self.state.bookmarks {
                    if !ids.contains(&bookmark.id) {
                        continue;
                    }
                    if !self.state.contexts.contains_key(&bookmark.context_id) {
                        return Err(RunError::BookmarkOrphaned {
                            bookmark: bookmark.id.clone(),
                            context: bookmark.context_id,
                        });
                    }
                    found += 1;
                    if let Some(timer) = bookmark.timer() {
                        self.caused_at = Some(timer.due_at);
                        // TM-8: a due timer's resume carries when it fired.
                        let fired_at = payload.get("fired_at").and_then(Value::as_i64);
                        let late_ms =
                            fired_at.map_or(0, |f| f.saturating_sub(timer.due_at).max(0) / 1000);
                        tracing::info!(
                            definition = self.state.definition.name.as_str(),
                            instance = self.state.instance_id.as_str(),
                            node = bookmark.node_id.as_str(),
                            timer = bookmark.id.as_str(),
                            kind = timer.kind.as_str(),
                            late_ms,
                            "timer fired"
                        );
                    }
                    items.push(WorkItem {
                        context: bookmark.context_id,
                        entry: EntryPoint::Resume {
                            bookmark: bookmark.id.clone(),
                            payload: payload.clone(),
                        },
                    });
                }
                if found == 0 {
                    return Err(RunError::BookmarkNotFound {
                        instance: self.state.instance_id.clone(),
                    });
                }
                self.state.queue.extend(items);
            }
            RunTarget::Migrated { state, entered_at } => {
                if self.state.root.is_none() && self.state.queue.is_empty() {
                    let root = self.graph.root();
                    let input = self.state.input.clone();
                    let id = self.create_context(root, None, None, Some(input), None)?;
                    self.state.root = Some(id);
                    if let Some(c) = self.state.context_mut(id) {
                        c.properties
                            .insert(CURRENT_STATE.to_owned(), Value::String(state));
                        if let Some(at) = entered_at {
                            c.properties.insert(ENTERED_AT.to_owned(), at);
                        }
                    }
                    self.state.queue.push_back(WorkItem {
                        context: id,
                        entry: EntryPoint::Continue {
                            callback: ON_MIGRATED.to_owned(),
                            tag: TAG_MIGRATED.to_owned(),
                            payload: None,
                        },
                    });
                }
            }
            RunTarget::MigratedFlow {
                node,
                started_at,
                input,
            } => {
                if self.state.root.is_none() && self.state.queue.is_empty() {
                    let root = self.graph.root();
                    let root_input = self.state.input.clone();
                    let id = self.create_context(root, None, None, Some(root_input), None)?;
                    self.state.root = Some(id);
                    if let Some(c) = self.state.context_mut(id) {
                        c.properties.insert(
                            MIGRATED_TO.to_owned(),
                            serde_json::json!({
                                "node": node,
                                "started_at": started_at,
                                "input": input,
                            }),
                        );
                    }
                    self.state.queue.push_back(WorkItem {
                        context: id,
                        entry: EntryPoint::Continue {
                            callback: ON_MIGRATED.to_owned(),
                            tag: TAG_MIGRATED.to_owned(),
                            payload: None,
                        },
                    });
                }
            }
            RunTarget::None => {
                let fresh = self.state.status == WorkflowStatus::Running
                    && self.state.sub_status == Some(SubStatus::Pending)
                    && self.state.root.is_none();
                if self.state.queue.is_empty() && fresh {
                    let root = self.graph.root();
                    let input = self.state.input.clone();
                    let id = self.create_context(root, None, None, Some(input), None)?;
                    self.state.root = Some(id);
                    self.state.queue.push_back(WorkItem {
                        context: id,
                        entry: EntryPoint::Execute,
                    });
                }
            }
        }
        Ok(())
    }

    /// [`Executor::plan`] for the step-by-step tests.
    #[cfg(test)]
    pub(crate) fn plan_for_tests(&mut self, target: RunTarget) -> Result<(), RunError> {
        self.plan(target)
    }

    fn end_for_idle(&self) -> RunEnd {
        let root_done = self
            .state
            .root
            .and_then(|r| self.state.context(r))
            .is_some_and(|c| c.status == ActivityStatus::Completed);
        if root_done {
            RunEnd::Finished
        } else if self.state.bookmarks.is_empty() {
            RunEnd::Suspended(SubStatus::Stalled)
        } else if self
            .state
            .bookmarks
            .iter()
            .any(|b| b.name == crate::engine::names::Reserved::Slot.name())
        {
            // QU-11: an attempt waits for a slot of its queue (others may wait for events).
            RunEnd::Suspended(SubStatus::WaitingForSlot)
        } else {
            RunEnd::Suspended(SubStatus::Waiting)
        }
    }

    /// Sets the final status of the run and tidies the state for the commit (ENG-7, ENG-42).
    fn finish(&mut self, end: RunEnd) {
        match end {
            RunEnd::Finished => {
                self.state.bookmarks.clear();
                self.state.callbacks.clear();
                self.state.queue.clear();
                if self.state.output.is_none() {
                    self.state.output = Some(self.state.data.clone());
                }
                self.set_status(WorkflowStatus::Finished, None);
                self.publish(EventKind::WorkflowFinished);
            }
            RunEnd::Suspended(sub) => {
                self.set_status(WorkflowStatus::Suspended, Some(sub));
                self.publish(EventKind::WorkflowSuspended { sub_status: sub });
            }
            RunEnd::Faulted => {
                self.set_status(WorkflowStatus::Faulted, None);
                if let Some(incident) = self.state.incidents.last().cloned() {
                    self.publish(EventKind::WorkflowFaulted { incident });
                }
            }
            RunEnd::Budget => {}
        }
        self.state.prune();
        self.state.journal.compact();
        self.state.updated_at = self.now;
    }

    pub(crate) fn set_status(&mut self, status: WorkflowStatus, sub: Option<SubStatus>) {
        if (self.state.status, self.state.sub_status) == (status, sub) {
            return;
        }
        let from = (self.state.status, self.state.sub_status);
        self.state.status = status;
        self.state.sub_status = sub;
        // Executing is transient inside a run; journal only what a commit can show.
        if sub != Some(SubStatus::Executing) {
            // Stored names only, no Rust debug forms (ST-20).
            if self.state.journal.keeps(JournalKind::StatusChanged) {
                let detail = Detail::object()
                    .str("from", &status_name(from.0, from.1))
                    .str("to", &status_name(status, sub))
                    .finish();
                self.record_detail(JournalKind::StatusChanged, None, detail);
            }
        }
    }

    // ---- one work item ------------------------------------------------------------------

    /// Runs one work item through the middleware chain (ENG-34) and the invoker (ENG-35).
    pub(crate) async fn step(&mut self, item: WorkItem) -> Result<(), StepError> {
        let Some(context) = self.state.context(item.context) else {
            return Err(RunError::ContextNotFound {
                context: item.context,
            }
            .into());
        };
        if context.status.is_final() || context.status == ActivityStatus::Faulted {
            // Withdrawn work cannot be here; stay robust to a hand-edited queue.
            return Ok(());
        }
        let node = self
            .graph
            .index_of(&context.node_id)
            .ok_or_else(|| RunError::NodeNotFound {
                node: context.node_id.clone(),
            })?;
        // The graph's id of the node, the context's own (no copy: it borrows the graph).
        let node_id = self.node_id(node);
        let entry_name = match item.entry {
            EntryPoint::Execute => "execute",
            EntryPoint::Resume { .. } => "resume",
            EntryPoint::Continue { .. } => "continue",
        };
        let middleware = self.middleware;
        // Copied only for the middleware, whose `after` runs once the item changed the state.
        let instance_id = if middleware.activity.is_empty() {
            String::new()
        } else {
            self.state.instance_id.clone()
        };
        let info = ActivityInfo {
            instance_id: &instance_id,
            node_id,
            context_id: item.context,
            entry: entry_name,
        };
        for layer in &middleware.activity {
            if layer.before(&info) == Flow::Decline {
                self.record(
                    JournalKind::Declined,
                    Some(item.context),
                    &json!({"entry": entry_name}),
                );
                return Ok(());
            }
        }
        let span = tracing::info_span!(
            "workflow.activity",
            instance = %self.state.instance_id,
            node = %node_id,
            context = item.context,
            entry = entry_name
        );
        let result = self
            .invoke(item.context, node, item.entry)
            .instrument(span)
            .await;
        let status = self
            .state
            .context(item.context)
            .map_or(ActivityStatus::Canceled, |c| c.status);
        for layer in middleware.activity.iter().rev() {
            layer.after(&info, status);
        }
        result
    }

    /// ENG-35: set `Running`, run the entry point, burn the resumed bookmark, count it.
    async fn invoke(
        &mut self,
        id: ContextId,
        node: NodeIndex,
        entry: EntryPoint,
    ) -> Result<(), StepError> {
        let now = self.now;
        if let Some(c) = self.state.context_mut(id) {
            if c.status == ActivityStatus::Pending {
                c.status = ActivityStatus::Running;
                // ENG-55: a migrated node keeps the instant it started in the previous version.
                c.started_at.get_or_insert(now);
            }
            c.execution_count += 1;
        }
        if self.state.journal.keeps(JournalKind::Started) {
            self.record_detail(JournalKind::Started, Some(id), Detail::null());
        }
        self.activity_event(id, ActivityRef::executing);
        let result = match entry {
            EntryPoint::Execute => match self.execute(id, node) {
                Ok(Execution::Task {
                    function,
                    retry,
                    attempt_timeout_ms,
                    queue,
                }) => {
                    self.run_task(id, function, retry, attempt_timeout_ms, queue)
                        .await
                }
                Ok(Execution::Settled) => Ok(()),
                Err(error) => Err(error),
            },
            EntryPoint::Resume { bookmark, payload } => self.resume(id, node, &bookmark, payload),
            EntryPoint::Continue {
                callback,
                tag,
                payload,
            } => {
                let child = ChildInfo {
                    id,
                    node_id: self.node_id(node).to_owned(),
                    status: ActivityStatus::Running,
                    result: None,
                    tag: Some(tag),
                    payload,
                };
                self.on_child(id, &callback, child)
            }
        };
        self.activity_event(id, ActivityRef::executed);
        result
    }

    /// ENG-21: resume from a bookmark; burn it once the entry point returned without fault.
    fn resume(
        &mut self,
        id: ContextId,
        node: NodeIndex,
        bookmark_id: &str,
        payload: Value,
    ) -> Result<(), StepError> {
        let Some(position) = self
            .state
            .bookmarks
            .iter()
            .position(|b| b.id == bookmark_id)
        else {
            // Consumed by an earlier item of this run: nothing to do.
            return Ok(());
        };
        let bookmark = self.state.bookmarks.remove(position);
        if self.state.journal.keeps(JournalKind::BookmarkResumed) {
            // Keys in order: `bookmark`, `due_at`, `fired_at`, `name`.
            let mut detail = Detail::object().str("bookmark", &bookmark.id);
            // TM-8: a timer journals when it was due and when it fired.
            if let Some(due_at) = bookmark.payload.get("due_at") {
                detail = detail
                    .value("due_at", due_at)
                    .value("fired_at", &json!(self.now));
            }
            let detail = detail.str("name", &bookmark.name).finish();
            self.record_detail(JournalKind::BookmarkResumed, Some(id), detail);
        }
        // RT-22 rejects outside stimuli only: the engine's own (`wf.` timers, a child's
        // result) would be fired again for ever, so their decode failures fault.
        let outside = !bookmark.name.starts_with("wf.");
        // The node's id borrows the graph: no copy.
        self.resuming = outside.then(|| (bookmark.id.clone(), self.node_id(node)));
        if self.stimulus.is_none() && outside {
            self.stimulus = Some((bookmark.id.clone(), self.node_id(node), payload.clone()));
        }
        let result = match &bookmark.callback {
            Some(callback) => {
                let child = ChildInfo {
                    id,
                    node_id: self.node_id(node).to_owned(),
                    status: ActivityStatus::Running,
                    result: Some(payload.clone()),
                    tag: None,
                    payload: Some(payload),
                };
                self.on_child(id, callback, child)
            }
            None => self.bookmark_completed(id, node, payload),
        };
        self.resuming = None;
        match &result {
            Err(StepError::Fault { .. })
                if self.state.context(id).is_some_and(|c| !c.status.is_final()) =>
            {
                // ENG-21: on fault the bookmark stays for a retry with the same payload. (When
                // the context completed and its owner's callback failed, ENG-15, the bookmark
                // was consumed by that completion and the owner is what faulted.)
                self.state
                    .bookmarks
                    .insert(position.min(self.state.bookmarks.len()), bookmark);
            }
            _ if !bookmark.auto_burn => {
                if self
                    .state
                    .contexts
                    .get(&id)
                    .is_some_and(|c| !c.status.is_final())
                {
                    self.state
                        .bookmarks
                        .insert(position.min(self.state.bookmarks.len()), bookmark);
                }
            }
            _ => {
                if self.state.journal.keeps(JournalKind::BookmarkBurned) {
                    let detail = Detail::object().str("bookmark", &bookmark.id).finish();
                    self.record_detail(JournalKind::BookmarkBurned, Some(id), detail);
                }
            }
        }
        result
    }

    // ---- contexts, scheduling, completion -----------------------------------------------

    pub(crate) fn node_id(&self, node: NodeIndex) -> &'a str {
        let graph: &'a Graph = self.graph;
        graph.node(node).map_or("", |n| n.id.as_str())
    }

    fn create_context(
        &mut self,
        node: NodeIndex,
        parent: Option<ContextId>,
        tag: Option<String>,
        input: Option<Value>,
        payload: Option<Value>,
    ) -> Result<ContextId, RunError> {
        let node_id = self.node_id(node);
        if node_id.is_empty() {
            return Err(RunError::NodeNotFound {
                node: format!("#{node}"),
            });
        }
        let id = self.state.next_context_id;
        self.state.next_context_id += 1;
        self.state.contexts.insert(
            id,
            ActivityContext {
                id,
                node_id: node_id.to_owned(),
                parent,
                status: ActivityStatus::Pending,
                is_executing: false,
                executing_entry: None,
                tag,
                properties: serde_json::Map::new(),
                variables: serde_json::Map::new(),
                input,
                payload,
                execution_count: 0,
                started_at: None,
                completed_at: None,
                result: None,
                outcomes: Vec::new(),
                completion_seq: None,
                fault: None,
            },
        );
        Ok(id)
    }

    /// ENG-11: schedules `node`, a direct child of the owner's node, with a completion tag and
    /// a callback name; returns the child's context id.
    pub(crate) fn schedule_child(
        &mut self,
        owner: ContextId,
        node: NodeIndex,
        tag: Option<String>,
        callback: Option<&str>,
        payload: Option<Value>,
    ) -> Result<ContextId, StepError> {
        let owner_node = self
            .state
            .context(owner)
            .and_then(|c| self.graph.index_of(&c.node_id));
        let parent = self.graph.node(node).and_then(|n| n.parent);
        if owner_node.is_none() || parent != owner_node {
            return Err(engine_fault(
                owner,
                format!(
                    "NotAChild: node `{}` is not a direct child of the scheduling activity",
                    self.node_id(node)
                ),
            ));
        }
        let detail = self
            .state
            .journal
            .keeps(JournalKind::Scheduled)
            .then(|| Detail::object().opt_str("tag", tag.as_deref()).finish());
        let entry_tag = if callback.is_some() {
            tag.clone()
        } else {
            None
        };
        let child = self.create_context(node, Some(owner), tag, None, payload)?;
        self.state.queue.push_back(WorkItem {
            context: child,
            entry: EntryPoint::Execute,
        });
        if let Some(callback) = callback {
            self.state.callbacks.push(CallbackEntry {
                owner,
                child,
                callback: callback.to_owned(),
                tag: entry_tag,
            });
        }
        if let Some(detail) = detail {
            self.record_detail(JournalKind::Scheduled, Some(child), detail);
        }
        Ok(child)
    }

    /// Appends a continuation work item for `owner` itself (SM-6).
    pub(crate) fn schedule_continuation(
        &mut self,
        owner: ContextId,
        callback: &str,
        tag: &str,
        payload: Option<Value>,
    ) {
        self.state.queue.push_back(WorkItem {
            context: owner,
            entry: EntryPoint::Continue {
                callback: callback.to_owned(),
                tag: tag.to_owned(),
                payload,
            },
        });
        if self.state.journal.keeps(JournalKind::Scheduled) {
            let detail = Detail::object().str("tag", tag).finish();
            self.record_detail(JournalKind::Scheduled, Some(owner), detail);
        }
    }

    /// ENG-14: completes a `Running` context (a no-op otherwise) and signals its owner.
    pub(crate) fn complete(
        &mut self,
        id: ContextId,
        result: Option<Value>,
        outcomes: Vec<String>,
    ) -> Result<(), StepError> {
        if self.state.context(id).map(|c| c.status) != Some(ActivityStatus::Running) {
            return Ok(());
        }
        // The owner is not called for the children its own completion cancels (ENG-15).
        self.state.callbacks.retain(|e| e.owner != id);
        for child in self.state.live_children(id) {
            self.cancel(child)?;
        }
        self.state.bookmarks.retain(|b| b.context_id != id);
        self.state.queue.retain(|w| w.context != id);
        self.state.completion_seq += 1;
        let seq = self.state.completion_seq;
        let now = self.now;
        if let Some(c) = self.state.context_mut(id) {
            c.status = ActivityStatus::Completed;
            c.result = result;
            c.outcomes = outcomes;
            c.completed_at = Some(now);
            c.completion_seq = Some(seq);
            c.variables.clear();
        }
        self.record_detail(JournalKind::Completed, Some(id), Detail::null());
        self.activity_event(id, ActivityRef::completed);
        self.signal_owner(id)
    }

    /// ENG-16: cancels a non-final context and its descendants, then signals its owner.
    pub(crate) fn cancel(&mut self, id: ContextId) -> Result<(), StepError> {
        if self.state.context(id).is_none_or(|c| c.status.is_final()) {
            return Ok(());
        }
        let descendants = self.descendants(id);
        self.state
            .queue
            .retain(|w| w.context != id && !descendants.contains(&w.context));
        self.state.callbacks.retain(|e| e.owner != id);
        for child in self.state.live_children(id) {
            self.cancel(child)?;
        }
        self.cancel_child_instances(|b| b.context_id == id);
        self.state.bookmarks.retain(|b| b.context_id != id);
        let now = self.now;
        if let Some(c) = self.state.context_mut(id) {
            c.status = ActivityStatus::Canceled;
            c.is_executing = false;
            c.completed_at = Some(now);
            c.variables.clear();
        }
        self.record_detail(JournalKind::Canceled, Some(id), Detail::null());
        self.activity_event(id, ActivityRef::canceled);
        self.signal_owner(id)
    }

    /// ACT-24: cancelling a waiting SubWorkflow cancels its child instance, once this run
    /// commits.
    pub(crate) fn cancel_child_instances(&mut self, which: impl Fn(&Bookmark) -> bool) {
        for bookmark in
            self.state.bookmarks.iter().filter(|b| {
                b.name == crate::engine::names::Reserved::SubWorkflow.name() && which(b)
            })
        {
            if let Some(child) = bookmark
                .payload
                .get("child_instance_id")
                .and_then(Value::as_str)
            {
                self.links.push(Link::Cancel {
                    instance_id: child.to_owned(),
                });
            }
        }
    }

    /// Cancels `child` without calling its owner back (SM-5.1: callbacks dropped).
    pub(crate) fn cancel_silently(&mut self, child: ContextId) -> Result<(), StepError> {
        self.state.callbacks.retain(|e| e.child != child);
        self.cancel(child)
    }

    fn descendants(&self, id: ContextId) -> Vec<ContextId> {
        let mut out = Vec::new();
        let mut frontier = vec![id];
        while let Some(parent) = frontier.pop() {
            for c in self
                .state
                .contexts
                .values()
                .filter(|c| c.parent == Some(parent))
            {
                out.push(c.id);
                frontier.push(c.id);
            }
        }
        out
    }

    /// ENG-15: removes the child's callback entry and runs the owner's callback at once.
    fn signal_owner(&mut self, child: ContextId) -> Result<(), StepError> {
        let Some(position) = self.state.callbacks.iter().position(|e| e.child == child) else {
            return Ok(());
        };
        let entry = self.state.callbacks.remove(position);
        let Some(c) = self.state.context(child) else {
            return Ok(());
        };
        let info = ChildInfo {
            id: child,
            node_id: c.node_id.clone(),
            status: c.status,
            result: c.result.clone(),
            tag: entry.tag,
            payload: c.payload.clone(),
        };
        self.on_child(entry.owner, &entry.callback, info)
    }

    /// ENG-17: records the failure for good; the owner is not signalled and the run stops.
    pub(crate) fn fault_now(&mut self, id: ContextId, record: FaultRecord) {
        let node_id = self
            .state
            .context(id)
            .map(|c| c.node_id.clone())
            .unwrap_or_default();
        if let Some(c) = self.state.context_mut(id) {
            c.status = ActivityStatus::Faulted;
            c.is_executing = false;
            c.fault = Some(record.clone());
        }
        let detail = json!({"kind": format!("{:?}", record.kind), "message": record.message});
        self.state.incidents.push(Incident {
            id: new_ulid(),
            context_id: id,
            node_id,
            fault: record,
            at: self.now,
            resolution: None,
            kind: crate::engine::state::IncidentKind::ActivityFailed,
            stimulus_id: None,
        });
        self.record(JournalKind::Faulted, Some(id), &detail);
        self.activity_event(id, ActivityRef::faulted);
        self.faulted = true;
    }

    /// ENG-19, ENG-20: creates a bookmark owned by a `Running` context; an identical one
    /// (same hash and callback) is returned instead of doubled.
    pub(crate) fn create_bookmark(
        &mut self,
        id: ContextId,
        name: &str,
        hash: String,
        payload: Value,
        callback: Option<&str>,
    ) -> Result<String, StepError> {
        let Some(c) = self.state.context(id) else {
            return Err(RunError::ContextNotFound { context: id }.into());
        };
        if c.status != ActivityStatus::Running {
            return Err(engine_fault(
                id,
                "ContextNotRunning: only a running activity may create bookmarks",
            ));
        }
        if let Some(existing) = self
            .state
            .bookmarks
            .iter()
            .find(|b| b.context_id == id && b.hash == hash && b.callback.as_deref() == callback)
        {
            return Ok(existing.id.clone());
        }
        let node_id = c.node_id.clone();
        let bookmark = Bookmark {
            id: new_ulid(),
            name: name.to_owned(),
            hash,
            node_id,
            context_id: id,
            payload,
            auto_burn: true,
            callback: callback.map(str::to_owned),
            created_at: self.now,
        };
        let bookmark_id = bookmark.id.clone();
        if self.state.journal.keeps(JournalKind::BookmarkCreated) {
            let detail = Detail::object()
                .str("bookmark", &bookmark_id)
                .str("name", name)
                .finish();
            self.record_detail(JournalKind::BookmarkCreated, Some(id), detail);
        }
        self.state.bookmarks.push(bookmark);
        Ok(bookmark_id)
    }

    // ---- data and user code -------------------------------------------------------------

    /// The decoded data, decoding `state.data` on first use (ENG-43).
    pub(crate) fn data_mut(&mut self) -> Result<&mut D, RunError> {
        if self.data.is_none() {
            let decoded: D = serde_json::from_value(self.state.data.clone()).map_err(|e| {
                RunError::DataDecode {
                    instance: self.state.instance_id.clone(),
                    message: e.to_string(),
                }
            })?;
            self.data = Some(decoded);
        }
        self.data.as_mut().ok_or_else(|| RunError::DataDecode {
            instance: self.state.instance_id.clone(),
            message: "data unavailable".to_owned(),
        })
    }

    /// Evaluates the registered condition `name` for the activity `owner` (ACT-6): an error or
    /// a panic faults `owner`.
    pub(crate) fn condition(
        &mut self,
        owner: ContextId,
        name: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<bool, StepError> {
        let Some(name) = name else {
            return Ok(true);
        };
        let registry = self.registry;
        let Some(condition) = registry.conditions.get(name) else {
            return Err(engine_fault(
                owner,
                format!("no condition is registered under `{name}`"),
            ));
        };
        let data: &D = self.data_mut()?;
        let result = catch_unwind(AssertUnwindSafe(|| condition(data, payload)));
        let value = match result {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => {
                if let Some(rejection) = self.payload_rejection(&error) {
                    return Err(rejection);
                }
                return Err(StepError::Fault {
                    context: owner,
                    record: FaultRecord {
                        kind: FaultKind::Error,
                        message: format!("condition `{name}` failed: {error}"),
                        attempt: 1,
                    },
                });
            }
            Err(panic) => {
                return Err(StepError::Fault {
                    context: owner,
                    record: FaultRecord {
                        kind: FaultKind::Panicked,
                        message: format!("condition `{name}` panicked: {}", panic_message(&*panic)),
                        attempt: 1,
                    },
                });
            }
        };
        Ok(value)
    }

    // ---- journal and events -------------------------------------------------------------

    /// Appends a journal entry (kept if the journal level keeps its kind).
    pub(crate) fn record(&mut self, kind: JournalKind, context: Option<ContextId>, detail: &Value) {
        let now = self.now;
        // The node id is borrowed from the context, not cloned: the journal copies it once.
        let state = &mut self.state;
        let node = context.and_then(|id| state.contexts.get(&id).map(|c| (id, c.node_id.as_str())));
        state.journal.record(kind, node, detail, now);
    }

    /// [`Executor::record`] with a detail already written as its stored text.
    pub(crate) fn record_detail(
        &mut self,
        kind: JournalKind,
        context: Option<ContextId>,
        detail: Detail,
    ) {
        let now = self.now;
        let state = &mut self.state;
        let node = context.and_then(|id| state.contexts.get(&id).map(|c| (id, c.node_id.as_str())));
        state.journal.record_detail(kind, node, detail, now);
    }

    pub(crate) fn publish(&mut self, kind: EventKind) {
        if !self.emit_events {
            return;
        }
        self.state.event_seq += 1;
        self.events.push(LifecycleEvent {
            instance_id: self.state.instance_id.clone(),
            definition: self.state.definition.name.clone(),
            correlation_id: self.state.correlation_id.clone(),
            at_micros: self.now,
            seq: self.state.event_seq,
            kind,
        });
    }

    fn activity_event(&mut self, id: ContextId, make: fn(ActivityRef) -> EventKind) {
        if !self.emit_events {
            return;
        }
        let Some(c) = self.state.context(id) else {
            return;
        };
        let activity = ActivityRef {
            node_id: c.node_id.clone(),
            context_id: id,
            execution_count: c.execution_count,
        };
        self.publish(make(activity));
    }

    /// Cancels the whole instance (ENG-50 on an idle instance): the tree, the queue, the
    /// bookmarks; open incidents resolved as `cancelled`.
    pub(crate) fn cancel_instance(&mut self, reason: Option<String>) -> Result<(), RunError> {
        if let Some(root) = self.state.root {
            match self.cancel(root) {
                Ok(()) | Err(StepError::Fault { .. }) => {}
                Err(StepError::Abort(e)) => return Err(e),
            }
        }
        // Faulted contexts are not final: cancel them too (ENG-4 `Faulted -> Canceled`).
        let now = self.now;
        for c in self.state.contexts.values_mut() {
            if !c.status.is_final() {
                c.status = ActivityStatus::Canceled;
                c.completed_at = Some(now);
            }
        }
        self.state.queue.clear();
        self.cancel_child_instances(|_| true);
        self.state.bookmarks.clear();
        self.state.callbacks.clear();
        for incident in &mut self.state.incidents {
            if incident.resolution.is_none() {
                incident.resolution = Some("cancelled".to_owned());
            }
        }
        self.state.cancel_reason = reason.clone();
        self.set_status(WorkflowStatus::Cancelled, None);
        self.publish(EventKind::WorkflowCancelled { reason });
        self.state.prune();
        self.state.journal.compact();
        self.state.updated_at = self.now;
        Ok(())
    }

    /// Pauses the instance (ENG-50): `Suspended/Paused`, with its queue, bookmarks and
    /// contexts kept as they are for the resume.
    pub(crate) fn pause_instance(&mut self) {
        self.set_status(WorkflowStatus::Suspended, Some(SubStatus::Paused));
        self.publish(EventKind::WorkflowSuspended {
            sub_status: SubStatus::Paused,
        });
        self.state.journal.compact();
        self.state.updated_at = self.now;
    }
}

/// The executor is the scope its activities run in: each call is the executor's own.
impl<'a, D> Scope<'a> for Executor<'a, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    fn graph(&self) -> &'a Graph {
        self.graph
    }

    fn state(&self) -> &WorkflowState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut WorkflowState {
        &mut self.state
    }

    fn now(&self) -> Micros {
        self.now
    }

    fn caused_at(&self) -> Option<Micros> {
        self.caused_at
    }

    fn declined(&mut self, declined: DeclinedTransition) {
        self.declined.push(declined);
    }

    fn schedule_child(
        &mut self,
        owner: ContextId,
        node: NodeIndex,
        tag: Option<String>,
        callback: Option<&str>,
        payload: Option<Value>,
    ) -> Result<ContextId, StepError> {
        Executor::schedule_child(self, owner, node, tag, callback, payload)
    }

    fn schedule_continuation(
        &mut self,
        owner: ContextId,
        callback: &str,
        tag: &str,
        payload: Option<Value>,
    ) {
        Executor::schedule_continuation(self, owner, callback, tag, payload);
    }

    fn complete(
        &mut self,
        id: ContextId,
        result: Option<Value>,
        outcomes: Vec<String>,
    ) -> Result<(), StepError> {
        Executor::complete(self, id, result, outcomes)
    }

    fn cancel(&mut self, id: ContextId) -> Result<(), StepError> {
        Executor::cancel(self, id)
    }

    fn cancel_silently(&mut self, child: ContextId) -> Result<(), StepError> {
        Executor::cancel_silently(self, child)
    }

    fn cancel_child_instances(&mut self, which: &dyn Fn(&Bookmark) -> bool) {
        Executor::cancel_child_instances(self, which);
    }

    fn create_bookmark(
        &mut self,
        id: ContextId,
        name: &str,
        hash: String,
        payload: Value,
        callback: Option<&str>,
    ) -> Result<String, StepError> {
        Executor::create_bookmark(self, id, name, hash, payload, callback)
    }

    fn record(&mut self, kind: JournalKind, context: Option<ContextId>, detail: Value) {
        Executor::record(self, kind, context, &detail);
    }

    fn record_detail(&mut self, kind: JournalKind, context: Option<ContextId>, detail: Detail) {
        Executor::record_detail(self, kind, context, detail);
    }

    fn journal_keeps(&self, kind: JournalKind) -> bool {
        self.state.journal.keeps(kind)
    }

    fn link(&mut self, link: Link) {
        self.links.push(link);
    }

    fn payload_rejection(&self, error: &crate::engine::task::TaskError) -> Option<StepError> {
        Executor::payload_rejection(self, error)
    }

    fn condition(
        &mut self,
        owner: ContextId,
        name: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<bool, StepError> {
        Executor::condition(self, owner, name, payload)
    }

    fn value_fn(&mut self, owner: ContextId, name: &str) -> Result<Value, StepError> {
        Executor::value_fn(self, owner, name)
    }

    fn items_fn(&mut self, owner: ContextId, name: &str) -> Result<Vec<Value>, StepError> {
        Executor::items_fn(self, owner, name)
    }

    fn call_assign(
        &mut self,
        owner: ContextId,
        name: &str,
        value: &Value,
    ) -> Result<Result<(), UserFailure>, StepError> {
        Executor::call_assign(self, owner, name, value)
    }

    fn replace_data(&mut self, json: Value) -> Result<(), String> {
        let data = serde_json::from_value::<D>(json.clone()).map_err(|e| e.to_string())?;
        self.state.data = json;
        self.data = Some(data);
        Ok(())
    }

    fn outcome_fn(&self, payload_type: &str) -> Option<&'a crate::engine::registry::OutcomeFn> {
        let registry: &'a Registry<D> = self.registry;
        registry.outcomes.get(payload_type)
    }
}

impl ActivityRef {
    fn executing(self) -> EventKind {
        EventKind::ActivityExecuting(self)
    }
    fn executed(self) -> EventKind {
        EventKind::ActivityExecuted(self)
    }
    fn completed(self) -> EventKind {
        EventKind::ActivityCompleted(self)
    }
    fn faulted(self) -> EventKind {
        EventKind::ActivityFaulted(self)
    }
    fn canceled(self) -> EventKind {
        EventKind::ActivityCanceled(self)
    }
}

/// What task attempts need besides the state (FLT-16, FLT-17, ENG-52).
#[derive(Debug, Clone)]
pub(crate) struct AttemptSettings {
    /// Workflow time, for attempt timeouts.
    pub(crate) clock: Arc<dyn crate::clock::Clock>,
    /// How long a cancelled task may take to return before it is dropped (ENG-52).
    pub(crate) cancel_grace: std::time::Duration,
    /// Fired when the instance is cancelled while this run executes a task.
    pub(crate) instance_cancel: Option<crate::cancel::CancellationToken>,
    /// Set when an operator asked to pause the instance (ENG-50): the run stops at the next
    /// item boundary, after the current task attempt.
    pub(crate) pause: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Where to keep the node of the task attempt in progress, for the run's lease guard
    /// (its lease-lost event names the node).
    pub(crate) executing: Option<Arc<std::sync::Mutex<Option<String>>>>,
    /// Told of every task attempt (ENG-60).
    pub(crate) observer: Option<Arc<dyn crate::engine::observer::AttemptObserver>>,
    /// The flow-control gate a task of a queue takes its slot from (QU-10); `None`: a task
    /// naming a queue faults.
    pub(crate) flow: Option<crate::engine::slots::Gate>,
}

impl AttemptSettings {
    /// Keeps `node` (or, with `None`, no node) as the task attempt in progress.
    pub(crate) fn set_executing(&self, node: Option<&str>) {
        if let Some(executing) = &self.executing {
            *executing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = node.map(str::to_owned);
        }
    }

    /// Whether a pause was requested for this run.
    pub(crate) fn pause_requested(&self) -> bool {
        self.pause
            .as_ref()
            .is_some_and(|p| p.load(std::sync::atomic::Ordering::SeqCst))
    }
}

impl Default for AttemptSettings {
    fn default() -> Self {
        Self {
            clock: Arc::new(crate::clock::SystemClock),
            cancel_grace: DEFAULT_CANCEL_GRACE,
            instance_cancel: None,
            pause: None,
            executing: None,
            observer: None,
            flow: None,
        }
    }
}

/// ENG-52's default grace.
pub(crate) const DEFAULT_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

fn run_info(s: &WorkflowState) -> RunInfo<'_> {
    RunInfo {
        instance_id: &s.instance_id,
        definition: &s.definition.name,
        status: s.status,
        sub_status: s.sub_status,
        queued: s.queue.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::{SubStatus, WorkflowStatus, status_name};

    #[test]
    fn a_status_name_is_the_display_form_with_its_sub_status() {
        use SubStatus::*;
        use WorkflowStatus::*;
        for status in [Running, Suspended, Faulted, Finished, Cancelled] {
            assert_eq!(status_name(status, None), status.to_string());
            for sub in [Pending, Executing, Waiting, Paused, Stalled, WaitingForSlot] {
                assert_eq!(status_name(status, Some(sub)), format!("{status}/{sub}"));
            }
        }
    }
}
