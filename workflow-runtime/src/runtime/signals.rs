//! The runs in progress in this process, and how operators and leases reach them (FLT-15,
//! ENG-50): each run's cancellation token and signals, registered while it runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::lock;
use crate::cancel::CancellationToken;
use crate::store::{ControlKind, ControlRequest};

/// The handle of a run in progress in this process: how operators reach it (FLT-15).
pub(crate) struct RunHandle {
    /// Fired to cancel the task the run is executing.
    pub(crate) token: CancellationToken,
    /// What operators asked of the run.
    pub(crate) signals: Arc<RunSignals>,
}

/// Requests for a run in progress: set by a lease renewal that returned a control request, by
/// the queue worker, or by a suspend in this process.
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

/// The runs this process has in progress, by instance id, and a wake-up for when one ends
/// (for the shutdown).
#[derive(Default)]
pub(crate) struct ActiveRuns {
    runs: Mutex<HashMap<String, RunHandle>>,
    idle: tokio::sync::Notify,
}

impl ActiveRuns {
    /// Registers a run of `instance_id` until the returned guard drops.
    pub(crate) fn register<'r>(
        &'r self,
        instance_id: &'r str,
        token: &CancellationToken,
        signals: &Arc<RunSignals>,
    ) -> ActiveRun<'r> {
        lock(&self.runs).insert(
            instance_id.to_owned(),
            RunHandle {
                token: token.clone(),
                signals: Arc::clone(signals),
            },
        );
        ActiveRun {
            runs: self,
            instance_id,
        }
    }

    /// Calls `f` with the run of `instance_id` in progress here, if there is one.
    pub(crate) fn with<R>(&self, instance_id: &str, f: impl FnOnce(&RunHandle) -> R) -> Option<R> {
        lock(&self.runs).get(instance_id).map(f)
    }

    /// Fires the cancellation token of every run in progress.
    pub(crate) fn cancel_all(&self) {
        for run in lock(&self.runs).values() {
            run.token.cancel();
        }
    }

    /// Waits until this process runs nothing, at most until `deadline`.
    pub(crate) async fn wait_idle(&self, deadline: tokio::time::Instant) {
        loop {
            let idle = self.idle.notified();
            if lock(&self.runs).is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }
}

/// A run registered in [`ActiveRuns`]: forgotten when it drops.
pub(crate) struct ActiveRun<'r> {
    runs: &'r ActiveRuns,
    instance_id: &'r str,
}

impl Drop for ActiveRun<'_> {
    fn drop(&mut self) {
        lock(&self.runs.runs).remove(self.instance_id);
        self.runs.idle.notify_waiters();
    }
}
