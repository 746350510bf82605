//! Durable timers (TM-3 to TM-10): timer rows written with their bookmarks (TM-3),
//! the in-process driver that waits precisely for the earliest due time and re-arms on hints
//! (TM-4), the sweep as a fallback and the startup load (TM-5, TM-8), and firing under a
//! claim so one process fires each timer (TM-6).

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::{Inner, Runtime, lock};
use super::{RunTarget, StartOptions};
use crate::base::ms_to_micros;
use crate::engine::graph::TimeTrigger;
use crate::engine::names::Reserved;
use crate::engine::state::Bookmark;
use crate::engine::state::TriggerStart;
use crate::store::{Micros, NewTimer, Schedule, ScheduleFiring, StoreError, TimerRow, WakeUp};

/// How long a claim on a due timer lasts before another claimer may fire it (TM-6).
const CLAIM_TTL: Micros = 30_000_000;

/// How many due timers one claim takes.
const CLAIM_PAGE: usize = 100;

/// The timer row of a timer bookmark (TM-3): its id is the bookmark's, its due time the
/// payload's `due_at` (ms).
pub(super) fn timer_of(bookmark: &Bookmark) -> Option<NewTimer> {
    let kind = Reserved::from_name(&bookmark.name)?.timer_kind()?;
    let due_at = bookmark.payload.get("due_at").and_then(Value::as_u64)?;
    Some(NewTimer {
        timer_id: bookmark.id.clone(),
        kind: kind.to_owned(),
        due_at: ms_to_micros(due_at),
    })
}

/// What [`Runtime::fire_due_timers`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerFiring {
    /// Bookmarks resumed: `(instance id, timer id)`, in due order; for a time trigger's
    /// schedule (TM-11 to TM-13), `(started instance id, schedule id)`.
    pub fired: Vec<(String, String)>,
    /// Timers claimed whose resume failed (the claim expires and they are tried again); for a
    /// schedule, `(definition name, schedule id)`.
    pub failed: Vec<(String, String)>,
}

impl Runtime {
    /// Claims the timers due at the clock's now (TM-6) and resumes each one's bookmark, in
    /// due order, through the normal resume path: the resume payload is
    /// `{ "due_at", "fired_at" }` (ms), which the Delay completes with and journals (TM-8).
    /// The timer driver calls it; call it yourself on a runtime built without one.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the store fails while claiming timers; timers already fired stay
    /// fired, and the others are claimed again later.
    pub async fn fire_due_timers(&self) -> Result<TimerFiring, StoreError> {
        self.schedule_triggers().await?;
        let mut report = TimerFiring::default();
        loop {
            let now = self.inner.clock.now();
            let claimed = self
                .inner
                .store
                .claim_due_timers(&self.inner.owner, now, CLAIM_TTL, CLAIM_PAGE)
                .await?;
            if claimed.is_empty() {
                return Ok(report);
            }
            for timer in claimed {
                // A schedule (no instance) is a time trigger's (TM-11 to TM-13).
                let Some(instance_id) = timer.instance_id.clone() else {
                    match self.fire_schedule(&timer).await {
                        Ok(Some(started)) => report.fired.push((started, timer.timer_id)),
                        Ok(None) => {}
                        Err(error) => {
                            tracing::warn!(
                                schedule = %timer.timer_id,
                                %error,
                                "a due schedule could not be fired; its claim will expire"
                            );
                            let name = timer.definition_name.clone().unwrap_or_default();
                            report.failed.push((name, timer.timer_id));
                        }
                    }
                    continue;
                };
                let payload = json!({
                    "due_at": timer.due_at / 1000,
                    "fired_at": self.inner.clock.now_ms(),
                });
                match self
                    .resume_bookmark(&instance_id, &timer.timer_id, payload)
                    .await
                {
                    Ok(_) => report.fired.push((instance_id, timer.timer_id)),
                    Err(error) => {
                        tracing::warn!(
                            instance = %instance_id,
                            timer = %timer.timer_id,
                            %error,
                            "a due timer could not be fired; its claim will expire"
                        );
                        report.failed.push((instance_id, timer.timer_id));
                    }
                }
            }
        }
    }

    /// Stops the timer driver and fires the cancellation tokens of the tasks this process is
    /// running; part of [`Runtime::shutdown`].
    pub(super) fn stop_timers_and_tasks(&self) {
        self.inner.stop.send_replace(true);
        for token in lock(&self.inner.running).values() {
            token.cancel();
        }
    }

    /// Starts the timer driver on the current tokio runtime, unless one already runs.
    /// [`RuntimeBuilder::build`](super::RuntimeBuilder::build) does it when called inside a
    /// tokio runtime; call it after building outside one. Returns whether it started one.
    pub fn start_timer_driver(&self) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let mut started = lock(&self.inner.driver_started);
        if *started {
            return false;
        }
        *started = true;
        let weak = Arc::downgrade(&self.inner);
        let hints = self.inner.store.subscribe();
        let stop = self.inner.stop.subscribe();
        handle.spawn(drive_timers(weak, hints, stop));
        true
    }
}

/// The driver (TM-4, TM-5): fire what is due, then wait through the clock until exactly the
/// earliest due time, re-arming when a hint announces an earlier one; the sweep interval
/// only bounds the wait as a fallback for lost hints and expired claims.
async fn drive_timers(
    weak: Weak<Inner>,
    mut hints: broadcast::Receiver<WakeUp>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let runtime = Runtime { inner };
        // TM-5, TM-8: the first pass is the startup load; overdue timers fire at once.
        if let Err(error) = runtime.fire_due_timers().await {
            tracing::warn!(%error, "timer driver: claiming due timers failed");
        }
        let clock = runtime.inner.clock.clone();
        let sweep = runtime.inner.sweep_interval;
        let mut earliest = match runtime.inner.store.earliest_timer(clock.now()).await {
            Ok(earliest) => earliest,
            Err(error) => {
                tracing::warn!(%error, "timer driver: reading the earliest timer failed");
                None
            }
        };
        drop(runtime);
        loop {
            let due = match earliest {
                Some(at) => clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            let fallback = async {
                match sweep {
                    Some(interval) => tokio::time::sleep(interval).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = due => break,
                () = fallback => break,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                hint = hints.recv() => match hint {
                    // TM-4: an earlier timer re-arms the wait at once.
                    Ok(WakeUp::TimersChanged { earliest: Some(at) }) => {
                        if earliest.is_none_or(|e| at < e) {
                            earliest = Some(at);
                        }
                    }
                    Ok(WakeUp::TimersChanged { earliest: None })
                    | Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

impl Runtime {
    /// Writes the schedules of every registered definition's time triggers, once per
    /// runtime (TM-11 to TM-13); the timer driver and [`crate::testing::TestRuntime`] do it
    /// before their first claim. A schedule's id is derived from the definition, the node and
    /// the trigger's settings: an unchanged trigger keeps its `next_due` (and a fired StartAt
    /// stays fired), a changed one gets a new schedule due from now and the old one is
    /// removed, as is the schedule of a removed trigger.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the schedules cannot be written; a later call tries again.
    pub async fn schedule_triggers(&self) -> Result<(), StoreError> {
        self.inner
            .schedules_written
            .get_or_try_init(|| self.write_schedules())
            .await
            .map(|_| ())
    }

    async fn write_schedules(&self) -> Result<(), StoreError> {
        let now = self.inner.clock.now();
        let mut names: Vec<&String> = self.inner.workflows.keys().collect();
        names.sort();
        for name in names {
            let Some(workflow) = self.inner.workflows.get(name) else {
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
                        let now_s = u64::try_from(now / 1_000_000).unwrap_or(0);
                        let Some(next) = schedule.next_after_with_offset(now_s, *offset_seconds)
                        else {
                            continue;
                        };
                        (
                            "cron",
                            format!("cron:{expression}:{offset_seconds}"),
                            ms_to_micros(next.saturating_mul(1000)),
                        )
                    }
                };
                let schedule_id = format!(
                    "sch-{}",
                    super::send::sha_hex(&[name, &node_id, &key])
                        .get(..40)
                        .unwrap_or_default()
                );
                keep.push(schedule_id.clone());
                self.inner
                    .store
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
            for old in self.inner.store.list_schedules(name).await? {
                if !keep.contains(&old.schedule_id) {
                    self.inner.store.delete_schedule(&old.schedule_id).await?;
                }
            }
        }
        Ok(())
    }

    /// Fires one claimed schedule (TM-11 to TM-13): in one transaction, creates the instance
    /// of this occurrence, which starts at the trigger node, and advances the schedule; missed
    /// occurrences are coalesced into this one. Returns the started instance's id.
    async fn fire_schedule(&self, timer: &TimerRow) -> Result<Option<String>, StoreError> {
        let (Some(name), Some(node_id)) = (&timer.definition_name, &timer.node_id) else {
            return Ok(None);
        };
        let Some(workflow) = self.inner.workflows.get(name) else {
            return Ok(None);
        };
        let Some((_, trigger)) = workflow
            .time_triggers()
            .into_iter()
            .find(|(n, _)| n == node_id)
        else {
            return Ok(None);
        };
        let now = self.inner.clock.now();
        let due = timer.due_at;
        let (payload, next_due) = match trigger {
            TimeTrigger::Timer { interval_ms } => {
                let interval = ms_to_micros(interval_ms.max(1));
                let k = now.saturating_sub(due).max(0) / interval + 1;
                (
                    json!({ "due_at": due / 1000, "missed": k - 1 }),
                    Some(due.saturating_add(k.saturating_mul(interval))),
                )
            }
            TimeTrigger::StartAt { .. } => (json!({ "due_at": due / 1000 }), None),
            TimeTrigger::Cron {
                schedule,
                offset_seconds,
                ..
            } => {
                let now_s = u64::try_from(now / 1_000_000).unwrap_or(0);
                let mut latest = u64::try_from(due / 1_000_000).unwrap_or(0);
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
                    .map(|s| ms_to_micros(s.saturating_mul(1000)));
                (
                    json!({ "occurrence": latest.saturating_mul(1000), "missed": missed }),
                    next,
                )
            }
        };
        let instance_id = format!(
            "sch-{}",
            super::send::sha_hex(&[&timer.timer_id, &due.to_string()])
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
        };
        let mut new = match self.new_instance(name, payload, options, None, Some(trigger)) {
            Ok(new) => new,
            Err(error) => {
                tracing::warn!(definition = %name, %error, "a time trigger could not start an instance");
                return Ok(None);
            }
        };
        new.activation_scope = self.activation_scope(name, None).ok().flatten();
        match self
            .inner
            .store
            .fire_schedule(&timer.timer_id, due, new, next_due)
            .await?
        {
            ScheduleFiring::Started => {
                if let Err(error) = self.drive(&instance_id, RunTarget::None).await {
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

/// The default sweep interval (TM-5).
pub(super) const DEFAULT_SWEEP: Duration = Duration::from_secs(30);

impl Runtime {
    /// Shuts this runtime down (RT-26, ENG-36, ENG-52): the timer driver and the queue worker
    /// stop (a queue pass in progress completes first), and the tasks this process is running
    /// get their cancellation token fired. Their runs are *interrupted*: abandoned without a
    /// commit and without counting an attempt, so the instances continue from their last
    /// commit in the next process ([`Runtime::recover`]). A task that ignores its token is
    /// dropped after the grace. Build a new runtime to run again.
    pub async fn shutdown(&self) {
        self.stop_timers_and_tasks();
        self.stop_queue_worker().await;
    }
}
