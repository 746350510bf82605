//! Wake-ups across processes (ST-18, ST-27): hints travel as `NOTIFY` payloads on the
//! schema's channel, and a listener task turns them back into [`WakeUp`]s on this store's
//! broadcast.
//!
//! The hints of a write are handed to a sender task once the write has committed (so a
//! write rolled back sends none), which sends what has gathered meanwhile as one `NOTIFY`
//! in its own statement, committed without waiting for a WAL flush (a hint promises no
//! durability). Not inside the committing transaction: PostgreSQL serialises the
//! commits of transactions that notified (one global lock, held through the commit's WAL
//! flush), which would make every commit wait for the others' flushes instead of sharing
//! them. A hint is advisory: one lost to a crash between a commit and its `NOTIFY` leaves
//! the work to the other processes' sweeps.
//!
//! A payload is lines: the sending store's origin (so a store ignores its own hints, which it
//! has already sent locally), then one hint per line: `q`, `t [<earliest µs>]`, `r <id>`,
//! `x <id>` or `c <id>`. Notifications may be missed while the listener reconnects, so each
//! (re)connection sends the sweep hints (queue and timers changed); while the listener cannot
//! connect it sends them every poll interval instead.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, mpsc};

use super::super::{Micros, WakeUp};

/// The largest payload sent; PostgreSQL's limit is 8000 bytes. A longer list of hints is
/// sent as the sweep hints.
const MAX_PAYLOAD: usize = 7000;

/// The payload of `hints` sent by `origin`.
pub(super) fn payload(origin: &str, hints: &[WakeUp]) -> String {
    let mut text = origin.to_owned();
    for hint in hints {
        text.push('\n');
        match hint {
            WakeUp::QueueChanged => text.push('q'),
            WakeUp::TimersChanged { earliest: None } => text.push('t'),
            WakeUp::TimersChanged { earliest: Some(at) } => text.push_str(&format!("t {at}")),
            WakeUp::InstanceRunnable { id } => text.push_str(&format!("r {id}")),
            WakeUp::InstanceTerminal { id } => text.push_str(&format!("x {id}")),
            WakeUp::ControlRequested { id } => text.push_str(&format!("c {id}")),
        }
    }
    if text.len() > MAX_PAYLOAD {
        format!("{origin}\nq\nt")
    } else {
        text
    }
}

/// The hints of a payload, or `None` when it is this store's own (or not one of ours).
pub(super) fn parse(own_origin: &str, payload: &str) -> Option<Vec<WakeUp>> {
    let mut lines = payload.lines();
    let origin = lines.next()?;
    if origin == own_origin {
        return None;
    }
    let mut hints = Vec::new();
    for line in lines {
        let (kind, arg) = line.split_once(' ').unwrap_or((line, ""));
        let hint = match kind {
            "q" => WakeUp::QueueChanged,
            "t" => WakeUp::TimersChanged {
                earliest: arg.parse::<Micros>().ok(),
            },
            "r" => WakeUp::InstanceRunnable { id: arg.to_owned() },
            "x" => WakeUp::InstanceTerminal { id: arg.to_owned() },
            "c" => WakeUp::ControlRequested { id: arg.to_owned() },
            _ => continue,
        };
        hints.push(hint);
    }
    Some(hints)
}

/// The most hints in one payload (each line at most ~130 bytes: far below the limit).
const HINTS_PER_PAYLOAD: usize = 40;

/// The sender task: sends the hints handed to it, what gathered while the previous `NOTIFY`
/// was in flight as one, until the store (holding the other end) is dropped. A failed
/// `NOTIFY` is logged and dropped (hints are advisory).
pub(super) async fn send(
    pool: PgPool,
    channel: String,
    origin: String,
    mut hints: mpsc::UnboundedReceiver<Vec<WakeUp>>,
) {
    while let Some(first) = hints.recv().await {
        let mut batch = first;
        while let Ok(more) = hints.try_recv() {
            batch.extend(more);
        }
        let mut unique: Vec<WakeUp> = Vec::with_capacity(batch.len());
        for hint in batch {
            if !unique.contains(&hint) {
                unique.push(hint);
            }
        }
        for chunk in unique.chunks(HINTS_PER_PAYLOAD) {
            // A transaction that notified is given a transaction id, so its commit waits
            // for a WAL flush; a hint promises no durability (ST-18), so it does not wait.
            let sent = sqlx::query(
                "SELECT pg_notify($1, $2), set_config('synchronous_commit', 'off', true)",
            )
            .bind(&channel)
            .bind(payload(&origin, chunk))
            .execute(&pool)
            .await;
            if let Err(error) = sent {
                tracing::debug!(%error, "postgres store: a wake-up notification was not sent");
            }
        }
    }
}

fn sweep(sender: &broadcast::Sender<WakeUp>) {
    // No subscriber is not an error: hints are advisory (ST-18).
    let _ = sender.send(WakeUp::QueueChanged);
    let _ = sender.send(WakeUp::TimersChanged { earliest: None });
}

/// The listener task: runs until the store is dropped (it is aborted then).
pub(super) async fn listen(
    pool: PgPool,
    channel: String,
    origin: String,
    sender: broadcast::Sender<WakeUp>,
    poll_interval: Duration,
) {
    let mut connected_once = false;
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, ?poll_interval, "postgres store: the notification listener cannot connect; polling");
                sweep(&sender);
                tokio::time::sleep(poll_interval).await;
                continue;
            }
        };
        if let Err(error) = listener.listen(&channel).await {
            tracing::warn!(%error, ?poll_interval, "postgres store: LISTEN failed; polling");
            sweep(&sender);
            tokio::time::sleep(poll_interval).await;
            continue;
        }
        if connected_once {
            tracing::info!(%channel, "postgres store: the notification listener reconnected; sweeping");
            sweep(&sender);
        }
        connected_once = true;
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    for hint in parse(&origin, notification.payload()).unwrap_or_default() {
                        let _ = sender.send(hint);
                    }
                }
                // The connection was lost and has been re-established: notifications sent
                // meanwhile are lost, so sweep.
                Ok(None) => {
                    tracing::info!(%channel, "postgres store: the notification listener reconnected; sweeping");
                    sweep(&sender);
                }
                Err(error) => {
                    tracing::warn!(%error, ?poll_interval, "postgres store: the notification listener failed; polling until it reconnects");
                    sweep(&sender);
                    tokio::time::sleep(poll_interval).await;
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_own_hints_are_ignored() {
        let hints = vec![
            WakeUp::QueueChanged,
            WakeUp::TimersChanged { earliest: Some(-5) },
            WakeUp::TimersChanged { earliest: None },
            WakeUp::InstanceRunnable { id: "a:1".into() },
            WakeUp::InstanceTerminal { id: "b".into() },
            WakeUp::ControlRequested { id: "c".into() },
        ];
        let text = payload("p1", &hints);
        assert_eq!(parse("p2", &text), Some(hints));
        assert_eq!(parse("p1", &text), None);
    }

    #[test]
    fn an_oversized_payload_becomes_the_sweep_hints() {
        let hints: Vec<WakeUp> = (0..1000)
            .map(|i| WakeUp::InstanceRunnable {
                id: format!("instance-{i}"),
            })
            .collect();
        let text = payload("p1", &hints);
        assert!(text.len() <= MAX_PAYLOAD);
        assert_eq!(
            parse("p2", &text),
            Some(vec![
                WakeUp::QueueChanged,
                WakeUp::TimersChanged { earliest: None }
            ])
        );
    }
}
