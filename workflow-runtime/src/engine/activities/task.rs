//! Task (ACT-11): runs a registered task fn, one attempt at a time (the engine's `attempt`
//! module); a retry waits on a `wf.retry` timer whose callback starts the next attempt (FLT-3).

use super::scope::{Scope, StepError};
use crate::engine::state::{ContextId, EntryPoint, WorkItem};

/// The Task activity, for any [`Scope`].
pub(crate) trait TaskActivity<'g>: Scope<'g> {
    /// FLT-3: the retry timer fired: the next attempt runs as a fresh `execute`.
    fn task_retry_due(&mut self, id: ContextId) -> Result<(), StepError> {
        self.state_mut().queue.push_back(WorkItem {
            context: id,
            entry: EntryPoint::Execute,
        });
        Ok(())
    }
}

impl<'g, S: Scope<'g> + ?Sized> TaskActivity<'g> for S {}
