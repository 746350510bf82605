//! The runtime's core: its services, built from a checked builder and wired once. Each
//! service owns its state; a service calls the services below it (ultimately the run path
//! and the store), never the runtime itself:
//!
//! ```text
//! lifecycle ──> router ──> control ──> links ──> starts ──> run path ──> definitions
//!    │     └──> timers ─────────────────┘                      │
//!    └──> recovery ─────────────────────┘                      └──> store, engine
//! queries ──> run path
//! versions ──> run path
//! ```

use std::sync::Arc;

use tokio::sync::{Notify, watch};

use super::builder::{Checked, RuntimeBuilder};
use super::control::Controller;
use super::definitions::Definitions;
use super::errors::BuildError;
use super::lease::LeaseSettings;
use super::lifecycle::{Lifecycle, LifecycleSettings, Recovery, RetentionPurge};
use super::links::Links;
use super::metrics::Metrics;
use super::queries::Queries;
use super::router::{Router, RouterSettings};
use super::run_path::{RunPath, RunPathSettings};
use super::starts::Starts;
use super::timers::Timers;
use super::versions::Versions;
use crate::base::new_ulid;
use crate::clock::SystemClock;
use crate::store::Storage;

/// The services of one runtime.
pub(crate) struct Core {
    pub(super) store: Storage,
    pub(super) run_path: Arc<RunPath>,
    pub(super) starts: Arc<Starts>,
    pub(super) links: Arc<Links>,
    pub(super) controller: Arc<Controller>,
    pub(super) queries: Queries,
    pub(super) router: Arc<Router>,
    pub(super) timers: Arc<Timers>,
    pub(super) lifecycle: Lifecycle,
    pub(super) versions: Versions,
}

impl Core {
    /// Checks `builder` and builds the services it describes.
    pub(crate) fn build(mut builder: RuntimeBuilder) -> Result<Self, BuildError> {
        let Checked {
            workflows,
            versions,
            store,
            queues,
        } = builder.checked()?;
        let clock = builder
            .clock
            .take()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let owner = builder.owner.take().unwrap_or_else(new_ulid);
        let lease = LeaseSettings::new(builder.lease_ttl, builder.lease_renewal);
        let queue_ttl = i64::try_from(builder.queue_ttl.as_micros()).unwrap_or(i64::MAX);
        let (stop, _) = watch::channel(false);
        let doorbell = Arc::new(Notify::new());
        let metrics = Arc::new(Metrics::new(workflows.keys(), builder.metrics));
        let definitions = Arc::new(Definitions::new(
            workflows,
            versions,
            Arc::clone(&clock),
            builder.journal_level,
            builder.max_journal_entries,
            std::mem::take(&mut builder.trace),
        ));
        let run_path = Arc::new(RunPath::new(RunPathSettings {
            store: store.clone(),
            owner: owner.clone(),
            lease,
            definitions,
            clock: Arc::clone(&clock),
            middleware: std::mem::take(&mut builder.middleware),
            commit_strategy: builder.commit_strategy,
            max_steps_per_run: builder.max_steps_per_run,
            cancel_grace: builder.cancel_grace,
            queue_ttl,
            event_buffer: builder.event_buffer,
            metrics,
            flow: Some(Arc::new(crate::engine::slots::FlowGate::new(
                store.clone(),
                owner.clone(),
                queues,
                lease.ttl_micros(),
            ))),
        }));
        let starts = Arc::new(Starts::new(Arc::clone(&run_path)));
        let links = Arc::new(Links::new(Arc::clone(&run_path), Arc::clone(&starts)));
        // QU-11: a release naming a holder whose instance is suspended waiting for the slot
        // resumes it at once, in this process.
        if let Some(gate) = run_path.flow() {
            let (run_path, links) = (Arc::downgrade(&run_path), Arc::downgrade(&links));
            gate.set_waker(Box::new(move |instance: String| {
                let (run_path, links) = (run_path.clone(), links.clone());
                tokio::spawn(async move {
                    let Some(run_path) = run_path.upgrade() else {
                        return;
                    };
                    run_path.resume_slot_waits(&instance).await;
                    drop(run_path);
                    if let Some(links) = links.upgrade() {
                        links.process().await;
                    }
                });
            }));
        }
        let controller = Arc::new(Controller::new(
            Arc::clone(&run_path),
            Arc::clone(&links),
            Arc::clone(&doorbell),
            stop.subscribe(),
        ));
        let router = Arc::new(Router::new(
            Arc::clone(&run_path),
            Arc::clone(&links),
            Arc::clone(&controller),
            RouterSettings {
                queue_ttl,
                queue_sweep: builder.queue_sweep,
                doorbell,
                stop: stop.subscribe(),
            },
        ));
        let timers = Arc::new(Timers::new(
            Arc::clone(&run_path),
            Arc::clone(&links),
            clock,
            builder.sweep_interval,
        ));
        let recovery = Arc::new(Recovery::new(
            Arc::clone(&run_path),
            Arc::clone(&links),
            stop.subscribe(),
        ));
        let retention = Arc::new(RetentionPurge::new(
            store.clone(),
            owner,
            lease.ttl,
            builder.retention.clone(),
        ));
        let lifecycle = Lifecycle::new(
            Arc::clone(&run_path),
            Arc::clone(&router),
            Arc::clone(&timers),
            recovery,
            retention,
            LifecycleSettings {
                timer_driver: builder.timer_driver,
                queue_worker: builder.queue_worker,
                recovery_every: builder.recovery_sweep,
                cancel_grace: builder.cancel_grace,
                stop,
            },
        );
        Ok(Self {
            store,
            queries: Queries::new(Arc::clone(&run_path)),
            versions: Versions::new(Arc::clone(&run_path)),
            run_path,
            starts,
            links,
            controller,
            router,
            timers,
            lifecycle,
        })
    }
}
