//! Schedules of time triggers (TM-11 to TM-13): written per (definition, node, settings)
//! before the first claim, fired under claim, one instance per occurrence.

use serde_json::json;

use super::Timers;
use crate::base::{micros_to_secs, ms_to_micros, secs_to_micros};
use crate::engine::graph::TimeTrigger;
use crate::engine::state::TriggerStart;
use crate::identity::sha_hex;
use crate::runtime::outcomes::StartOptions;
use crate::runtime::run_path::RunOptions;
use crate::store::{Schedule, ScheduleFiring, StoreError, TimerRow};

impl Timers {
    fn definitions(&self) -> &crate::runtime::definitions::Definitions {
        self.run_path.definitions()
    }

    /// Writes the schedules of every registered definition's time triggers, once per
    /// runtime (TM-11 to TM-13); the timer driver and `TestRuntime` do it
    /// before their first claim. A schedule's id is derived from the definition, the node and
    /// the trigger's settings: an unchanged trigger keeps its `next_due` (and a fired StartAt
    /// stays fired), a changed one gets a new schedule due from now and the old one is
    /// removed, as is the schedule of a removed trigger.
    pub(crate) async fn schedule_triggers(&self) -> Result<(), StoreError> {
        self.schedules_written
            .get_or_try_init(|| self.write_schedules())
            .await
            .map(|_| ())
    }

    async fn write_schedules(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        for name in self.definitions().names() {
            let Some(workflow) = self.definitions().get(name) else {
                continue;
            };
            let mut keep = Vec::new();
            for (node_id, trigger) in workflow.time_triggers() {
                let (kind, key, due_at) = match &trigger {
                    TimeTrigger::Timer { interval_ms } => (
                        "timer",
                        format!("timer:{interval_ms}"),
                        now.saturating_add(ms_to_micros(*interval_ms)),
                    ),
                    TimeTrigger::StartAt { at_ms } => (
                        "start_at",
                        format!("start_at:{at_ms}"),
                        ms_to_micros(*at_ms).max(now),
                    ),
                    TimeTrigger::Cron {
                        expression,
                        schedule,
                        offset_seconds,
                    } => {
                        let now_s = micros_to_secs(now);
                        let Some(next) = schedule.next_after_with_offset(now_s, *offset_seconds)
                        else {
                            continue;
                        };
                        (
                            "cron",
                            format!("cron:{expression}:{offset_seconds}"),
                            secs_to_micros(next),
                        )
                    }
                };
                let schedule_id = format!(
                    "sch-{}",
                    sha_hex(&[name, &node_id, &key])
                        .get(..40)
                        .unwrap_or_default()
                );
                keep.push(schedule_id.clone());
                self.store
                    .put_schedule(Schedule {
                        schedule_id,
                        definition_name: name.clone(),
                        node_id,
                        kind: kind.to_owned(),
                        due_at,
                        fired: false,
                    })
                    .await?;
            }
            for old in self.store.list_schedules(name).await? {
                if !keep.contains(&old.schedule_id) {
                    self.store.delete_schedule(&old.schedule_id).await?;
                }
            }
        }
        Ok(())
    }

    /// Fires one claimed schedule (TM-11 to TM-13): in one transaction, creates the instance
    /// of this occurrence, which starts at the trigger node, and advances the schedule; missed
    /// occurrences are coalesced into this one. Returns the started instance's id.
    pub(super) async fn fire_schedule(
        &self,
        timer: &TimerRow,
    ) -> Result<Option<String>, StoreError> {
        let (Some(name), Some(node_id)) = (&timer.definition_name, &timer.node_id) else {
            return Ok(None);
        };
        let Some(workflow) = self.definitions().get(name) else {
            return Ok(None);
        };
        let Some((_, trigger)) = workflow
            .time_triggers()
            .into_iter()
            .find(|(n, _)| n == node_id)
        else {
            return Ok(None);
        };
        let now = self.clock.now();
        let due = timer.due_at;
        let (payload, next_due) = match trigger {
            TimeTrigger::Timer { interval_ms } => {
                let interval = ms_to_micros(interval_ms.max(1));
                let k = now.saturating_sub(due).max(0) / interval + 1;
                (
                    json!({ "due_at": due, "missed": k - 1 }),
                    Some(due.saturating_add(k.saturating_mul(interval))),
                )
            }
            TimeTrigger::StartAt { .. } => (json!({ "due_at": due }), None),
            TimeTrigger::Cron {
                schedule,
                offset_seconds,
                ..
            } => {
                let now_s = micros_to_secs(now);
                let mut latest = micros_to_secs(due);
                let mut missed = 0u64;
                while missed < 10_000 {
                    match schedule.next_after_with_offset(latest, offset_seconds) {
                        Some(n) if n <= now_s => {
                            latest = n;
                            missed += 1;
                        }
                        _ => break,
                    }
                }
                let next = schedule
                    .next_after_with_offset(latest.max(now_s), offset_seconds)
                    .map(secs_to_micros);
                (
                    json!({ "occurrence": secs_to_micros(latest), "missed": missed }),
                    next,
                )
            }
        };
        let instance_id = format!(
            "sch-{}",
            sha_hex(&[&timer.timer_id, &due.to_string()])
                .get(..40)
                .unwrap_or_default()
        );
        let trigger = TriggerStart {
            node_id: node_id.clone(),
            stimulus_id: instance_id.clone(),
            payload: payload.clone(),
        };
        let options = StartOptions {
            instance_id: Some(instance_id.clone()),
            correlation_id: None,
            traceparent: None,
        };
        let mut new = match self.definitions().new_instance(
            name,
            payload,
            options,
            None,
            Some(trigger),
        ) {
            Ok(new) => new,
            Err(error) => {
                tracing::warn!(definition = %name, %error, "a time trigger could not start an instance");
                return Ok(None);
            }
        };
        new.activation_scope = self
            .definitions()
            .activation_scope(name, None)
            .ok()
            .flatten();
        match self
            .store
            .fire_schedule(&timer.timer_id, due, new, next_due)
            .await?
        {
            ScheduleFiring::Started => {
                if let Err(error) = self.run_path.run(&instance_id, RunOptions::first()).await {
                    tracing::warn!(instance = %instance_id, %error, "a triggered instance did not run; recover() runs it");
                }
                Ok(Some(instance_id))
            }
            ScheduleFiring::Refused { existing } => {
                tracing::info!(definition = %name, %existing, "time trigger refused by the activation strategy (RT-16)");
                Ok(None)
            }
            ScheduleFiring::Stale => Ok(None),
        }
    }
}
