//! Durable timers (TM-3 to TM-10): the in-process driver that waits precisely for the earliest
//! due time and re-arms on hints (TM-4), the sweep as a fallback and the startup load (TM-5,
//! TM-8), firing under a claim so one process fires each timer (TM-6), and time-trigger
//! schedules. The timer row a bookmark owns (TM-3) is the engine's `names::timer_of`.

mod driver;
mod schedules;

pub use driver::TimerFiring;
pub(crate) use driver::{DEFAULT_SWEEP, drive_timers};
