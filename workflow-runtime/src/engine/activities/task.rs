//! Task (ACT-11): runs a registered task fn, one attempt at a time (the engine's `attempt`
//! module); a retry waits on a `wf.retry` timer whose callback starts the next attempt (FLT-3).

use crate::engine::executor::{Executor, StepError};
use crate::engine::state::{ContextId, EntryPoint, WorkItem};

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// FLT-3: the retry timer fired: the next attempt runs as a fresh `execute`.
    pub(crate) fn task_retry_due(&mut self, id: ContextId) -> Result<(), StepError> {
        self.state.queue.push_back(WorkItem {
            context: id,
            entry: EntryPoint::Execute,
        });
        Ok(())
    }
}
