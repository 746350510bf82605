//! Flow-control slots around a task attempt (QU-10, QU-11): before the attempt of a task of a
//! queue runs, the gate takes a slot of it from the store. When the queue has no room for
//! longer than a short grace, the attempt does not wait in its run: the gate answers
//! [`Taken::Suspend`], the run suspends its instance on a `wf.slot` bookmark whose timer asks
//! again, and a release naming the holder resumes it at once. The slot is renewed while the
//! attempt runs and released when it ends, whatever the outcome.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use workflow_model::{Priority, Queue};

use crate::base::{Micros, now_micros};
use crate::cancel::CancellationToken;
use crate::engine::error::RunError;
use crate::store::{
    SlotAsk, SlotLease, SlotOutcome, SlotWait, Storage, StoreError, WaitReason, WakeUp,
};

/// The longest the first waiter in line goes without asking again (the one behind it asks
/// half as often, and so on): a wake-up may be lost, and a waiter's place is kept only while
/// it asks within the lease.
const MAX_POLL: Duration = Duration::from_millis(500);

/// How long an attempt may wait for its slot inside its run before its instance is suspended
/// (QU-11): a waiter behind others that have room now asks again within `BEHIND_RETRY` (20
/// ms), and a racing ask is served as soon; a longer wait is out of the run.
pub(crate) const IN_RUN_GRACE: Duration = Duration::from_millis(25);

/// The longest wait for a rate window's turn that stays in the run (QU-11). Below it, the
/// run's own sleep meets the turn within the window's precision, where a resume through the
/// timer driver costs a commit and a run per waiter (which fell far short of a 1,000/s rate),
/// and a parked run holds its lease and memory for at most a second. Beyond it the waits add
/// up with the backlog (10,000 waiters at 10/s would park runs for 1,000 s), while a resume's
/// cost and lateness (milliseconds) are small against the wait. A third of the lease would
/// park runs for 10 s at the default lease TTL.
pub(crate) const RATE_IN_RUN: Duration = Duration::from_secs(1);

/// What the gate answers an attempt that asks for a slot.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The slot is held: run the attempt under [`FlowGate::hold`].
    Granted(SlotLease),
    /// No room within the grace: suspend the instance and ask again `after` this long at the
    /// latest (or when a release names the holder). The place in line is kept until then and
    /// one lease more.
    Suspend {
        /// Why it waits, and where in line.
        wait: SlotWait,
        /// When to ask again at the latest.
        after: Duration,
    },
}

/// Resumes the suspended waits of an instance whose holder a release named (QU-11): set by
/// the runtime, which runs the instance's `wf.slot` bookmarks.
pub(crate) type SlotWaker = Box<dyn Fn(String) + Send + Sync>;

/// The declared queues of a runtime and the store their slots live in.
#[derive(Debug)]
pub(crate) struct FlowGate {
    storage: Storage,
    owner: String,
    queues: HashMap<String, Queue>,
    ttl: Micros,
    /// The attempts of this process waiting in line, by holder: a release here wakes the
    /// one the store names as served next, and no other.
    waiting: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    /// Resumes an instance suspended waiting for a slot when a release names its holder.
    waker: std::sync::OnceLock<Waker>,
}

/// The [`SlotWaker`] a gate holds.
struct Waker(SlotWaker);

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

/// Why an attempt did not get its slot.
#[derive(Debug)]
pub(crate) enum GateError {
    /// The instance was cancelled while the attempt waited.
    Cancelled,
    /// The queue is not declared (build() refuses such definitions; a definition loaded later
    /// may still name one).
    Unknown(String),
    /// The store failed.
    Store(StoreError),
}

impl FlowGate {
    /// The gate of `queues`, for the process `owner`, with slot leases of `ttl` µs.
    pub(crate) fn new(storage: Storage, owner: String, queues: Vec<Queue>, ttl: Micros) -> Self {
        Self {
            storage,
            owner,
            queues: queues
                .into_iter()
                .map(|q| (q.name().to_owned(), q))
                .collect(),
            ttl,
            waiting: std::sync::Mutex::new(HashMap::new()),
            waker: std::sync::OnceLock::new(),
        }
    }

    /// Sets what resumes an instance suspended waiting for a slot (QU-11); once.
    pub(crate) fn set_waker(&self, waker: SlotWaker) {
        let _ = self.waker.set(Waker(waker));
    }

    /// Takes a slot of `queue` for `holder` under the partition `key`. With `suspend`, a wait
    /// longer than [`IN_RUN_GRACE`] answers [`Taken::Suspend`] (a task attempt, QU-11);
    /// without, it waits in line until one is granted (a run of a definition-level queue,
    /// QU-14).
    pub(crate) async fn acquire(
        &self,
        queue: &str,
        holder: &str,
        key: Option<&str>,
        priority: u8,
        cancel: Option<&CancellationToken>,
        suspend: bool,
    ) -> Result<Taken, GateError> {
        let declared = self
            .queues
            .get(queue)
            .ok_or_else(|| GateError::Unknown(queue.to_owned()))?;
        let priority = Priority::new(i64::from(priority)).unwrap_or(Priority::MAX);
        // The bell is hung only once the holder waits (an uncontended ask rings no bell and
        // should not pay for one); `wait_in_line` asks again after hanging it, so a release
        // between the two asks is not missed.
        let mut bell = None;
        let result = self
            .wait_in_line(declared, holder, key, priority, cancel, &mut bell, suspend)
            .await;
        if bell.is_some() {
            crate::base::lock(&self.waiting).remove(holder);
        }
        result
    }

    #[allow(clippy::too_many_arguments, clippy::too_many_lines)]
    async fn wait_in_line(
        &self,
        declared: &Queue,
        holder: &str,
        key: Option<&str>,
        priority: Priority,
        cancel: Option<&CancellationToken>,
        bell: &mut Option<Arc<tokio::sync::Notify>>,
        suspend: bool,
    ) -> Result<Taken, GateError> {
        let queue = declared.name();
        let mut waited = false;
        let started = tokio::time::Instant::now();
        // QU-11: a suspended waiter asks again at the latest one lease later (its timer); its
        // place is kept to then and one lease more, so a restart within a lease keeps it.
        let place_ttl = suspend.then(|| self.ttl.saturating_mul(2));
        // QU-12: a release in another process names the waiter served next through the
        // store's hints. A store no other process shares sends none (a release here rings
        // the bell), and listening would wake every waiter at every commit. Subscribed to
        // with the bell, once the holder waits.
        let mut hints = None;
        loop {
            let ask = SlotAsk {
                holder: holder.to_owned(),
                owner: self.owner.clone(),
                key: key.map(str::to_owned),
                priority,
                now: now_micros(),
                ttl: self.ttl,
                place_ttl,
            };
            let outcome = self
                .storage
                .acquire_slot(declared, ask)
                .await
                .map_err(GateError::Store)?;
            let (expired, wait) = match outcome {
                SlotOutcome::Granted { lease, expired } => {
                    report_expired(queue, &expired);
                    tracing::debug!(
                        target: "workflow_runtime::flow",
                        queue, holder, token = lease.token, waited, "slot acquired"
                    );
                    return Ok(Taken::Granted(lease));
                }
                SlotOutcome::Waiting { wait, expired } => (expired, wait),
            };
            report_expired(queue, &expired);
            if suspend && let Some(until) = self.suspends(declared, &wait, started.elapsed()) {
                tracing::debug!(
                    target: "workflow_runtime::flow",
                    queue, holder, why = %why(queue, &wait),
                    asks_again_in_ms = until.as_millis(),
                    "waiting for a slot; the instance is suspended"
                );
                return Ok(Taken::Suspend { wait, after: until });
            }
            if bell.is_none() {
                // The first wait in the run: hang the bell, listen to the hints, and ask again
                // unless the wait is for the rate window (no release ends it): a release that
                // named this holder before the bell hung is then seen in the answer.
                let hung = Arc::new(tokio::sync::Notify::new());
                crate::base::lock(&self.waiting).insert(holder.to_owned(), Arc::clone(&hung));
                *bell = Some(hung);
                hints = self
                    .storage
                    .hears_other_processes()
                    .then(|| self.storage.subscribe());
                if !waits_for_the_rate(declared, &wait) {
                    continue;
                }
            }
            if !waited {
                tracing::debug!(
                    target: "workflow_runtime::flow",
                    queue, holder, why = %why(queue, &wait), "waiting for a slot"
                );
            }
            waited = true;
            let pause = self.pause(&wait, self.ttl / 3);
            let cancelled = async {
                match cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            // A release naming this holder (or every waiter of the queue), or hints lost:
            // ask again.
            let named = crate::store::hint_heard(hints.as_mut(), |hint| {
                matches!(hint, WakeUp::SlotFree { queue: freed, holder: next }
                    if freed == queue && next.as_deref().is_none_or(|n| n == holder))
            });
            let rung = async {
                match bell.as_deref() {
                    Some(bell) => bell.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = rung => {}
                () = named => {}
                () = cancelled => {
                    self.leave(queue, holder).await;
                    return Err(GateError::Cancelled);
                }
            }
        }
    }

    /// Whether a waiter that has waited `waited` in its run is suspended (QU-11), and when
    /// its timer asks again. A wait for the rate window (the reason `Rate`, or `Behind` in a
    /// queue with a rate) stays in the run while its turn is at most [`RATE_IN_RUN`] away:
    /// its end is known, and the run's own sleep meets it more precisely than a resume
    /// through the timer driver; a longer one suspends with its timer due when its turn
    /// comes (at the latest one lease later). A wait for room others hold suspends once it
    /// is longer than [`IN_RUN_GRACE`].
    fn suspends(&self, declared: &Queue, wait: &SlotWait, waited: Duration) -> Option<Duration> {
        if waits_for_the_rate(declared, wait) {
            let turn =
                Duration::from_micros(u64::try_from(wait.retry_at? - now_micros()).unwrap_or(0));
            let lease = Duration::from_micros(u64::try_from(self.ttl).unwrap_or(1).max(1));
            return (turn > RATE_IN_RUN).then(|| turn.min(lease));
        }
        (waited + self.pause(wait, self.ttl / 3) > IN_RUN_GRACE).then(|| self.pause(wait, self.ttl))
    }

    /// How long a waiter waits before asking again, at most `cap` µs: the store's retry
    /// time is when this waiter's own turn can come (QU-12: for a rate, when the start it
    /// waits for leaves the window). Without one, far back in line, it asks less often: a
    /// release wakes the one served next, in this process or (through the store's hints or
    /// its suspended instance's resume) in another, and every ask on a queue takes its row
    /// lock. In a run the cap is a third of the lease, which keeps the place; a suspended
    /// waiter's is one lease, its place kept a lease longer.
    fn pause(&self, wait: &SlotWait, cap: Micros) -> Duration {
        let spread = MAX_POLL
            .saturating_mul(1 + wait.ahead)
            .min(Duration::from_micros(
                u64::try_from(cap).unwrap_or(1).max(1),
            ));
        wait.retry_at
            .map_or(spread, |at| {
                Duration::from_micros(u64::try_from(at - now_micros()).unwrap_or(0))
            })
            .min(spread)
    }

    /// Leaves the line of `queue` (a waiting instance was cancelled, QU-11) and wakes the
    /// waiter that the place left makes first.
    pub(crate) async fn leave(&self, queue: &str, holder: &str) {
        match self.storage.leave_queue(queue, holder, now_micros()).await {
            Ok(release) => {
                if release.released {
                    tracing::debug!(
                        target: "workflow_runtime::flow",
                        queue, holder, "left the line"
                    );
                }
                self.wake(release.next);
            }
            Err(error) => tracing::warn!(
                target: "workflow_runtime::flow",
                queue, holder, %error, "leaving the line failed; the place expires"
            ),
        }
    }

    /// Wakes the waiter a release named (QU-12): an attempt of this process waiting in its
    /// run through its bell; else its instance, suspended waiting for the slot (QU-11), is
    /// resumed. A waiter in the run of another process hears the store's hint instead.
    fn wake(&self, next: Option<String>) {
        let Some(next) = next else { return };
        let bell = crate::base::lock(&self.waiting).get(&next).cloned();
        match bell {
            Some(bell) => bell.notify_one(),
            None => {
                if let (Some(waker), Some(instance)) = (self.waker.get(), instance_of(&next)) {
                    (waker.0)(instance.to_owned());
                }
            }
        }
    }

    /// Keeps `lease` alive while `work` runs, then gives the slot back (QU-11).
    pub(crate) async fn hold<F: Future>(&self, lease: SlotLease, work: F) -> F::Output {
        let renew_every = Duration::from_micros(u64::try_from(self.ttl / 3).unwrap_or(1).max(1));
        let mut held = lease;
        let mut work = std::pin::pin!(work);
        // One timer, polled (so registered) only when the work is not done at its first poll.
        let renewal = tokio::time::sleep(renew_every);
        let mut renewal = std::pin::pin!(renewal);
        let output = loop {
            tokio::select! {
                biased;
                output = &mut work => break output,
                () = &mut renewal => {
                    renewal
                        .as_mut()
                        .reset(tokio::time::Instant::now() + renew_every);
                    match self.storage.renew_slot(&held, now_micros(), self.ttl).await {
                        Ok(renewed) => held = renewed,
                        Err(error) => tracing::warn!(
                            target: "workflow_runtime::flow",
                            queue = %held.queue, holder = %held.holder, %error,
                            "slot renewal failed"
                        ),
                    }
                }
            }
        };
        match self.storage.release_slot(&held, now_micros()).await {
            Ok(release) => {
                tracing::debug!(
                    target: "workflow_runtime::flow",
                    queue = %held.queue, holder = %held.holder, token = held.token,
                    "slot released"
                );
                // On a queue limited by its rate alone the store names nobody (QU-12): its
                // suspended waiters are resumed by their timers when the window frees a start.
                self.wake(release.next);
            }
            Err(error) => tracing::warn!(
                target: "workflow_runtime::flow",
                queue = %held.queue, holder = %held.holder, %error, "slot release failed"
            ),
        }
        output
    }
}

/// The instance of a slot holder: `{instance}/{context}/{attempt}` for a task attempt
/// (QU-11), `{instance}/run` for a run (QU-14).
pub(crate) fn instance_of(holder: &str) -> Option<&str> {
    if let Some(instance) = holder.strip_suffix("/run") {
        return Some(instance);
    }
    let mut parts = holder.rsplitn(3, '/');
    let (_attempt, _context) = (parts.next(), parts.next());
    parts.next()
}

/// Whether `wait` is for the rate window (the reason `Rate`, or `Behind` in a queue with a
/// rate): no release ends it, its turn comes when a start leaves the window.
fn waits_for_the_rate(declared: &Queue, wait: &SlotWait) -> bool {
    matches!(wait.reason, WaitReason::Rate { .. })
        || (matches!(wait.reason, WaitReason::Behind) && declared.rate_limit().is_some())
}

fn report_expired(queue: &str, expired: &[crate::store::slots::SlotRow]) {
    for slot in expired {
        tracing::info!(
            target: "workflow_runtime::flow",
            queue, holder = %slot.holder, owner = %slot.owner, token = slot.token,
            "slot expired"
        );
    }
}

/// What `why` says of a waiting ask (QU-7): "waiting for `payments`: 25 of 25 running, 3
/// ahead of it", or "rate limit: next slot in 140 ms".
pub(crate) fn why(queue: &str, wait: &SlotWait) -> String {
    let ahead = match wait.ahead {
        0 => String::new(),
        1 => ", 1 ahead of it".to_owned(),
        n => format!(", {n} ahead of it"),
    };
    match &wait.reason {
        WaitReason::Concurrency { running, limit } => {
            format!("waiting for `{queue}`: {running} of {limit} running{ahead}")
        }
        WaitReason::PerProcess { running, limit } => {
            format!("waiting for `{queue}`: {running} of {limit} running in this process{ahead}")
        }
        WaitReason::PerKey { running, limit } => {
            format!("waiting for `{queue}`: {running} of {limit} running for its key{ahead}")
        }
        WaitReason::Rate { next_at } => format!(
            "waiting for `{queue}`: rate limit: next slot in {} ms{ahead}",
            (next_at - now_micros()).max(0) / 1_000
        ),
        WaitReason::Behind => format!("waiting for `{queue}`: in line{ahead}"),
    }
}

/// The shared gate, as the attempt settings carry it.
pub(crate) type Gate = Arc<FlowGate>;

/// A waiter's place in a suspended wait for a slot (QU-11, QU-14): what its `wf.slot`
/// bookmark records, for the task attempt's wait and the run's alike.
pub(crate) struct SlotWaitMark<'a> {
    /// The queue.
    pub(crate) queue: &'a str,
    /// The holder it asks as (the attempt's, or `{instance}/run`).
    pub(crate) holder: &'a str,
    /// Its partition key.
    pub(crate) key: Option<&'a str>,
    /// Its priority.
    pub(crate) priority: u8,
}

impl SlotWaitMark<'_> {
    /// The bookmark's hash, scoped to the instance and `scope` (the waiting context, or
    /// `run`), and its payload: when its timer asks again, the queue, the holder, the key,
    /// the priority and the words of `why` (the caller adds what only its wait has).
    ///
    /// # Errors
    ///
    /// The hash's, for an instance id it cannot scope.
    pub(crate) fn bookmark(
        &self,
        instance_id: &str,
        scope: &str,
        wait: &SlotWait,
        due_at: Micros,
    ) -> Result<(String, serde_json::Map<String, serde_json::Value>), crate::identity::RoutingError>
    {
        let hash = crate::identity::stimulus_hash(
            crate::engine::names::Reserved::Slot.name(),
            None,
            Some((instance_id, scope)),
        )?;
        let mut payload = serde_json::Map::new();
        payload.insert("due_at".into(), due_at.into());
        payload.insert("queue".into(), self.queue.into());
        payload.insert("holder".into(), self.holder.into());
        payload.insert("key".into(), self.key.into());
        payload.insert("priority".into(), self.priority.into());
        payload.insert("why".into(), why(self.queue, wait).into());
        Ok((hash, payload))
    }
}

/// The holder of a run's slot (QU-14).
pub(crate) fn run_holder(instance_id: &str) -> String {
    format!("{instance_id}/run")
}

/// A run that did not get its slot of the definition's queue (QU-14): a cancel while waiting
/// abandons the run like a cancel during it.
pub(crate) fn run_slot_error(instance: &str, queue: &str, error: GateError) -> RunError {
    match error {
        GateError::Cancelled => RunError::Interrupted {
            instance: instance.to_owned(),
        },
        GateError::Store(error) => RunError::Store {
            instance: instance.to_owned(),
            error,
        },
        // `build()` refuses a definition whose queue is not declared.
        GateError::Unknown(_) => RunError::StateCorrupt {
            instance: instance.to_owned(),
            reason: format!("the definition runs in queue `{queue}`, which is not declared"),
        },
    }
}
