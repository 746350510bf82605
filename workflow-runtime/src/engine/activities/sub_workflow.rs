//! SubWorkflow (ACT-24): a child instance started once the run commits; in `wait` mode a
//! `wf.sub_workflow` bookmark that the child's final commit resumes.

use serde_json::{Value, json};

use super::scope::{ChildInfo, Link, Scope, StepError, UserFailure, done, engine_fault, permanent};
use crate::engine::graph::NodeKind;
use crate::engine::names::{ON_CHILD_DONE, Reserved};
use crate::engine::state::{ContextId, ParentLink};
use crate::engine::state::{FaultKind, FaultRecord};

/// The default nesting limit of sub-workflows (ACT-24).
const MAX_DEPTH: u32 = 32;

/// The SubWorkflow activity, for any [`Scope`].
pub(crate) trait SubWorkflowActivity<'g>: Scope<'g> {
    // ---- SubWorkflow (ACT-24), in memory ------------------------------------------------
    /// Starts a child instance (queued as a [`Link`] and carried out once this run commits)
    /// and, in `wait` mode, waits on a `wf.sub_workflow` bookmark that the child's final
    /// commit resumes; `detach` completes at once with the child id.
    fn sub_workflow_execute(
        &mut self,
        id: ContextId,
        workflow: &str,
        input: Option<&str>,
        detach: bool,
    ) -> Result<(), StepError> {
        let depth = self.state().parent.as_ref().map_or(0, |p| p.depth) + 1;
        if depth > MAX_DEPTH {
            return Err(permanent(
                id,
                format!("sub-workflow `{workflow}` nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        let child_input = match input {
            Some(name) => self.value_fn(id, name)?,
            None => Value::Null,
        };
        let child = crate::base::new_ulid();
        let parent_id = self.state().instance_id.clone();
        let parent = move |bookmark_id| ParentLink {
            instance_id: parent_id.clone(),
            bookmark_id,
            depth,
        };
        if detach {
            let link = Link::Start {
                workflow: workflow.to_owned(),
                instance_id: child.clone(),
                input: child_input,
                parent: parent(None),
            };
            self.link(link);
            return self.complete(id, Some(json!(child)), done());
        }
        let scope = id.to_string();
        let hash = crate::identity::stimulus_hash(
            Reserved::SubWorkflow.name(),
            None,
            Some((self.state().instance_id.as_str(), scope.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        let bookmark = self.create_bookmark(
            id,
            Reserved::SubWorkflow.name(),
            hash,
            json!({ "child_instance_id": child }),
            Some(ON_CHILD_DONE),
        )?;
        let link = Link::Start {
            workflow: workflow.to_owned(),
            instance_id: child,
            input: child_input,
            parent: parent(Some(bookmark)),
        };
        self.link(link);
        Ok(())
    }

    /// The child's final commit resumed the bookmark with `{status, output}`: `Finished`
    /// assigns the output and completes with `done`; `Cancelled` takes the `cancelled` port
    /// when it is connected, else fails for good (ACT-24).
    fn sub_workflow_done(
        &mut self,
        id: ContextId,
        workflow: &str,
        assign: Option<&str>,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let payload = child.payload.clone().unwrap_or(Value::Null);
        let child_id = payload
            .get("child_instance_id")
            .unwrap_or(&Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let output = payload.get("output").cloned().unwrap_or(Value::Null);
        match payload.get("status").and_then(Value::as_str) {
            Some("Finished") => {
                if let Some(name) = assign {
                    self.assign_fn(id, name, &output)?;
                }
                self.complete(id, Some(output), done())
            }
            Some("Cancelled") if self.cancelled_port_connected(id) => {
                self.complete(id, None, vec!["cancelled".to_owned()])
            }
            Some("Cancelled") => Err(permanent(
                id,
                format!("child workflow `{child_id}` was cancelled"),
            )),
            _ => Err(permanent(
                id,
                format!(
                    "child workflow `{workflow}` could not run: {}",
                    payload
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown error")
                ),
            )),
        }
    }

    /// Whether the flowchart owning context `id` connects its `cancelled` port.
    fn cancelled_port_connected(&self, id: ContextId) -> bool {
        let Some(c) = self.state().context(id) else {
            return false;
        };
        let graph = self.graph();
        let Some(owner) = c
            .parent
            .and_then(|p| self.state().context(p))
            .and_then(|p| graph.index_of(&p.node_id))
            .and_then(|n| graph.node(n))
        else {
            return false;
        };
        let NodeKind::Flowchart(fc) = &owner.kind else {
            return false;
        };
        let Some(local) = fc.local_of(&c.node_id) else {
            return false;
        };
        fc.connections
            .iter()
            .any(|conn| conn.port == "cancelled" && conn.endpoints.is_some_and(|e| e.0 == local))
    }

    /// Runs the registered assign fn `name` on the data (ACT-24's `assign`): an error or a
    /// panic faults `owner`, and the last good data stays (FLT-4).
    fn assign_fn(&mut self, owner: ContextId, name: &str, value: &Value) -> Result<(), StepError> {
        let (kind, message) = match self.call_assign(owner, name, value)? {
            Ok(()) => return Ok(()),
            Err(UserFailure::Failed(error)) => (
                FaultKind::Error,
                format!("assign fn `{name}` failed: {error}"),
            ),
            Err(UserFailure::Panicked) => {
                (FaultKind::Panicked, format!("assign fn `{name}` panicked"))
            }
        };
        Err(StepError::Fault {
            context: owner,
            record: FaultRecord {
                kind,
                message,
                attempt: 1,
            },
        })
    }
}

impl<'g, S: Scope<'g> + ?Sized> SubWorkflowActivity<'g> for S {}
