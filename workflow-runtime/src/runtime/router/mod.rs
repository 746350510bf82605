//! The router: delivery by `Runtime::send` (RT-14 to RT-24), the trigger index and
//! activation (RT-9 to RT-16), the bookmark queue and its worker (RT-25 to RT-31) and dead
//! letters. What they exchange with callers (the stimulus, reports, errors, the hash) is the
//! public [`crate::routing`] module, one layer down. Every delivery is a run of the run path.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::control::Controller;
use super::definitions::Definitions;
use super::links::Links;
use super::run_path::{Delivery, RunPath};
use crate::base::lock;
use crate::store::{IdempotencyRecord, Micros, Storage};

mod dead_letters;
mod debounce;
mod delivery;
mod queue;
mod triggers;

pub(crate) use debounce::debounce_driver;
pub(crate) use queue::queue_worker;

/// What the router is built with.
pub(crate) struct RouterSettings {
    /// The default queue TTL (RT-28).
    pub(crate) queue_ttl: Micros,
    /// The queue worker's periodic sweep (RT-26).
    pub(crate) queue_sweep: Duration,
    /// The queue worker's doorbell, capacity one (RT-26).
    pub(crate) doorbell: Arc<Notify>,
    /// Set when the runtime shuts down: passes stop between items.
    pub(crate) stop: watch::Receiver<bool>,
}

/// The router (see the module docs).
pub(crate) struct Router {
    store: Storage,
    run_path: Arc<RunPath>,
    links: Arc<Links>,
    controller: Arc<Controller>,
    /// The queue worker's doorbell, capacity one (RT-26).
    doorbell: Arc<Notify>,
    stop: watch::Receiver<bool>,
    /// Set once the triggers are written to the store (RT-9).
    triggers_indexed: tokio::sync::OnceCell<()>,
    /// Serializes queue passes (the worker and `Runtime::deliver_inbox`), and holds the
    /// items this process has put back undelivered and announced once (RT-27): put back
    /// again, they are not announced again.
    queue_passes: tokio::sync::Mutex<HashSet<String>>,
    /// The pending idempotency records of direct sends in progress, by stimulus id, with the
    /// number of sends of that stimulus in progress (concurrent sends with one key share the
    /// first one's): the first commit delivering the stimulus, or creating an instance for
    /// it, writes it (RT-19); the send completes it.
    pending_records: Mutex<HashMap<String, (IdempotencyRecord, usize)>>,
    /// The default queue TTL, µs (RT-28).
    queue_ttl: Micros,
    /// The queue worker's periodic sweep (RT-26).
    queue_sweep: Duration,
}

impl Router {
    pub(crate) fn new(
        run_path: Arc<RunPath>,
        links: Arc<Links>,
        controller: Arc<Controller>,
        settings: RouterSettings,
    ) -> Self {
        Self {
            store: run_path.store().clone(),
            run_path,
            links,
            controller,
            doorbell: settings.doorbell,
            stop: settings.stop,
            triggers_indexed: tokio::sync::OnceCell::new(),
            queue_passes: tokio::sync::Mutex::new(HashSet::new()),
            pending_records: Mutex::new(HashMap::new()),
            queue_ttl: settings.queue_ttl,
            queue_sweep: settings.queue_sweep,
        }
    }

    fn definitions(&self) -> &Definitions {
        self.run_path.definitions()
    }

    /// Whether the runtime is shutting down: passes stop between items.
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Rings the queue worker's doorbell (RT-26).
    pub(crate) fn ring(&self) {
        self.doorbell.notify_one();
    }

    /// The queue worker's doorbell.
    pub(crate) fn doorbell(&self) -> Arc<Notify> {
        Arc::clone(&self.doorbell)
    }

    /// The queue worker's periodic sweep.
    pub(crate) fn queue_sweep(&self) -> Duration {
        self.queue_sweep
    }

    /// A delivery of `stimulus_id` by this router: with a direct send's pending record
    /// when one of this process is delivering it (RT-19).
    fn delivery(&self, stimulus_id: &str, receipt: bool) -> Delivery {
        let delivery = if receipt {
            Delivery::kept(stimulus_id.to_owned())
        } else {
            Delivery::once(stimulus_id.to_owned())
        };
        delivery.with_record(
            lock(&self.pending_records)
                .get(stimulus_id)
                .map(|(record, _)| record.clone()),
        )
    }
}
