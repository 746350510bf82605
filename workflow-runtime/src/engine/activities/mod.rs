//! The built-in activities, one family per module: [`sequence`], [`task`], [`event`],
//! [`state_machine`], [`flowchart`], [`time`], [`branching`], [`loops`], [`control`],
//! [`sub_workflow`] and [`saga`]; [`scope`], what they may ask of the engine; and here the
//! dispatch of every kind's `execute` entry point and callbacks.
//!
//! Each kind has an `execute` entry point and a table of callbacks by name (ENG-12); the
//! executor resolves a persisted callback name here and fails the run with `UnknownCallback`
//! for a name the kind does not know.

mod branching;
mod control;
mod event;
pub(crate) mod flowchart;
mod loops;
mod saga;
pub(crate) mod scope;
mod sequence;
pub(crate) mod state_machine;
mod sub_workflow;
mod task;
mod time;

use crate::engine::error::RunError;
use crate::engine::graph::{NodeIndex, NodeKind};
use crate::engine::names::{
    ON_ACTION, ON_BODY, ON_BRANCH, ON_CHILD_DONE, ON_CONTINUE, ON_DEADLINE, ON_ENTRY, ON_EXIT,
    ON_MIGRATED, ON_NODE, ON_RETRY, ON_SAGA_BODY, ON_SLOT, ON_STEP, ON_TICK, ON_TRIGGER,
};
use crate::engine::state::ContextId;
use branching::BranchingActivity;
use control::ControlActivity;
pub(crate) use event::EventActivity;
use flowchart::{FlowchartActivity, FlowchartMigration};
use loops::LoopActivity;
use saga::SagaActivity;
use scope::{ChildInfo, Scope, StepError};
use sequence::SequenceActivity;
use state_machine::StateMachineActivity;
use sub_workflow::SubWorkflowActivity;
use task::TaskActivity;
use time::TimeActivity;
use workflow_model::RetryPolicy;

/// What the `execute` entry point left to do: nothing, or a task attempt, which the executor
/// runs (it is the one asynchronous step: ENG-35, FLT-16).
#[derive(Debug)]
pub(crate) enum Execution<'g> {
    /// The activity did what it does on `execute`.
    Settled,
    /// Run the registered task fn `function` for the context, with its retry policy and
    /// attempt timeout (ACT-11).
    Task {
        function: &'g str,
        retry: Option<&'g RetryPolicy>,
        attempt_timeout_ms: Option<u64>,
        /// The queue each attempt takes a slot of, its priority and key path (QU-10).
        queue: Option<&'g crate::engine::graph::TaskQueue>,
    },
}

/// The entry points of every built-in activity, dispatched by kind (ENG-12), for any
/// [`Scope`].
pub(crate) trait Activities<'g>: Scope<'g> {
    /// The `execute` entry point of every kind; a task's attempt is left to the caller.
    fn execute(&mut self, id: ContextId, node: NodeIndex) -> Result<Execution<'g>, StepError> {
        let graph = self.graph();
        let Some(node) = graph.node(node) else {
            return Err(RunError::NodeNotFound {
                node: format!("#{node}"),
            }
            .into());
        };
        // RT-13, ACT-7: a time trigger that created the instance completes at once with the
        // tick or occurrence as output, without waiting (and a Timer's body is not used).
        if matches!(
            node.kind,
            NodeKind::Timer { .. } | NodeKind::StartAt { .. } | NodeKind::Cron { .. }
        ) && self
            .state()
            .trigger
            .as_ref()
            .is_some_and(|t| t.node_id == node.id)
            && let Some(trigger) = self.state_mut().trigger.take()
        {
            return self
                .complete(id, Some(trigger.payload), Vec::new())
                .map(|()| Execution::Settled);
        }
        let settled = match &node.kind {
            NodeKind::Task {
                function,
                retry,
                attempt_timeout_ms,
                queue,
                ..
            } => {
                return Ok(Execution::Task {
                    function,
                    retry: retry.as_ref(),
                    attempt_timeout_ms: *attempt_timeout_ms,
                    queue: queue.as_ref(),
                });
            }
            NodeKind::Event {
                event,
                key,
                look_back,
                deadline_ms,
                ..
            } => {
                // RT-13, ACT-7: the trigger that created the instance completes at once with
                // the stimulus payload instead of waiting.
                if self
                    .state()
                    .trigger
                    .as_ref()
                    .is_some_and(|t| t.node_id == node.id)
                    && let Some(trigger) = self.state_mut().trigger.take()
                {
                    let index = graph.index_of(&node.id).unwrap_or_default();
                    return self
                        .bookmark_completed(id, index, trigger.payload)
                        .map(|()| Execution::Settled);
                }
                self.execute_event(id, event, key.as_deref(), *look_back)?;
                self.arm_deadline(id, *deadline_ms)
            }
            NodeKind::Delay { duration_ms, until } => {
                self.execute_delay(id, *duration_ms, until.as_deref())
            }
            NodeKind::Timer { interval_ms, .. } => self.timer_execute(id, *interval_ms),
            NodeKind::StartAt { at_ms, at_fn, zone } => {
                self.execute_start_at(id, *at_ms, at_fn.as_deref(), zone.as_ref())
            }
            NodeKind::Cron {
                expression,
                schedule,
                zone,
                ..
            } => self.execute_cron(id, expression, schedule, zone),
            NodeKind::Sequence { steps } => {
                let input = self.state().context(id).and_then(|c| c.input.clone());
                self.sequence_next(id, steps, 0, input)
            }
            NodeKind::Saga { body, .. } => self.saga_execute(id, *body),
            NodeKind::StateMachine(machine) => self.machine_execute(id, machine),
            NodeKind::Flowchart(fc) => self.flowchart_execute(id, fc),
            NodeKind::If {
                condition,
                then,
                otherwise,
                structured,
            } => self.if_execute(id, condition, *then, *otherwise, *structured),
            NodeKind::Switch(s) => self.switch_execute(id, s),
            NodeKind::While { condition, body } => self.while_next(id, condition, *body),
            NodeKind::ForEach { items, body } => self.for_each_execute(id, items, *body),
            NodeKind::ParallelForEach {
                items,
                body,
                max_in_flight,
            } => self.parallel_for_each_execute(id, items, *body, *max_in_flight),
            NodeKind::Parallel { branches, .. } => self.parallel_execute(id, branches),
            NodeKind::Fork { branches } => self.complete(id, None, branches.clone()),
            NodeKind::Join { .. } | NodeKind::Start | NodeKind::End => {
                self.complete(id, None, vec![workflow_model::DONE.to_owned()])
            }
            NodeKind::Finish { output } => self.finish_execute(id, output.as_deref()),
            NodeKind::Break => self.break_execute(id),
            NodeKind::Fault { code, message } => self.fault_execute(id, code, message),
            NodeKind::Correlate { key } => self.correlate_execute(id, key),
            NodeKind::SetVariable { variable, value } => {
                self.set_variable_execute(id, variable, value)
            }
            NodeKind::SubWorkflow {
                workflow,
                input,
                detach,
                deadline_ms,
                ..
            } => {
                self.sub_workflow_execute(id, workflow, input.as_deref(), *detach)?;
                // A detached child with a deadline is refused at build.
                self.arm_deadline(id, *deadline_ms)
            }
        };
        settled.map(|()| Execution::Settled)
    }

    /// Runs the owner's callback `callback` for a child's completion or a continuation.
    fn on_child(
        &mut self,
        owner: ContextId,
        callback: &str,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        let graph = self.graph();
        // The node is found from the owner's node id where the state holds it: it borrows
        // the graph, not the state, so the id is not copied (only an error names it).
        let node = self
            .state()
            .context(owner)
            .and_then(|c| graph.index_of(&c.node_id))
            .and_then(|i| graph.node(i));
        let Some(node) = node else {
            let node_id = self
                .state()
                .context(owner)
                .map(|c| c.node_id.clone())
                .unwrap_or_default();
            return Err(RunError::NodeNotFound { node: node_id }.into());
        };
        let unknown = |kind: &'static str| {
            StepError::Abort(RunError::UnknownCallback {
                node: node.id.clone(),
                kind,
                callback: callback.to_owned(),
            })
        };
        match (&node.kind, callback) {
            (NodeKind::Event { .. } | NodeKind::SubWorkflow { .. }, ON_DEADLINE) => {
                self.deadline_reached(owner)
            }
            (
                NodeKind::Timer {
                    body,
                    until,
                    max_ticks,
                    interval_ms,
                    ..
                },
                ON_TICK,
            ) => self.timer_ticked(owner, *interval_ms, *body, until.as_deref(), *max_ticks),
            (NodeKind::Saga { .. }, ON_SAGA_BODY) => self.saga_body_completed(owner),
            (NodeKind::Task { .. }, ON_RETRY | ON_SLOT) => self.task_retry_due(owner),
            (NodeKind::Sequence { steps }, ON_STEP) => {
                self.sequence_step_completed(owner, steps, &child)
            }
            (NodeKind::StateMachine(m), ON_ENTRY) => self.machine_on_entry(owner, m, &child),
            (NodeKind::StateMachine(m), ON_TRIGGER) => self.machine_on_trigger(owner, m, child),
            (NodeKind::StateMachine(m), ON_EXIT) => self.machine_on_exit(owner, m, child),
            (NodeKind::StateMachine(m), ON_ACTION) => self.machine_on_action(owner, m, child),
            (NodeKind::StateMachine(m), ON_CONTINUE) => self.machine_on_continue(owner, m, child),
            (NodeKind::StateMachine(m), ON_MIGRATED) => self.machine_on_migrated(owner, m, &child),
            (NodeKind::Flowchart(fc), ON_NODE) => self.flowchart_settled(owner, fc, &child),
            (NodeKind::Flowchart(fc), ON_MIGRATED) => self.flowchart_on_migrated(owner, fc, &child),
            (NodeKind::Sequence { steps }, ON_MIGRATED) => {
                self.sequence_on_migrated(owner, steps, &child)
            }
            (
                kind @ (NodeKind::If { .. } | NodeKind::Switch(_) | NodeKind::Parallel { .. }),
                ON_BRANCH,
            ) => self.branch_completed(owner, kind, &child),
            (kind, ON_BODY) if kind.is_loop() => self.body_completed(owner, kind, &child),
            (
                NodeKind::SubWorkflow {
                    workflow, assign, ..
                },
                ON_CHILD_DONE,
            ) => self.sub_workflow_done(owner, workflow, assign.as_deref(), &child),
            (kind, _) => Err(unknown(kind.name())),
        }
    }
}

impl<'g, S: Scope<'g> + ?Sized> Activities<'g> for S {}
