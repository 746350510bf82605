//! Sequence (ACT-12): runs its steps one after the other; its index is a property.

use serde_json::{Value, json};

use super::scope::{ChildInfo, Scope, StepError};
use crate::engine::graph::NodeIndex;
use crate::engine::names::ON_STEP;
use crate::engine::state::{ContextId, JournalKind};

/// The property holding a sequence's current index (ACT-12).
const INDEX: &str = "index";

/// The Sequence activity, for any [`Scope`].
pub(crate) trait SequenceActivity<'g>: Scope<'g> {
    /// Schedules the step at `index` with `input` as its input (ACT-5): the sequence's own
    /// input for the first step, the previous step's output for the next ones (an event's
    /// payload, read by the next task with `TaskContext::input`, as in a flowchart).
    fn sequence_next(
        &mut self,
        id: ContextId,
        steps: &[NodeIndex],
        index: usize,
        input: Option<Value>,
    ) -> Result<(), StepError> {
        let Some(&step) = steps.get(index) else {
            return self.complete(id, None, Vec::new());
        };
        if let Some(c) = self.state_mut().context_mut(id) {
            c.properties.insert(INDEX.to_owned(), json!(index));
        }
        let child = self.schedule_child(id, step, Some(index.to_string()), Some(ON_STEP), None)?;
        if let Some(c) = self.state_mut().context_mut(child) {
            c.input = input;
        }
        Ok(())
    }

    fn sequence_step_completed(
        &mut self,
        id: ContextId,
        steps: &[NodeIndex],
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let index = self
            .state()
            .context(id)
            .and_then(|c| c.properties.get(INDEX))
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(0);
        let expected = steps.get(index).map(|&s| self.node_id(s));
        if expected != Some(child.node_id.as_str()) {
            self.record(JournalKind::Declined, Some(id), json!({"stale": child.id}));
            return Ok(());
        }
        self.sequence_next(id, steps, index + 1, child.result.clone())
    }
}

impl<'g, S: Scope<'g> + ?Sized> SequenceActivity<'g> for S {}
