//! Hearing of other processes' writes to the file (ST-18, RT-27): the writer connection's
//! `PRAGMA data_version` changes when, and only when, another connection committed (an
//! operator's `workflow` command, say); this store's own commits leave it as it is. The
//! writer thread reads it whenever it has been idle for [`POLL`] (a look at the WAL index,
//! no transaction) and, when it moved, tells the subscribers of
//! [`RemoteHints`](crate::store::RemoteHints): the workers then look at the queue and the
//! timers. A store that only this process writes thus needs no periodic rescan to notice
//! another process's stimulus.

use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::broadcast;

use crate::store::backend::WakeUp;

/// How often an idle writer looks at `data_version`.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// The last `data_version` the writer read, and who hears when it changes.
pub(super) struct Watch {
    last: Option<i64>,
    at: Instant,
    hints: broadcast::Sender<WakeUp>,
}

impl Watch {
    pub(super) fn new(hints: broadcast::Sender<WakeUp>) -> Self {
        Self {
            last: None,
            at: Instant::now(),
            hints,
        }
    }

    /// How long until the next look.
    pub(super) fn due_in(&self) -> Duration {
        POLL.saturating_sub(self.at.elapsed())
    }

    /// Reads `data_version` on the writer's connection (outside a transaction); a change
    /// since the last read is another connection's commit.
    pub(super) fn check(&mut self, conn: &Connection) {
        self.at = Instant::now();
        let Ok(version) = conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0)) else {
            return;
        };
        if self.last.is_some_and(|last| last != version) {
            tracing::debug!("sqlite: another process wrote to the file");
            // No subscriber is not an error: hints are advisory (ST-18).
            let _ = self.hints.send(WakeUp::QueueChanged);
            let _ = self.hints.send(WakeUp::TimersChanged { earliest: None });
        }
        self.last = Some(version);
    }
}
