//! Branching: If (ACT-13), Switch (ACT-14) and Parallel, the structured fork (ACT-18).

use serde_json::json;

use super::scope::done;
use super::scope::{ChildInfo, Scope, StepError};
use crate::engine::graph::{NodeIndex, NodeKind, SwitchNode};
use crate::engine::names::{ON_BRANCH, PENDING, VALUE};
use crate::engine::state::ContextId;

/// The If, Switch and Parallel activities, for any [`Scope`].
pub(crate) trait BranchingActivity<'g>: Scope<'g> {
    // ---- If (ACT-13) --------------------------------------------------------------------
    fn if_execute(
        &mut self,
        id: ContextId,
        condition: &str,
        then: Option<NodeIndex>,
        otherwise: Option<NodeIndex>,
        structured: bool,
    ) -> Result<(), StepError> {
        let value = self.condition(id, Some(condition), None)?;
        if !structured {
            // The decision node: ports `true` and `false`.
            return self.complete(id, Some(json!(value)), vec![value.to_string()]);
        }
        self.set_prop(id, VALUE, json!(value));
        let (branch, tag) = if value {
            (then, "then")
        } else {
            (otherwise, "else")
        };
        match branch {
            Some(node) => {
                self.schedule_child(id, node, Some(tag.to_owned()), Some(ON_BRANCH), None)?;
                Ok(())
            }
            None => self.complete(id, Some(json!(value)), done()),
        }
    }

    // ---- Switch (ACT-14) ----------------------------------------------------------------
    fn switch_execute(&mut self, id: ContextId, s: &SwitchNode) -> Result<(), StepError> {
        let mut matched: Vec<usize> = Vec::new();
        for (i, (_, condition, _)) in s.cases.iter().enumerate() {
            if self.condition(id, Some(condition), None)? {
                matched.push(i);
                if !s.any {
                    break;
                }
            }
        }
        let labels: Vec<String> = matched
            .iter()
            .filter_map(|&i| s.cases.get(i))
            .map(|c| c.0.clone())
            .collect();
        if !s.structured {
            let outcomes = if labels.is_empty() {
                vec!["default".to_owned()]
            } else {
                labels.clone()
            };
            return self.complete(id, Some(json!(labels)), outcomes);
        }
        let mut bodies: Vec<(String, NodeIndex)> = matched
            .iter()
            .filter_map(|&i| s.cases.get(i))
            .filter_map(|c| c.2.map(|b| (c.0.clone(), b)))
            .collect();
        if matched.is_empty()
            && let Some(default) = s.default
        {
            bodies.push(("default".to_owned(), default));
        }
        self.set_prop(id, VALUE, json!(labels));
        if bodies.is_empty() {
            return self.complete(id, Some(json!(labels)), done());
        }
        self.set_prop(id, PENDING, json!(bodies.len()));
        for (label, body) in bodies {
            self.schedule_child(id, body, Some(label), Some(ON_BRANCH), None)?;
        }
        Ok(())
    }

    /// A branch of If, Switch or Parallel completed (or was cancelled).
    fn branch_completed(
        &mut self,
        id: ContextId,
        kind: &NodeKind,
        _child: &ChildInfo,
    ) -> Result<(), StepError> {
        let value = self.prop(id, VALUE).cloned();
        match kind {
            NodeKind::If { .. } => self.complete(id, value, done()),
            // ACT-18 any: the first branch to complete wins; completing cancels the others.
            NodeKind::Parallel { any: true, .. } => self.complete(id, None, done()),
            _ => {
                let pending = self.prop_u64(id, PENDING).saturating_sub(1);
                self.set_prop(id, PENDING, json!(pending));
                if pending == 0 {
                    self.complete(id, value, done())
                } else {
                    Ok(())
                }
            }
        }
    }

    // ---- Parallel (ACT-18) --------------------------------------------------------------
    fn parallel_execute(&mut self, id: ContextId, branches: &[NodeIndex]) -> Result<(), StepError> {
        if branches.is_empty() {
            return self.complete(id, None, done());
        }
        self.set_prop(id, PENDING, json!(branches.len()));
        for (i, &branch) in branches.iter().enumerate() {
            self.schedule_child(id, branch, Some(i.to_string()), Some(ON_BRANCH), None)?;
        }
        Ok(())
    }
}

impl<'g, S: Scope<'g> + ?Sized> BranchingActivity<'g> for S {}
