//! Time: Delay (ACT-20), StartAt (ACT-22) and Cron (ACT-23) not as triggers, and the
//! repeating Timer (ACT-21, TM-11); each waits on a durable timer (TM-3).

use serde_json::{Value, json};

use super::scope::{Scope, StepError, engine_fault};
use super::scope::{done, permanent};
use crate::base::{Micros, ms_to_micros};
use crate::engine::graph::NodeIndex;
use crate::engine::names::{ON_BODY, ON_TICK, Reserved};
use crate::engine::state::ContextId;
use crate::identity::stimulus_hash;

/// A Timer's anchor (µs since the epoch), the moment it started (TM-11).
const ANCHOR: &str = "anchor";
/// A Timer's ticks so far.
const TICKS: &str = "ticks";
/// The grid index `k` of a Timer's armed tick (`anchor + k × interval`).
const GRID: &str = "grid";

/// The Delay, Timer, StartAt and Cron activities, for any [`Scope`].
pub(crate) trait TimeActivity<'g>: Scope<'g> {
    /// A `wf.delay` bookmark scoped to this context (RT-7) with its due time as payload; the
    /// commit writes its timer row (TM-3) and the timer driver resumes it when due (TM-9):
    /// `due_at` (µs since the epoch) is computed once, here. The duration is the user's
    /// milliseconds; with `until`, the value fn gives the instant in ms since the Unix epoch
    /// (user input, converted here); one not in the future completes at once (ACT-20). The
    /// duration counts from the context's start: now, or for a node placed by a migration the
    /// instant it started in the previous version (ENG-55).
    fn execute_delay(
        &mut self,
        id: ContextId,
        duration_ms: Option<u64>,
        until: Option<&str>,
    ) -> Result<(), StepError> {
        let due_at = match (duration_ms, until) {
            (Some(duration_ms), _) => {
                let since = self
                    .state()
                    .context(id)
                    .and_then(|c| c.started_at)
                    .unwrap_or_else(|| self.now());
                since.saturating_add(ms_to_micros(duration_ms))
            }
            (None, Some(until)) => {
                let value = self.value_fn(id, until)?;
                let Some(at) = value.as_u64() else {
                    return Err(permanent(
                        id,
                        format!(
                            "delay until fn `{until}` returned `{value}`, not an instant in ms since the epoch"
                        ),
                    ));
                };
                ms_to_micros(at)
            }
            (None, None) => {
                return Err(engine_fault(id, "delay without a duration or an instant"));
            }
        };
        if due_at <= self.now() {
            let now = self.now();
            return self.complete(
                id,
                Some(json!({ "due_at": due_at, "fired_at": now })),
                Vec::new(),
            );
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            Reserved::Delay.name(),
            None,
            Some((self.state().instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(
            id,
            Reserved::Delay.name(),
            hash,
            json!({ "due_at": due_at }),
            None,
        )?;
        Ok(())
    }

    /// ACT-22 (TM-3): a `wf.start_at` bookmark with payload `{due_at}` (µs) and its timer;
    /// the instant is a constant or a value fn's result (user input: ms since the epoch or
    /// RFC 3339, converted here; a local date and time is read in the node's zone, TM-16).
    /// One not in the future completes at once, with no bookmark.
    fn execute_start_at(
        &mut self,
        id: ContextId,
        at_ms: Option<u64>,
        at_fn: Option<&str>,
        zone: Option<&workflow_model::cron::Zone>,
    ) -> Result<(), StepError> {
        let due_at = match (at_ms, at_fn) {
            (Some(at), _) => ms_to_micros(at),
            (None, Some(at_fn)) => {
                let value = self.value_fn(id, at_fn)?;
                let instant = match &value {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => crate::engine::graph::instant_ms(s, zone),
                    _ => None,
                };
                let Some(at) = instant else {
                    return Err(permanent(
                        id,
                        format!(
                            "start_at fn `{at_fn}` returned `{value}`, not an instant (ms since the epoch or RFC 3339)"
                        ),
                    ));
                };
                ms_to_micros(at)
            }
            (None, None) => {
                return Err(engine_fault(id, "start_at without an instant"));
            }
        };
        self.timer_wait(
            id,
            Reserved::StartAt.name(),
            due_at,
            json!({ "due_at": due_at }),
        )
    }

    /// ACT-23 not as trigger (TM-12): a `wf.cron` bookmark with payload `{due_at, expression}`
    /// due at the first occurrence strictly after now in the node's zone (TM-16 to TM-18);
    /// when it fires, the node completes.
    fn execute_cron(
        &mut self,
        id: ContextId,
        expression: &str,
        schedule: &workflow_model::cron::Schedule,
        zone: &workflow_model::cron::Zone,
    ) -> Result<(), StepError> {
        let now_seconds = crate::base::micros_to_secs(self.now());
        let Some(next) = schedule.next_after_in(now_seconds, zone) else {
            return Err(permanent(
                id,
                format!("cron `{expression}` has no occurrence within 5 years"),
            ));
        };
        let due_at = crate::base::secs_to_micros(next);
        self.timer_wait(
            id,
            Reserved::Cron.name(),
            due_at,
            json!({ "due_at": due_at, "expression": expression }),
        )
    }

    /// A timer bookmark scoped to this context (RT-7, TM-3), or completion at once when
    /// `due_at` is not in the future.
    fn timer_wait(
        &mut self,
        id: ContextId,
        name: &str,
        due_at: Micros,
        payload: Value,
    ) -> Result<(), StepError> {
        if due_at <= self.now() {
            let now = self.now();
            return self.complete(
                id,
                Some(json!({ "due_at": due_at, "fired_at": now })),
                Vec::new(),
            );
        }
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            name,
            None,
            Some((self.state().instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(id, name, hash, payload, None)?;
        Ok(())
    }

    // ---- Timer (ACT-21, TM-11) ----------------------------------------------------------
    /// The anchor is now; the first tick is armed one interval later.
    fn timer_execute(&mut self, id: ContextId, interval_ms: u64) -> Result<(), StepError> {
        let now = self.now();
        self.set_prop(id, ANCHOR, json!(now));
        self.set_prop(id, TICKS, json!(0));
        self.set_prop(id, GRID, json!(0));
        self.timer_arm(id, interval_ms)
    }

    /// Arms the next tick at the first grid point `anchor + k × interval` strictly after now
    /// (TM-11): missed grid points are coalesced, and the tick's bookmark counts them.
    fn timer_arm(&mut self, id: ContextId, interval_ms: u64) -> Result<(), StepError> {
        let interval = ms_to_micros(interval_ms.max(1));
        let anchor = self.prop_instant(id, ANCHOR);
        let previous = self.prop_u64(id, GRID);
        let elapsed = u64::try_from(self.now().saturating_sub(anchor)).unwrap_or(0);
        let k = elapsed / interval.unsigned_abs() + 1;
        let k = k.max(previous + 1);
        let missed = k - previous - 1;
        self.set_prop(id, GRID, json!(k));
        let offset = i64::try_from(k)
            .unwrap_or(i64::MAX)
            .saturating_mul(interval);
        let due_at = anchor.saturating_add(offset);
        let tick = self.prop_u64(id, TICKS) + 1;
        let scope_context = id.to_string();
        let hash = stimulus_hash(
            Reserved::Timer.name(),
            None,
            Some((self.state().instance_id.as_str(), scope_context.as_str())),
        )
        .map_err(|e| engine_fault(id, e.to_string()))?;
        self.create_bookmark(
            id,
            Reserved::Timer.name(),
            hash,
            json!({ "due_at": due_at, "tick": tick, "missed": missed }),
            Some(ON_TICK),
        )?;
        Ok(())
    }

    /// A tick fired: the body runs, if there is one, then the timer decides whether to stop.
    fn timer_ticked(
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
}

impl<'g, S: Scope<'g> + ?Sized> TimeActivity<'g> for S {}
