//! Operator actions on faulted instances (FLT-8) and reading incidents (FLT-6).

use super::{CancelError, Control, Runtime, StateError};
use crate::engine::executor::{RunEnd, RunError, RunTarget};
use crate::engine::state::{
    ActivityStatus, ContextId, EntryPoint, Incident, SubStatus, WorkItem, WorkflowState,
    WorkflowStatus,
};
use crate::runtime::Started;

/// Why [`Runtime::retry`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Only a `Faulted` instance is retried.
    #[error("instance `{instance}` is {status}, not Faulted")]
    NotFaulted {
        /// The id.
        instance: String,
        /// Its status.
        status: WorkflowStatus,
    },
    /// A compensation failed (FLT-13): resuming the compensation list is not implemented
    /// yet. Cancel the instance. (A compensated failure is retried: its outermost
    /// compensated scope restarts, FLT-8.)
    #[error("instance `{instance}`: a compensation failed; retrying it is not supported yet")]
    CompensatedFailure {
        /// The id.
        instance: String,
    },
    /// The run failed (a conflict with another operator, a store error).
    #[error(transparent)]
    Run(#[from] RunError),
}

impl From<CancelError> for RetryError {
    fn from(error: CancelError) -> Self {
        match error {
            CancelError::InstanceNotFound { instance } => Self::InstanceNotFound { instance },
            CancelError::Run(error) => Self::Run(error),
            CancelError::AlreadyTerminal { status } => Self::NotFaulted {
                instance: String::new(),
                status,
            },
        }
    }
}

/// FLT-8: the open incidents resolved as `retried`, each faulted activity made `Running`
/// again with a fresh attempt budget and queued to run from scratch.
fn reopen(state: &mut WorkflowState) {
    let mut contexts = Vec::new();
    for incident in state
        .incidents
        .iter_mut()
        .filter(|i| i.resolution.is_none())
    {
        incident.resolution = Some("retried".to_owned());
        contexts.push(incident.context_id);
    }
    for id in contexts {
        if let Some(c) = state.context_mut(id)
            && c.status == ActivityStatus::Faulted
        {
            c.status = ActivityStatus::Running;
            c.fault = None;
            crate::engine::faults::reset_attempts(c);
            state.queue.push_back(WorkItem {
                context: id,
                entry: EntryPoint::Execute,
            });
        }
    }
    state.status = WorkflowStatus::Running;
    state.sub_status = Some(SubStatus::Pending);
}

impl Runtime {
    /// The operator's retry (FLT-8, ENG-50) of a `Faulted` instance: its incidents are
    /// resolved as `retried`, its timers unparked (TM-10), and each faulted activity runs
    /// again from scratch with a fresh attempt budget (`Faulted -> Running`); nothing else
    /// changes. One fenced commit: of two racing operators, one gets a conflict.
    ///
    /// When the instance is leased by another process, or pinned to a definition version this
    /// runtime does not run, the retry is recorded durably and [`Control::Requested`] returned:
    /// the runtime that owns the instance applies it.
    ///
    /// # Errors
    ///
    /// [`RetryError::InstanceNotFound`] for an unknown id, [`RetryError::NotFaulted`] for an
    /// instance that is not `Faulted`, [`RetryError::CompensatedFailure`] when sagas compensated
    /// the failure, and [`RetryError::Run`] when the run fails (a conflict with another operator
    /// included).
    pub async fn retry(&self, instance_id: &str) -> Result<Control, RetryError> {
        self.ensure_background();
        let result = self.retry_inner(instance_id).await;
        self.process_links().await;
        result
    }

    async fn retry_inner(&self, instance_id: &str) -> Result<Control, RetryError> {
        use crate::store::{ControlKind, StoreError};
        let not_found = || RetryError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let record = match self.inner.store.load_instance_text(instance_id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Err(not_found()),
            Err(error) => {
                return Err(RetryError::Run(super::run_store_error(instance_id, error)));
            }
        };
        if record.status != WorkflowStatus::Faulted {
            return Err(RetryError::NotFaulted {
                instance: instance_id.to_owned(),
                status: record.status,
            });
        }
        let runs_here = self
            .inner
            .workflows
            .get(&record.definition_name)
            .is_some_and(|w| w.version() == record.definition_version);
        if !runs_here {
            return Ok(self
                .request_control(instance_id, ControlKind::Retry, None)
                .await?);
        }
        let _local = self.local_run(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found()),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .request_control(instance_id, ControlKind::Retry, None)
                    .await?);
            }
            Err(error) => {
                return Err(RetryError::Run(super::run_store_error(instance_id, error)));
            }
        };
        self.retry_with(guard).await.map(Control::Applied)
    }

    /// The retry under `guard`, which it settles.
    pub(super) async fn retry_with(
        &self,
        guard: super::LeaseGuard<'_>,
    ) -> Result<Started, RetryError> {
        let instance_id = guard.instance_id().to_owned();
        let instance_id = instance_id.as_str();
        let token = crate::cancel::CancellationToken::new();
        let result = guard
            .hold(
                &token,
                None,
                std::pin::pin!(self.retry_leased(&guard, &token)),
            )
            .await;
        match (result, guard.lost()) {
            (Ok(started), _) => {
                guard.released_by_commit();
                Ok(started)
            }
            (Err(RetryError::Run(RunError::Interrupted { .. })), Some(lost)) => {
                Err(RetryError::Run(super::run_store_error(instance_id, lost)))
            }
            (Err(error), Some(_)) => Err(error),
            (Err(error), None) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    async fn retry_leased(
        &self,
        guard: &super::LeaseGuard<'_>,
        token: &crate::cancel::CancellationToken,
    ) -> Result<Started, RetryError> {
        let instance_id = guard.instance_id();
        let (mut state, commits) = self.load_for_run(guard).await?;
        if state.status != WorkflowStatus::Faulted {
            return Err(RetryError::NotFaulted {
                instance: instance_id.to_owned(),
                status: state.status,
            });
        }
        let marked = |state: &WorkflowState, context: ContextId| {
            state
                .context(context)
                .and_then(|c| c.properties.get(crate::engine::saga::COMPENSATED_FAILURE))
                .cloned()
        };
        let open: Vec<(usize, ContextId)> = state
            .incidents
            .iter()
            .enumerate()
            .filter(|(_, i)| i.resolution.is_none())
            .map(|(n, i)| (n, i.context_id))
            .collect();
        // A failed compensation (FLT-13): resuming its list is not implemented.
        if open
            .iter()
            .any(|&(_, c)| marked(&state, c).is_some_and(|m| m.is_boolean()))
        {
            return Err(RetryError::CompensatedFailure {
                instance: instance_id.to_owned(),
            });
        }
        let workflow = self.workflow_for(&state)?;
        if commits.control_kind() == Some(crate::store::ControlKind::Retry) {
            commits.clear_control_next();
        }
        // FLT-8: a compensated failure restarts the outermost compensated scope, whose work
        // was undone; the failed activity itself stays behind, cancelled.
        for (n, context) in open {
            let Some(scope) = marked(&state, context).and_then(|m| m.as_u64()) else {
                continue;
            };
            if let Some(incident) = state.incidents.get_mut(n) {
                incident.resolution = Some("retried".to_owned());
            }
            if let Some(c) = state.context_mut(context) {
                c.status = ActivityStatus::Canceled;
                c.properties
                    .remove(crate::engine::saga::COMPENSATED_FAILURE);
            }
            state.queue.push_back(WorkItem {
                context: scope,
                entry: EntryPoint::Execute,
            });
        }
        reopen(&mut state);
        let mut first = true;
        loop {
            let mut options = self.run_options(Some(token));
            options.attempts.executing = Some(guard.executing());
            let output = workflow
                .run(
                    state,
                    RunTarget::None,
                    options,
                    &self.inner.middleware,
                    Some((&commits, self.inner.commit_strategy)),
                )
                .await?;
            let end = output.end;
            if first {
                // TM-10: the retry's commit unparks the instance's timers.
                commits.unpark_next();
                first = false;
            }
            let (next, started) = self
                .commit_and_publish(&commits, output, end != RunEnd::Budget)
                .await?;
            if end != RunEnd::Budget {
                return Ok(started);
            }
            state = next;
        }
    }

    /// The incidents recorded against an instance (FLT-6), open and resolved, oldest first;
    /// `None` for an unknown id.
    ///
    /// # Errors
    ///
    /// A [`StateError`] when the instance cannot be read or decoded.
    pub async fn incidents(&self, instance_id: &str) -> Result<Option<Vec<Incident>>, StateError> {
        Ok(self.load_state(instance_id).await?.map(|s| s.incidents))
    }
}

impl Runtime {
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
        guard: &super::LeaseGuard<'_>,
        size: usize,
        limit: usize,
        delivery: Option<super::Delivery>,
        signals: &super::control::RunSignals,
    ) -> Result<RunError, RunError> {
        use crate::engine::state::{FaultKind, FaultRecord, IncidentKind};
        let instance_id = guard.instance_id().to_owned();
        let (mut state, commits) = self.load_for_run(guard).await?;
        // RT-19: consumed when a commit of this run consumed it (the run's first commit does,
        // and only the run commits under its lease), or an earlier delivery's receipt says so.
        let pending = match delivery {
            Some(delivery) => {
                let consumed = signals.committed_by_now(super::lock(&commits.tracker).version)
                    || (delivery.receipt
                        && self
                            .inner
                            .store
                            .has_receipt(&instance_id, &delivery.stimulus_id)
                            .await
                            .map_err(|error| super::run_store_error(&instance_id, error))?);
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
        let now = self.inner.clock.now();
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
        if self.inner.events.receiver_count() > 0 {
            let _ = self
                .inner
                .events
                .send(crate::engine::events::LifecycleEvent {
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
        if let Some(watch) = super::lock(&self.inner.watches).get(&instance_id) {
            watch.send_modify(|n| *n += 1);
        }
        Ok(RunError::StateTooLarge {
            instance: instance_id,
            size,
            limit,
            incident: incident.id,
            stimulus_id: pending,
        })
    }
}
