//! Sequence (ACT-12): runs its steps one after the other; its index is a property.

use serde_json::{Value, json};

use super::flowchart::take_placement;
use super::scope::{ChildInfo, Scope, StepError, engine_fault};
use crate::engine::graph::NodeIndex;
use crate::engine::names::ON_STEP;
use crate::engine::state::{ActivityStatus, ContextId, JournalKind};

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

    /// ENG-55: a migrated instance's sequence, placed at the step its migration names: the
    /// step is scheduled afresh (its execution is its wait, a timer counted from the instant
    /// it started in the previous version) and the steps before it do not run.
    fn sequence_on_migrated(
        &mut self,
        id: ContextId,
        steps: &[NodeIndex],
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let Some(placement) = take_placement(self, id, child)? else {
            return Ok(());
        };
        let index = steps.iter().position(|&s| {
            let path = self.node_id(s);
            path.rsplit(':').next().unwrap_or(path) == placement.node
        });
        let Some(index) = index else {
            return Err(engine_fault(
                id,
                format!(
                    "a migration placed the sequence at `{}`, not one of its steps",
                    placement.node
                ),
            ));
        };
        self.sequence_next(id, steps, index, placement.input)?;
        if let Some(started_at) = placement.started_at {
            let scheduled = self
                .state()
                .contexts
                .values()
                .filter(|c| c.parent == Some(id) && c.status == ActivityStatus::Pending)
                .map(|c| c.id)
                .max();
            if let Some(c) = scheduled.and_then(|s| self.state_mut().context_mut(s)) {
                c.started_at = Some(started_at);
            }
        }
        Ok(())
    }
}

impl<'g, S: Scope<'g> + ?Sized> SequenceActivity<'g> for S {}
