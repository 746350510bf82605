//! Cancelling an instance (ENG-50, FLT-15, FLT-16): applied at once under its lease when this
//! runtime runs it, else recorded durably as a control request for the runtime that owns it.
//! The run path applies a cancel requested during a run once the run stops.

use super::RunPath;
use super::commit::RunCommits;
use crate::engine::executor::RunError;
use crate::engine::state::WorkflowState;
use crate::runtime::document::run_store_error;
use crate::runtime::errors::CancelError;
use crate::runtime::lease::LeaseGuard;
use crate::runtime::outcomes::Control;
use crate::runtime::registered::ErasedWorkflow;
use crate::status::Started;
use crate::store::{ControlKind, ControlRequest, StoreError};

impl RunPath {
    /// Cancels an instance (ENG-50): see `Runtime::cancel`.
    pub(crate) async fn cancel(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<Control, CancelError> {
        let record = match self.store.load_instance_text(instance_id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => {
                return Err(CancelError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                });
            }
            Err(error) => return Err(CancelError::Run(run_store_error(instance_id, error))),
        };
        if record.status.is_final() {
            return Err(CancelError::AlreadyTerminal {
                status: record.status,
            });
        }
        if !self.definitions.runs_record(&record) {
            // FLT-15: the runtime that runs it applies it.
            return Ok(self
                .request_control(instance_id, ControlKind::Cancel, reason)
                .await?);
        }
        // FLT-15, FLT-16: a task of this instance running in this process gets its token
        // fired; its run is abandoned and this cancel goes next.
        self.active.with(instance_id, |run| run.token.cancel());
        let _turn = self.turn(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => {
                return Err(CancelError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                });
            }
            Err(StoreError::LeaseHeld { .. }) => {
                // FLT-15: running in another process, which honours the request.
                return Ok(self
                    .request_control(instance_id, ControlKind::Cancel, reason)
                    .await?);
            }
            Err(error) => return Err(CancelError::Run(run_store_error(instance_id, error))),
        };
        match self.cancel_held(&guard, reason).await {
            Ok(started) => {
                guard.released_by_commit();
                Ok(Control::Applied(started))
            }
            Err(error) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    /// Cancels the instance under `guard`, whose lease the cancel's commit releases.
    pub(crate) async fn cancel_held(
        &self,
        guard: &LeaseGuard<'_>,
        reason: Option<String>,
    ) -> Result<Started, CancelError> {
        let (state, commits) = self.load(guard).await?;
        if state.status.is_final() {
            return Err(CancelError::AlreadyTerminal {
                status: state.status,
            });
        }
        let workflow = self.definitions.workflow_for(&state)?;
        Ok(self
            .cancel_loaded(&*workflow, state, &commits, reason)
            .await?)
    }

    /// Cancels the loaded instance and commits it (final: the commit clears any control
    /// request).
    pub(crate) async fn cancel_loaded(
        &self,
        workflow: &dyn ErasedWorkflow,
        state: WorkflowState,
        commits: &RunCommits<'_>,
        reason: Option<String>,
    ) -> Result<Started, RunError> {
        let slot_waits = slot_waits(&state);
        let output = workflow.cancel(state, reason, &self.middleware, self.clock.now())?;
        let (_, started) = self.commit_and_publish(commits, output, true).await?;
        // QU-11: an attempt suspended waiting for a slot leaves the line with the cancel, and
        // the waiter its place made first is woken.
        if let Some(gate) = &self.flow {
            for (queue, holder) in slot_waits {
                gate.leave(&queue, &holder).await;
            }
        }
        Ok(started)
    }

    /// After a run that a requested cancel reached: the cancel, under a new lease (FLT-15).
    /// `None` when it cannot be taken now; the request stays recorded for the next pass.
    pub(super) async fn cancel_requested(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Option<Started> {
        let guard = self.lease(instance_id).await.ok()?;
        match self.cancel_held(&guard, reason).await {
            Ok(started) => {
                guard.released_by_commit();
                Some(started)
            }
            Err(error) => {
                tracing::warn!(instance = instance_id, %error, "a requested cancel could not be applied; it stays recorded");
                guard.release().await;
                None
            }
        }
    }

    /// Records `kind` for the runtime that owns the instance (ENG-50, C-29).
    pub(crate) async fn request_control(
        &self,
        instance_id: &str,
        kind: ControlKind,
        reason: Option<String>,
    ) -> Result<Control, RunError> {
        self.store
            .request_control(instance_id, ControlRequest { kind, reason })
            .await
            .map_err(|error| run_store_error(instance_id, error))?;
        tracing::info!(
            instance = instance_id,
            request = kind.as_str(),
            "control request recorded for the runtime that owns the instance"
        );
        Ok(Control::Requested)
    }
}

/// The places in line the instance's attempts keep while suspended waiting for a slot
/// (QU-11): `(queue, holder)` of each `wf.slot` bookmark.
pub(crate) fn slot_waits(state: &WorkflowState) -> Vec<(String, String)> {
    state
        .bookmarks
        .iter()
        .filter(|b| b.name == crate::engine::names::Reserved::Slot.name())
        .filter_map(|b| {
            let text = |field: &str| b.payload.get(field)?.as_str().map(str::to_owned);
            Some((text("queue")?, text("holder")?))
        })
        .collect()
}
