//! Durable timers (TM-3 to TM-10): timer rows written with their bookmarks (TM-3),
//! the in-process driver that waits precisely for the earliest due time and re-arms on hints
//! (TM-4), the sweep as a fallback and the startup load (TM-5, TM-8), and firing under a
//! claim so one process fires each timer (TM-6).

mod driver;
mod schedules;

pub use driver::TimerFiring;
pub(crate) use driver::{DEFAULT_SWEEP, drive_timers};

use serde_json::Value;

use crate::base::ms_to_micros;
use crate::engine::names::Reserved;
use crate::engine::state::Bookmark;
use crate::store::NewTimer;

/// The timer row of a timer bookmark (TM-3): its id is the bookmark's, its due time the
/// payload's `due_at` (ms).
pub(crate) fn timer_of(bookmark: &Bookmark) -> Option<NewTimer> {
    let kind = Reserved::from_name(&bookmark.name)?.timer_kind()?;
    let due_at = bookmark.payload.get("due_at").and_then(Value::as_u64)?;
    Some(NewTimer {
        timer_id: bookmark.id.clone(),
        kind: kind.to_owned(),
        due_at: ms_to_micros(due_at),
    })
}
