//! A timer row whose due time does not decode (ST-22): its instance is faulted with a
//! `damaged_timer` incident naming the row, so that the damage is seen (in `why`, the
//! incidents, a `warn` event) instead of the instance sleeping forever.

use super::RunPath;
use crate::engine::executor::RunError;
use crate::engine::state::{FaultKind, FaultRecord, Incident, IncidentKind, WorkflowStatus};
use crate::runtime::document::run_store_error;
use crate::runtime::lease::LeaseGuard;
use crate::store::{DamagedTimer, StoreError};

impl RunPath {
    /// Faults the damaged timer's instance from its last commit with a `damaged_timer`
    /// incident (FLT-6) whose message is the row's decode error; the faulting commit parks
    /// the instance's timers (TM-10), the damaged one included, so it is reported once. A
    /// retry unparks them: a row still damaged faults the instance again once the claim the
    /// driver took on it expires (a lease TTL, TM-6). Whether the
    /// instance was faulted: not when it is gone, final, or leased by another run (then the
    /// row's claim expires and the driver meets it again).
    ///
    /// # Errors
    ///
    /// The lease's, the load's or the commit's.
    pub(crate) async fn fault_damaged_timer(
        &self,
        instance_id: &str,
        damage: &DamagedTimer,
    ) -> Result<bool, RunError> {
        let _turn = self.turn(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. } | StoreError::LeaseHeld { .. }) => return Ok(false),
            Err(error) => return Err(run_store_error(instance_id, error)),
        };
        match self.fault_damaged_held(&guard, damage).await {
            Ok(Some(incident)) => {
                guard.released_by_commit();
                tracing::warn!(
                    instance = instance_id,
                    timer = damage.timer_id.as_str(),
                    incident = incident.as_str(),
                    error = %damage.error(),
                    "instance faulted: one of its timer rows does not decode (damaged_timer)"
                );
                Ok(true)
            }
            Ok(None) => {
                guard.release().await;
                Ok(false)
            }
            Err(error) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    /// The faulting commit under `guard`; the incident's id, `None` for a final instance.
    async fn fault_damaged_held(
        &self,
        guard: &LeaseGuard<'_>,
        damage: &DamagedTimer,
    ) -> Result<Option<String>, RunError> {
        let instance_id = guard.instance_id().to_owned();
        let (mut state, commits) = self.load(guard).await?;
        if state.status.is_final() {
            return Ok(None);
        }
        // The context waiting on the timer, else the root.
        let (context_id, node_id) = state
            .bookmarks
            .iter()
            .find(|b| b.id == damage.timer_id)
            .map(|b| (b.context_id, b.node_id.clone()))
            .unwrap_or_else(|| {
                let root = state.root.unwrap_or_default();
                let node = state
                    .context(root)
                    .map(|c| c.node_id.clone())
                    .unwrap_or_default();
                (root, node)
            });
        let now = self.clock.now();
        let incident = Incident {
            id: crate::base::new_ulid(),
            context_id,
            node_id,
            fault: FaultRecord {
                kind: FaultKind::Engine,
                message: format!(
                    "{}; the timer cannot fire: repair its `due_at`, then retry the instance",
                    damage.error()
                ),
                attempt: 0,
            },
            at: now,
            resolution: None,
            kind: IncidentKind::DamagedTimer,
            stimulus_id: None,
        };
        state.incidents.push(incident.clone());
        state.status = WorkflowStatus::Faulted;
        state.sub_status = None;
        state.updated_at = now;
        state.event_seq += 1;
        // Releases the lease: the caller settles the guard as released by this commit.
        commits
            .commit(&mut state, true, Vec::new(), Vec::new())
            .await?;
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(crate::engine::events::LifecycleEvent {
                instance_id: instance_id.clone(),
                definition: state.definition.name.clone(),
                correlation_id: state.correlation_id.clone(),
                at_micros: now,
                seq: state.event_seq,
                kind: crate::engine::events::EventKind::WorkflowFaulted {
                    incident: incident.clone(),
                },
            });
        }
        self.watches.notify(&instance_id);
        Ok(Some(incident.id))
    }
}
