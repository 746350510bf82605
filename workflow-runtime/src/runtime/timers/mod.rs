//! Durable timers (TM-3 to TM-10): the in-process driver that waits precisely for the earliest
//! due time and re-arms on hints (TM-4), the sweep as a fallback and the startup load (TM-5,
//! TM-8), firing under a claim so one process fires each timer (TM-6), and time-trigger
//! schedules. The timer row a bookmark owns (TM-3) is the engine's `names::timer_of`. A timer
//! fires through the run path, as a resume of its bookmark.

use std::sync::Arc;
use std::time::Duration;

use super::links::Links;
use super::run_path::RunPath;
use crate::clock::Clock;
use crate::store::Storage;

mod driver;
mod schedules;

pub use driver::TimerFiring;
pub(crate) use driver::timer_driver;

/// The timers service (see the module docs).
pub(crate) struct Timers {
    store: Storage,
    run_path: Arc<RunPath>,
    links: Arc<Links>,
    /// Workflow time (TM-1).
    clock: Arc<dyn Clock>,
    /// The time triggers' schedules were written (TM-11 to TM-13).
    schedules_written: tokio::sync::OnceCell<()>,
    /// The timer driver's fallback sweep (TM-5); `None` disables it.
    fallback_sweep: Option<Duration>,
}

impl Timers {
    pub(crate) fn new(
        run_path: Arc<RunPath>,
        links: Arc<Links>,
        clock: Arc<dyn Clock>,
        fallback_sweep: Option<Duration>,
    ) -> Self {
        Self {
            store: run_path.store().clone(),
            run_path,
            links,
            clock,
            schedules_written: tokio::sync::OnceCell::new(),
            fallback_sweep,
        }
    }
}
