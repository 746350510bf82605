//! The work between instances that commits queue (ACT-24): children to start, parents to
//! resume with their children's results, children of cancelled SubWorkflows to cancel. The run
//! path fills it after each commit; the links service carries it out before the call that
//! caused it returns.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use crate::base::lock;
use crate::engine::executor::Link;

/// The links queued by this process's commits.
#[derive(Default)]
pub(crate) struct Outbox {
    links: Mutex<VecDeque<Link>>,
    /// Children created by their parent's commit whose first run is still to do.
    created: Mutex<HashSet<String>>,
    /// Final children's results queued by their commit, for the in-process resume of their
    /// parent to ack: `(parent, bookmark)` to `(item id, stimulus id)`.
    child_results: Mutex<HashMap<(String, String), (String, String)>>,
}

impl Outbox {
    /// Queues `link`.
    pub(crate) fn push(&self, link: Link) {
        lock(&self.links).push_back(link);
    }

    /// Queues `links`, then `last` if any.
    pub(crate) fn extend(&self, links: Vec<Link>, last: Option<Link>) {
        let mut queued = lock(&self.links);
        queued.extend(links);
        queued.extend(last);
    }

    /// The next link, oldest first.
    pub(crate) fn pop(&self) -> Option<Link> {
        lock(&self.links).pop_front()
    }

    /// Notes children a commit created, whose first run is to do.
    pub(crate) fn created(&self, ids: Vec<String>) {
        lock(&self.created).extend(ids);
    }

    /// Whether a commit created `instance_id` (forgotten now).
    pub(crate) fn take_created(&self, instance_id: &str) -> bool {
        lock(&self.created).remove(instance_id)
    }

    /// Notes the queue item that carries a final child's result to `(parent, bookmark)`.
    pub(crate) fn child_result(&self, key: (String, String), item: (String, String)) {
        lock(&self.child_results).insert(key, item);
    }

    /// The `(item id, stimulus id)` of the child's result for `(parent, bookmark)`, once.
    pub(crate) fn take_child_result(&self, key: &(String, String)) -> Option<(String, String)> {
        lock(&self.child_results).remove(key)
    }
}
