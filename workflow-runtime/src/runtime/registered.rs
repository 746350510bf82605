//! The registered workflows: each definition with its graph and user code, its data type
//! erased, and what one engine run of it takes and gives.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use workflow_model::Activation;

use crate::base::{BoxFuture, Micros};
use crate::engine::events::LifecycleEvent;
use crate::engine::executor::{
    AttemptSettings, Checkpoint, CommitStrategy, DeclinedTransition, Executor, Link, Middleware,
    RunEnd, RunError, RunTarget,
};
use crate::engine::graph::Graph;
use crate::engine::registry::Registry;
use crate::engine::state::WorkflowState;

pub(crate) struct RunOutput {
    pub(crate) state: WorkflowState,
    pub(crate) events: Vec<LifecycleEvent>,
    pub(crate) end: RunEnd,
    /// Child instances to start or cancel once committed (ACT-24).
    pub(crate) links: Vec<Link>,
    /// The transitions whose condition declined their trigger in the run (SM-4).
    pub(crate) declined: Vec<DeclinedTransition>,
}

/// The settings of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// Clock, grace and the instance's cancellation token for task attempts.
    pub(crate) attempts: AttemptSettings,
    /// The step budget (ENG-10).
    pub(crate) max_steps: usize,
    /// The run path holds the run's slot of the definition's queue already (QU-14): the run
    /// takes none.
    pub(crate) run_slot_held: bool,
    /// Whether lifecycle events are collected (someone subscribed).
    pub(crate) emit_events: bool,
    /// The run's time, from the runtime's clock (TM-1).
    pub(crate) now: Micros,
    /// When the stimulus this run delivers was sent, if it delivers one (RT-30).
    pub(crate) caused_at: Option<Micros>,
}

/// A registered definition with its user code, its data type erased.
pub(crate) trait ErasedWorkflow: Send + Sync {
    fn version(&self) -> &str;
    /// The definition's JSON form.
    fn json(&self) -> &str;
    /// Whether `data` decodes into the data type: on failure, the field path (when not
    /// the root) and the message.
    fn check_data(&self, data: &Value) -> Result<(), (Option<String>, String)>;
    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        options: RunSettings,
        middleware: &'a Middleware,
        checkpoint: Option<(&'a dyn Checkpoint, CommitStrategy)>,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>>;
    fn cancel(
        &self,
        state: WorkflowState,
        reason: Option<String>,
        middleware: &Middleware,
        now: Micros,
    ) -> Result<RunOutput, RunError>;
    /// Pauses the instance (ENG-50): `Suspended/Paused`, everything else kept.
    fn pause(&self, state: WorkflowState, middleware: &Middleware, now: Micros) -> RunOutput;
    /// `(node id, workflow name)` of every SubWorkflow node, for ACT-V10 at build.
    fn sub_workflows(&self) -> Vec<(String, String)>;
    /// The tasks taking flow-control slots (QU-10): `(node id, queue name)`.
    fn task_queues(&self) -> Vec<(String, String)>;
    /// The queue every run of an instance takes a slot of (QU-14).
    fn run_queue(&self) -> Option<&str>;
    /// The event trigger nodes (ACT-7): `(node path id, event name)`, in graph order.
    fn event_triggers(&self) -> Vec<(String, String)>;
    /// The time trigger nodes (ACT-7, TM-11 to TM-13), in graph order.
    fn time_triggers(&self) -> Vec<(String, crate::engine::graph::TimeTrigger)>;
    /// The activation strategy (RT-15).
    fn activation(&self) -> Activation;
    /// Where an instance waits and can be migrated, by the kind of the root (ENG-54, ENG-55).
    fn positions(&self) -> crate::engine::graph::Positions;
}

pub(crate) struct Registered<D> {
    pub(crate) version: String,
    /// The definition's JSON form, recorded in the store for tools.
    pub(crate) json: String,
    pub(crate) graph: Graph,
    pub(crate) registry: Registry<D>,
    pub(crate) activation: Activation,
    /// The queue every run takes a slot of (QU-14).
    pub(crate) run_queue: Option<String>,
}

impl<D> Registered<D>
where
    D: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// One run of the executor (ENG-9), without the definition's queue.
    async fn run_unqueued(
        &self,
        state: WorkflowState,
        target: RunTarget,
        options: RunSettings,
        middleware: &Middleware,
        checkpoint: Option<(&dyn Checkpoint, CommitStrategy)>,
    ) -> Result<RunOutput, RunError> {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.now = options.now;
        executor.caused_at = options.caused_at;
        executor.attempts = options.attempts;
        executor.emit_events = options.emit_events;
        executor.checkpoint = checkpoint;
        let end = executor.run(target, options.max_steps).await?;
        Ok(RunOutput {
            state: executor.state,
            events: executor.events,
            end,
            links: executor.links,
            declined: executor.declined,
        })
    }
}

impl<D> ErasedWorkflow for Registered<D>
where
    D: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn version(&self) -> &str {
        &self.version
    }

    fn json(&self) -> &str {
        &self.json
    }

    fn check_data(&self, data: &Value) -> Result<(), (Option<String>, String)> {
        serde_path_to_error::deserialize::<_, D>(data.clone())
            .map(drop)
            .map_err(|e| {
                let path = e.path().to_string();
                let path = (path != ".").then_some(path);
                (path, e.into_inner().to_string())
            })
    }

    fn run<'a>(
        &'a self,
        state: WorkflowState,
        target: RunTarget,
        options: RunSettings,
        middleware: &'a Middleware,
        checkpoint: Option<(&'a dyn Checkpoint, CommitStrategy)>,
    ) -> BoxFuture<'a, Result<RunOutput, RunError>> {
        Box::pin(async move {
            // QU-14: a run of a definition with a queue runs only with a slot of it, held
            // from here to the run's end (its suspension, completion or fault).
            let slot = match (&self.run_queue, &options.attempts.flow) {
                (Some(queue), Some(gate)) if !options.run_slot_held => {
                    let holder = crate::engine::slots::run_holder(&state.instance_id);
                    let cancel = options.attempts.instance_cancel.clone();
                    // A retry or a migration (QU-14): the run waits in line for its slot.
                    let taken = gate
                        .acquire(queue, &holder, None, 0, cancel.as_ref(), false)
                        .await
                        .map_err(|error| {
                            crate::engine::slots::run_slot_error(&state.instance_id, queue, error)
                        })?;
                    let crate::engine::slots::Taken::Granted(lease) = taken else {
                        return Err(RunError::StateCorrupt {
                            instance: state.instance_id.clone(),
                            reason: format!("the run's slot of `{queue}` was not granted"),
                        });
                    };
                    Some((std::sync::Arc::clone(gate), lease))
                }
                _ => None,
            };
            let run = self.run_unqueued(state, target, options, middleware, checkpoint);
            match slot {
                Some((gate, lease)) => gate.hold(lease, run).await,
                None => run.await,
            }
        })
    }

    fn cancel(
        &self,
        state: WorkflowState,
        reason: Option<String>,
        middleware: &Middleware,
        now: Micros,
    ) -> Result<RunOutput, RunError> {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.now = now;
        executor.cancel_instance(reason)?;
        Ok(RunOutput {
            state: executor.state,
            events: executor.events,
            end: RunEnd::Finished,
            links: executor.links,
            declined: Vec::new(),
        })
    }

    fn pause(&self, state: WorkflowState, middleware: &Middleware, now: Micros) -> RunOutput {
        let mut executor = Executor::new(&self.graph, &self.registry, state, middleware);
        executor.now = now;
        executor.pause_instance();
        RunOutput {
            state: executor.state,
            events: executor.events,
            end: RunEnd::Suspended(crate::engine::state::SubStatus::Paused),
            links: executor.links,
            declined: Vec::new(),
        }
    }

    fn sub_workflows(&self) -> Vec<(String, String)> {
        self.graph.sub_workflows()
    }

    fn task_queues(&self) -> Vec<(String, String)> {
        self.graph.task_queues()
    }

    fn run_queue(&self) -> Option<&str> {
        self.run_queue.as_deref()
    }

    fn event_triggers(&self) -> Vec<(String, String)> {
        self.graph.event_triggers()
    }

    fn time_triggers(&self) -> Vec<(String, crate::engine::graph::TimeTrigger)> {
        self.graph.time_triggers()
    }

    fn activation(&self) -> Activation {
        self.activation
    }

    fn positions(&self) -> crate::engine::graph::Positions {
        self.graph.positions()
    }
}
