//! Control: Finish (ACT-25), Fault (ACT-26), Break (ACT-9, ACT-29), Correlate (ACT-27) and
//! SetVariable (ACT-28).

use super::scope::done;
use super::scope::{Scope, StepError, engine_fault};
use crate::engine::state::{ContextId, FaultKind, FaultRecord};

/// The Finish, Break, Fault, Correlate and SetVariable activities, for any [`Scope`].
pub(crate) trait ControlActivity<'g>: Scope<'g> {
    // ---- Finish, Fault, Break, Correlate, SetVariable -----------------------------------
    /// ACT-25, ENG-18: completes itself silently, then the root, which cancels every other
    /// non-final context and withdraws their work; the run ends `Finished` with the output.
    fn finish_execute(&mut self, id: ContextId, output: Option<&str>) -> Result<(), StepError> {
        if let Some(name) = output {
            let value = self.value_fn(id, name)?;
            self.state_mut().output = Some(value);
        }
        self.state_mut().callbacks.retain(|e| e.child != id);
        self.complete(id, None, Vec::new())?;
        match self.state().root {
            Some(root) if root != id => self.complete(root, None, Vec::new()),
            _ => Ok(()),
        }
    }

    /// ACT-26: fails at once with the permanent error `{code}: {message}`.
    fn fault_execute(&mut self, id: ContextId, code: &str, message: &str) -> Result<(), StepError> {
        Err(StepError::Fault {
            context: id,
            record: FaultRecord {
                kind: FaultKind::Error,
                message: format!("{code}: {message}"),
                attempt: 1,
            },
        })
    }

    /// ACT-9, ACT-29: the signal travels up to the nearest While, ForEach or
    /// ParallelForEach. Every composite on the way completes at once (cancelling its other
    /// live children, ENG-14) without calling its owner back, then the loop completes with
    /// `done` and its owner is signalled as usual.
    fn break_execute(&mut self, id: ContextId) -> Result<(), StepError> {
        let mut chain = vec![id];
        let mut current = self.state().context(id).and_then(|c| c.parent);
        let target = loop {
            let Some(ctx) = current.and_then(|c| self.state().context(c)) else {
                return Err(engine_fault(
                    id,
                    "`break` is not inside a loop; it must be within a `while`, `for_each`, \
                     `parallel_for_each` or `timer`",
                ));
            };
            let is_loop = self
                .graph()
                .index_of(&ctx.node_id)
                .and_then(|n| self.graph().node(n))
                .is_some_and(|n| n.kind.is_loop());
            if is_loop {
                break ctx.id;
            }
            chain.push(ctx.id);
            current = ctx.parent;
        };
        self.state_mut()
            .callbacks
            .retain(|e| !chain.contains(&e.child));
        for context in chain {
            self.complete(context, None, Vec::new())?;
        }
        self.complete(target, None, done())
    }

    /// ACT-27: sets the instance's correlation id from a value fn returning a non-empty
    /// string.
    fn correlate_execute(&mut self, id: ContextId, key: &str) -> Result<(), StepError> {
        let value = self.value_fn(id, key)?;
        let Some(key_value) = value.as_str().filter(|s| !s.is_empty()) else {
            return Err(StepError::Fault {
                context: id,
                record: FaultRecord {
                    kind: FaultKind::Error,
                    message: format!(
                        "correlate: value fn `{key}` must return a non-empty string, got {value}"
                    ),
                    attempt: 1,
                },
            });
        };
        self.state_mut().correlation_id = Some(key_value.to_owned());
        self.complete(id, None, done())
    }

    /// ACT-28: assigns the value in the nearest enclosing context that holds the variable,
    /// else on the root context (the model has no declarations yet).
    fn set_variable_execute(
        &mut self,
        id: ContextId,
        variable: &str,
        value: &str,
    ) -> Result<(), StepError> {
        let computed = self.value_fn(id, value)?;
        let mut current = self.state().context(id).and_then(|c| c.parent);
        let mut scope = self.state().root;
        while let Some(ctx) = current.and_then(|c| self.state().context(c)) {
            if ctx.variables.contains_key(variable) {
                scope = Some(ctx.id);
                break;
            }
            current = ctx.parent;
        }
        if let Some(c) = scope.and_then(|s| self.state_mut().context_mut(s)) {
            c.variables.insert(variable.to_owned(), computed);
        }
        self.complete(id, None, done())
    }
}

impl<'g, S: Scope<'g> + ?Sized> ControlActivity<'g> for S {}
