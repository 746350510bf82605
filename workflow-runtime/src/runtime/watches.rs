//! Awaiters' wake-ups (ENG-48): a counter per awaited instance, bumped after each commit of
//! this process, so an awaiter re-reads the store at once instead of at its next poll.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::base::lock;

/// The watched instances, by id.
#[derive(Default)]
pub(crate) struct Watches {
    watches: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Watches {
    /// A receiver told of each commit of `instance_id` from now on.
    pub(crate) fn subscribe(&self, instance_id: &str) -> watch::Receiver<u64> {
        lock(&self.watches)
            .entry(instance_id.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes the awaiters of `instance_id`, if any.
    pub(crate) fn notify(&self, instance_id: &str) {
        if let Some(watch) = lock(&self.watches).get(instance_id) {
            watch.send_modify(|n| *n += 1);
        }
    }

    /// Forgets the watch of `instance_id` once nobody awaits it.
    pub(crate) fn release(&self, instance_id: &str) {
        let mut watches = lock(&self.watches);
        if watches
            .get(instance_id)
            .is_some_and(|w| w.receiver_count() == 0)
        {
            watches.remove(instance_id);
        }
    }

    /// Forgets the watch of `instance_id` (it was purged).
    pub(crate) fn remove(&self, instance_id: &str) {
        lock(&self.watches).remove(instance_id);
    }
}
