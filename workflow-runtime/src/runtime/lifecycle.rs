//! The runtime's lifecycle: the background work started at build (the timer driver, the queue
//! worker and the recovery sweep) and [`Runtime::shutdown`].
//!
//! [`RuntimeBuilder::build`](super::RuntimeBuilder::build) called inside a tokio runtime
//! starts the background work on it. Built outside one, the runtime starts it on the tokio
//! runtime of its first operation ([`Runtime::start`], [`Runtime::send`], ...), or when
//! [`Runtime::run_background`] is called; that call reports [`LifecycleError::NoTokioRuntime`]
//! outside tokio instead of leaving timers and queued stimuli silently unserved. A task whose
//! tokio runtime was dropped is started again on the next operation's. Each task holds only a
//! weak reference to the runtime between passes, so dropping the last clone ends them.

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Inner, RecoveryReport, Runtime, lock};

/// The default interval of the recovery sweep: 10 s.
pub(crate) const DEFAULT_RECOVERY_SWEEP: Duration = Duration::from_secs(10);

/// Why the background work could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// Called outside a tokio runtime: timers, the bookmark queue and recovery need one.
    #[error(
        "no tokio runtime: the timer driver, the queue worker and the recovery sweep run on tokio; call this inside a tokio runtime"
    )]
    NoTokioRuntime,
}

/// The handles of the background tasks, and whether they should run.
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// The timer driver (TM-4).
    pub(crate) timers: Option<JoinHandle<()>>,
    /// The queue worker (RT-26).
    pub(crate) queue: Option<JoinHandle<()>>,
    /// The recovery sweep (ENG-25, ENG-26).
    pub(crate) sweep: Option<JoinHandle<()>>,
    /// The retention purge (ST-30).
    pub(crate) retention: Option<JoinHandle<()>>,
    /// Set by [`Runtime::shutdown`]: operations do not start the work again by themselves.
    pub(crate) shut_down: bool,
}

impl Background {
    fn live(handle: Option<&JoinHandle<()>>) -> bool {
        handle.is_some_and(|h| !h.is_finished())
    }
}

impl Runtime {
    /// Starts the background work on the current tokio runtime, whichever part of it is
    /// enabled and not running (the timer driver unless
    /// [`RuntimeBuilder::timer_driver`](super::RuntimeBuilder::timer_driver) is off, the
    /// queue worker unless [`RuntimeBuilder::queue_worker`](super::RuntimeBuilder::queue_worker)
    /// is off, the recovery sweep unless
    /// [`RuntimeBuilder::recovery_sweep`](super::RuntimeBuilder::recovery_sweep) is `None`,
    /// the retention purge unless [`Retention::every`](super::Retention) is `None`).
    /// `build` inside tokio and every operation do it already; after
    /// [`Runtime::shutdown`] only this call starts the work again.
    ///
    /// # Errors
    ///
    /// [`LifecycleError::NoTokioRuntime`] outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let runtime = workflow_runtime::Runtime::builder().build()?;
    /// runtime.run_background()?;
    /// runtime.shutdown(std::time::Duration::from_secs(1)).await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn run_background(&self) -> Result<(), LifecycleError> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Err(LifecycleError::NoTokioRuntime);
        };
        let mut background = lock(&self.inner.background);
        background.shut_down = false;
        self.inner.stop.send_replace(false);
        self.spawn_missing(&mut background, &handle);
        Ok(())
    }

    /// What every operation calls first: starts the background work that is missing, on
    /// the current tokio runtime, unless shut down (see the module docs).
    pub(crate) fn ensure_background(&self) {
        let mut background = lock(&self.inner.background);
        if background.shut_down {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.spawn_missing(&mut background, &handle);
    }

    fn spawn_missing(&self, background: &mut Background, handle: &tokio::runtime::Handle) {
        let weak = std::sync::Arc::downgrade(&self.inner);
        if self.inner.timer_driver && !Background::live(background.timers.as_ref()) {
            background.timers = Some(handle.spawn(super::timers::drive_timers(
                weak.clone(),
                self.inner.store.subscribe(),
                self.inner.stop.subscribe(),
            )));
        }
        if self.inner.queue_worker && !Background::live(background.queue.as_ref()) {
            background.queue = Some(handle.spawn(super::router::queue::worker(
                weak.clone(),
                std::sync::Arc::clone(&self.inner.doorbell),
                self.inner.stop.subscribe(),
                self.inner.store.subscribe(),
                self.inner.sweep,
            )));
            // RT-26: a registration rings the doorbell.
            self.inner.doorbell.notify_one();
        }
        if let Some(every) = self.inner.recovery_sweep
            && !Background::live(background.sweep.as_ref())
        {
            background.sweep =
                Some(handle.spawn(sweep(weak.clone(), self.inner.stop.subscribe(), every)));
        }
        if let Some(every) = self.inner.retention.every
            && !Background::live(background.retention.as_ref())
        {
            background.retention = Some(handle.spawn(super::retention::purge(
                weak,
                self.inner.stop.subscribe(),
                every.max(Duration::from_millis(1)),
            )));
        }
    }

    /// Whether [`Runtime::shutdown`] is stopping this runtime: background passes stop
    /// between items.
    pub(crate) fn stopping(&self) -> bool {
        *self.inner.stop.borrow()
    }

    /// Shuts this runtime down (RT-26, ENG-36, ENG-51, ENG-52). The timer driver, the queue
    /// worker and the recovery sweep stop, and are awaited: once this returns and the last
    /// clone is dropped, nothing of the runtime holds its store (a SQLite file reopens at
    /// once). The tasks this process is running get up to `grace` to finish; then their
    /// cancellation tokens fire and their runs are *interrupted*: abandoned without a commit
    /// and without counting an attempt, so the instances continue from their last commit in
    /// the next process (its recovery sweep runs them). A task that ignores its token is
    /// dropped after [`RuntimeBuilder::cancel_grace`](super::RuntimeBuilder::cancel_grace).
    /// Build a new runtime to run again (or call [`Runtime::run_background`]). Last, the
    /// store's wake-ups for other processes still waiting to be sent are sent
    /// ([`Storage::flush_hints`](crate::store::Storage::flush_hints), at most 2 s).
    pub async fn shutdown(&self, grace: Duration) {
        lock(&self.inner.background).shut_down = true;
        self.inner.stop.send_replace(true);
        // ENG-51: running tasks get their grace before their tokens fire.
        let deadline = tokio::time::Instant::now() + grace;
        self.wait_idle(deadline).await;
        for run in lock(&self.inner.running).values() {
            run.token.cancel();
        }
        let deadline = tokio::time::Instant::now() + self.inner.cancel_grace;
        self.wait_idle(deadline).await;
        let handles: Vec<JoinHandle<()>> = {
            let mut background = lock(&self.inner.background);
            [
                background.timers.take(),
                background.queue.take(),
                background.sweep.take(),
                background.retention.take(),
            ]
            .into_iter()
            .flatten()
            .collect()
        };
        for handle in handles {
            // A task of a tokio runtime that is gone was cancelled with it.
            let _ = handle.await;
        }
        // RT-27: the other processes hear of this one's last writes (the items its worker
        // put back, its last commits) before it goes; a store that cannot send them within
        // the bound does not hold the shutdown (the others' sweeps find the work).
        let flushed = tokio::time::timeout(FLUSH_BOUND, self.inner.store.flush_hints()).await;
        if flushed.is_err() {
            tracing::warn!(bound = ?FLUSH_BOUND, "shutdown: the store's last wake-ups for other processes were not sent in time");
        }
    }

    /// Waits until this process runs no task, at most until `deadline`.
    async fn wait_idle(&self, deadline: tokio::time::Instant) {
        loop {
            let idle = self.inner.idle.notified();
            if lock(&self.inner.running).is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }
}

/// How long [`Runtime::shutdown`] waits for the store's last wake-ups to be sent.
const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// The recovery sweep (ENG-25, ENG-26): one pass at once, then one every `every`, each
/// running again the `Running` instances whose lease is free or expired (a process died
/// during their run, or before their first one): one indexed query, no other instance is
/// read. (A parent whose child finished before a crash is resumed by the queue: the child's
/// final commit queued its result, ACT-24.)
async fn sweep(weak: Weak<Inner>, mut stop: watch::Receiver<bool>, every: Duration) {
    loop {
        {
            let Some(inner) = weak.upgrade() else { return };
            let runtime = Runtime { inner };
            if runtime.stopping() {
                return;
            }
            let mut report = RecoveryReport::default();
            if let Err(error) = runtime.recovery_pass(&mut report, true).await {
                tracing::warn!(%error, "recovery sweep: claiming runnable instances failed");
            }
            log_report(&report);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

fn log_report(report: &RecoveryReport) {
    for error in &report.failed {
        tracing::warn!(%error, "recovery sweep: an interrupted instance could not run");
    }
    for parent in &report.parents_resumed {
        tracing::info!(instance = %parent, "recovery sweep: resumed a parent whose child had finished");
    }
}
