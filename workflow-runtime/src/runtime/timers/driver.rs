//! The timer driver (TM-4 to TM-8): waits precisely for the earliest due time, re-arms on
//! hints, sweeps as a fallback, and fires due timers under a claim so one process fires each
//! (TM-6).

use std::sync::{Arc, Weak};

use serde_json::json;
use tokio::sync::{broadcast, watch};

use super::Timers;
use super::schedules::Fired;
use crate::engine::executor::RunTarget;
use crate::runtime::errors::ResumeError;
use crate::runtime::run_path::KEPT_IDLE;
use crate::store::{StoreError, WakeUp};

/// How many due timers one claim takes.
const CLAIM_PAGE: usize = 100;

/// How many claimed timers resume at once (TM-6). Each resume is a whole run of its instance
/// (lease, load, tasks, commit): one after the other, a page of them took far longer than
/// their claim, timers fell tens of seconds behind under load and a time trigger's
/// occurrences, queued behind them, were coalesced.
const FIRING_CONCURRENCY: usize = 8;

/// What [`Runtime::fire_due_timers`](crate::Runtime::fire_due_timers) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerFiring {
    /// Bookmarks resumed: `(instance id, timer id)`, in due order; for a time trigger's
    /// schedule (TM-11 to TM-13), `(started instance id, schedule id)`.
    pub fired: Vec<(String, String)>,
    /// Timers claimed whose resume failed (the claim expires and they are tried again); for a
    /// schedule, `(definition name, schedule id)`.
    pub failed: Vec<(String, String)>,
    /// Cron schedules whose missed occurrences were skipped without starting an instance
    /// (TM-19): `(definition name, schedule id)`.
    pub skipped: Vec<(String, String)>,
    /// The debounce ids of the debounced sends settled (RT-35), in due order: delivered, or
    /// refused for good and dropped; filled by
    /// [`Runtime::fire_due_timers`](crate::Runtime::fire_due_timers).
    pub debounced: Vec<String>,
    /// Timer rows whose due time does not decode (ST-22), each reported by a `warn` event
    /// and its instance faulted with a `damaged_timer` incident: `(instance id, timer id)`;
    /// for a schedule, `(definition name, schedule id)`.
    pub damaged: Vec<(String, String)>,
}

impl Timers {
    /// Claims the timers due at the clock's now (TM-6) and resumes each one's bookmark through
    /// the normal resume path, the time triggers' schedules first, then the instances' timers
    /// in due order, a few at once: the resume payload is `{ "due_at", "fired_at" }` (µs),
    /// which the Delay completes with and journals (TM-8).
    /// The timer driver calls it; call it yourself on a runtime built without one.
    pub(crate) async fn fire_due_timers(self: &Arc<Self>) -> Result<TimerFiring, StoreError> {
        self.schedule_triggers().await?;
        let mut report = TimerFiring::default();
        loop {
            let now = self.clock.now();
            // TM-5: nothing due, nothing claimed: a read, so an idle driver writes nothing
            // (a claim of no rows is still a write transaction).
            if self
                .store
                .earliest_timer(now)
                .await?
                .is_none_or(|at| at > now)
            {
                return Ok(report);
            }
            let due = self
                .store
                .claim_timers(
                    self.run_path.owner(),
                    now,
                    // TM-6: a claim lasts as long as an instance lease (ST-14).
                    self.run_path.lease_settings().ttl_micros(),
                    CLAIM_PAGE,
                )
                .await?;
            if due.claimed.is_empty() && due.damaged.is_empty() {
                return Ok(report);
            }
            // ST-22: a row whose due time does not decode is never due; its instance is
            // faulted with an incident naming it instead of sleeping forever.
            for damage in &due.damaged {
                self.report_damaged(damage).await;
                let owner = damage
                    .instance_id
                    .clone()
                    .or_else(|| damage.definition_name.clone())
                    .unwrap_or_default();
                report.damaged.push((owner, damage.timer_id.clone()));
            }
            let claimed = due.claimed;
            // A schedule (no instance) is a time trigger's (TM-11 to TM-13): fired first, so
            // its occurrence is not late for the runs of the page's timers.
            let (schedules, timers): (Vec<_>, Vec<_>) =
                claimed.into_iter().partition(|t| t.instance_id.is_none());
            for timer in schedules {
                match self.fire_schedule(&timer).await {
                    Ok(Fired::Started(started)) => report.fired.push((started, timer.timer_id)),
                    Ok(Fired::Nothing) => {}
                    Ok(Fired::Skipped) => {
                        let name = timer.definition_name.clone().unwrap_or_default();
                        report.skipped.push((name, timer.timer_id));
                    }
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
            }
            // The timers resume in due order, the instances up to FIRING_CONCURRENCY at once;
            // the timers of one instance one after the other, in due order (a retry's timer
            // due before a state's `after` timer must fire first).
            let mut groups: Vec<(String, Vec<(usize, crate::store::TimerRow)>)> = Vec::new();
            for (index, timer) in timers.into_iter().enumerate() {
                let instance = timer.instance_id.clone().unwrap_or_default();
                match groups.iter_mut().find(|(i, _)| *i == instance) {
                    Some((_, group)) => group.push((index, timer)),
                    None => groups.push((instance, vec![(index, timer)])),
                }
            }
            let mut results = Vec::new();
            let mut running = tokio::task::JoinSet::new();
            for (_, group) in groups {
                while running.len() >= FIRING_CONCURRENCY {
                    if let Some(done) = running.join_next().await {
                        results.extend(joined(done));
                    }
                }
                let timers = Arc::clone(self);
                running.spawn(async move {
                    let mut fired = Vec::with_capacity(group.len());
                    for (index, timer) in group {
                        let outcome = timers.fire_timer(&timer).await;
                        fired.push((index, timer, outcome));
                    }
                    fired
                });
            }
            while let Some(done) = running.join_next().await {
                results.extend(joined(done));
            }
            results.sort_by_key(|(index, ..)| *index);
            for (_, timer, fired) in results {
                let instance_id = timer.instance_id.unwrap_or_default();
                if fired {
                    report.fired.push((instance_id, timer.timer_id));
                } else {
                    report.failed.push((instance_id, timer.timer_id));
                }
            }
        }
    }

    /// Reports a damaged timer row (ST-22): a `warn` event naming it, and its instance, if
    /// any, faulted with a `damaged_timer` incident. A row whose instance could not be
    /// faulted now (leased by a run elsewhere) keeps its claim until it expires, then is met
    /// again.
    async fn report_damaged(&self, damage: &crate::store::DamagedTimer) {
        tracing::warn!(
            instance = damage.instance_id.as_deref().unwrap_or(""),
            timer = %damage.timer_id,
            error = %damage.error(),
            "a timer row does not decode: it cannot fire"
        );
        let Some(instance_id) = damage.instance_id.as_deref() else {
            return;
        };
        if let Err(error) = self.run_path.fault_damaged_timer(instance_id, damage).await {
            tracing::warn!(
                instance = instance_id,
                timer = %damage.timer_id,
                %error,
                "the instance of a damaged timer could not be faulted; its claim will expire"
            );
        }
    }

    /// Resumes one claimed instance timer's bookmark; whether it fired (a failure is logged,
    /// and the claim expires so that it is tried again).
    async fn fire_timer(&self, timer: &crate::store::TimerRow) -> bool {
        let instance_id = timer.instance_id.as_deref().unwrap_or_default();
        let fired_at = self.clock.now();
        // ENG-60: how late it fires, in workflow time.
        let late = u64::try_from(fired_at.saturating_sub(timer.due_at)).unwrap_or(0);
        self.run_path
            .metrics()
            .timer_fired(std::time::Duration::from_micros(late));
        let payload = json!({
            "due_at": timer.due_at,
            "fired_at": fired_at,
        });
        let target = RunTarget::Bookmarks {
            ids: vec![timer.timer_id.clone()],
            payload,
        };
        // Another process may keep the instance's lease between its runs (ST-38): the
        // firing is handed the instance when it gives the lease back, instead of leaving
        // the timer claimed until the claim expires; for half the claim at most, so that a
        // firing that still cannot run is tried again by whoever claims it next.
        let bound = KEPT_IDLE.min(self.run_path.lease_settings().ttl / 2);
        let resumed = self
            .run_path
            .run_when_free(instance_id, || target.clone(), bound)
            .await;
        self.links.process().await;
        let resumed = match resumed {
            Ok(Some(started)) => Ok(started),
            Ok(None) => Err(ResumeError::InstanceNotFound {
                instance: instance_id.to_owned(),
            }),
            Err(error) => Err(ResumeError::Run(error)),
        };
        match resumed {
            // The run logs `timer fired` with the definition and the node.
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(
                    instance = %instance_id,
                    timer = %timer.timer_id,
                    %error,
                    "a due timer could not be fired; its claim will expire"
                );
                false
            }
        }
    }
}

/// The firings of one joined group: a panicked group is logged (the claims of its timers
/// expire and they are tried again).
fn joined(
    done: Result<Vec<(usize, crate::store::TimerRow, bool)>, tokio::task::JoinError>,
) -> Vec<(usize, crate::store::TimerRow, bool)> {
    match done {
        Ok(fired) => fired,
        Err(error) => {
            tracing::warn!(%error, "firing due timers panicked; their claims will expire");
            Vec::new()
        }
    }
}

/// The driver (TM-4, TM-5): fire what is due, then wait through the clock until exactly the
/// earliest due time, re-arming when a hint announces an earlier one; the sweep interval
/// only bounds the wait as a fallback for lost hints and expired claims.
pub(crate) async fn timer_driver(
    weak: Weak<Timers>,
    mut hints: broadcast::Receiver<WakeUp>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let Some(timers) = weak.upgrade() else { return };
        if *stop.borrow() {
            return;
        }
        // TM-5, TM-8: the first pass is the startup load; overdue timers fire at once.
        if let Err(error) = timers.fire_due_timers().await {
            tracing::warn!(%error, "timer driver: claiming due timers failed");
        }
        let clock = timers.clock.clone();
        let sweep = timers.fallback_sweep;
        let mut earliest = match timers.store.earliest_timer(clock.now()).await {
            Ok(earliest) => earliest,
            Err(error) => {
                tracing::warn!(%error, "timer driver: reading the earliest timer failed");
                None
            }
        };
        drop(timers);
        // TM-5: the fallback sweep runs at a fixed time after this pass, however many hints
        // re-arm the precise wait meanwhile (a stream of hints must not postpone it for
        // ever: it is what fires a timer whose claim expired).
        let fallback_at = sweep.map(|interval| tokio::time::Instant::now() + interval);
        loop {
            let due = match earliest {
                Some(at) => clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            let fallback = async {
                match fallback_at {
                    Some(at) => tokio::time::sleep_until(at).await,
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
