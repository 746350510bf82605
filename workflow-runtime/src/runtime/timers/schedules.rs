//! Schedules of time triggers (TM-11 to TM-13): written per (definition, node, settings)
//! before the first claim, fired under claim, one instance per occurrence; a cron trigger's
//! missed occurrences are skipped, coalesced or backfilled by its policy (TM-19).

use std::collections::VecDeque;

use workflow_model::Missed;
use workflow_model::cron::{Schedule as CronSchedule, Zone};

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
                    TimeTrigger::Timer {
                        interval_ms,
                        missed,
                    } => (
                        "timer",
                        timer_key(*interval_ms, *missed),
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
                        zone,
                        missed,
                    } => {
                        let now_s = micros_to_secs(now);
                        let Some(next) = schedule.next_after_in(now_s, zone) else {
                            continue;
                        };
                        (
                            "cron",
                            cron_key(expression, zone, *missed),
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
    /// of this occurrence, which starts at the trigger node, and advances the schedule. A
    /// timer's missed ticks are coalesced into this one; a cron's missed occurrences follow
    /// its policy (TM-19), which may start nothing and only advance the schedule.
    pub(super) async fn fire_schedule(&self, timer: &TimerRow) -> Result<Fired, StoreError> {
        let (Some(name), Some(node_id)) = (&timer.definition_name, &timer.node_id) else {
            return Ok(Fired::Nothing);
        };
        let Some(workflow) = self.definitions().get(name) else {
            return Ok(Fired::Nothing);
        };
        let Some((_, trigger)) = workflow
            .time_triggers()
            .into_iter()
            .find(|(n, _)| n == node_id)
        else {
            return Ok(Fired::Nothing);
        };
        let now = self.clock.now();
        let due = timer.due_at;
        let (payload, next_due) = match trigger {
            TimeTrigger::Timer {
                interval_ms,
                missed,
            } => {
                let firing = timer_firing(ms_to_micros(interval_ms.max(1)), missed, due, now);
                match firing.occurrence {
                    Some(tick) => (
                        json!({ "due_at": tick, "missed": firing.missed }),
                        firing.next_due,
                    ),
                    None => return self.skip(timer, name, node_id, firing).await,
                }
            }
            TimeTrigger::StartAt { .. } => (json!({ "due_at": due }), None),
            TimeTrigger::Cron {
                schedule,
                zone,
                missed,
                ..
            } => {
                let firing = cron_firing(&schedule, &zone, missed, micros_to_secs(due), now);
                match firing.occurrence {
                    Some(occurrence) => (
                        json!({
                            "occurrence": secs_to_micros(occurrence),
                            "missed": firing.missed,
                        }),
                        firing.next_due,
                    ),
                    None => return self.skip(timer, name, node_id, firing).await,
                }
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
                return Ok(Fired::Nothing);
            }
        };
        new.activation_scope = self
            .definitions()
            .activation_scope(name, None)
            .ok()
            .flatten();
        match self
            .store
            .fire_schedule(&timer.timer_id, due, Some(new), next_due)
            .await?
        {
            ScheduleFiring::Started => {
                if let Err(error) = self.run_path.run(&instance_id, RunOptions::first()).await {
                    tracing::warn!(instance = %instance_id, %error, "a triggered instance did not run; recover() runs it");
                }
                Ok(Fired::Started(instance_id))
            }
            ScheduleFiring::Refused { existing } => {
                tracing::info!(definition = %name, %existing, "time trigger refused by the activation strategy (RT-16)");
                Ok(Fired::Nothing)
            }
            ScheduleFiring::Stale | ScheduleFiring::Skipped => Ok(Fired::Nothing),
        }
    }

    /// TM-19 skip: starts no instance and moves the schedule past now.
    async fn skip<T>(
        &self,
        timer: &TimerRow,
        name: &str,
        node_id: &str,
        firing: Firing<T>,
    ) -> Result<Fired, StoreError> {
        let skipped = self
            .store
            .fire_schedule(
                &timer.timer_id,
                timer.due_at,
                None::<crate::store::NewInstance>,
                firing.next_due,
            )
            .await?;
        if skipped != ScheduleFiring::Skipped {
            return Ok(Fired::Nothing);
        }
        tracing::info!(
            definition = %name,
            node = %node_id,
            skipped = firing.missed,
            "missed occurrences skipped (TM-19)"
        );
        Ok(Fired::Skipped)
    }
}

/// What firing one claimed schedule did.
#[derive(Debug)]
pub(super) enum Fired {
    /// It started this instance.
    Started(String),
    /// Its missed occurrences were skipped by the trigger's policy and it advanced (TM-19).
    Skipped,
    /// Nothing: another process fired it, its definition or node is gone, or the activation
    /// strategy refused the instance.
    Nothing,
}

/// How late an occurrence may fire and still count as on time (TM-19): later than this, it
/// was missed (no process ran, or they were far behind).
pub(crate) const MISSED_AFTER_SECONDS: u64 = 60;

/// The most occurrences one firing walks over; a 6-field cron missing more than this many
/// goes on from the last one walked at its next firing.
const MAX_WALK: usize = 100_000;

/// What one firing of a cron or timer trigger does (TM-19).
#[derive(Debug, PartialEq, Eq)]
struct Firing<T> {
    /// The occurrence (Unix seconds for a cron, µs for a timer) this firing starts an
    /// instance for; `None` to start none.
    occurrence: Option<T>,
    /// The occurrences this firing stands for that start no instance of their own.
    missed: u64,
    /// Where the schedule goes next (µs); at or before now when a backfill goes on.
    next_due: Option<crate::base::Micros>,
}

/// The firing of a cron trigger due at `due` (Unix seconds) at `now` (µs), by its policy:
/// `once` starts one instance for the latest past occurrence and coalesces the rest; `skip`
/// starts one only if the latest is on time (within [`MISSED_AFTER_SECONDS`]); `backfill(n)`
/// starts the oldest of the latest `n` and leaves the schedule due at the next one, so the
/// driver fires the others one by one.
fn cron_firing(
    schedule: &CronSchedule,
    zone: &Zone,
    missed: Missed,
    due: u64,
    now: crate::base::Micros,
) -> Firing<u64> {
    let now_s = micros_to_secs(now);
    let keep = match missed {
        Missed::Backfill(n) => usize::try_from(n).unwrap_or(usize::MAX).clamp(1, MAX_WALK),
        Missed::Skip | Missed::Once => 1,
    };
    // The latest `keep` occurrences from `due` up to now, and how many there were.
    let mut latest = VecDeque::from([due]);
    let mut count = 1usize;
    while count < MAX_WALK {
        let last = latest.back().copied().unwrap_or(due);
        match schedule.next_after_in(last, zone) {
            Some(n) if n <= now_s => {
                latest.push_back(n);
                if latest.len() > keep {
                    latest.pop_front();
                }
                count += 1;
            }
            _ => break,
        }
    }
    let newest = latest.back().copied().unwrap_or(due);
    let after_now = schedule
        .next_after_in(newest.max(now_s), zone)
        .map(secs_to_micros);
    let uncounted = u64::try_from(count - latest.len()).unwrap_or(u64::MAX);
    match missed {
        Missed::Once => Firing {
            occurrence: Some(newest),
            missed: uncounted,
            next_due: after_now,
        },
        Missed::Skip if now_s.saturating_sub(newest) <= MISSED_AFTER_SECONDS => Firing {
            occurrence: Some(newest),
            missed: uncounted,
            next_due: after_now,
        },
        Missed::Skip => Firing {
            occurrence: None,
            missed: u64::try_from(count).unwrap_or(u64::MAX),
            next_due: after_now,
        },
        Missed::Backfill(_) => {
            let first = latest.front().copied().unwrap_or(due);
            Firing {
                occurrence: Some(first),
                missed: uncounted,
                next_due: latest.get(1).map(|&n| secs_to_micros(n)).or(after_now),
            }
        }
    }
}

/// The firing of a repeating-timer trigger due at `due` (µs) at `now`, ticking every
/// `interval` µs, by its policy (TM-11, TM-19): the ticks that fell due are `due + j ×
/// interval` up to now. `once` starts one instance for them all, with the first tick's due
/// time (TM-11's coalescing); `skip` starts one for the latest only if it is on time (within
/// [`MISSED_AFTER_SECONDS`]); `backfill(n)` starts the oldest of the latest `n` and leaves the
/// schedule due at the next one, so the driver fires the others one by one.
fn timer_firing(
    interval: crate::base::Micros,
    missed: Missed,
    due: crate::base::Micros,
    now: crate::base::Micros,
) -> Firing<crate::base::Micros> {
    let interval = interval.max(1);
    // Ticks due at or before now, counting `due` itself.
    let count = now.saturating_sub(due).max(0) / interval + 1;
    let tick = |j: i64| due.saturating_add(j.saturating_mul(interval));
    let after_now = Some(tick(count));
    let uncounted = |kept: i64| u64::try_from(count - kept).unwrap_or(0);
    match missed {
        Missed::Once => Firing {
            occurrence: Some(due),
            missed: uncounted(1),
            next_due: after_now,
        },
        Missed::Skip
            if now.saturating_sub(tick(count - 1)) <= secs_to_micros(MISSED_AFTER_SECONDS) =>
        {
            Firing {
                occurrence: Some(tick(count - 1)),
                missed: uncounted(1),
                next_due: after_now,
            }
        }
        Missed::Skip => Firing {
            occurrence: None,
            missed: uncounted(0),
            next_due: after_now,
        },
        Missed::Backfill(n) => {
            let keep = i64::from(n).clamp(1, count);
            let first = count - keep;
            Firing {
                occurrence: Some(tick(first)),
                missed: uncounted(keep),
                next_due: Some(tick(first + 1)),
            }
        }
    }
}

/// The part of a repeating-timer trigger's schedule id that its settings decide: a changed
/// interval or policy is a new schedule; the default policy keeps the key it had before
/// policies, so its schedule keeps its next due time.
fn timer_key(interval_ms: u64, missed: Missed) -> String {
    if missed.is_default() {
        format!("timer:{interval_ms}")
    } else {
        format!("timer:{interval_ms}:missed={missed}")
    }
}

/// The part of a cron trigger's schedule id that its settings decide: a changed expression,
/// zone or policy is a new schedule. UTC and fixed offsets keep the key they had before
/// IANA zones, so their schedules keep their next due time.
fn cron_key(expression: &str, zone: &Zone, missed: Missed) -> String {
    let zone = zone
        .fixed_offset_seconds()
        .map_or_else(|| zone.name().to_owned(), |s| s.to_string());
    if missed.is_default() {
        format!("cron:{expression}:{zone}")
    } else {
        format!("cron:{expression}:{zone}:missed={missed}")
    }
}
