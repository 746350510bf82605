//! Operator actions on faulted instances (FLT-8) and reading incidents (FLT-6).

use super::{CancelError, Runtime, StateError};
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
    /// # Errors
    ///
    /// [`RetryError::InstanceNotFound`] for an unknown id, [`RetryError::NotFaulted`] for an
    /// instance that is not `Faulted`, [`RetryError::CompensatedFailure`] when sagas compensated
    /// the failure, and [`RetryError::Run`] when the run fails (a conflict with another operator
    /// included).
    pub async fn retry(&self, instance_id: &str) -> Result<Started, RetryError> {
        let result = self.retry_inner(instance_id).await;
        self.process_links().await;
        result
    }

    async fn retry_inner(&self, instance_id: &str) -> Result<Started, RetryError> {
        let _local = self.local_run(instance_id).await;
        let store = &*self.inner.store;
        let lease = match store
            .acquire_lease(
                instance_id,
                &self.inner.owner,
                super::now_micros(),
                self.inner.lease_ttl,
            )
            .await
        {
            Ok(lease) => lease,
            Err(crate::store::StoreError::NotFound { .. }) => {
                return Err(RetryError::InstanceNotFound {
                    instance: instance_id.to_owned(),
                });
            }
            Err(error) => {
                return Err(RetryError::Run(super::run_store_error(instance_id, error)));
            }
        };
        let result = self.retry_leased(instance_id, lease.token).await;
        if result.is_err() {
            let _ = store.release_lease(instance_id, lease.token).await;
        }
        result
    }

    async fn retry_leased(&self, instance_id: &str, token: u64) -> Result<Started, RetryError> {
        let (mut state, commits) = self.load_for_run(instance_id, token).await?;
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
            let output = workflow
                .run(
                    state,
                    RunTarget::None,
                    self.run_options(None),
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
