//! A run whose state grew over the store's limit (ST-24): the instance is faulted from its
//! last commit with a `state_too_large` incident, so it does not loop.

use super::{Delivery, RunPath};
use crate::base::lock;
use crate::engine::executor::RunError;
use crate::engine::state::{Incident, WorkflowStatus};
use crate::runtime::document::run_store_error;
use crate::runtime::lease::LeaseGuard;
use crate::runtime::signals::RunSignals;

impl RunPath {
    /// ST-24: a run's commit was refused as too large (nothing of it written). Under the
    /// run's lease, one minimal commit faults the instance from its last committed state with
    /// a `state_too_large` incident (FLT-5, FLT-6): its bookmarks stay, its timers are parked,
    /// and it does not loop. The stimulus the run delivered, unless an earlier commit of the
    /// run consumed it, stays unconsumed: the returned [`RunError::StateTooLarge`] names it
    /// for the caller to dead-letter.
    ///
    /// # Errors
    ///
    /// The load's or the faulting commit's; the caller then releases the lease (the instance
    /// is unchanged).
    pub(super) async fn fault_too_large(
        &self,
        guard: &LeaseGuard<'_>,
        size: usize,
        limit: usize,
        delivery: Option<Delivery>,
        signals: &RunSignals,
    ) -> Result<RunError, RunError> {
        use crate::engine::state::{FaultKind, FaultRecord, IncidentKind};
        let instance_id = guard.instance_id().to_owned();
        let (mut state, commits) = self.load(guard).await?;
        // RT-19: consumed when a commit of this run consumed it (the run's first commit does,
        // and only the run commits under its lease), or an earlier delivery's receipt says so.
        let pending = match delivery {
            Some(delivery) => {
                let consumed = signals.committed_by_now(lock(&commits.tracker).version)
                    || (delivery.receipt
                        && self
                            .store
                            .has_receipt(&instance_id, &delivery.stimulus_id)
                            .await
                            .map_err(|error| run_store_error(&instance_id, error))?);
                (!consumed).then_some(delivery.stimulus_id)
            }
            None => None,
        };
        let context_id = state.root.unwrap_or_default();
        let node_id = state
            .context(context_id)
            .map(|c| c.node_id.clone())
            .unwrap_or_default();
        let mut message = format!(
            "the state document reached {size} bytes, over the store's limit of {limit}; \
             the instance keeps its last committed state"
        );
        if let Some(stimulus) = &pending {
            message.push_str(&format!(
                "; stimulus `{stimulus}` was not consumed and is dead-lettered"
            ));
        }
        let now = self.clock.now();
        let incident = Incident {
            id: crate::base::new_ulid(),
            context_id,
            node_id,
            fault: FaultRecord {
                kind: FaultKind::Engine,
                message,
                attempt: 0,
            },
            at: now,
            resolution: None,
            kind: IncidentKind::StateTooLarge,
            stimulus_id: pending.clone(),
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
        tracing::error!(
            definition = state.definition.name.as_str(),
            instance = instance_id.as_str(),
            incident = incident.id.as_str(),
            size,
            limit,
            stimulus = pending.as_deref().unwrap_or(""),
            "instance faulted: its state is over the size limit (state_too_large)"
        );
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
        Ok(RunError::StateTooLarge {
            instance: instance_id,
            size,
            limit,
            incident: incident.id,
            stimulus_id: pending,
        })
    }
}
