//! This process's turns to run an instance: runs of one instance in one process queue on a
//! local lock instead of meeting each other's lease (the lease still fences other processes,
//! ST-14). The recovery sweep never waits for a turn: it hands an instance another run of this
//! process holds back at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::base::lock;

/// The local locks of the instances this process runs or waits to run.
#[derive(Default)]
pub(crate) struct Turns {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// Waits for this process's other runs of the instance; the turn forgets the instance's
    /// lock when nobody else waits on it.
    pub(crate) async fn take(&self, instance_id: &str) -> Turn<'_> {
        let mutex = self.entry(instance_id);
        let guard = mutex.clone().lock_owned().await;
        Turn {
            turns: self,
            instance_id: instance_id.to_owned(),
            mutex: Some(mutex),
            guard: Some(guard),
        }
    }

    /// The turn if nobody here holds the instance now.
    pub(crate) fn try_take(&self, instance_id: &str) -> Option<Turn<'_>> {
        let mutex = self.entry(instance_id);
        let guard = mutex.clone().try_lock_owned().ok()?;
        Some(Turn {
            turns: self,
            instance_id: instance_id.to_owned(),
            mutex: Some(mutex),
            guard: Some(guard),
        })
    }

    fn entry(&self, instance_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.locks)
            .entry(instance_id.to_owned())
            .or_default()
            .clone()
    }
}

/// This process's turn to run an instance, held until it drops.
pub(crate) struct Turn<'r> {
    turns: &'r Turns,
    instance_id: String,
    mutex: Option<Arc<tokio::sync::Mutex<()>>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = lock(&self.turns.locks);
        // The map's reference and ours: nobody else waits.
        if self
            .mutex
            .take()
            .is_some_and(|m| Arc::strong_count(&m) == 2)
        {
            locks.remove(&self.instance_id);
        }
    }
}
