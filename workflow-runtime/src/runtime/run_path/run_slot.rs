//! The slot a run of a definition with a queue takes before it runs (QU-14). When the queue
//! has no room within the gate's grace, a run that delivers nothing (a start, a recovery, the
//! resume of its own wait) does not wait in line inside the run: it commits the instance
//! `Suspended/WaitingForSlot` with a `wf.slot` bookmark of the run's holder, whose timer asks
//! again, and gives the lease back without running anything. A release naming the holder
//! resumes that bookmark at once (QU-12); the resumed run asks again and, granted, removes the
//! bookmark, puts the status back and runs what the instance had queued.

use serde_json::{Value, json};

use super::RunPath;
use crate::cancel::CancellationToken;
use crate::engine::executor::{RunEnd, RunError, RunTarget};
use crate::engine::names::Reserved;
use crate::engine::slots::{Gate, SlotWaitMark, Taken, run_holder, run_slot_error};
use crate::engine::state::{Bookmark, SubStatus, WorkflowState, WorkflowStatus};
use crate::runtime::registered::{ErasedWorkflow, RunOutput};
use crate::store::SlotLease;

/// What a run does after asking for its slot.
pub(super) enum RunSlot {
    /// Run `target` from `state`, under the slot when the definition has a queue.
    Go {
        state: WorkflowState,
        target: RunTarget,
        slot: Option<(Gate, SlotLease)>,
    },
    /// No slot within the grace: commit this output (the instance waiting for its slot) and
    /// end the run.
    Wait(RunOutput),
}

/// Whether `bookmark` is the wait of a whole run for its slot, not of a task attempt.
fn is_run_wait(bookmark: &Bookmark, holder: &str) -> bool {
    bookmark.name == Reserved::Slot.name()
        && bookmark.payload.get("holder").and_then(Value::as_str) == Some(holder)
}

impl RunPath {
    /// Takes the slot of the definition's queue for a run toward `target` (QU-14). A run
    /// that delivers nothing but the resume of its own wait may suspend (see the module
    /// docs); one delivering a stimulus or a timer of the instance waits in line in the run,
    /// so that what it delivers is not lost.
    pub(super) async fn take_run_slot(
        &self,
        workflow: &dyn ErasedWorkflow,
        mut state: WorkflowState,
        target: RunTarget,
        cancel: &CancellationToken,
    ) -> Result<RunSlot, RunError> {
        let (Some(queue), Some(gate)) = (workflow.run_queue(), self.flow.as_ref()) else {
            return Ok(RunSlot::Go {
                state,
                target,
                slot: None,
            });
        };
        // A resume of bookmarks all gone (a wait resumed by its timer and by a release, say)
        // delivers nothing: it takes no place in line.
        if let RunTarget::Bookmarks { ids, .. } = &target
            && !ids
                .iter()
                .any(|id| state.bookmarks.iter().any(|b| &b.id == id))
        {
            return Err(RunError::BookmarkNotFound {
                instance: state.instance_id.clone(),
            });
        }
        let holder = run_holder(&state.instance_id);
        let own = state.bookmarks.iter().position(|b| is_run_wait(b, &holder));
        let own_id = own
            .and_then(|i| state.bookmarks.get(i))
            .map(|b| b.id.clone());
        // The resume of the run's own wait is no delivery: what is left of the target runs.
        let target = match target {
            RunTarget::Bookmarks { ids, payload } if own_id.is_some() => {
                let rest: Vec<String> = ids
                    .into_iter()
                    .filter(|id| Some(id) != own_id.as_ref())
                    .collect();
                if rest.is_empty() {
                    RunTarget::None
                } else {
                    RunTarget::Bookmarks { ids: rest, payload }
                }
            }
            target => target,
        };
        let suspend = matches!(target, RunTarget::None);
        let taken = gate
            .acquire(queue, &holder, None, 0, Some(cancel), suspend)
            .await
            .map_err(|error| run_slot_error(&state.instance_id, queue, error))?;
        match taken {
            Taken::Granted(lease) => {
                // The wait is over: its bookmark (and timer) go with the run's first commit,
                // and the instance is again what it was when it began to wait.
                if let Some(index) = own {
                    let wait = state.bookmarks.remove(index);
                    restore_status(&mut state, &wait.payload);
                }
                Ok(RunSlot::Go {
                    state,
                    target,
                    slot: Some((std::sync::Arc::clone(gate), lease)),
                })
            }
            Taken::Suspend { wait, after } => {
                let now = self.clock.now();
                let (status, sub_status) = match own {
                    Some(index) => {
                        let old = state.bookmarks.remove(index);
                        recorded_status(&old.payload).unwrap_or((state.status, state.sub_status))
                    }
                    None => (state.status, state.sub_status),
                };
                // A paused instance resumed by an operator does not go back to paused.
                let sub_status = match sub_status {
                    Some(SubStatus::Paused | SubStatus::WaitingForSlot) => Some(SubStatus::Waiting),
                    sub => sub,
                };
                let after = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
                let mark = SlotWaitMark {
                    queue,
                    holder: &holder,
                    key: None,
                    priority: 0,
                };
                let (hash, mut payload) = mark
                    .bookmark(&state.instance_id, "run", &wait, now.saturating_add(after))
                    .map_err(|error| RunError::StateCorrupt {
                        instance: state.instance_id.clone(),
                        reason: error.to_string(),
                    })?;
                payload.insert("status".into(), json!(status.as_str()));
                payload.insert(
                    "sub_status".into(),
                    json!(sub_status.map(SubStatus::as_str)),
                );
                let payload = Value::Object(payload);
                let node_id = state
                    .root
                    .and_then(|root| state.context(root))
                    .map(|c| c.node_id.clone())
                    .unwrap_or_default();
                state.bookmarks.push(Bookmark {
                    id: crate::base::new_ulid(),
                    name: Reserved::Slot.name().to_owned(),
                    hash,
                    node_id,
                    context_id: state.root.unwrap_or_default(),
                    payload,
                    auto_burn: true,
                    callback: None,
                    created_at: now,
                });
                state.status = WorkflowStatus::Suspended;
                state.sub_status = Some(SubStatus::WaitingForSlot);
                Ok(RunSlot::Wait(RunOutput {
                    state,
                    events: Vec::new(),
                    end: RunEnd::Suspended(SubStatus::WaitingForSlot),
                    links: Vec::new(),
                    declined: Vec::new(),
                }))
            }
        }
    }
}

/// Puts back the status a run's wait recorded when it began (QU-14).
fn restore_status(state: &mut WorkflowState, payload: &Value) {
    if let Some(status) = recorded_status(payload) {
        (state.status, state.sub_status) = status;
    }
}

/// The status a run's wait recorded when it began.
fn recorded_status(payload: &Value) -> Option<(WorkflowStatus, Option<SubStatus>)> {
    let status = payload
        .get("status")
        .and_then(Value::as_str)
        .and_then(WorkflowStatus::parse)?;
    let sub_status = payload
        .get("sub_status")
        .and_then(Value::as_str)
        .and_then(SubStatus::parse);
    Some((status, sub_status))
}
