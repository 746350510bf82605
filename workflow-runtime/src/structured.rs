//! The structured activities: If (ACT-13), Switch (ACT-14), While (ACT-15),
//! ForEach (ACT-16), ParallelForEach (ACT-17), Parallel, the structured fork (ACT-18), Finish
//! (ACT-25), Fault (ACT-26), Correlate (ACT-27), SetVariable (ACT-28) and Break (ACT-9,
//! ACT-29); and the flow-only nodes `start`, `end`, `join` and `fork` (FC-17 to FC-20).
//!
//! Each keeps its durable state in its context's properties (ENG-6): a loop its iteration or
//! index and its snapshot, a fork its pending count. Nothing grows with iterations (ENG-7).
//!
//! Variables (ACT-8): the model has no variable declarations yet, so a variable lives in the
//! nearest enclosing context that already holds it, and otherwise on the root context.
//! ForEach and ParallelForEach put `item` and `index` on each body context. A task reads them
//! with [`crate::TaskContext::variable`], nearest first.

use serde_json::{Value, json};
use workflow_model::DONE;

use crate::executor::{ChildInfo, Executor, Link, StepError, engine_fault};
use crate::graph::{NodeIndex, NodeKind, SwitchNode};
use crate::instance::{ContextId, FaultKind, FaultRecord, ParentLink};
use crate::task::Outcome;

/// The bookmark name of a waiting SubWorkflow (ACT-3).
pub(crate) const SUB_WORKFLOW: &str = "wf.sub_workflow";
/// The callback of a SubWorkflow's bookmark (ENG-12).
pub(crate) const ON_CHILD_DONE: &str = "child_done";
/// The default nesting limit of sub-workflows (ACT-24).
const MAX_DEPTH: u32 = 32;

/// The callback of a branch of If, Switch and Parallel (ENG-12).
pub(crate) const ON_BRANCH: &str = "branch_completed";
/// The callback of a loop body of While, ForEach and ParallelForEach (ENG-12).
pub(crate) const ON_BODY: &str = "body_completed";

/// The callback of a `wf.timer` bookmark: a tick (ACT-21).
pub(crate) const ON_TICK: &str = "tick";
/// A Timer's bookmark name (ACT-21, TM-3).
const TIMER: &str = "wf.timer";
/// A Timer's anchor (ms), the moment it started (TM-11).
const ANCHOR: &str = "anchor";
/// A Timer's ticks so far.
const TICKS: &str = "ticks";
/// The grid index `k` of a Timer's armed tick (`anchor + k × interval`).
const GRID: &str = "grid";
const VALUE: &str = "value";
const PENDING: &str = "pending";
const ITERATION: &str = "iteration";
const ITEMS: &str = "items";
const INDEX: &str = "index";
const NEXT: &str = "next";
const DONE_COUNT: &str = "done";

fn done() -> Vec<String> {
    vec![DONE.to_owned()]
}

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    fn prop(&self, id: ContextId, key: &str) -> Option<&Value> {
        self.state.context(id).and_then(|c| c.properties.get(key))
    }

    fn prop_u64(&self, id: ContextId, key: &str) -> u64 {
        self.prop(id, key).and_then(Value::as_u64).unwrap_or(0)
    }

    fn set_prop(&mut self, id: ContextId, key: &str, value: Value) {
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
    fn items_fn(&mut self, owner: ContextId, name: &str) -> Result<Vec<Value>, StepError> {
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

    // ---- If (ACT-13) --------------------------------------------------------------------

    pub(crate) fn if_execute(
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

    pub(crate) fn switch_execute(
        &mut self,
        id: ContextId,
        s: &SwitchNode,
    ) -> Result<(), StepError> {
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
    pub(crate) fn branch_completed(
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

    pub(crate) fn parallel_execute(
        &mut self,
        id: ContextId,
        branches: &[NodeIndex],
    ) -> Result<(), StepError> {
        if branches.is_empty() {
            return self.complete(id, None, done());
        }
        self.set_prop(id, PENDING, json!(branches.len()));
        for (i, &branch) in branches.iter().enumerate() {
            self.schedule_child(id, branch, Some(i.to_string()), Some(ON_BRANCH), None)?;
        }
        Ok(())
    }

    // ---- While (ACT-15) -----------------------------------------------------------------

    pub(crate) fn while_next(
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

    // ---- Timer (ACT-21, TM-11) ----------------------------------------------------------

    /// The anchor is now; the first tick is armed one interval later.
    pub(crate) fn timer_execute(
        &mut self,
        id: ContextId,
        interval_ms: u64,
    ) -> Result<(), StepError> {
        let now = self.now;
        self.set_prop(id, ANCHOR, json!(now));
        self.set_prop(id, TICKS, json!(0));
        self.set_prop(id, GRID, json!(0));
        self.timer_arm(id, interval_ms)
    }

    /// Arms the next tick at the first grid point `anchor + k × interval` strictly after now
    /// (TM-11): missed grid points are coalesced, and the tick's bookmark counts them.
    fn timer_arm(&mut self, id: ContextId, interval_ms: u64) -> Result<(), StepError> {
        let interval = interval_ms.max(1);
        let anchor = self.prop_u64(id, ANCHOR);
        let previous = self.prop_u64(id, GRID);
        let k = self.now.saturating_sub(anchor) / interval + 1;
        let k = k.max(previous + 1);
        let missed = k - previous - 1;
        self.set_prop(id, GRID, json!(k));
        let due_at = anchor.saturating_add(k.saturating_mul(interval));
        let tick = self.prop_u64(id, TICKS) + 1;
        let scope_context = id.to_string();
        let hash = crate::routing::stimulus_hash(
            TIMER,
            None,
            Some((self.state.instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(
            id,
            TIMER,
            hash,
            json!({ "due_at": due_at, "tick": tick, "missed": missed }),
            Some(ON_TICK),
        )?;
        Ok(())
    }

    /// A tick fired: the body runs, if there is one, then the timer decides whether to stop.
    pub(crate) fn timer_ticked(
        &mut self,
        id: ContextId,
        interval_ms: u64,
        body: Option<NodeIndex>,
        until: Option<&str>,
        max_ticks: Option<u64>,
    ) -> Result<(), StepError> {
        let tick = self.prop_u64(id, TICKS) + 1;
        self.set_prop(id, TICKS, json!(tick));
        match body {
            Some(body) => {
                self.schedule_child(id, body, Some(tick.to_string()), Some(ON_BODY), None)?;
                Ok(())
            }
            None => self.timer_after_tick(id, interval_ms, until, max_ticks),
        }
    }

    /// After a tick's body: `until` or `max_ticks` may stop the timer; otherwise the next
    /// tick is armed (ACT-21).
    fn timer_after_tick(
        &mut self,
        id: ContextId,
        interval_ms: u64,
        until: Option<&str>,
        max_ticks: Option<u64>,
    ) -> Result<(), StepError> {
        let ticks = self.prop_u64(id, TICKS);
        if max_ticks.is_some_and(|max| ticks >= max)
            || (until.is_some() && self.condition(id, until, None)?)
        {
            return self.complete(id, Some(json!({ "ticks": ticks })), done());
        }
        self.timer_arm(id, interval_ms)
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
        if let Some(c) = self.state.context_mut(child) {
            c.input = Some(item.clone());
            c.variables.insert(ITEMS_VAR.to_owned(), item);
            c.variables.insert(INDEX.to_owned(), json!(index));
        }
        Ok(())
    }

    pub(crate) fn for_each_execute(
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

    pub(crate) fn parallel_for_each_execute(
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
    pub(crate) fn body_completed(
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

    // ---- Finish, Fault, Break, Correlate, SetVariable -----------------------------------

    /// ACT-25, ENG-18: completes itself silently, then the root, which cancels every other
    /// non-final context and withdraws their work; the run ends `Finished` with the output.
    pub(crate) fn finish_execute(
        &mut self,
        id: ContextId,
        output: Option<&str>,
    ) -> Result<(), StepError> {
        if let Some(name) = output {
            let value = self.value_fn(id, name)?;
            self.state.output = Some(value);
        }
        self.state.callbacks.retain(|e| e.child != id);
        self.complete(id, None, Vec::new())?;
        match self.state.root {
            Some(root) if root != id => self.complete(root, None, Vec::new()),
            _ => Ok(()),
        }
    }

    /// ACT-26: fails at once with the permanent error `{code}: {message}`.
    pub(crate) fn fault_execute(
        &mut self,
        id: ContextId,
        code: &str,
        message: &str,
    ) -> Result<(), StepError> {
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
    pub(crate) fn break_execute(&mut self, id: ContextId) -> Result<(), StepError> {
        let mut chain = vec![id];
        let mut current = self.state.context(id).and_then(|c| c.parent);
        let target = loop {
            let Some(ctx) = current.and_then(|c| self.state.context(c)) else {
                return Err(engine_fault(
                    id,
                    "`break` is not inside a loop; it must be within a `while`, `for_each`, \
                     `parallel_for_each` or `timer`",
                ));
            };
            let is_loop = self
                .graph
                .index_of(&ctx.node_id)
                .and_then(|n| self.graph.node(n))
                .is_some_and(|n| n.kind.is_loop());
            if is_loop {
                break ctx.id;
            }
            chain.push(ctx.id);
            current = ctx.parent;
        };
        self.state.callbacks.retain(|e| !chain.contains(&e.child));
        for context in chain {
            self.complete(context, None, Vec::new())?;
        }
        self.complete(target, None, done())
    }

    /// ACT-27: sets the instance's correlation id from a value fn returning a non-empty
    /// string.
    pub(crate) fn correlate_execute(&mut self, id: ContextId, key: &str) -> Result<(), StepError> {
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
        self.state.correlation_id = Some(key_value.to_owned());
        self.complete(id, None, done())
    }

    /// ACT-28: assigns the value in the nearest enclosing context that holds the variable,
    /// else on the root context (the model has no declarations yet).
    pub(crate) fn set_variable_execute(
        &mut self,
        id: ContextId,
        variable: &str,
        value: &str,
    ) -> Result<(), StepError> {
        let computed = self.value_fn(id, value)?;
        let mut current = self.state.context(id).and_then(|c| c.parent);
        let mut scope = self.state.root;
        while let Some(ctx) = current.and_then(|c| self.state.context(c)) {
            if ctx.variables.contains_key(variable) {
                scope = Some(ctx.id);
                break;
            }
            current = ctx.parent;
        }
        if let Some(c) = scope.and_then(|s| self.state.context_mut(s)) {
            c.variables.insert(variable.to_owned(), computed);
        }
        self.complete(id, None, done())
    }
}

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    // ---- SubWorkflow (ACT-24), in memory ------------------------------------------------

    /// Starts a child instance (queued as a [`Link`] and carried out once this run commits)
    /// and, in `wait` mode, waits on a `wf.sub_workflow` bookmark that the child's final
    /// commit resumes; `detach` completes at once with the child id.
    pub(crate) fn sub_workflow_execute(
        &mut self,
        id: ContextId,
        workflow: &str,
        input: Option<&str>,
        detach: bool,
    ) -> Result<(), StepError> {
        let depth = self.state.parent.as_ref().map_or(0, |p| p.depth) + 1;
        if depth > MAX_DEPTH {
            return Err(permanent(
                id,
                format!("sub-workflow `{workflow}` nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        let child_input = match input {
            Some(name) => self.value_fn(id, name)?,
            None => Value::Null,
        };
        let child = crate::ids::new_ulid();
        let parent_id = self.state.instance_id.clone();
        let parent = move |bookmark_id| ParentLink {
            instance_id: parent_id.clone(),
            bookmark_id,
            depth,
        };
        if detach {
            let link = Link::Start {
                workflow: workflow.to_owned(),
                instance_id: child.clone(),
                input: child_input,
                parent: parent(None),
            };
            self.links.push(link);
            return self.complete(id, Some(json!(child)), done());
        }
        let scope = id.to_string();
        let hash = crate::routing::stimulus_hash(
            SUB_WORKFLOW,
            None,
            Some((self.state.instance_id.as_str(), scope.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        let bookmark = self.create_bookmark(
            id,
            SUB_WORKFLOW,
            hash,
            json!({ "child_instance_id": child }),
            Some(ON_CHILD_DONE),
        )?;
        let link = Link::Start {
            workflow: workflow.to_owned(),
            instance_id: child,
            input: child_input,
            parent: parent(Some(bookmark)),
        };
        self.links.push(link);
        Ok(())
    }

    /// The child's final commit resumed the bookmark with `{status, output}`: `Finished`
    /// assigns the output and completes with `done`; `Cancelled` takes the `cancelled` port
    /// when it is connected, else fails for good (ACT-24).
    pub(crate) fn sub_workflow_done(
        &mut self,
        id: ContextId,
        workflow: &str,
        assign: Option<&str>,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let payload = child.payload.clone().unwrap_or(Value::Null);
        let child_id = payload
            .get("child_instance_id")
            .unwrap_or(&Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let output = payload.get("output").cloned().unwrap_or(Value::Null);
        match payload.get("status").and_then(Value::as_str) {
            Some("Finished") => {
                if let Some(name) = assign {
                    self.assign_fn(id, name, &output)?;
                }
                self.complete(id, Some(output), done())
            }
            Some("Cancelled") if self.cancelled_port_connected(id) => {
                self.complete(id, None, vec!["cancelled".to_owned()])
            }
            Some("Cancelled") => Err(permanent(
                id,
                format!("child workflow `{child_id}` was cancelled"),
            )),
            _ => Err(permanent(
                id,
                format!(
                    "child workflow `{workflow}` could not run: {}",
                    payload
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown error")
                ),
            )),
        }
    }

    /// Whether the flowchart owning context `id` connects its `cancelled` port.
    fn cancelled_port_connected(&self, id: ContextId) -> bool {
        let Some(c) = self.state.context(id) else {
            return false;
        };
        let graph = self.graph;
        let Some(owner) = c
            .parent
            .and_then(|p| self.state.context(p))
            .and_then(|p| graph.index_of(&p.node_id))
            .and_then(|n| graph.node(n))
        else {
            return false;
        };
        let NodeKind::Flowchart(fc) = &owner.kind else {
            return false;
        };
        let Some(local) = fc.local_of(&c.node_id) else {
            return false;
        };
        fc.connections
            .iter()
            .any(|conn| conn.port == "cancelled" && conn.endpoints.is_some_and(|e| e.0 == local))
    }

    /// Runs the registered assign fn `name` on the data (ACT-24's `assign`).
    fn assign_fn(&mut self, owner: ContextId, name: &str, value: &Value) -> Result<(), StepError> {
        let registry = self.registry;
        let Some(f) = registry.assigns.get(name) else {
            return Err(engine_fault(
                owner,
                format!("no assign fn is registered under `{name}`"),
            ));
        };
        let mut data = match self.data.take() {
            Some(d) => d,
            None => {
                self.data_mut()?;
                self.data
                    .take()
                    .ok_or_else(|| engine_fault(owner, "data unavailable"))?
            }
        };
        let result = user_result(owner, "assign fn", name, || f(&mut data, value));
        if result.is_err() {
            // The last good data stays (FLT-4).
            self.data = None;
            return result;
        }
        self.state.data = serde_json::to_value(&data)
            .map_err(|e| engine_fault(owner, format!("data does not serialize: {e}")))?;
        self.data = Some(data);
        Ok(())
    }
}

fn permanent(context: ContextId, message: String) -> StepError {
    StepError::Fault {
        context,
        record: FaultRecord {
            kind: FaultKind::Error,
            message,
            attempt: 1,
        },
    }
}

/// The variable name of a loop's current item (ACT-8).
const ITEMS_VAR: &str = "item";

/// Runs side-effect-free user code for `owner`: an error or a panic faults `owner` (ACT-6).
fn user_result<T>(
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
