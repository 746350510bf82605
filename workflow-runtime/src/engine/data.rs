//! Data, variables and the user code activities call: context properties (ENG-6), variables
//! in scope (ACT-8), value and items fns, and declared outcomes (FC-4).

use serde_json::Value;

use crate::engine::executor::{Executor, StepError, engine_fault};
use crate::engine::graph::NodeKind;
use crate::engine::state::{ContextId, FaultKind, FaultRecord};
use crate::engine::task::Outcome;
use workflow_model::DONE;

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    pub(crate) fn prop(&self, id: ContextId, key: &str) -> Option<&Value> {
        self.state.context(id).and_then(|c| c.properties.get(key))
    }

    pub(crate) fn prop_u64(&self, id: ContextId, key: &str) -> u64 {
        self.prop(id, key).and_then(Value::as_u64).unwrap_or(0)
    }

    pub(crate) fn set_prop(&mut self, id: ContextId, key: &str, value: Value) {
        if let Some(c) = self.state.context_mut(id) {
            c.properties.insert(key.to_owned(), value);
        }
    }

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
}

pub(crate) fn done() -> Vec<String> {
    vec![DONE.to_owned()]
}

pub(crate) fn permanent(context: ContextId, message: String) -> StepError {
    StepError::Fault {
        context,
        record: FaultRecord {
            kind: FaultKind::Error,
            message,
            attempt: 1,
        },
    }
}

/// Runs side-effect-free user code for `owner`: an error or a panic faults `owner` (ACT-6).
pub(crate) fn user_result<T>(
    owner: ContextId,
    what: &str,
    name: &str,
    f: impl FnOnce() -> Result<T, crate::TaskError>,
) -> Result<T, StepError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(StepError::Fault {
            context: owner,
            record: FaultRecord {
                kind: FaultKind::Error,
                message: format!("{what} `{name}` failed: {error}"),
                attempt: 1,
            },
        }),
        Err(_) => Err(StepError::Fault {
            context: owner,
            record: FaultRecord {
                kind: FaultKind::Panicked,
                message: format!("{what} `{name}` panicked"),
                attempt: 1,
            },
        }),
    }
}
