//! Loops: While (ACT-15), ForEach (ACT-16) and ParallelForEach (ACT-17). Each keeps its
//! iteration or index and its snapshot of the items in its properties (ENG-6); nothing grows
//! with iterations (ENG-7). ForEach and ParallelForEach put `item` and `index` on each body
//! context (ACT-8).

use serde_json::{Value, json};

use super::scope::done;
use super::scope::{ChildInfo, Scope, StepError};
use super::time::TimeActivity;
use crate::engine::graph::{NodeIndex, NodeKind};
use crate::engine::names::ON_BODY;
use crate::engine::state::ContextId;

const ITERATION: &str = "iteration";
const ITEMS: &str = "items";
const INDEX: &str = "index";
const NEXT: &str = "next";
const DONE_COUNT: &str = "done";
/// The variable name of a loop's current item (ACT-8).
const ITEMS_VAR: &str = "item";

/// The While, ForEach and ParallelForEach activities, for any [`Scope`].
pub(crate) trait LoopActivity<'g>: Scope<'g> {
    // ---- While (ACT-15) -----------------------------------------------------------------
    fn while_next(
        &mut self,
        id: ContextId,
        condition: &str,
        body: NodeIndex,
    ) -> Result<(), StepError> {
        if !self.condition(id, Some(condition), None)? {
            return self.complete(id, None, done());
        }
        let iteration = self.prop_u64(id, ITERATION) + 1;
        self.set_prop(id, ITERATION, json!(iteration));
        self.schedule_child(id, body, Some(iteration.to_string()), Some(ON_BODY), None)?;
        Ok(())
    }

    // ---- ForEach (ACT-16) and ParallelForEach (ACT-17) ----------------------------------
    /// Takes the snapshot of the items once, at start (ACT-16).
    fn loop_snapshot(&mut self, id: ContextId, items: &str) -> Result<usize, StepError> {
        let list = self.items_fn(id, items)?;
        let len = list.len();
        self.set_prop(id, ITEMS, Value::Array(list));
        Ok(len)
    }

    fn loop_item(&self, id: ContextId, index: usize) -> Option<Value> {
        self.prop(id, ITEMS)
            .and_then(Value::as_array)
            .and_then(|a| a.get(index))
            .cloned()
    }

    fn loop_len(&self, id: ContextId) -> usize {
        self.prop(id, ITEMS)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    }

    /// Schedules the body for item `index`: the item is its input (ACT-5) and the variables
    /// `item` and `index` are declared on the body context (ACT-8).
    fn loop_schedule_body(
        &mut self,
        id: ContextId,
        body: NodeIndex,
        index: usize,
    ) -> Result<(), StepError> {
        let item = self.loop_item(id, index).unwrap_or(Value::Null);
        let child = self.schedule_child(id, body, Some(index.to_string()), Some(ON_BODY), None)?;
        if let Some(c) = self.state_mut().context_mut(child) {
            c.input = Some(item.clone());
            c.variables.insert(ITEMS_VAR.to_owned(), item);
            c.variables.insert(INDEX.to_owned(), json!(index));
        }
        Ok(())
    }

    fn for_each_execute(
        &mut self,
        id: ContextId,
        items: &str,
        body: NodeIndex,
    ) -> Result<(), StepError> {
        self.loop_snapshot(id, items)?;
        self.for_each_next(id, body, 0)
    }

    fn for_each_next(
        &mut self,
        id: ContextId,
        body: NodeIndex,
        index: usize,
    ) -> Result<(), StepError> {
        if index >= self.loop_len(id) {
            return self.complete(id, None, done());
        }
        self.set_prop(id, INDEX, json!(index));
        self.loop_schedule_body(id, body, index)
    }

    fn parallel_for_each_execute(
        &mut self,
        id: ContextId,
        items: &str,
        body: NodeIndex,
        max_in_flight: Option<u32>,
    ) -> Result<(), StepError> {
        let len = self.loop_snapshot(id, items)?;
        if len == 0 {
            return self.complete(id, None, done());
        }
        self.set_prop(id, NEXT, json!(0));
        self.set_prop(id, DONE_COUNT, json!(0));
        let limit = max_in_flight.map_or(len, |m| (m.max(1) as usize).min(len));
        for _ in 0..limit {
            self.parallel_for_each_one(id, body)?;
        }
        Ok(())
    }

    fn parallel_for_each_one(&mut self, id: ContextId, body: NodeIndex) -> Result<(), StepError> {
        let next = usize::try_from(self.prop_u64(id, NEXT)).unwrap_or(usize::MAX);
        if next >= self.loop_len(id) {
            return Ok(());
        }
        self.set_prop(id, NEXT, json!(next + 1));
        self.loop_schedule_body(id, body, next)
    }

    /// A loop body completed (or was cancelled).
    fn body_completed(
        &mut self,
        id: ContextId,
        kind: &NodeKind,
        _child: &ChildInfo,
    ) -> Result<(), StepError> {
        match kind {
            NodeKind::While { condition, body } => self.while_next(id, condition, *body),
            NodeKind::ForEach { body, .. } => {
                let index = usize::try_from(self.prop_u64(id, INDEX)).unwrap_or(usize::MAX);
                self.for_each_next(id, *body, index.saturating_add(1))
            }
            NodeKind::Timer {
                interval_ms,
                until,
                max_ticks,
                ..
            } => self.timer_after_tick(id, *interval_ms, until.as_deref(), *max_ticks),
            NodeKind::ParallelForEach { body, .. } => {
                let finished = self.prop_u64(id, DONE_COUNT) + 1;
                self.set_prop(id, DONE_COUNT, json!(finished));
                if usize::try_from(finished).unwrap_or(usize::MAX) >= self.loop_len(id) {
                    return self.complete(id, None, done());
                }
                self.parallel_for_each_one(id, *body)
            }
            _ => Ok(()),
        }
    }
}

impl<'g, S: Scope<'g> + ?Sized> LoopActivity<'g> for S {}
