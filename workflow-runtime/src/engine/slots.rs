//! Flow-control slots around a task attempt (QU-10, QU-11): before the attempt of a task of a
//! queue runs, the gate takes a slot of it from the store, waiting in line while the queue's
//! limits have no room; the slot is renewed while the attempt runs and released when it
//! ends, whatever the outcome.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use workflow_model::{Priority, Queue};

use crate::base::{Micros, now_micros};
use crate::cancel::CancellationToken;
use crate::store::{
    SlotAsk, SlotLease, SlotOutcome, SlotWait, Storage, StoreError, WaitReason, WakeUp,
};

/// The longest the first waiter in line goes without asking again (the one behind it asks
/// half as often, and so on): a wake-up may be lost, and a waiter's place is kept only while
/// it asks within the lease.
const MAX_POLL: Duration = Duration::from_millis(500);

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
        }
    }

    /// Takes a slot of `queue` for `holder` under the partition `key`, waiting in line until
    /// one is granted (QU-11).
    pub(crate) async fn acquire(
        &self,
        queue: &str,
        holder: &str,
        key: Option<&str>,
        priority: u8,
        cancel: Option<&CancellationToken>,
    ) -> Result<SlotLease, GateError> {
        let declared = self
            .queues
            .get(queue)
            .ok_or_else(|| GateError::Unknown(queue.to_owned()))?;
        let priority = Priority::new(i64::from(priority)).unwrap_or(Priority::MAX);
        let bell = Arc::new(tokio::sync::Notify::new());
        crate::base::lock(&self.waiting).insert(holder.to_owned(), Arc::clone(&bell));
        let result = self
            .wait_in_line(declared, holder, key, priority, cancel, &bell)
            .await;
        crate::base::lock(&self.waiting).remove(holder);
        result
    }

    async fn wait_in_line(
        &self,
        declared: &Queue,
        holder: &str,
        key: Option<&str>,
        priority: Priority,
        cancel: Option<&CancellationToken>,
        bell: &tokio::sync::Notify,
    ) -> Result<SlotLease, GateError> {
        let queue = declared.name();
        let mut waited = false;
        // QU-12: a release in another process names the waiter served next through the
        // store's hints. A store no other process shares sends none (a release here rings
        // the bell), and listening would wake every waiter at every commit.
        let mut hints = self
            .storage
            .hears_other_processes()
            .then(|| self.storage.subscribe());
        loop {
            let ask = SlotAsk {
                holder: holder.to_owned(),
                owner: self.owner.clone(),
                key: key.map(str::to_owned),
                priority,
                now: now_micros(),
                ttl: self.ttl,
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
                    return Ok(lease);
                }
                SlotOutcome::Waiting { wait, expired } => (expired, wait),
            };
            report_expired(queue, &expired);
            if !waited {
                tracing::debug!(
                    target: "workflow_runtime::flow",
                    queue, holder, why = %why(queue, &wait), "waiting for a slot"
                );
            }
            waited = true;
            // The store's retry time is when this waiter's own turn can come (QU-12: for a
            // rate, when the start it waits for leaves the window). Without one, far back in
            // line, ask less often: a release rings the bell of the one served next, in this
            // process or (through the store's hints) in another, and every ask on a queue
            // takes its row lock. Never later than a third of the lease, which keeps the
            // place.
            let spread = MAX_POLL
                .saturating_mul(1 + wait.ahead)
                .min(Duration::from_micros(
                    u64::try_from(self.ttl / 3).unwrap_or(1).max(1),
                ));
            let pause = wait
                .retry_at
                .map_or(spread, |at| {
                    Duration::from_micros(u64::try_from(at - now_micros()).unwrap_or(0))
                })
                .min(spread);
            let cancelled = async {
                match cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let named = async {
                let Some(hints) = hints.as_mut() else {
                    return std::future::pending().await;
                };
                loop {
                    match hints.recv().await {
                        Ok(WakeUp::SlotFree {
                            queue: freed,
                            holder: next,
                        }) if freed == queue && next.as_deref().is_none_or(|n| n == holder) => {
                            return;
                        }
                        // Hints lost: ask again.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await;
                        }
                        Ok(_) => {}
                    }
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = bell.notified() => {}
                () = named => {}
                () = cancelled => {
                    let _ = self.storage.leave_queue(queue, holder, now_micros()).await;
                    return Err(GateError::Cancelled);
                }
            }
        }
    }

    /// Keeps `lease` alive while `work` runs, then gives the slot back (QU-11).
    pub(crate) async fn hold<F: Future>(&self, lease: SlotLease, work: F) -> F::Output {
        let renew_every = Duration::from_micros(u64::try_from(self.ttl / 3).unwrap_or(1).max(1));
        let mut held = lease;
        let mut work = std::pin::pin!(work);
        let output = loop {
            tokio::select! {
                output = &mut work => break output,
                () = tokio::time::sleep(renew_every) => {
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
                let next = release
                    .next
                    .and_then(|next| crate::base::lock(&self.waiting).get(&next).cloned());
                if let Some(bell) = next {
                    bell.notify_one();
                }
            }
            Err(error) => tracing::warn!(
                target: "workflow_runtime::flow",
                queue = %held.queue, holder = %held.holder, %error, "slot release failed"
            ),
        }
        output
    }
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
