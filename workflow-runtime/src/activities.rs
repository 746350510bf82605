//! The built-in activities: Sequence (ACT-12), Task (ACT-11), Event (ACT-19), Delay (ACT-20,
//! a durable timer, TM-3) and the StateMachine (SM-1 to SM-8); and the dispatch of every
//! kind's `execute` and callbacks, including the Flowchart (`flowchart.rs`) and the
//! structured activities (`structured.rs`).
//!
//! Each kind has an `execute` entry point and a table of callbacks by name (ENG-12); the
//! executor resolves a persisted callback name here and fails the run with `UnknownCallback`
//! for a name the kind does not know.

use serde_json::{Value, json};

use crate::executor::{ChildInfo, Executor, RunError, StepError, engine_fault};
use crate::flowchart::ON_NODE;
use crate::graph::{MachineNode, NodeIndex, NodeKind, TransitionNode};
use crate::instance::{ActivityStatus, ContextId, FaultKind, FaultRecord, JournalKind};
use crate::routing::{stimulus_hash, value_at_path};
use crate::structured::{ON_BODY, ON_BRANCH, ON_CHILD_DONE};

/// The property holding a machine's current state (SM-1).
pub const CURRENT_STATE: &str = "current_state";
/// The property holding a sequence's current index (ACT-12).
const INDEX: &str = "index";

/// Tag of a state's entry (SM-2).
pub const TAG_ENTERING: &str = "entering";
/// Tag of the automatic-cycle continuation (SM-6).
pub const TAG_CONTINUING: &str = "continuing";

const ON_STEP: &str = "step_completed";
const ON_ENTRY: &str = "on_entry";
const ON_TRIGGER: &str = "on_trigger";
const ON_EXIT: &str = "on_exit";
const ON_ACTION: &str = "on_action";
const ON_CONTINUE: &str = "on_continue";
/// The callback of a wait's deadline bookmark (TM-14).
const ON_DEADLINE: &str = "deadline_reached";
/// The deadline bookmark's reserved name (TM-3, TM-14).
pub(crate) const DEADLINE: &str = "wf.deadline";
/// The outcome of a wait whose deadline passed (TM-14).
const TIMEOUT: &str = "timeout";

/// A permanent error failing `context` for good (FLT-5).
fn permanent(context: ContextId, message: String) -> StepError {
    StepError::Fault {
        context,
        record: FaultRecord {
            kind: FaultKind::Error,
            message,
            attempt: 1,
        },
    }
}

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// The `execute` entry point of every kind.
    pub(crate) async fn execute(
        &mut self,
        id: ContextId,
        node: NodeIndex,
    ) -> Result<(), StepError> {
        let graph = self.graph;
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
            .state
            .trigger
            .as_ref()
            .is_some_and(|t| t.node_id == node.id)
            && let Some(trigger) = self.state.trigger.take()
        {
            return self.complete(id, Some(trigger.payload), Vec::new());
        }
        match &node.kind {
            NodeKind::Task {
                function,
                retry,
                attempt_timeout_ms,
                ..
            } => {
                self.run_task(id, function, retry.as_ref(), *attempt_timeout_ms)
                    .await
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
                    .state
                    .trigger
                    .as_ref()
                    .is_some_and(|t| t.node_id == node.id)
                    && let Some(trigger) = self.state.trigger.take()
                {
                    let index = graph.index_of(&node.id).unwrap_or_default();
                    return self.bookmark_completed(id, index, trigger.payload);
                }
                self.execute_event(id, event, key.as_deref(), *look_back)?;
                self.arm_deadline(id, *deadline_ms)
            }
            NodeKind::Delay { duration_ms, until } => {
                self.execute_delay(id, *duration_ms, until.as_deref())
            }
            NodeKind::Timer { interval_ms, .. } => self.timer_execute(id, *interval_ms),
            NodeKind::StartAt { at_ms, at_fn } => {
                self.execute_start_at(id, *at_ms, at_fn.as_deref())
            }
            NodeKind::Cron {
                expression,
                schedule,
                offset_seconds,
            } => self.execute_cron(id, expression, schedule, *offset_seconds),
            NodeKind::Sequence { steps } => {
                let input = self.state.context(id).and_then(|c| c.input.clone());
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
        }
    }

    /// Runs the owner's callback `callback` for a child's completion or a continuation.
    pub(crate) fn on_child(
        &mut self,
        owner: ContextId,
        callback: &str,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        let graph = self.graph;
        let node_id = self
            .state
            .context(owner)
            .map(|c| c.node_id.clone())
            .unwrap_or_default();
        let node = graph
            .index_of(&node_id)
            .and_then(|i| graph.node(i))
            .ok_or_else(|| RunError::NodeNotFound {
                node: node_id.clone(),
            })?;
        let unknown = |kind: &'static str| {
            StepError::Abort(RunError::UnknownCallback {
                node: node_id.clone(),
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
                },
                crate::structured::ON_TICK,
            ) => self.timer_ticked(owner, *interval_ms, *body, until.as_deref(), *max_ticks),
            (NodeKind::Saga { .. }, crate::saga::ON_SAGA_BODY) => self.saga_body_completed(owner),
            (NodeKind::Task { .. }, crate::faults::ON_RETRY) => {
                // FLT-3: the retry timer starts the next attempt.
                self.state.queue.push_back(crate::instance::WorkItem {
                    context: owner,
                    entry: crate::instance::EntryPoint::Execute,
                });
                Ok(())
            }
            (NodeKind::Sequence { steps }, ON_STEP) => {
                self.sequence_step_completed(owner, steps, &child)
            }
            (NodeKind::StateMachine(m), ON_ENTRY) => self.machine_on_entry(owner, m, &child),
            (NodeKind::StateMachine(m), ON_TRIGGER) => self.machine_on_trigger(owner, m, child),
            (NodeKind::StateMachine(m), ON_EXIT) => self.machine_on_exit(owner, m, child),
            (NodeKind::StateMachine(m), ON_ACTION) => self.machine_on_action(owner, m, child),
            (NodeKind::StateMachine(m), ON_CONTINUE) => self.machine_on_continue(owner, m, child),
            (NodeKind::Flowchart(fc), ON_NODE) => self.flowchart_settled(owner, fc, &child),
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

    // ---- Event (ACT-19) and Delay (ACT-20) ----------------------------------------------

    /// Creates a bookmark named after the event, hashed over its name and the key read from
    /// the data (ACT-3, RT-5); resuming it completes the event with the payload (ENG-21).
    fn execute_event(
        &mut self,
        id: ContextId,
        event: &str,
        key: Option<&str>,
        look_back: Option<workflow_model::LookBack>,
    ) -> Result<(), StepError> {
        let key_value = match key {
            None => None,
            Some(path) => match value_at_path(&self.state.data, path) {
                Some(value) => Some(value.clone()),
                None => {
                    return Err(engine_fault(
                        id,
                        format!("event `{event}`: key path `{path}` is not in the data"),
                    ));
                }
            },
        };
        let hash = stimulus_hash(event, key_value.as_ref(), None)
            .map_err(|e| engine_fault(id, format!("event `{event}`: {e}")))?;
        // RT-30: the wait's look-back travels with its bookmark, for the bookmark index.
        let payload = match look_back.and_then(|l| serde_json::to_value(l).ok()) {
            Some(look_back) => json!({ "key": key_value, "look_back": look_back }),
            None => json!({ "key": key_value }),
        };
        self.create_bookmark(id, event, hash, payload, None)?;
        Ok(())
    }

    /// ENG-21 for a bookmark without callback: an event completes with its payload as output
    /// and, when it declares its ports, the outcome its payload chooses through the mapping
    /// registered under its payload type ([`crate::Registry::outcome`], ACT-19); an outcome
    /// it did not declare fails it for good (FC-4). Other kinds complete with no outcome
    /// (`done`, FC-2).
    pub(crate) fn bookmark_completed(
        &mut self,
        id: ContextId,
        node: NodeIndex,
        payload: Value,
    ) -> Result<(), StepError> {
        let graph = self.graph;
        let Some(NodeKind::Event {
            event,
            choice: Some(choice),
            ..
        }) = graph.node(node).map(|n| &n.kind)
        else {
            self.event_assign(id, node, &payload)?;
            return self.complete(id, Some(payload), Vec::new());
        };
        let local = graph
            .node(node)
            .map(|n| n.id.rsplit(':').next().unwrap_or(&n.id).to_owned())
            .unwrap_or_default();
        let payload_type = choice.payload.as_deref().unwrap_or_default();
        let Some(mapping) = self.registry.outcomes.get(payload_type) else {
            // Checked at build (ACT-V8): only a registry changed behind the runtime's back.
            return Err(permanent(
                id,
                format!(
                    "event `{local}` declares outcomes but its payload type `{payload_type}` does not choose one"
                ),
            ));
        };
        let outcome =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mapping(&payload))) {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(error)) => {
                    if let Some(rejection) = self.payload_rejection(&error) {
                        return Err(rejection);
                    }
                    return Err(permanent(
                        id,
                        format!("event `{local}` ({event}): {}", error.message()),
                    ));
                }
                Err(_) => {
                    return Err(StepError::Fault {
                        context: id,
                        record: FaultRecord {
                            kind: FaultKind::Panicked,
                            message: format!(
                                "event `{local}`: the outcome mapping of `{payload_type}` panicked"
                            ),
                            attempt: 1,
                        },
                    });
                }
            };
        if !choice.ports.contains(&outcome) {
            return Err(permanent(
                id,
                format!("node `{local}` completed with undeclared outcome `{outcome}`"),
            ));
        }
        self.event_assign(id, node, &payload)?;
        self.complete(id, Some(payload), vec![outcome])
    }

    /// ACT-19: folds an event's payload into the data, by its `assign` (a field path of the
    /// data's JSON form, or a registered assign fn), before the event completes. A payload
    /// that does not fit rejects the stimulus for this instance while it resumes the event
    /// (RT-22): nothing changes; otherwise (a trigger's payload) the event fails for good.
    fn event_assign(
        &mut self,
        id: ContextId,
        node: NodeIndex,
        payload: &Value,
    ) -> Result<(), StepError> {
        let graph = self.graph;
        let Some(graph_node) = graph.node(node) else {
            return Ok(());
        };
        let NodeKind::Event {
            assign: Some(assign),
            ..
        } = &graph_node.kind
        else {
            return Ok(());
        };
        let local = graph_node
            .id
            .rsplit(':')
            .next()
            .unwrap_or(&graph_node.id)
            .to_owned();
        let reject = |this: &Self, target: &str, message: String| {
            let error = crate::task::TaskError::payload_decode(target, message.clone());
            this.payload_rejection(&error)
                .unwrap_or_else(|| permanent(id, message))
        };
        match assign {
            workflow_model::PayloadAssign::Field(path) => {
                let mut json = self.state.data.clone();
                if !crate::routing::set_at_path(&mut json, path, payload.clone()) {
                    return Err(reject(
                        self,
                        path,
                        format!("event `{local}`: assign field `{path}` is not in the data"),
                    ));
                }
                match serde_json::from_value::<D>(json.clone()) {
                    Ok(data) => {
                        self.state.data = json;
                        self.data = Some(data);
                        Ok(())
                    }
                    Err(e) => Err(reject(
                        self,
                        path,
                        format!(
                            "event `{local}`: the payload does not fit the data field `{path}`: {e}"
                        ),
                    )),
                }
            }
            workflow_model::PayloadAssign::Function(name) => {
                let registry = self.registry;
                let Some(f) = registry.assigns.get(name) else {
                    return Err(engine_fault(
                        id,
                        format!("no assign fn is registered under `{name}`"),
                    ));
                };
                let mut data = match self.data.take() {
                    Some(d) => d,
                    None => serde_json::from_value::<D>(self.state.data.clone()).map_err(|e| {
                        StepError::Abort(RunError::DataDecode {
                            instance: self.state.instance_id.clone(),
                            message: e.to_string(),
                        })
                    })?,
                };
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    f(&mut data, payload)
                }));
                match result {
                    Ok(Ok(())) => {
                        self.state.data = serde_json::to_value(&data).map_err(|e| {
                            engine_fault(id, format!("data does not serialize: {e}"))
                        })?;
                        self.data = Some(data);
                        Ok(())
                    }
                    // The last good data stays (FLT-4).
                    Ok(Err(error)) => Err(reject(
                        self,
                        name,
                        format!("event `{local}`: {}", error.message()),
                    )),
                    Err(_) => Err(StepError::Fault {
                        context: id,
                        record: FaultRecord {
                            kind: FaultKind::Panicked,
                            message: format!("event `{local}`: assign fn `{name}` panicked"),
                            attempt: 1,
                        },
                    }),
                }
            }
        }
    }

    /// A `wf.delay` bookmark scoped to this context (RT-7) with its due time as payload; the
    /// commit writes its timer row (TM-3) and the timer driver resumes it when due (TM-9):
    /// `due_at` is computed once, here. With `until`, the value fn gives the instant (ms since
    /// the Unix epoch); one not in the future completes at once (ACT-20).
    fn execute_delay(
        &mut self,
        id: ContextId,
        duration_ms: Option<u64>,
        until: Option<&str>,
    ) -> Result<(), StepError> {
        let due_at = match (duration_ms, until) {
            (Some(duration_ms), _) => self.now.saturating_add(duration_ms),
            (None, Some(until)) => {
                let value = self.value_fn(id, until)?;
                let Some(at) = value.as_u64() else {
                    return Err(permanent(
                        id,
                        format!(
                            "delay until fn `{until}` returned `{value}`, not an instant in ms since the epoch"
                        ),
                    ));
                };
                at
            }
            (None, None) => {
                return Err(engine_fault(id, "delay without a duration or an instant"));
            }
        };
        if due_at <= self.now {
            let now = self.now;
            return self.complete(
                id,
                Some(json!({ "due_at": due_at, "fired_at": now })),
                Vec::new(),
            );
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            "wf.delay",
            None,
            Some((self.state.instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(id, "wf.delay", hash, json!({ "due_at": due_at }), None)?;
        Ok(())
    }

    /// ACT-22 (TM-3): a `wf.start_at` bookmark with payload `{due_at}` and its timer; the
    /// instant is a constant or a value fn's result (ms since the epoch). One not in the
    /// future completes at once, with no bookmark.
    fn execute_start_at(
        &mut self,
        id: ContextId,
        at_ms: Option<u64>,
        at_fn: Option<&str>,
    ) -> Result<(), StepError> {
        let due_at = match (at_ms, at_fn) {
            (Some(at), _) => at,
            (None, Some(at_fn)) => {
                let value = self.value_fn(id, at_fn)?;
                let instant = match &value {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => crate::graph::parse_rfc3339_ms(s),
                    _ => None,
                };
                let Some(at) = instant else {
                    return Err(permanent(
                        id,
                        format!(
                            "start_at fn `{at_fn}` returned `{value}`, not an instant (ms since the epoch or RFC 3339)"
                        ),
                    ));
                };
                at
            }
            (None, None) => {
                return Err(engine_fault(id, "start_at without an instant"));
            }
        };
        self.timer_wait(id, "wf.start_at", due_at, json!({ "due_at": due_at }))
    }

    /// ACT-23 not as trigger (TM-12): a `wf.cron` bookmark with payload `{due_at, expression}`
    /// due at the first occurrence strictly after now; when it fires, the node completes.
    fn execute_cron(
        &mut self,
        id: ContextId,
        expression: &str,
        schedule: &workflow_model::cron::Schedule,
        offset_seconds: i32,
    ) -> Result<(), StepError> {
        let now_seconds = self.now / 1000;
        let Some(next) = schedule.next_after_with_offset(now_seconds, offset_seconds) else {
            return Err(permanent(
                id,
                format!("cron `{expression}` has no occurrence within 5 years"),
            ));
        };
        let due_at = next.saturating_mul(1000);
        self.timer_wait(
            id,
            "wf.cron",
            due_at,
            json!({ "due_at": due_at, "expression": expression }),
        )
    }

    /// A timer bookmark scoped to this context (RT-7, TM-3), or completion at once when
    /// `due_at` is not in the future.
    pub(crate) fn timer_wait(
        &mut self,
        id: ContextId,
        name: &str,
        due_at: u64,
        payload: Value,
    ) -> Result<(), StepError> {
        if due_at <= self.now {
            let now = self.now;
            return self.complete(
                id,
                Some(json!({ "due_at": due_at, "fired_at": now })),
                Vec::new(),
            );
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            name,
            None,
            Some((self.state.instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(id, name, hash, payload, None)?;
        Ok(())
    }

    // ---- deadlines (TM-14) --------------------------------------------------------------

    /// A `wf.deadline` bookmark beside the wait's own, in the same context, so both are
    /// written in one commit with the deadline's timer row (TM-3). Whichever is resumed first
    /// wins: the context's completion removes the other bookmark and its timer.
    fn arm_deadline(&mut self, id: ContextId, deadline_ms: Option<u64>) -> Result<(), StepError> {
        let Some(deadline_ms) = deadline_ms else {
            return Ok(());
        };
        if self
            .state
            .context(id)
            .is_none_or(|c| c.status != ActivityStatus::Running)
        {
            // Completed at once (a child that finished synchronously): no deadline to keep.
            return Ok(());
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            DEADLINE,
            None,
            Some((self.state.instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        let due_at = self.now.saturating_add(deadline_ms);
        self.create_bookmark(
            id,
            DEADLINE,
            hash,
            json!({ "due_at": due_at }),
            Some(ON_DEADLINE),
        )?;
        Ok(())
    }

    /// TM-14: the deadline's timer won. The wait completes with outcome `timeout` and a timeout
    /// marker as output (TM-15); its own bookmark goes with the completion, and a SubWorkflow
    /// cancels its child.
    fn deadline_reached(&mut self, id: ContextId) -> Result<(), StepError> {
        self.cancel_child_instances(|b| b.context_id == id);
        let now = self.now;
        self.complete(
            id,
            Some(json!({ "timeout": true, "fired_at": now })),
            vec![TIMEOUT.to_owned()],
        )
    }

    // ---- Sequence (ACT-12) --------------------------------------------------------------

    /// Schedules the step at `index` with `input` as its input (ACT-5): the sequence's own
    /// input for the first step, the previous step's output for the next ones (an event's
    /// payload, read by the next task with `TaskContext::input`, as in a flowchart).
    fn sequence_next(
        &mut self,
        id: ContextId,
        steps: &[NodeIndex],
        index: usize,
        input: Option<Value>,
    ) -> Result<(), StepError> {
        let Some(&step) = steps.get(index) else {
            return self.complete(id, None, Vec::new());
        };
        if let Some(c) = self.state.context_mut(id) {
            c.properties.insert(INDEX.to_owned(), json!(index));
        }
        let child = self.schedule_child(id, step, Some(index.to_string()), Some(ON_STEP), None)?;
        if let Some(c) = self.state.context_mut(child) {
            c.input = input;
        }
        Ok(())
    }

    fn sequence_step_completed(
        &mut self,
        id: ContextId,
        steps: &[NodeIndex],
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let index = self
            .state
            .context(id)
            .and_then(|c| c.properties.get(INDEX))
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(0);
        let expected = steps.get(index).map(|&s| self.node_id(s));
        if expected != Some(child.node_id.as_str()) {
            self.record(JournalKind::Declined, Some(id), json!({"stale": child.id}));
            return Ok(());
        }
        self.sequence_next(id, steps, index + 1, child.result.clone())
    }

    // ---- StateMachine (SM-1 to SM-8) --------------------------------------------------

    fn current_state(&self, id: ContextId) -> Option<String> {
        self.state
            .context(id)
            .and_then(|c| c.properties.get(CURRENT_STATE))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn set_current_state(&mut self, id: ContextId, state: &str) {
        if let Some(c) = self.state.context_mut(id) {
            c.properties.insert(CURRENT_STATE.to_owned(), json!(state));
        }
    }

    /// SM-1: `current_state := current_state ?? initial`, then enter it (no yield).
    fn machine_execute(&mut self, id: ContextId, m: &MachineNode) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_else(|| m.initial.clone());
        self.set_current_state(id, &current);
        if m.state(&current).is_none() {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("state `{current}` does not exist: the machine completes")}),
            );
            return self.complete(id, None, Vec::new());
        }
        self.record(
            JournalKind::StateChanged,
            Some(id),
            json!({"from": null, "to": current}),
        );
        self.machine_enter(id, m, &current, None)
    }

    /// SM-2: schedule the entry (tag `entering`), or run the outbound step at once.
    fn machine_enter(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        state: &str,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        let Some(node) = m.state(state) else {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("state `{state}` does not exist: the machine completes")}),
            );
            return self.complete(id, None, Vec::new());
        };
        match node.entry {
            Some(entry) => {
                self.schedule_child(
                    id,
                    entry,
                    Some(TAG_ENTERING.to_owned()),
                    Some(ON_ENTRY),
                    payload,
                )?;
                Ok(())
            }
            None => self.machine_outbound(id, m, state),
        }
    }

    fn machine_on_entry(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_default();
        let expected = m
            .state(&current)
            .and_then(|s| s.entry)
            .map(|e| self.node_id(e));
        if child.status != ActivityStatus::Completed || expected != Some(child.node_id.as_str()) {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        }
        self.machine_outbound(id, m, &current)
    }

    /// SM-3: terminal -> complete; first true automatic transition -> take it; else arm every
    /// trigger (tag = transition key); none -> stay Running with nothing pending.
    fn machine_outbound(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        state: &str,
    ) -> Result<(), StepError> {
        let valid: Vec<&TransitionNode> = m
            .transitions
            .iter()
            .filter(|t| t.from == state && m.state(&t.to).is_some())
            .collect();
        if valid.is_empty() {
            return self.complete(id, Some(json!(state)), Vec::new());
        }
        for t in valid.iter().filter(|t| t.trigger.is_none()) {
            if self.condition(id, t.condition.as_deref(), None)? {
                return self.machine_take(id, m, t, None);
            }
        }
        let mut armed = 0;
        for t in &valid {
            if let Some(trigger) = t.trigger {
                self.schedule_child(id, trigger, Some(t.key.clone()), Some(ON_TRIGGER), None)?;
                armed += 1;
            }
        }
        if armed == 0 {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("no transition from `{state}` can be taken (SM-3.4)")}),
            );
        }
        Ok(())
    }

    /// Resolves a transition from a tag: first among the current state's outbound
    /// transitions, else among all (SM-4).
    fn resolve<'m>(
        m: &'m MachineNode,
        current: &str,
        tag: Option<&str>,
    ) -> Option<&'m TransitionNode> {
        let tag = tag?;
        m.transitions
            .iter()
            .find(|t| t.from == current && t.key == tag)
            .or_else(|| m.transitions.iter().find(|t| t.key == tag))
    }

    #[cfg(test)]
    pub(crate) fn resolve_for_tests<'m>(
        m: &'m MachineNode,
        current: &str,
        tag: Option<&str>,
    ) -> Option<&'m TransitionNode> {
        Self::resolve(m, current, tag)
    }

    /// SM-4: a trigger completed.
    fn machine_on_trigger(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_default();
        let transition = Self::resolve(m, &current, child.tag.as_deref());
        let Some(t) = transition.filter(|t| {
            child.status == ActivityStatus::Completed
                && t.from == current
                && m.state(&t.to).is_some()
        }) else {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        };
        let payload = child.result;
        if self.condition(id, t.condition.as_deref(), payload.as_ref())? {
            return self.machine_take(id, m, t, payload);
        }
        // False: stay, leave competitors alone, re-arm the same trigger (SM-4).
        self.record(
            JournalKind::Declined,
            Some(id),
            json!({"transition": t.key, "reason": "condition false; trigger re-armed"}),
        );
        if let Some(trigger) = t.trigger {
            self.schedule_child(id, trigger, Some(t.key.clone()), Some(ON_TRIGGER), None)?;
        }
        Ok(())
    }

    /// SM-5: cancel competitors, exit, action, set the state, enter the target.
    fn machine_take(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        let competitors: Vec<ContextId> = self
            .state
            .callbacks
            .iter()
            .filter(|e| e.owner == id && e.callback == ON_TRIGGER)
            .map(|e| e.child)
            .collect();
        for child in competitors {
            self.cancel_silently(child)?;
        }
        match m.state(&t.from).and_then(|s| s.exit) {
            Some(exit) => {
                self.schedule_child(id, exit, Some(t.key.clone()), Some(ON_EXIT), payload)?;
                Ok(())
            }
            None => self.machine_after_exit(id, m, t, payload),
        }
    }

    fn machine_after_exit(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        match t.action {
            Some(action) => {
                self.schedule_child(id, action, Some(t.key.clone()), Some(ON_ACTION), payload)?;
                Ok(())
            }
            None => self.machine_arrive(id, m, t, payload),
        }
    }

    /// The transition an exit or action completion belongs to, unless stale (SM-5.3).
    fn live_transition<'m>(
        &mut self,
        id: ContextId,
        m: &'m MachineNode,
        child: &ChildInfo,
    ) -> Option<&'m TransitionNode> {
        let current = self.current_state(id).unwrap_or_default();
        let found = Self::resolve(m, &current, child.tag.as_deref())
            .filter(|t| child.status == ActivityStatus::Completed && t.from == current);
        if found.is_none() {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"stale": child.id, "tag": child.tag}),
            );
        }
        found
    }

    fn machine_on_exit(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        match self.live_transition(id, m, &child) {
            Some(t) => self.machine_after_exit(id, m, t, child.payload),
            None => Ok(()),
        }
    }

    fn machine_on_action(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        match self.live_transition(id, m, &child) {
            Some(t) => self.machine_arrive(id, m, t, child.payload),
            None => Ok(()),
        }
    }

    /// SM-5.4 and SM-5.5: the only moment the state changes; then enter the target, through
    /// a continuation work item when it can reach itself automatically (SM-6).
    fn machine_arrive(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        self.set_current_state(id, &t.to);
        self.record(
            JournalKind::StateChanged,
            Some(id),
            json!({"from": t.from, "to": t.to, "transition": t.key}),
        );
        if m.state(&t.to)
            .is_some_and(|s| s.reaches_itself_automatically)
        {
            self.schedule_continuation(id, ON_CONTINUE, TAG_CONTINUING, payload);
            return Ok(());
        }
        self.machine_enter(id, m, &t.to, payload)
    }

    fn machine_on_continue(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        if child.id != id || child.tag.as_deref() != Some(TAG_CONTINUING) {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        }
        let current = self.current_state(id).unwrap_or_default();
        self.machine_enter(id, m, &current, child.payload)
    }
}
