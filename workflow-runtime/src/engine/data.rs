//! Data, variables and the user code activities call: context properties (ENG-6), variables
//! in scope (ACT-8), value and items fns, and declared outcomes (FC-4).

use serde_json::Value;

use crate::engine::activities::scope::user_result;
use crate::engine::executor::{Executor, StepError, UserFailure, engine_fault};
use crate::engine::graph::NodeKind;
use crate::engine::state::ContextId;
use crate::engine::task::Outcome;

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// The variables visible from context `id` (ACT-8): its own, then its ancestors', nearest
    /// first, then the workflow-level ones.
    pub(crate) fn variables_in_scope(&self, id: ContextId) -> serde_json::Map<String, Value> {
        let mut out = serde_json::Map::new();
        let mut current = Some(id);
        while let Some(c) = current.and_then(|c| self.state.context(c)) {
            for (k, v) in &c.variables {
                out.entry(k.clone()).or_insert_with(|| v.clone());
            }
            current = c.parent;
        }
        for (k, v) in &self.state.variables {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
        out
    }

    /// FC-4: the message of the permanent error when the task of context `id`, whose node
    /// declares its ports, completed with an outcome it did not declare.
    pub(crate) fn undeclared_outcome(&self, id: ContextId, outcome: &Outcome) -> Option<String> {
        let c = self.state.context(id)?;
        let node = self
            .graph
            .index_of(&c.node_id)
            .and_then(|n| self.graph.node(n))?;
        let NodeKind::Task {
            ports: Some(ports), ..
        } = &node.kind
        else {
            return None;
        };
        let bad = outcome.names().iter().find(|o| !ports.contains(o))?;
        let local = c.node_id.rsplit(':').next().unwrap_or(&c.node_id);
        Some(format!(
            "node `{local}` completed with undeclared outcome `{bad}`"
        ))
    }

    /// Runs the registered value fn `name` for `owner` (ACT-10); an error or a panic faults
    /// `owner`.
    pub(crate) fn value_fn(&mut self, owner: ContextId, name: &str) -> Result<Value, StepError> {
        let registry = self.registry;
        let Some(f) = registry.values.get(name) else {
            return Err(engine_fault(
                owner,
                format!("no value fn is registered under `{name}`"),
            ));
        };
        let data: &D = self.data_mut()?;
        user_result(owner, "value fn", name, || f(data))
    }

    /// Runs the registered items fn `name` for `owner` (ACT-16).
    pub(crate) fn items_fn(
        &mut self,
        owner: ContextId,
        name: &str,
    ) -> Result<Vec<Value>, StepError> {
        let registry = self.registry;
        let Some(f) = registry.items.get(name) else {
            return Err(engine_fault(
                owner,
                format!("no items fn is registered under `{name}`"),
            ));
        };
        let data: &D = self.data_mut()?;
        user_result(owner, "items fn", name, || f(data))
    }

    /// Runs the registered assign fn `name` on the data with `value` (the scope's
    /// `call_assign`): the data changes only when it succeeds (FLT-4).
    pub(crate) fn call_assign(
        &mut self,
        owner: ContextId,
        name: &str,
        value: &Value,
    ) -> Result<Result<(), UserFailure>, StepError> {
        let registry = self.registry;
        let Some(f) = registry.assigns.get(name) else {
            return Err(engine_fault(
                owner,
                format!("no assign fn is registered under `{name}`"),
            ));
        };
        self.data_mut()?;
        let mut data = self
            .data
            .take()
            .ok_or_else(|| engine_fault(owner, "data unavailable"))?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut data, value))) {
            Ok(Ok(())) => {
                self.state.data = serde_json::to_value(&data)
                    .map_err(|e| engine_fault(owner, format!("data does not serialize: {e}")))?;
                self.data = Some(data);
                Ok(Ok(()))
            }
            Ok(Err(error)) => Ok(Err(UserFailure::Failed(error))),
            Err(_) => Ok(Err(UserFailure::Panicked)),
        }
    }
}
