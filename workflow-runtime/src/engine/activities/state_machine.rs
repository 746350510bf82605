//! The StateMachine (SM-1 to SM-8): entry, triggers, exits, actions and
//! the automatic cycle, its current state a property (SM-1).

use serde_json::{Value, json};

use super::scope::{ChildInfo, Scope, StepError};
use crate::engine::graph::{MachineNode, TransitionNode};
use crate::engine::names::{
    CURRENT_STATE, ENTERED_AT, ON_ACTION, ON_CONTINUE, ON_ENTRY, ON_EXIT, ON_TRIGGER,
    TAG_CONTINUING, TAG_ENTERING, TAG_MIGRATED,
};
use crate::engine::state::{ActivityStatus, ContextId, Detail, JournalKind};

/// The StateMachine activity, for any [`Scope`].
pub(crate) trait StateMachineActivity<'g>: Scope<'g> {
    // ---- StateMachine (SM-1 to SM-8) --------------------------------------------------
    fn current_state(&self, id: ContextId) -> Option<String> {
        self.state()
            .context(id)
            .and_then(|c| c.properties.get(CURRENT_STATE))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn set_current_state(&mut self, id: ContextId, state: &str) {
        if let Some(c) = self.state_mut().context_mut(id) {
            // Written over in place once set: no new key and value per transition.
            match c.properties.get_mut(CURRENT_STATE) {
                Some(Value::String(current)) => state.clone_into(current),
                _ => {
                    c.properties
                        .insert(CURRENT_STATE.to_owned(), Value::String(state.to_owned()));
                }
            }
        }
    }

    /// SM-1: `current_state := current_state ?? initial`, then enter it (no yield).
    fn machine_execute(&mut self, id: ContextId, m: &MachineNode) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_else(|| m.initial.clone());
        self.set_current_state(id, &current);
        if m.state(&current).is_none() {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("state `{current}` does not exist: the machine completes")}),
            );
            return self.complete(id, None, Vec::new());
        }
        self.record(
            JournalKind::StateChanged,
            Some(id),
            json!({"from": null, "to": current}),
        );
        self.machine_enter(id, m, &current, None)
    }

    /// SM-2: schedule the entry (tag `entering`), or run the outbound step at once.
    fn machine_enter(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        state: &str,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        let Some(node) = m.state(state) else {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("state `{state}` does not exist: the machine completes")}),
            );
            return self.complete(id, None, Vec::new());
        };
        match node.entry {
            Some(entry) => {
                self.schedule_child(
                    id,
                    entry,
                    Some(TAG_ENTERING.to_owned()),
                    Some(ON_ENTRY),
                    payload,
                )?;
                Ok(())
            }
            None => self.machine_outbound(id, m, state),
        }
    }

    fn machine_on_entry(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_default();
        let expected = m
            .state(&current)
            .and_then(|s| s.entry)
            .map(|e| self.node_id(e));
        if child.status != ActivityStatus::Completed || expected != Some(child.node_id.as_str()) {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        }
        self.machine_outbound(id, m, &current)
    }

    /// SM-3: terminal -> complete; first true automatic transition -> take it; else arm every
    /// trigger (tag = transition key); none -> stay Running with nothing pending.
    fn machine_outbound(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        state: &str,
    ) -> Result<(), StepError> {
        let valid: Vec<&TransitionNode> = m
            .transitions
            .iter()
            .filter(|t| t.from == state && m.state(&t.to).is_some())
            .collect();
        if valid.is_empty() {
            return self.complete(id, Some(json!(state)), Vec::new());
        }
        for t in valid.iter().filter(|t| t.trigger.is_none()) {
            if self.condition(id, t.condition.as_deref(), None)? {
                return self.machine_take(id, m, t, None);
            }
        }
        let mut armed = 0;
        for t in &valid {
            if let Some(trigger) = t.trigger {
                self.schedule_child(id, trigger, Some(t.key.clone()), Some(ON_TRIGGER), None)?;
                armed += 1;
            }
        }
        if armed == 0 {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("no transition from `{state}` can be taken (SM-3.4)")}),
            );
        }
        Ok(())
    }

    /// SM-4: a trigger completed.
    fn machine_on_trigger(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        let current = self.current_state(id).unwrap_or_default();
        let transition = resolve(m, &current, child.tag.as_deref());
        let Some(t) = transition.filter(|t| {
            child.status == ActivityStatus::Completed
                && t.from == current
                && m.state(&t.to).is_some()
        }) else {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        };
        let payload = child.result;
        if self.condition(id, t.condition.as_deref(), payload.as_ref())? {
            return self.machine_take(id, m, t, payload);
        }
        // False: stay, leave competitors alone, re-arm the same trigger (SM-4).
        let name = t
            .key
            .split_once(':')
            .map_or(t.key.as_str(), |(_, name)| name);
        self.declined(super::scope::DeclinedTransition {
            state: current.clone(),
            transition: name.to_owned(),
            condition: t.condition.clone(),
        });
        self.record(
            JournalKind::Declined,
            Some(id),
            json!({"transition": t.key, "reason": "condition false; trigger re-armed"}),
        );
        if let Some(trigger) = t.trigger {
            self.schedule_child(id, trigger, Some(t.key.clone()), Some(ON_TRIGGER), None)?;
        }
        Ok(())
    }

    /// SM-5: cancel competitors, exit, action, set the state, enter the target.
    fn machine_take(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        let competitors: Vec<ContextId> = self
            .state()
            .callbacks
            .iter()
            .filter(|e| e.owner == id && e.callback == ON_TRIGGER)
            .map(|e| e.child)
            .collect();
        for child in competitors {
            self.cancel_silently(child)?;
        }
        match m.state(&t.from).and_then(|s| s.exit) {
            Some(exit) => {
                self.schedule_child(id, exit, Some(t.key.clone()), Some(ON_EXIT), payload)?;
                Ok(())
            }
            None => self.machine_after_exit(id, m, t, payload),
        }
    }

    fn machine_after_exit(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        match t.action {
            Some(action) => {
                self.schedule_child(id, action, Some(t.key.clone()), Some(ON_ACTION), payload)?;
                Ok(())
            }
            None => self.machine_arrive(id, m, t, payload),
        }
    }

    /// The transition an exit or action completion belongs to, unless stale (SM-5.3).
    fn live_transition<'m>(
        &mut self,
        id: ContextId,
        m: &'m MachineNode,
        child: &ChildInfo,
    ) -> Option<&'m TransitionNode> {
        let current = self.current_state(id).unwrap_or_default();
        let found = resolve(m, &current, child.tag.as_deref())
            .filter(|t| child.status == ActivityStatus::Completed && t.from == current);
        if found.is_none() {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"stale": child.id, "tag": child.tag}),
            );
        }
        found
    }

    fn machine_on_exit(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        match self.live_transition(id, m, &child) {
            Some(t) => self.machine_after_exit(id, m, t, child.payload),
            None => Ok(()),
        }
    }

    fn machine_on_action(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        match self.live_transition(id, m, &child) {
            Some(t) => self.machine_arrive(id, m, t, child.payload),
            None => Ok(()),
        }
    }

    /// SM-5.4 and SM-5.5: the only moment the state changes; then enter the target, through
    /// a continuation work item when it can reach itself automatically (SM-6).
    fn machine_arrive(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        t: &TransitionNode,
        payload: Option<Value>,
    ) -> Result<(), StepError> {
        self.set_current_state(id, &t.to);
        // RT-30: the `since_entered` waits of the new state look back to this run's cause.
        let caused_at = self.caused_at();
        if let Some(c) = self.state_mut().context_mut(id) {
            match caused_at {
                Some(at) => {
                    c.properties.insert(ENTERED_AT.to_owned(), Value::from(at));
                }
                None => {
                    c.properties.remove(ENTERED_AT);
                }
            }
        }
        if self.journal_keeps(JournalKind::StateChanged) {
            let detail = Detail::object()
                .str("from", &t.from)
                .str("to", &t.to)
                .str("transition", &t.key)
                .finish();
            self.record_detail(JournalKind::StateChanged, Some(id), detail);
        }
        if m.state(&t.to)
            .is_some_and(|s| s.reaches_itself_automatically)
        {
            self.schedule_continuation(id, ON_CONTINUE, TAG_CONTINUING, payload);
            return Ok(());
        }
        self.machine_enter(id, m, &t.to, payload)
    }

    fn machine_on_continue(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: ChildInfo,
    ) -> Result<(), StepError> {
        if child.id != id || child.tag.as_deref() != Some(TAG_CONTINUING) {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        }
        let current = self.current_state(id).unwrap_or_default();
        self.machine_enter(id, m, &current, child.payload)
    }

    /// ENG-54: a migrated instance's machine, placed in its current state, arms that state's
    /// transitions (SM-3) without running its entry, which ran in the previous version.
    fn machine_on_migrated(
        &mut self,
        id: ContextId,
        m: &MachineNode,
        child: &ChildInfo,
    ) -> Result<(), StepError> {
        if child.id != id || child.tag.as_deref() != Some(TAG_MIGRATED) {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"ignored": child.id, "tag": child.tag}),
            );
            return Ok(());
        }
        let current = self.current_state(id).unwrap_or_else(|| m.initial.clone());
        if m.state(&current).is_none() {
            self.record(
                JournalKind::Declined,
                Some(id),
                json!({"reason": format!("state `{current}` does not exist: the machine completes")}),
            );
            return self.complete(id, None, Vec::new());
        }
        self.machine_outbound(id, m, &current)
    }
}

impl<'g, S: Scope<'g> + ?Sized> StateMachineActivity<'g> for S {}

/// Resolves a transition from a tag: first among the current state's outbound transitions,
/// else among all (SM-4).
pub(crate) fn resolve<'m>(
    m: &'m MachineNode,
    current: &str,
    tag: Option<&str>,
) -> Option<&'m TransitionNode> {
    let tag = tag?;
    m.transitions
        .iter()
        .find(|t| t.from == current && t.key == tag)
        .or_else(|| m.transitions.iter().find(|t| t.key == tag))
}
