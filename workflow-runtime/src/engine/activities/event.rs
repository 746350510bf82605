//! Event (ACT-19): a bookmark named after the event and hashed over its key (RT-5), and the
//! deadline of a wait (an Event's or a SubWorkflow's `timeout`, TM-14).

use serde_json::{Value, json};

use super::scope::permanent;
use super::scope::{Scope, StepError, UserFailure, engine_fault};
use crate::engine::graph::{NodeIndex, NodeKind};
use crate::engine::names::{ON_DEADLINE, Reserved};
use crate::engine::state::{ActivityStatus, ContextId, FaultKind, FaultRecord};
use crate::identity::{stimulus_hash, value_at_path};

/// The outcome of a wait whose deadline passed (TM-14).
const TIMEOUT: &str = "timeout";

/// The Event activity and the deadlines of waits, for any [`Scope`].
pub(crate) trait EventActivity<'g>: Scope<'g> {
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
            Some(path) => match value_at_path(&self.state().data, path) {
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
        // RT-30: the wait's look-back travels with its bookmark, for the bookmark index;
        // `since_entered` with the instant its state machine's current state was entered.
        let payload = match look_back.and_then(|l| serde_json::to_value(l).ok()) {
            Some(value) if look_back == Some(workflow_model::LookBack::SinceEntered) => {
                json!({ "key": key_value, "look_back": value, "since": self.entered_at(id) })
            }
            Some(look_back) => json!({ "key": key_value, "look_back": look_back }),
            None => json!({ "key": key_value }),
        };
        self.create_bookmark(id, event, hash, payload, None)?;
        Ok(())
    }

    /// When the nearest state machine owning `id` entered its current state (RT-30); `None`
    /// in its initial state or outside a state machine.
    fn entered_at(&self, id: ContextId) -> Option<crate::base::Micros> {
        let state = self.state();
        let mut at = state.context(id)?.parent;
        while let Some(owner) = at {
            let context = state.context(owner)?;
            if context
                .properties
                .contains_key(crate::engine::names::CURRENT_STATE)
            {
                return context
                    .properties
                    .get(crate::engine::names::ENTERED_AT)
                    .and_then(Value::as_i64);
            }
            at = context.parent;
        }
        None
    }

    /// ENG-21 for a bookmark without callback: an event completes with its payload as output
    /// and, when it declares its ports, the outcome its payload chooses through the mapping
    /// registered under its payload type ([`crate::Registry::outcome`], ACT-19); an outcome
    /// it did not declare fails it for good (FC-4). Other kinds complete with no outcome
    /// (`done`, FC-2).
    fn bookmark_completed(
        &mut self,
        id: ContextId,
        node: NodeIndex,
        payload: Value,
    ) -> Result<(), StepError> {
        let graph = self.graph();
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
        let Some(mapping) = self.outcome_fn(payload_type) else {
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
        let graph = self.graph();
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
            let error = crate::engine::task::TaskError::payload_decode(target, message.clone());
            this.payload_rejection(&error)
                .unwrap_or_else(|| permanent(id, message))
        };
        match assign {
            workflow_model::PayloadAssign::Field(path) => {
                let mut json = self.state().data.clone();
                if !crate::identity::set_at_path(&mut json, path, payload.clone()) {
                    return Err(reject(
                        self,
                        path,
                        format!("event `{local}`: assign field `{path}` is not in the data"),
                    ));
                }
                match self.replace_data(json) {
                    Ok(()) => Ok(()),
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
                match self.call_assign(id, name, payload)? {
                    Ok(()) => Ok(()),
                    // The last good data stays (FLT-4).
                    Err(UserFailure::Failed(error)) => Err(reject(
                        self,
                        name,
                        format!("event `{local}`: {}", error.message()),
                    )),
                    Err(UserFailure::Panicked) => Err(StepError::Fault {
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

    // ---- deadlines (TM-14) --------------------------------------------------------------
    /// A `wf.deadline` bookmark beside the wait's own, in the same context, so both are
    /// written in one commit with the deadline's timer row (TM-3). Whichever is resumed first
    /// wins: the context's completion removes the other bookmark and its timer.
    fn arm_deadline(&mut self, id: ContextId, deadline_ms: Option<u64>) -> Result<(), StepError> {
        let Some(deadline_ms) = deadline_ms else {
            return Ok(());
        };
        if self
            .state()
            .context(id)
            .is_none_or(|c| c.status != ActivityStatus::Running)
        {
            // Completed at once (a child that finished synchronously): no deadline to keep.
            return Ok(());
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            Reserved::Deadline.name(),
            None,
            Some((self.state().instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        // From the wait's start: now, or for a node placed by a migration the instant it
        // started in the previous version (ENG-55).
        let since = self
            .state()
            .context(id)
            .and_then(|c| c.started_at)
            .unwrap_or_else(|| self.now());
        let due_at = since.saturating_add(crate::base::ms_to_micros(deadline_ms));
        self.create_bookmark(
            id,
            Reserved::Deadline.name(),
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
        self.cancel_child_instances(&|b| b.context_id == id);
        let now = self.now();
        self.complete(
            id,
            Some(json!({ "timeout": true, "fired_at": now })),
            vec![TIMEOUT.to_owned()],
        )
    }
}

impl<'g, S: Scope<'g> + ?Sized> EventActivity<'g> for S {}
