//! Compensation (FLT-10 to FLT-13): a saga scope runs its body;
//! each task that completes inside it and declares a compensation is recorded on the scope
//! with its completion order. When an activity inside fails for good, the scope's other live
//! work is cancelled and the compensations run one at a time, newest completion first (the
//! failed task's own first, if it declares one), each on the data as it is now. Then the
//! scope takes `compensated` (`compensate_then_continue`) or the failure passes to the next
//! enclosing scope, and out of the outermost one the instance faults with an incident listing
//! the compensations that ran (`compensate_then_fault`). A compensation that fails faults the
//! instance naming it and the original failure (FLT-13).
//!
//! The operator's retry of an instance whose failure saga scopes compensated restarts the
//! outermost compensated scope from its beginning (FLT-8). Simplifications, for now:
//! compensations run inline in the failing run with one attempt each (no retry policy), and
//! the retry of an instance whose compensation failed is refused with
//! [`RetryError::CompensatedFailure`](crate::RetryError::CompensatedFailure).

use serde_json::{Value, json};

use crate::engine::executor::{Executor, StepError};
use crate::engine::graph::NodeKind;
use crate::engine::guard::CatchUnwind;
use crate::engine::state::{ContextId, FaultKind, FaultRecord, JournalKind};

/// The scope property listing `[node id, compensation fn]` in completion order.
const COMPENSABLE: &str = "compensable";
/// The scope's outcome after compensating with `compensate_then_continue`.
const COMPENSATED: &str = "compensated";

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// The nearest saga scope enclosing the context, with its `continue_after` flag.
    fn enclosing_saga(&self, id: ContextId) -> Option<(ContextId, bool)> {
        let mut current = self.state.context(id).and_then(|c| c.parent);
        while let Some(ctx) = current.and_then(|c| self.state.context(c)) {
            let kind = self
                .graph
                .index_of(&ctx.node_id)
                .and_then(|i| self.graph.node(i))
                .map(|n| &n.kind);
            if let Some(NodeKind::Saga { continue_after, .. }) = kind {
                return Some((ctx.id, *continue_after));
            }
            current = ctx.parent;
        }
        None
    }

    /// The compensation a context's node declares, with what it runs with: the task's
    /// variables in scope and its input, as they were when it ran (FLT-11), and its context id
    /// for its idempotency key.
    fn compensation_of(&self, id: ContextId) -> Option<Compensable> {
        let ctx = self.state.context(id)?;
        let node = self.graph.node(self.graph.index_of(&ctx.node_id)?)?;
        match &node.kind {
            NodeKind::Task {
                compensation: Some(c),
                ..
            } => Some(Compensable {
                node: ctx.node_id.clone(),
                function: c.clone(),
                context: Some(id),
                variables: self.variables_in_scope(id),
                input: ctx.input.clone(),
            }),
            _ => None,
        }
    }

    /// FLT-11: a task that completed inside a saga scope and declares a compensation is
    /// recorded on the scope, in completion order.
    pub(crate) fn record_compensable(&mut self, id: ContextId) {
        let Some(entry) = self.compensation_of(id) else {
            return;
        };
        let Some((saga, _)) = self.enclosing_saga(id) else {
            return;
        };
        if let Some(c) = self.state.context_mut(saga) {
            let list = c
                .properties
                .entry(COMPENSABLE.to_owned())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let (Value::Array(list), Ok(entry)) = (list, serde_json::to_value(&entry)) {
                list.push(entry);
            }
        }
    }

    /// A failure for good (FLT-5), compensated first when a saga scope encloses it
    /// (FLT-11, FLT-12).
    pub(crate) async fn fail(&mut self, context: ContextId, record: FaultRecord) {
        let mut failed = context;
        let mut record = record;
        let mut ran: Vec<String> = Vec::new();
        let mut own = self.compensation_of(failed);
        while let Some((saga, continue_after)) = self.enclosing_saga(failed) {
            // 1. The scope's other live work is cancelled (its callbacks dropped).
            self.state.callbacks.retain(|e| e.owner != saga);
            for child in self.state.live_children(saga) {
                if let Err(StepError::Abort(_)) = self.cancel_silently(child) {
                    break;
                }
            }
            // 2. The list: the failed task's own first, then newest completion first.
            let mut list: Vec<Compensable> = own.take().into_iter().collect();
            let completed = self
                .state
                .context_mut(saga)
                .and_then(|c| c.properties.remove(COMPENSABLE))
                .map(|v| Compensable::list(&v))
                .unwrap_or_default();
            list.extend(completed.into_iter().rev());
            // 3. One at a time.
            for entry in list {
                let (node, function) = (entry.node.clone(), entry.function.clone());
                match self.run_compensation(saga, &entry).await {
                    Ok(()) => ran.push(local(&node).to_owned()),
                    Err((kind, message)) => {
                        // FLT-13: compensation_failed, naming it and the original failure.
                        let record = FaultRecord {
                            kind,
                            message: format!(
                                "compensation_failed: compensation `{function}` of `{}` failed: {message}; original failure: {}; compensated before it: [{}]",
                                local(&node),
                                record.message,
                                ran.join(", ")
                            ),
                            attempt: record.attempt,
                        };
                        self.fault_now(saga, record);
                        mark_compensated(self, saga);
                        return;
                    }
                }
            }
            self.record(
                JournalKind::Faulted,
                Some(saga),
                &json!({ "message": record.message, "compensated": ran }),
            );
            if continue_after {
                // FLT-12 `continue`: the scope takes `compensated`; no incident stays open.
                let output = json!({ "compensated": ran, "failure": record.message });
                if let Err(StepError::Fault { context, record }) =
                    self.complete(saga, Some(output), vec![COMPENSATED.to_owned()])
                {
                    self.fault_now(context, record);
                }
                return;
            }
            // FLT-12 `fault`: the failure passes to the next enclosing scope.
            failed = saga;
        }
        let compensated = failed != context;
        if !ran.is_empty() {
            record.message = format!("{} (compensated: {})", record.message, ran.join(", "));
        }
        self.fault_now(context, record);
        if compensated {
            // FLT-8: an operator's retry restarts `failed`, the outermost compensated scope.
            if let Some(c) = self.state.context_mut(context) {
                c.properties
                    .insert(COMPENSATED_FAILURE.to_owned(), json!(failed));
            }
        }
    }

    /// Runs one compensation fn on the data as it is now, with its task's variables and input
    /// and the key `<task key>:compensate` (FLT-11); its changes are kept.
    async fn run_compensation(
        &mut self,
        saga: ContextId,
        entry: &Compensable,
    ) -> Result<(), (FaultKind, String)> {
        let (node, function) = (entry.node.as_str(), entry.function.as_str());
        let registry = self.registry;
        let Some(task) = registry.tasks.get(function) else {
            return Err((
                FaultKind::Error,
                format!("no task is registered under `{function}`"),
            ));
        };
        self.data_mut()
            .map_err(|_| (FaultKind::Error, "data unavailable".to_owned()))?;
        let Some(data) = self.data.take() else {
            return Err((FaultKind::Error, "data unavailable".to_owned()));
        };
        let mut cx = crate::engine::task::TaskContext {
            data,
            payload: None,
            input: entry.input.clone(),
            instance_id: self.state.instance_id.clone(),
            node_id: format!("{node}:compensate"),
            context_id: entry.context.unwrap_or(saga),
            attempt: 1,
            variables: entry.variables.clone(),
            cancellation: crate::cancel::CancellationToken::new(),
            key_suffix: Some("compensate"),
        };
        // ENG-17: the same panic guard as a task attempt; a panic is a failed compensation.
        let result = match CatchUnwind(task(&mut cx)).await {
            Ok(result) => result,
            Err(panic) => return Err((FaultKind::Panicked, panic)),
        };
        match result {
            Ok(_) => {
                self.state.data = serde_json::to_value(&cx.data)
                    .map_err(|e| (FaultKind::Engine, e.to_string()))?;
                self.data = Some(cx.data);
                self.record(
                    JournalKind::Completed,
                    Some(saga),
                    &json!({ "compensated": node, "compensation": function }),
                );
                Ok(())
            }
            Err(error) => Err((FaultKind::Error, error.message().to_owned())),
        }
    }
}

/// A compensation to run (FLT-11), recorded on its scope when its task completes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Compensable {
    /// The compensated task's node id.
    node: String,
    /// The registry name of the compensation fn.
    function: String,
    /// The compensated task's context, for the key `<task key>:compensate`.
    #[serde(default)]
    context: Option<ContextId>,
    /// The variables in scope when the task ran (a loop's `item` and `index`, ACT-8).
    #[serde(default)]
    variables: serde_json::Map<String, Value>,
    /// The task's input (ACT-5).
    #[serde(default)]
    input: Option<Value>,
}

impl Compensable {
    /// The scope's list; an entry of an older run (`[node, fn]`) reads without variables.
    fn list(value: &Value) -> Vec<Compensable> {
        let Value::Array(items) = value else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|item| match item {
                Value::Array(pair) => match (pair.first(), pair.get(1)) {
                    (Some(Value::String(node)), Some(Value::String(function))) => {
                        Some(Compensable {
                            node: node.clone(),
                            function: function.clone(),
                            context: None,
                            variables: serde_json::Map::new(),
                            input: None,
                        })
                    }
                    _ => None,
                },
                other => serde_json::from_value(other.clone()).ok(),
            })
            .collect()
    }
}

/// The context property marking a failure that saga scopes compensated: the id of the
/// outermost compensated scope, which the operator's retry restarts (FLT-8); `true` after a
/// compensation that failed, which the retry refuses (resuming the list is not implemented).
pub(crate) const COMPENSATED_FAILURE: &str = "compensated_failure";

fn mark_compensated<D>(executor: &mut Executor<'_, D>, id: ContextId)
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    if let Some(c) = executor.state.context_mut(id) {
        c.properties
            .insert(COMPENSATED_FAILURE.to_owned(), Value::Bool(true));
    }
}

fn local(node: &str) -> &str {
    node.rsplit(':').next().unwrap_or(node)
}
