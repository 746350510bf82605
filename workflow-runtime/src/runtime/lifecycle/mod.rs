//! The runtime's lifecycle: the background work started at build (the timer driver, the queue
//! worker, the recovery sweep and the retention purge), recovery, and the shutdown.
//!
//! `RuntimeBuilder::build` called inside a tokio runtime starts the background work on it.
//! Built outside one, the runtime starts it on the tokio runtime of its first operation
//! (`Runtime::start`, `Runtime::send`, ...), or when `Runtime::run_background` is called; that
//! call reports [`LifecycleError::NoTokioRuntime`] outside tokio instead of leaving timers and
//! queued stimuli silently unserved. A task whose tokio runtime was dropped is started again on
//! the next operation's. Each task holds only a weak reference to the service it serves
//! between passes, so dropping the last clone of the runtime ends them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::errors::LifecycleError;
use super::router::{Router, debounce_driver, queue_worker};
use super::run_path::RunPath;
use super::timers::{Timers, timer_driver};
use crate::base::lock;

mod purge;
mod recovery;

pub(crate) use purge::RetentionPurge;
pub(crate) use recovery::Recovery;

/// The handles of the background tasks, and whether they should run.
#[derive(Debug, Default)]
struct Background {
    /// The timer driver (TM-4).
    timers: Option<JoinHandle<()>>,
    /// The debounce driver (RT-35), run with the timer driver.
    debounce: Option<JoinHandle<()>>,
    /// The queue worker (RT-26).
    queue: Option<JoinHandle<()>>,
    /// The recovery sweep (ENG-25, ENG-26).
    recovery: Option<JoinHandle<()>>,
    /// The retention purge (ST-30).
    retention: Option<JoinHandle<()>>,
    /// Set by the shutdown: operations do not start the work again by themselves.
    shut_down: bool,
}

impl Background {
    fn live(handle: Option<&JoinHandle<()>>) -> bool {
        handle.is_some_and(|h| !h.is_finished())
    }
}

/// Which background tasks run.
pub(crate) struct LifecycleSettings {
    /// Whether the timer driver runs in the background (TM-4).
    pub(crate) timer_driver: bool,
    /// Whether the queue worker runs in the background (RT-26).
    pub(crate) queue_worker: bool,
    /// The recovery sweep's interval; `None`: only `Runtime::recover` recovers.
    pub(crate) recovery_every: Option<Duration>,
    /// ENG-52's grace for cancelled tasks, waited for at shutdown.
    pub(crate) cancel_grace: Duration,
    /// Stops the background tasks; dropped with the runtime.
    pub(crate) stop: watch::Sender<bool>,
}

/// The lifecycle (see the module docs).
pub(crate) struct Lifecycle {
    run_path: Arc<RunPath>,
    router: Arc<Router>,
    timers: Arc<Timers>,
    recovery: Arc<Recovery>,
    retention: Arc<RetentionPurge>,
    background: Mutex<Background>,
    settings: LifecycleSettings,
}

impl Lifecycle {
    pub(crate) fn new(
        run_path: Arc<RunPath>,
        router: Arc<Router>,
        timers: Arc<Timers>,
        recovery: Arc<Recovery>,
        retention: Arc<RetentionPurge>,
        settings: LifecycleSettings,
    ) -> Self {
        Self {
            run_path,
            router,
            timers,
            recovery,
            retention,
            background: Mutex::new(Background::default()),
            settings,
        }
    }

    /// Recovery, run by hand.
    pub(crate) fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The retention purge, run by hand.
    pub(crate) fn retention(&self) -> &RetentionPurge {
        &self.retention
    }

    /// Starts the background work that is enabled and not running on the current tokio
    /// runtime, even after a shutdown: see `Runtime::run_background`.
    pub(crate) fn run_background(&self) -> Result<(), LifecycleError> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Err(LifecycleError::NoTokioRuntime);
        };
        let mut background = lock(&self.background);
        background.shut_down = false;
        self.settings.stop.send_replace(false);
        self.spawn_missing(&mut background, &handle);
        Ok(())
    }

    /// What every operation calls first: starts the background work that is missing, on
    /// the current tokio runtime, unless shut down (see the module docs).
    pub(crate) fn ensure_background(&self) {
        let mut background = lock(&self.background);
        if background.shut_down {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.spawn_missing(&mut background, &handle);
    }

    fn spawn_missing(&self, background: &mut Background, handle: &tokio::runtime::Handle) {
        if self.settings.timer_driver && !Background::live(background.timers.as_ref()) {
            background.timers = Some(self.spawn_timer_driver(handle));
        }
        if self.settings.timer_driver && !Background::live(background.debounce.as_ref()) {
            background.debounce = Some(self.spawn_debounce_driver(handle));
        }
        if self.settings.queue_worker && !Background::live(background.queue.as_ref()) {
            background.queue = Some(self.spawn_queue_worker(handle));
            // RT-26: a registration rings the doorbell.
            self.router.ring();
        }
        if let Some(every) = self.settings.recovery_every
            && !Background::live(background.recovery.as_ref())
        {
            background.recovery = Some(handle.spawn(recovery::recovery_sweep(
                Arc::downgrade(&self.recovery),
                self.settings.stop.subscribe(),
                self.run_path.store().subscribe(),
                every,
            )));
        }
        if let Some(every) = self.retention.every()
            && !Background::live(background.retention.as_ref())
        {
            background.retention = Some(handle.spawn(purge::retention_purge(
                Arc::downgrade(&self.retention),
                self.settings.stop.subscribe(),
                every.max(Duration::from_millis(1)),
            )));
        }
    }

    fn spawn_timer_driver(&self, handle: &tokio::runtime::Handle) -> JoinHandle<()> {
        handle.spawn(timer_driver(
            Arc::downgrade(&self.timers),
            self.run_path.store().subscribe(),
            self.settings.stop.subscribe(),
        ))
    }

    fn spawn_debounce_driver(&self, handle: &tokio::runtime::Handle) -> JoinHandle<()> {
        handle.spawn(debounce_driver(
            Arc::downgrade(&self.router),
            self.run_path.store().subscribe(),
            self.settings.stop.subscribe(),
            self.router.queue_sweep(),
        ))
    }

    fn spawn_queue_worker(&self, handle: &tokio::runtime::Handle) -> JoinHandle<()> {
        handle.spawn(queue_worker(
            Arc::downgrade(&self.router),
            self.router.doorbell(),
            self.settings.stop.subscribe(),
            self.run_path.store().subscribe(),
            self.router.queue_sweep(),
        ))
    }

    /// Starts the timer driver unless one runs: see `Runtime::start_timer_driver`.
    pub(crate) fn start_timer_driver(&self) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let mut background = lock(&self.background);
        if Background::live(background.timers.as_ref()) {
            return false;
        }
        background.timers = Some(self.spawn_timer_driver(&handle));
        if !Background::live(background.debounce.as_ref()) {
            background.debounce = Some(self.spawn_debounce_driver(&handle));
        }
        true
    }

    /// Starts the queue worker unless one runs (the triggers are indexed already): see
    /// `Runtime::start_workers`.
    pub(crate) fn start_queue_worker(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut background = lock(&self.background);
        if Background::live(background.queue.as_ref()) {
            return;
        }
        self.settings.stop.send_replace(false);
        background.queue = Some(self.spawn_queue_worker(&handle));
        // RT-26: a registration rings the doorbell.
        self.router.ring();
    }

    /// Whether the queue worker runs.
    #[cfg(test)]
    pub(crate) fn queue_worker_runs(&self) -> bool {
        lock(&self.background).queue.is_some()
    }

    /// Shuts the runtime down: see `Runtime::shutdown`.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        lock(&self.background).shut_down = true;
        self.settings.stop.send_replace(true);
        let active = self.run_path.active();
        // ENG-51: running tasks get their grace before their tokens fire.
        let deadline = tokio::time::Instant::now() + grace;
        active.wait_idle(deadline).await;
        active.cancel_all();
        let deadline = tokio::time::Instant::now() + self.settings.cancel_grace;
        active.wait_idle(deadline).await;
        let handles: Vec<JoinHandle<()>> = {
            let mut background = lock(&self.background);
            [
                background.timers.take(),
                background.debounce.take(),
                background.queue.take(),
                background.recovery.take(),
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
        let flushed = tokio::time::timeout(FLUSH_BOUND, self.run_path.store().flush_hints()).await;
        if flushed.is_err() {
            tracing::warn!(bound = ?FLUSH_BOUND, "shutdown: the store's last wake-ups for other processes were not sent in time");
        }
    }
}

/// How long the shutdown waits for the store's last wake-ups to be sent.
const FLUSH_BOUND: Duration = Duration::from_secs(2);
