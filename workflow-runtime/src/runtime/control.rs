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
//!   its periodic sweep ([`RuntimeBuilder::queue_sweep`](super::RuntimeBuilder::queue_sweep)).
//!
//! The commit that honours a request clears it in the same write. A request that no longer
//! applies (a suspend for an instance that faulted meanwhile, a resume for one that is not
//! paused) is cleared and logged.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Runtime, Started, lock, run_store_error};
use crate::cancel::CancellationToken;
use crate::engine::executor::{RunEnd, RunError, RunTarget};
use crate::engine::state::{SubStatus, WorkflowStatus};
use crate::store::{ControlKind, ControlRequest, InstanceFilter, InstanceRecord, StoreError};

/// What a control call did: applied by this runtime, or recorded for the runtime that owns
/// the instance (ENG-50). Either way it returned once the outcome is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Applied by this call; the instance's status after it.
    Applied(Started),
    /// Recorded as a durable control request: the instance runs in another process (its
    /// lease is held there) or on a definition version this runtime does not run. The
    /// runtime owning it applies it at the instance's next step.
    Requested,
}

impl Control {
    /// The status after the call, when it was applied here.
    pub fn applied(&self) -> Option<&Started> {
        match self {
            Self::Applied(started) => Some(started),
            Self::Requested => None,
        }
    }

    /// Whether the call was only recorded, for the owning runtime to apply.
    pub fn is_requested(&self) -> bool {
        matches!(self, Self::Requested)
    }
}

impl std::fmt::Display for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Applied(started) => match started.sub_status {
                Some(sub) => write!(
                    f,
                    "instance `{}` is now {}/{sub}",
                    started.instance_id, started.status
                ),
                None => write!(
                    f,
                    "instance `{}` is now {}",
                    started.instance_id, started.status
                ),
            },
            Self::Requested => f.write_str(
                "requested: the runtime that owns the instance applies it at its next step",
            ),
        }
    }
}

/// Why [`Runtime::suspend`] or [`Runtime::resume`] failed; nothing changed (ENG-50).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// Unknown id.
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// Already `Finished` or `Cancelled`.
    #[error("instance `{instance}` is already {status}")]
    AlreadyTerminal {
        /// The id.
        instance: String,
        /// Its final status.
        status: WorkflowStatus,
    },
    /// Only a paused instance (`Suspended/Paused`) is resumed.
    #[error("instance `{instance}` is {status}{}, not paused: there is nothing to resume", sub_status.map(|s| format!("/{s}")).unwrap_or_default())]
    NotResumable {
        /// The id.
        instance: String,
        /// Its status.
        status: WorkflowStatus,
        /// Its sub-status.
        sub_status: Option<SubStatus>,
    },
    /// A faulted instance is not suspended: retry it or cancel it.
    #[error("instance `{instance}` is Faulted: retry it or cancel it instead")]
    NotSuspendable {
        /// The id.
        instance: String,
    },
    /// The store failed, or the change could not be committed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The handle of a run in progress in this process: how operators reach it (FLT-15).
pub(crate) struct RunHandle {
    /// Fired to cancel the task the run is executing.
    pub(crate) token: CancellationToken,
    /// What operators asked of the run.
    pub(crate) signals: Arc<RunSignals>,
}

/// Requests for a run in progress: set by a lease renewal that returned a control request, by
/// the queue worker, or by [`Runtime::suspend`] in this process.
#[derive(Debug, Default)]
pub(crate) struct RunSignals {
    /// Stop at the next item boundary and pause (ENG-50).
    pub(crate) pause: Arc<AtomicBool>,
    /// Cancel once the run stops, with this reason (FLT-15).
    cancel: Mutex<Option<Option<String>>>,
    /// This run resumes a paused instance.
    pub(crate) resume: AtomicBool,
    /// The version the run loaded (0 until it has): a later version was committed by the
    /// run itself, which holds the lease.
    loaded_version: AtomicU64,
}

impl RunSignals {
    /// Passes a stored request on to the run: a cancel fires its token, a suspend asks it to
    /// stop at the next item boundary. A resume or a retry does not concern a running run.
    pub(crate) fn signal(&self, request: &ControlRequest, token: &CancellationToken) {
        match request.kind {
            ControlKind::Cancel => {
                let mut cancel = lock(&self.cancel);
                if cancel.is_none() {
                    *cancel = Some(request.reason.clone());
                    token.cancel();
                }
            }
            ControlKind::Suspend => self.pause.store(true, Ordering::SeqCst),
            ControlKind::Resume | ControlKind::Retry => {}
        }
    }

    /// Whether a pause was asked for.
    pub(crate) fn paused(&self) -> bool {
        self.pause.load(Ordering::SeqCst)
    }

    /// Records the version the run loaded.
    pub(crate) fn loaded(&self, version: u64) {
        self.loaded_version.store(version, Ordering::SeqCst);
    }

    /// Whether the run committed since it loaded the instance, now at `version`.
    pub(crate) fn committed_by_now(&self, version: u64) -> bool {
        let loaded = self.loaded_version.load(Ordering::SeqCst);
        loaded != 0 && version > loaded
    }

    /// The cancel asked for, once.
    pub(crate) fn take_cancel(&self) -> Option<Option<String>> {
        lock(&self.cancel).take()
    }
}

/// What a requester found about the instance before acting.
enum Found {
    /// Run it here.
    Here(InstanceRecord<String>),
    /// Not run by this runtime: record a request.
    Elsewhere(InstanceRecord<String>),
}

impl Runtime {
    /// Whether this runtime runs the record's definition version.
    fn runs(&self, record: &InstanceRecord<String>) -> bool {
        self.inner
            .workflows
            .get(&record.definition_name)
            .is_some_and(|w| w.version() == record.definition_version)
    }

    /// Loads the instance a control call is about.
    async fn control_target(&self, instance_id: &str) -> Result<Option<Found>, RunError> {
        match self.inner.store.load_instance_text(instance_id).await {
            Ok(record) if self.runs(&record) => Ok(Some(Found::Here(record))),
            Ok(record) => Ok(Some(Found::Elsewhere(record))),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(run_store_error(instance_id, error)),
        }
    }

    /// Records `kind` for the runtime that owns the instance (ENG-50, C-29).
    pub(super) async fn request_control(
        &self,
        instance_id: &str,
        kind: ControlKind,
        reason: Option<String>,
    ) -> Result<Control, RunError> {
        self.inner
            .store
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

    /// Suspends (pauses) an instance (ENG-50): nothing of it runs until [`Runtime::resume`].
    /// A task it is running finishes its current attempt (no cancellation token fires); the
    /// run stops at the next item boundary, and the instance becomes `Suspended/Paused` with
    /// its queue and bookmarks kept and its timers parked (TM-10). Stimuli sent to it meanwhile
    /// are held in the queue and delivered after the resume. Suspending a paused instance
    /// changes nothing.
    ///
    /// When the instance runs in another process, or on a definition version this runtime
    /// does not run, the suspend is recorded durably and [`Control::Requested`] returned: the
    /// runtime that owns it applies it at the instance's next step.
    ///
    /// # Errors
    ///
    /// [`ControlError::InstanceNotFound`] for an unknown id, [`ControlError::AlreadyTerminal`]
    /// for a finished or cancelled instance, [`ControlError::NotSuspendable`] for a faulted one,
    /// [`ControlError::Run`] when the store fails; nothing changes in each case.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::{Control, Runtime, SubStatus, TaskContext, workflow};
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Invoice {
    ///     paid: bool,
    /// }
    ///
    /// async fn mark_paid(ctx: &mut TaskContext<Invoice>) {
    ///     ctx.data_mut().paid = true;
    /// }
    ///
    /// workflow! {
    ///     workflow Billing(Invoice) = sequence [
    ///         wait = event("paid"),
    ///         task(mark_paid),
    ///     ];
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder().register::<Billing>().build()?;
    /// let id = runtime.start::<Billing>(Invoice::default()).await?.instance_id;
    ///
    /// let paused = runtime.suspend(&id).await?;
    /// assert_eq!(paused.applied().and_then(|s| s.sub_status), Some(SubStatus::Paused));
    ///
    /// // While paused, the event is held instead of delivered.
    /// let report = runtime.send(workflow_runtime::Stimulus::new("paid")).await?;
    /// assert_eq!(report.deferred, vec![id.clone()]);
    ///
    /// runtime.resume(&id).await?;
    /// runtime.deliver_queued().await?;
    /// let snapshot = runtime.get_state(&id).await?.ok_or("gone")?;
    /// assert!(snapshot.data::<Invoice>()?.paid);
    /// # let _ = Duration::ZERO;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn suspend(&self, instance_id: &str) -> Result<Control, ControlError> {
        self.ensure_background();
        let result = self.suspend_inner(instance_id).await;
        self.process_links().await;
        result
    }

    async fn suspend_inner(&self, instance_id: &str) -> Result<Control, ControlError> {
        let record = match self.control_target(instance_id).await? {
            None => return Err(not_found(instance_id)),
            Some(Found::Elsewhere(record)) => {
                check_suspendable(&record)?;
                if record.sub_status == Some(SubStatus::Paused) {
                    return Ok(Control::Applied(started_of(&record)));
                }
                return Ok(self
                    .request_control(instance_id, ControlKind::Suspend, None)
                    .await?);
            }
            Some(Found::Here(record)) => record,
        };
        check_suspendable(&record)?;
        // A run of this process stops at its next item boundary and pauses.
        if let Some(run) = lock(&self.inner.running).get(instance_id) {
            run.signals.pause.store(true, Ordering::SeqCst);
        }
        let _local = self.local_run(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found(instance_id)),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .request_control(instance_id, ControlKind::Suspend, None)
                    .await?);
            }
            Err(error) => return Err(run_store_error(instance_id, error).into()),
        };
        let result = self.pause_leased(&guard).await;
        match result {
            Ok(Some(started)) => {
                guard.released_by_commit();
                Ok(Control::Applied(started))
            }
            Ok(None) => {
                guard.release().await;
                let state = self
                    .load_state(instance_id)
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
    pub(super) async fn pause_leased(
        &self,
        guard: &super::LeaseGuard<'_>,
    ) -> Result<Option<Started>, RunError> {
        let (state, commits) = self.load_for_run(guard).await?;
        let requested = commits.control_kind() == Some(ControlKind::Suspend);
        if state.status.is_final() {
            return Ok(None);
        }
        if state.status == WorkflowStatus::Faulted || state.sub_status == Some(SubStatus::Paused) {
            if requested {
                self.clear_request(state, &commits).await?;
                return Ok(self
                    .load_state(guard.instance_id())
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
        let workflow = self.workflow_for(&state)?;
        if requested {
            commits.clear_control_next();
        }
        let output = workflow.pause(state, &self.inner.middleware, self.inner.clock.now());
        let (_, started) = self.commit_and_publish(&commits, output, true).await?;
        Ok(Some(started))
    }

    /// Commits the state unchanged but for its cleared control request, releasing the lease.
    async fn clear_request(
        &self,
        mut state: crate::engine::state::WorkflowState,
        commits: &super::RunCommits<'_>,
    ) -> Result<(), RunError> {
        commits.clear_control_next();
        commits
            .commit(&mut state, true, Vec::new(), Vec::new())
            .await
    }

    /// Resumes a paused instance (ENG-50): its timers are unparked (those that fell due fire
    /// at once, TM-10), its queued work runs on, and the stimuli held for it while it was
    /// paused are delivered by the queue worker.
    ///
    /// When the instance runs in another process, or on a definition version this runtime
    /// does not run, the resume is recorded durably and [`Control::Requested`] returned: the
    /// runtime that owns it applies it.
    ///
    /// # Errors
    ///
    /// [`ControlError::InstanceNotFound`] for an unknown id, [`ControlError::AlreadyTerminal`]
    /// for a finished or cancelled instance, [`ControlError::NotResumable`] for one that is not
    /// paused, [`ControlError::Run`] when its run fails (nothing of it is committed).
    pub async fn resume(&self, instance_id: &str) -> Result<Control, ControlError> {
        self.ensure_background();
        let result = self.resume_inner(instance_id).await;
        self.process_links().await;
        if matches!(result, Ok(Control::Applied(_))) {
            // The stimuli held while it was paused.
            self.inner.doorbell.notify_one();
        }
        result
    }

    async fn resume_inner(&self, instance_id: &str) -> Result<Control, ControlError> {
        let record = match self.control_target(instance_id).await? {
            None => return Err(not_found(instance_id)),
            Some(Found::Elsewhere(record)) => {
                check_resumable(&record)?;
                return Ok(self
                    .request_control(instance_id, ControlKind::Resume, None)
                    .await?);
            }
            Some(Found::Here(record)) => record,
        };
        check_resumable(&record)?;
        let local = self.local_run(instance_id).await;
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::NotFound { .. }) => return Err(not_found(instance_id)),
            Err(StoreError::LeaseHeld { .. }) => {
                return Ok(self
                    .request_control(instance_id, ControlKind::Resume, None)
                    .await?);
            }
            Err(error) => return Err(run_store_error(instance_id, error).into()),
        };
        let started = self.run_leased_as(guard, RunTarget::None, None, true).await;
        drop(local);
        Ok(Control::Applied(started?))
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
            let page = match self.inner.store.list_instances(filter.clone()).await {
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
                if self.stopping() {
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
        let Ok(record) = self.inner.store.load_instance_text(instance_id).await else {
            return;
        };
        let Some(request) = record.control_request.clone() else {
            return;
        };
        if record.status.is_final() || !self.runs(&record) {
            return;
        }
        if let Some(run) = lock(&self.inner.running).get(instance_id) {
            run.signals.signal(&request, &run.token);
            return;
        }
        // Busy here: that run honours a cancel or a suspend as it starts; the next pass
        // takes the rest.
        let Some(local) = self.try_local_run(instance_id) else {
            return;
        };
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::LeaseHeld { .. } | StoreError::NotFound { .. }) => return,
            Err(error) => {
                tracing::warn!(instance = instance_id, %error, "control request: taking the lease failed");
                return;
            }
        };
        let outcome = match request.kind {
            ControlKind::Cancel => match self.cancel_leased(&guard, request.reason.clone()).await {
                Ok(started) => {
                    guard.released_by_commit();
                    Ok(Some(started))
                }
                Err(error) => {
                    guard.release().await;
                    Err(error.to_string())
                }
            },
            ControlKind::Suspend => match self.pause_leased(&guard).await {
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
                let result = self.run_leased_as(guard, RunTarget::None, None, true).await;
                self.inner.doorbell.notify_one();
                result.map(Some).map_err(|e| e.to_string())
            }
            ControlKind::Retry if record.status == WorkflowStatus::Faulted => self
                .retry_with(guard)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            ControlKind::Resume | ControlKind::Retry => {
                // No longer applies: cleared, and said so.
                let cleared = match self.load_for_run(&guard).await {
                    Ok((state, commits)) => self.clear_request(state, &commits).await,
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
        drop(local);
        self.process_links().await;
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

    /// After a run that a requested cancel reached: the cancel, under a new lease (FLT-15).
    /// `None` when it cannot be taken now; the request stays recorded for the next pass.
    pub(super) async fn cancel_after_run(
        &self,
        instance_id: &str,
        reason: Option<String>,
    ) -> Option<Started> {
        let guard = self.lease(instance_id).await.ok()?;
        match self.cancel_leased(&guard, reason).await {
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

    /// Whether a run's output is paused instead of committed as it ended (ENG-50): the pause
    /// applies to a run that stopped at a boundary or went idle.
    pub(super) fn pauses(end: RunEnd) -> bool {
        matches!(end, RunEnd::Budget | RunEnd::Suspended(_))
    }
}

fn not_found(instance_id: &str) -> ControlError {
    ControlError::InstanceNotFound {
        instance: instance_id.to_owned(),
    }
}

fn state_error(instance_id: &str, error: &super::StateError) -> ControlError {
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
