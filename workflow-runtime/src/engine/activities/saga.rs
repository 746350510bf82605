//! The saga scope as an activity (FLT-10): it runs its body and completes with `done`; what
//! happens when something inside fails is compensation, in the engine's `saga` module.

use super::scope::{Scope, StepError};
use crate::engine::graph::NodeIndex;
use crate::engine::names::ON_SAGA_BODY;
use crate::engine::state::ContextId;

/// The saga scope activity, for any [`Scope`].
pub(crate) trait SagaActivity<'g>: Scope<'g> {
    /// Runs the scope's body.
    fn saga_execute(&mut self, id: ContextId, body: NodeIndex) -> Result<(), StepError> {
        self.schedule_child(id, body, None, Some(ON_SAGA_BODY), None)?;
        Ok(())
    }

    /// The body completed: so does the scope, with `done`.
    fn saga_body_completed(&mut self, id: ContextId) -> Result<(), StepError> {
        self.complete(id, None, vec![workflow_model::DONE.to_owned()])
    }
}

impl<'g, S: Scope<'g> + ?Sized> SagaActivity<'g> for S {}
