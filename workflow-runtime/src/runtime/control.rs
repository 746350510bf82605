//! Operator control of instances (ENG-50, FLT-8, FLT-15): cancel, suspend, resume and retry,
//! applied at once when this runtime can, and otherwise recorded durably as a *control
//! request* that the runtime owning the instance honours at the instance's next step.
//!
//! A request is written with [`Store::request_control`](crate::store::Store::request_control)
//! when the instance's lease is held by another process (it is running there) or when this
//! runtime does not run the instance's definition version (the `workflow` command-line tool,
//! an operator's runtime without the application's code). The owning runtime finds it:
//!
//! - a run in progress sees it at its next lease renewal, or when the queue worker is told (a
//!   store wake-up in process, or its periodic sweep); a cancel fires the run's cancellation
//!   token (FLT-16) and is applied from the last commit, a suspend stops the run at the next
//!   item boundary after the current task attempt;
//! - a run about to start honours a pending cancel or suspend instead of running;
//! - an idle instance is taken by the queue worker, on the store's wake-up in process and on
//!   its periodic sweep ([`RuntimeBuilder::inbox_sweep`](super::RuntimeBuilder::inbox_sweep)).
//!
//! The commit that honours a request clears it in the same write. A request that no longer
//! applies (a suspend for an instance that faulted meanwhile, a resume for one that is not
//! paused) is cleared and logged.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{Notify, watch};

use super::document::{load_state, run_store_error};
use super::errors::{CancelError, ControlError, RetryError, StateError};
use super::lease::LeaseGuard;
use super::links::Links;
use super::outcomes::Control;
use super::run_path::{RunCommits, RunOptions, RunPath};
use crate::cancel::CancellationToken;
use crate::engine::executor::{RunEnd, RunError, RunTarget};
use crate::engine::state::{
    ActivityStatus, ContextId, EntryPoint, SubStatus, WorkItem, WorkflowState, WorkflowStatus,
};
use crate::status::Started;
use crate::store::{ControlKind, InstanceFilter, InstanceRecord, StoreError};

/// Operator control (see the module docs).
pub(crate) struct Controller {
    run_path: Arc<RunPath>,
    /// Carries out the links a change queued (ACT-24).
    links: Arc<Links>,
    /// The queue worker's doorbell: a resumed instance takes the stimuli held for it.
    doorbell: Arc<Notify>,
    /// Set when the runtime shuts down: the control pass stops between instances.
    stop: watch::Receiver<bool>,
}

/// What a requester found about the instance before acting.
enum Found {
    /// Run it here.
    Here(InstanceRecord<String>),
    /// Not run by this runtime: record a request.
    Elsewhere(InstanceRecord<String>),
}

impl Controller {
    pub(crate) fn new(
        run_path: Arc<RunPath>,
        links: Arc<Links>,
        doorbell: Arc<Notify>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Self {
            run_path,
            links,
            doorbell,
            stop,
        }
    }

    /// Loads the instance a control call is about.
    async fn control_target(&self, instance_id: &str) -> Result<Option<Found>, RunError> {
        match self.run_path.store().load_instance_text(instance_id).await {
            Ok(record) if self.run_path.definitions().runs_record(&record) => {
                Ok(Some(Found::Here(record)))
            }
            Ok(record) => Ok(Some(Found::Elsewhere(record))),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(run_store_error(instance_id, error)),
        }
    }

    /// Cancels an instance (ENG-50): see `Runtime::cancel`. The run path applies it, as it
    /// applies a cancel requested during a run (FLT-15).
    pub(crate) async fn cancel(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Result<Control, CancelError> {
        self.run_path.cancel(instance_id, reason).await
    }

    /// Suspends (pauses) an instance (ENG-50): see `Runtime::suspend`.
    pub(crate) async fn suspend(&self, instance_id: &str) -> Result<Control, ControlError> {
        let record = match self.control_target(instance_id).await? {
            None => return Err(not_found(instance_id)),
            Some(Found::Elsewhere(record)) => {
                check_suspendable(&record)?;
                if record.sub_status == Some(SubStatus::Paused) {
                    return Ok(Control::Applied(started_of(&record)));
                }
                return Ok(self
                    .run_path
                    .request_control(instance_id, ControlKind::Suspend, None)
                    .await?);
            }
            Some(Found::Here(record)) => record,
        };
        check_suspendable(&record)?;
        // A run of this process stops at its next item boundary and pauses.
        self.run_path.active().with(instance_id, |run| {
            run.signals.pause.store(true, Ordering::SeqCst);
        });
        let _turn = self.run_path.turn(instance_id).await;
        let guard = match self.run_path.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found(instance_id)),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .run_path
                    .request_control(instance_id, ControlKind::Suspend, None)
                    .await?);
            }
            Err(error) => return Err(run_store_error(instance_id, error).into()),
        };
        let result = self.pause_held(&guard).await;
        match result {
            Ok(Some(started)) => {
                guard.released_by_commit();
                Ok(Control::Applied(started))
            }
            Ok(None) => {
                guard.release().await;
                let state = load_state(self.run_path.store(), instance_id)
                    .await
                    .map_err(|e| state_error(instance_id, &e))?
                    .ok_or_else(|| not_found(instance_id))?;
                if state.status.is_final() {
                    return Err(ControlError::AlreadyTerminal {
                        instance: instance_id.to_owned(),
                        status: state.status,
                    });
                }
                if state.status == WorkflowStatus::Faulted {
                    return Err(ControlError::NotSuspendable {
                        instance: instance_id.to_owned(),
                    });
                }
                Ok(Control::Applied(Started {
                    instance_id: instance_id.to_owned(),
                    status: state.status,
                    sub_status: state.sub_status,
                }))
            }
            Err(error) => {
                guard.release().await;
                Err(error.into())
            }
        }
    }

    /// Pauses the instance under `guard` (ENG-50); `None` when there is nothing to pause
    /// (final, faulted, or paused already), after clearing a suspend request left for it.
    async fn pause_held(&self, guard: &LeaseGuard<'_>) -> Result<Option<Started>, RunError> {
        let (state, commits) = self.run_path.load(guard).await?;
        let requested = commits.control_kind() == Some(ControlKind::Suspend);
        if state.status.is_final() {
            return Ok(None);
        }
        if state.status == WorkflowStatus::Faulted || state.sub_status == Some(SubStatus::Paused) {
            if requested {
                clear_request(state, &commits).await?;
                return Ok(load_state(self.run_path.store(), guard.instance_id())
                    .await
                    .ok()
                    .flatten()
                    .map(|s| Started {
                        instance_id: s.instance_id,
                        status: s.status,
                        sub_status: s.sub_status,
                    }));
            }
            return Ok(None);
        }
        let workflow = self.run_path.definitions().workflow_for(&state)?;
        if requested {
            commits.clear_control_next();
        }
        let output = workflow.pause(state, self.run_path.middleware(), self.run_path.now());
        let (_, started) = self
            .run_path
            .commit_and_publish(&commits, output, true)
            .await?;
        Ok(Some(started))
    }

    /// Resumes a paused instance (ENG-50): see `Runtime::resume`.
    pub(crate) async fn resume(&self, instance_id: &str) -> Result<Control, ControlError> {
        let record = match self.control_target(instance_id).await? {
            None => return Err(not_found(instance_id)),
            Some(Found::Elsewhere(record)) => {
                check_resumable(&record)?;
                return Ok(self
                    .run_path
                    .request_control(instance_id, ControlKind::Resume, None)
                    .await?);
            }
            Some(Found::Here(record)) => record,
        };
        check_resumable(&record)?;
        let turn = self.run_path.turn(instance_id).await;
        let guard = match self.run_path.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found(instance_id)),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .run_path
                    .request_control(instance_id, ControlKind::Resume, None)
                    .await?);
            }
            Err(error) => return Err(run_store_error(instance_id, error).into()),
        };
        let started = self.resume_held(instance_id, guard, &turn).await;
        drop(turn);
        Ok(Control::Applied(started?))
    }

    /// Runs the paused instance under `guard` again (ENG-50).
    async fn resume_held<'a>(
        &'a self,
        instance_id: &str,
        guard: LeaseGuard<'a>,
        turn: &'a super::run_path::Turn<'a>,
    ) -> Result<Started, RunError> {
        let options = RunOptions::to(RunTarget::None)
            .resuming()
            .under(guard, turn);
        self.run_path
            .run(instance_id, options)
            .await
            .map(|started| {
                started.unwrap_or_else(|| Started {
                    instance_id: instance_id.to_owned(),
                    status: WorkflowStatus::Running,
                    sub_status: Some(SubStatus::Pending),
                })
            })
    }

    /// Rings the queue worker's doorbell: the stimuli held while an instance was paused.
    pub(crate) fn ring(&self) {
        self.doorbell.notify_one();
    }

    /// The operator's retry (FLT-8, ENG-50) of a `Faulted` instance: see `Runtime::retry`.
    pub(crate) async fn retry(&self, instance_id: &str) -> Result<Control, RetryError> {
        let not_found = || RetryError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let record = match self.run_path.store().load_instance_text(instance_id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Err(not_found()),
            Err(error) => {
                return Err(RetryError::Run(run_store_error(instance_id, error)));
            }
        };
        if record.status != WorkflowStatus::Faulted {
            return Err(RetryError::NotFaulted {
                instance: instance_id.to_owned(),
                status: record.status,
            });
        }
        if !self.run_path.definitions().runs_record(&record) {
            return Ok(self
                .run_path
                .request_control(instance_id, ControlKind::Retry, None)
                .await?);
        }
        let _turn = self.run_path.turn(instance_id).await;
        let guard = match self.run_path.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found()),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .run_path
                    .request_control(instance_id, ControlKind::Retry, None)
                    .await?);
            }
            Err(error) => {
                return Err(RetryError::Run(run_store_error(instance_id, error)));
            }
        };
        self.retry_held(guard).await.map(Control::Applied)
    }

    /// The retry under `guard`, which it settles.
    async fn retry_held(&self, guard: LeaseGuard<'_>) -> Result<Started, RetryError> {
        let instance_id = guard.instance_id().to_owned();
        let instance_id = instance_id.as_str();
        let token = CancellationToken::new();
        let result = guard
            .hold(&token, None, std::pin::pin!(self.retry_run(&guard, &token)))
            .await;
        match (result, guard.lost()) {
            (Ok(started), _) => {
                guard.released_by_commit();
                Ok(started)
            }
            (Err(RetryError::Run(RunError::Interrupted { .. })), Some(lost)) => {
                Err(RetryError::Run(run_store_error(instance_id, lost)))
            }
            (Err(error), Some(_)) => Err(error),
            (Err(error), None) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    /// Reopens the faulted instance under `guard` and runs it on (FLT-8).
    async fn retry_run(
        &self,
        guard: &LeaseGuard<'_>,
        token: &CancellationToken,
    ) -> Result<Started, RetryError> {
        let instance_id = guard.instance_id();
        let (mut state, commits) = self.run_path.load(guard).await?;
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
        let workflow = self.run_path.definitions().workflow_for(&state)?;
        if commits.control_kind() == Some(ControlKind::Retry) {
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
            let mut options = self.run_path.engine_settings(Some(token));
            options.attempts.executing = Some(guard.executing());
            let output = workflow
                .run(
                    state,
                    RunTarget::None,
                    options,
                    self.run_path.middleware(),
                    Some((&commits, self.run_path.commit_strategy())),
                )
                .await?;
            let end = output.end;
            if first {
                // TM-10: the retry's commit unparks the instance's timers.
                commits.unpark_next();
                first = false;
            }
            let (next, started) = self
                .run_path
                .commit_and_publish(&commits, output, end != RunEnd::Budget)
                .await?;
            if end != RunEnd::Budget {
                return Ok(started);
            }
            state = next;
        }
    }

    // ---- the owning side ------------------------------------------------------------------

    /// Honours the pending control requests of the store's instances that this runtime runs
    /// (the queue worker's periodic pass).
    pub(crate) async fn control_pass(&self) {
        let mut filter = InstanceFilter {
            control_requested: true,
            limit: 100,
            ..InstanceFilter::default()
        };
        loop {
            let page = match self.run_path.store().list_instances(filter.clone()).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "control requests: listing them failed");
                    return;
                }
            };
            let Some(last) = page.last() else { return };
            filter.after = Some(last.instance_id.clone());
            let full = page.len() >= 100;
            for listed in page {
                if *self.stop.borrow() {
                    return;
                }
                self.honour(&listed.instance_id).await;
            }
            if !full {
                return;
            }
        }
    }

    /// Honours the instance's pending control request if this runtime runs it: a run of it in
    /// progress here is signalled; an idle one is taken under its lease and changed. One whose
    /// lease another process holds is left to it (its lease renewal returns the request).
    pub(crate) async fn honour(&self, instance_id: &str) {
        let run_path = &*self.run_path;
        let Ok(record) = run_path.store().load_instance_text(instance_id).await else {
            return;
        };
        let Some(request) = record.control_request.clone() else {
            return;
        };
        if record.status.is_final() || !run_path.definitions().runs_record(&record) {
            return;
        }
        if run_path
            .active()
            .with(instance_id, |run| run.signals.signal(&request, &run.token))
            .is_some()
        {
            return;
        }
        // Busy here: that run honours a cancel or a suspend as it starts; the next pass
        // takes the rest.
        let Some(turn) = run_path.try_turn(instance_id) else {
            return;
        };
        let guard = match run_path.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::LeaseHeld { .. } | StoreError::NotFound { .. }) => return,
            Err(error) => {
                tracing::warn!(instance = instance_id, %error, "control request: taking the lease failed");
                return;
            }
        };
        let outcome = match request.kind {
            ControlKind::Cancel => match run_path.cancel_held(&guard, request.reason.clone()).await
            {
                Ok(started) => {
                    guard.released_by_commit();
                    Ok(Some(started))
                }
                Err(error) => {
                    guard.release().await;
                    Err(error.to_string())
                }
            },
            ControlKind::Suspend => match self.pause_held(&guard).await {
                Ok(Some(started)) => {
                    guard.released_by_commit();
                    Ok(Some(started))
                }
                Ok(None) => {
                    guard.release().await;
                    Ok(None)
                }
                Err(error) => {
                    guard.release().await;
                    Err(error.to_string())
                }
            },
            ControlKind::Resume if record.sub_status == Some(SubStatus::Paused) => {
                let result = self.resume_held(instance_id, guard, &turn).await;
                self.doorbell.notify_one();
                result.map(Some).map_err(|e| e.to_string())
            }
            ControlKind::Retry if record.status == WorkflowStatus::Faulted => self
                .retry_held(guard)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            ControlKind::Resume | ControlKind::Retry => {
                // No longer applies: cleared, and said so.
                let cleared = match run_path.load(&guard).await {
                    Ok((state, commits)) => clear_request(state, &commits).await,
                    Err(error) => Err(error),
                };
                match cleared {
                    Ok(()) => {
                        guard.released_by_commit();
                        tracing::info!(
                            instance = instance_id,
                            request = request.kind.as_str(),
                            status = %record.status,
                            "control request no longer applies; cleared"
                        );
                        Ok(None)
                    }
                    Err(error) => {
                        guard.release().await;
                        Err(error.to_string())
                    }
                }
            }
        };
        drop(turn);
        self.links.process().await;
        match outcome {
            Ok(Some(started)) => tracing::info!(
                instance = instance_id,
                request = request.kind.as_str(),
                status = %started.status,
                "control request honoured"
            ),
            Ok(None) => {}
            Err(error) => tracing::warn!(
                instance = instance_id,
                request = request.kind.as_str(),
                %error,
                "control request could not be honoured; it stays recorded"
            ),
        }
    }
}

/// Commits the state unchanged but for its cleared control request, releasing the lease.
async fn clear_request(mut state: WorkflowState, commits: &RunCommits<'_>) -> Result<(), RunError> {
    commits.clear_control_next();
    commits
        .commit(&mut state, true, Vec::new(), Vec::new())
        .await
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

fn not_found(instance_id: &str) -> ControlError {
    ControlError::InstanceNotFound {
        instance: instance_id.to_owned(),
    }
}

fn state_error(instance_id: &str, error: &StateError) -> ControlError {
    ControlError::Run(RunError::StateCorrupt {
        instance: instance_id.to_owned(),
        reason: error.to_string(),
    })
}

fn started_of(record: &InstanceRecord<String>) -> Started {
    Started {
        instance_id: record.instance_id.clone(),
        status: record.status,
        sub_status: record.sub_status,
    }
}

fn check_suspendable(record: &InstanceRecord<String>) -> Result<(), ControlError> {
    if record.status.is_final() {
        return Err(ControlError::AlreadyTerminal {
            instance: record.instance_id.clone(),
            status: record.status,
        });
    }
    if record.status == WorkflowStatus::Faulted {
        return Err(ControlError::NotSuspendable {
            instance: record.instance_id.clone(),
        });
    }
    Ok(())
}

fn check_resumable(record: &InstanceRecord<String>) -> Result<(), ControlError> {
    if record.status.is_final() {
        return Err(ControlError::AlreadyTerminal {
            instance: record.instance_id.clone(),
            status: record.status,
        });
    }
    if record.sub_status != Some(SubStatus::Paused) {
        return Err(ControlError::NotResumable {
            instance: record.instance_id.clone(),
            status: record.status,
            sub_status: record.sub_status,
        });
    }
    Ok(())
}
