//! Debounced sends (RT-35): a send with a debounce window is stored, not delivered; each
//! later send with the same name, key and target replaces its stimulus and pushes its due
//! time back. Once due, the debounce driver (or `Runtime::fire_due_timers`) claims the row,
//! sends the last stimulus as an ordinary send, and settles the row. The delivery's
//! idempotency key is derived from the row's burst and version, so a delivery repeated after
//! a crash (the claim expired before the row was settled) is a duplicate.

use std::sync::Weak;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::Router;
use crate::base::new_ulid;
use crate::identity::sha_hex;
use crate::routing::{Debounced, MAX_DEBOUNCE, SendError, SendReport, Stimulus, to_micros};
use crate::store::{DebounceRow, StoreError, WakeUp};

/// How many due rows one claim takes.
const CLAIM_PAGE: usize = 100;

/// The stored form of a debounced send: the stimulus and its options, as the last send made
/// them (its idempotency key and window are not kept: the delivery has its own key).
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<Value>,
    #[serde(default)]
    payload: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bookmark_id: Option<String>,
    /// The inbox TTL, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_micros: Option<u64>,
    inbox: bool,
    via_inbox: bool,
}

impl Pending {
    fn of(stimulus: &Stimulus) -> Self {
        Self {
            name: stimulus.name.clone(),
            key: stimulus.key.clone(),
            payload: stimulus.payload.clone(),
            instance_id: stimulus.instance_id.clone(),
            correlation_id: stimulus.correlation_id.clone(),
            bookmark_id: stimulus.bookmark_id.clone(),
            ttl_micros: stimulus
                .ttl
                .map(|ttl| u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)),
            inbox: stimulus.inbox,
            via_inbox: stimulus.via_inbox,
        }
    }

    fn into_stimulus(self, idempotency_key: String) -> Stimulus {
        let mut stimulus = Stimulus::new(self.name);
        stimulus.key = self.key;
        stimulus.payload = self.payload;
        stimulus.instance_id = self.instance_id;
        stimulus.correlation_id = self.correlation_id;
        stimulus.bookmark_id = self.bookmark_id;
        stimulus.ttl = self.ttl_micros.map(Duration::from_micros);
        stimulus.inbox = self.inbox;
        stimulus.via_inbox = self.via_inbox;
        stimulus.idempotency_key = Some(idempotency_key);
        stimulus
    }
}

/// RT-35: a window between 1 ms and [`MAX_DEBOUNCE`].
pub(super) fn check_window(window: Duration) -> Result<(), SendError> {
    let problem = if window.is_zero() {
        "zero"
    } else if window < Duration::from_millis(1) {
        "too short"
    } else if window > MAX_DEBOUNCE {
        "too long"
    } else {
        return Ok(());
    };
    Err(SendError::InvalidDebounce {
        window,
        problem,
        max: MAX_DEBOUNCE,
    })
}

impl Router {
    /// Stores a validated debounced send (RT-35): the row of its debounce id gets its
    /// stimulus, and its due time moves to `window` from now (workflow time).
    pub(super) async fn debounce(
        &self,
        stimulus: &Stimulus,
        hash: &str,
        window: Duration,
    ) -> Result<SendReport, SendError> {
        let debounce_id = format!(
            "deb-{}",
            sha_hex(&[
                "wf-debounce/1",
                hash,
                stimulus.instance_id.as_deref().unwrap_or_default(),
                stimulus.correlation_id.as_deref().unwrap_or_default(),
                stimulus.bookmark_id.as_deref().unwrap_or_default(),
            ])
            .get(..40)
            .unwrap_or_default()
        );
        let now = self.run_path.now();
        let stimulus_text =
            serde_json::to_string(&Pending::of(stimulus)).map_err(|e| SendError::Payload {
                message: format!("the debounced send does not serialize: {e}"),
            })?;
        let stored = self
            .store
            .put_debounce(DebounceRow {
                debounce_id: debounce_id.clone(),
                burst_id: new_ulid(),
                name: stimulus.name.clone(),
                hash: hash.to_owned(),
                stimulus: stimulus_text,
                first_sent_at: now,
                last_sent_at: now,
                due_at: now.saturating_add(to_micros(window)),
                sends: 1,
            })
            .await
            .map_err(SendError::Store)?;
        let mut report =
            SendReport::empty(format!("{debounce_id}-{}", stored.sends), hash.to_owned());
        report.debounced = Some(Debounced {
            debounce_id,
            due_at: stored.due_at,
            sends: stored.sends,
        });
        Ok(report)
    }

    /// Delivers the debounced sends due now (RT-35), a page at a time; returns the debounce
    /// ids of the rows settled, in due order. A delivery that fails on the store, or a row
    /// that does not decode, stays claimed and is tried again once its claim expires; one
    /// refused for good (its instance gone, say) is logged and dropped, as the send would
    /// have been refused, and counts as settled.
    pub(crate) async fn fire_due_debounces(&self) -> Result<Vec<String>, StoreError> {
        let mut delivered = Vec::new();
        loop {
            let now = self.run_path.now();
            if self
                .store
                .earliest_debounce(now)
                .await?
                .is_none_or(|at| at > now)
            {
                return Ok(delivered);
            }
            let claimed = self
                .store
                .claim_due_debounces(
                    self.run_path.owner(),
                    now,
                    self.run_path.lease_settings().ttl_micros(),
                    CLAIM_PAGE,
                )
                .await?
                .claimed;
            if claimed.is_empty() {
                return Ok(delivered);
            }
            for row in claimed {
                if self.stopping() {
                    return Ok(delivered);
                }
                match self.deliver_debounced(&row).await {
                    Ok(true) => delivered.push(row.debounce_id),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(debounce = %row.debounce_id, %error, "a due debounced send could not be settled; its claim will expire");
                    }
                }
            }
        }
    }

    /// Sends one claimed row's stimulus and settles the row; whether it was settled.
    async fn deliver_debounced(&self, row: &DebounceRow) -> Result<bool, StoreError> {
        let pending: Pending = match serde_json::from_str(&row.stimulus) {
            Ok(pending) => pending,
            Err(e) => {
                // A row that does not decode fails alone (ST-22); it stays claimed.
                return Err(StoreError::Decode {
                    what: "debounce",
                    id: row.debounce_id.clone(),
                    path: "stimulus".to_owned(),
                    message: e.to_string(),
                });
            }
        };
        let key = format!("debounce-{}-{}", row.burst_id, row.sends);
        match self.send(pending.into_stimulus(key)).await {
            Ok(report) => {
                tracing::info!(
                    debounce = %row.debounce_id,
                    name = %row.name,
                    sends = row.sends,
                    stimulus = %report.stimulus_id,
                    "debounced send delivered"
                );
            }
            Err(SendError::Store(error)) => {
                tracing::warn!(debounce = %row.debounce_id, %error, "a due debounced send could not be delivered; its claim will expire");
                return Ok(false);
            }
            Err(error) => {
                tracing::warn!(debounce = %row.debounce_id, name = %row.name, %error, "a due debounced send was refused; it is dropped");
            }
        }
        self.store
            .finish_debounce(&row.debounce_id, &row.burst_id, row.sends)
            .await?;
        Ok(true)
    }
}

/// The debounce driver (RT-35): delivers what is due, then waits through the clock until the
/// earliest due time, re-arming when a hint announces timers; `sweep` bounds the wait, for
/// sends made by other processes and claims that expired.
pub(crate) async fn debounce_driver(
    weak: Weak<Router>,
    mut hints: broadcast::Receiver<WakeUp>,
    mut stop: watch::Receiver<bool>,
    sweep: Duration,
) {
    loop {
        let Some(router) = weak.upgrade() else { return };
        if *stop.borrow() {
            return;
        }
        if let Err(error) = router.fire_due_debounces().await {
            tracing::warn!(%error, "debounce driver: delivering due debounced sends failed");
        }
        let clock = router.run_path.clock();
        let mut earliest = match router.store.earliest_debounce(clock.now()).await {
            Ok(earliest) => earliest,
            Err(error) => {
                tracing::warn!(%error, "debounce driver: reading the earliest due send failed");
                None
            }
        };
        drop(router);
        let fallback_at = tokio::time::Instant::now() + sweep;
        loop {
            let due = match earliest {
                Some(at) => clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                () = due => break,
                () = tokio::time::sleep_until(fallback_at) => break,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
                hint = hints.recv() => match hint {
                    Ok(WakeUp::TimersChanged { earliest: Some(at) }) => {
                        if earliest.is_none_or(|e| at < e) {
                            earliest = Some(at);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}
