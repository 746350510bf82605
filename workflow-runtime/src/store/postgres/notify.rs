//! Wake-ups across processes (ST-18, ST-27): hints travel as `NOTIFY` payloads on the
//! schema's channel, and a listener task turns them back into [`WakeUp`]s on this store's
//! broadcast.
//!
//! The hints of a commit are handed to a sender task once it has committed (so a write
//! rolled back sends none), which sends what has gathered meanwhile as one `NOTIFY` in its
//! own statement, committed without waiting for a WAL flush (a hint promises no
//! durability). Not inside the committing transaction: PostgreSQL serialises the commits of
//! transactions that notified (one global lock, held through the commit's WAL flush), which
//! would make every commit wait for the others' flushes instead of sharing them. A process
//! about to exit flushes the sender ([`Outgoing::Flush`]); a hint lost to a crash between a
//! commit and its `NOTIFY` is found by the queue worker's sweep, which passes at least once
//! per lease TTL on this store (RT-27). The rare writes another process must hear of to
//! deliver held work (an enqueue, a control request, a replayed dead letter) notify inside
//! their own transaction instead ([`notify_in`]): their hint is sent if and only if they
//! commit, even by a command that exits at once.
//!
//! A payload is lines: the sending store's origin (so a store ignores its own hints, which it
//! has already sent locally), then one hint per line: `q`, `t [<earliest µs>]`, `r <id>`,
//! `x <id>`, `c <id>`, `g <owner>`, `u <id>` or `s <queue> [<holder>]`. Notifications may be missed while the listener reconnects, so each
//! reconnection sends the sweep hints (queue and timers changed: a change, RT-27) once it
//! listens again; while the listener cannot connect it sends them every poll interval
//! instead. Whether it listens now is the store's
//! [`RemoteHints::hears_every_change`](crate::store::RemoteHints::hears_every_change).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::base::Micros;
use crate::store::backend::WakeUp;

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
            WakeUp::OwnerGone { owner } => text.push_str(&format!("g {owner}")),
            WakeUp::InstanceUnclaimed { id } => text.push_str(&format!("u {id}")),
            // A queue's name has no space (QU-V1): the holder is the rest of the line.
            WakeUp::SlotFree {
                queue,
                holder: Some(holder),
            } => text.push_str(&format!("s {queue} {holder}")),
            WakeUp::SlotFree {
                queue,
                holder: None,
            } => text.push_str(&format!("s {queue}")),
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
            "g" => WakeUp::OwnerGone {
                owner: arg.to_owned(),
            },
            "u" => WakeUp::InstanceUnclaimed { id: arg.to_owned() },
            "s" => match arg.split_once(' ') {
                Some((queue, holder)) => WakeUp::SlotFree {
                    queue: queue.to_owned(),
                    holder: Some(holder.to_owned()),
                },
                None => WakeUp::SlotFree {
                    queue: arg.to_owned(),
                    holder: None,
                },
            },
            _ => continue,
        };
        hints.push(hint);
    }
    Some(hints)
}

/// The payload telling the holders of the leases of `ids` that another process wants them
/// (ST-38): a line `w <id>` each, which stores of an older version skip.
pub(super) fn wanted_payload(origin: &str, ids: &[String]) -> String {
    let mut text = origin.to_owned();
    for id in ids {
        text.push_str("\nw ");
        text.push_str(id);
    }
    text
}

/// The instances whose leases a payload of another store says are wanted (ST-38): those of
/// its `w` lines, and those of its control requests (`c`).
pub(super) fn wanted_ids<'p>(own_origin: &str, payload: &'p str) -> Vec<&'p str> {
    let mut lines = payload.lines();
    if lines.next().is_none_or(|origin| origin == own_origin) {
        return Vec::new();
    }
    lines
        .filter_map(|line| line.strip_prefix("w ").or_else(|| line.strip_prefix("c ")))
        .collect()
}

/// The most hints in one payload (each line at most ~130 bytes: far below the limit).
const HINTS_PER_PAYLOAD: usize = 40;

/// What the store hands its sender task.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// The hints of a committed write.
    Hints(Vec<WakeUp>),
    /// A lease another process holds was found wanted (ST-38): its holder gives it back.
    Wanted(String),
    /// Answered once every hint handed over before it was sent (or failed).
    Flush(oneshot::Sender<()>),
}

/// The hints without repeats, in their order.
fn unique(hints: Vec<WakeUp>) -> Vec<WakeUp> {
    let mut unique: Vec<WakeUp> = Vec::with_capacity(hints.len());
    for hint in hints {
        if !unique.contains(&hint) {
            unique.push(hint);
        }
    }
    unique
}

/// Notifies `hints` inside the transaction of `conn`: PostgreSQL delivers them when, and
/// only when, it commits.
pub(super) async fn notify_in(
    conn: &mut PgConnection,
    channel: &str,
    origin: &str,
    hints: &[WakeUp],
) -> Result<(), sqlx::Error> {
    for chunk in unique(hints.to_vec()).chunks(HINTS_PER_PAYLOAD) {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload(origin, chunk))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The sender task: sends the hints handed to it, what gathered while the previous `NOTIFY`
/// was in flight as one, until the store (holding the other end) is dropped, and answers
/// each flush once what came before it was sent. A failed `NOTIFY` is logged and dropped
/// (hints are advisory).
pub(super) async fn send(
    pool: PgPool,
    channel: String,
    origin: String,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
) {
    while let Some(first) = outgoing.recv().await {
        let mut batch = Vec::new();
        let mut wanted = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take().or_else(|| outgoing.try_recv().ok()) {
            match message {
                Outgoing::Hints(hints) => batch.extend(hints),
                Outgoing::Wanted(id) => wanted.push(id),
                Outgoing::Flush(done) => flushes.push(done),
            }
        }
        let payloads = unique(batch)
            .chunks(HINTS_PER_PAYLOAD)
            .map(|chunk| payload(&origin, chunk))
            .chain(
                wanted
                    .chunks(HINTS_PER_PAYLOAD)
                    .map(|chunk| wanted_payload(&origin, chunk)),
            )
            .collect::<Vec<_>>();
        for text in payloads {
            // A transaction that notified is given a transaction id, so its commit waits
            // for a WAL flush; a hint promises no durability (ST-18), so it does not wait.
            let sent = sqlx::query(
                "SELECT pg_notify($1, $2), set_config('synchronous_commit', 'off', true)",
            )
            .bind(&channel)
            .bind(text)
            .execute(&pool)
            .await;
            if let Err(error) = sent {
                tracing::debug!(%error, "postgres store: a wake-up notification was not sent");
            }
        }
        for done in flushes {
            // A flusher that stopped waiting is not an error.
            let _ = done.send(());
        }
    }
}

fn sweep(sender: &broadcast::Sender<WakeUp>) {
    // No subscriber is not an error: hints are advisory (ST-18).
    let _ = sender.send(WakeUp::QueueChanged);
    let _ = sender.send(WakeUp::TimersChanged { earliest: None });
}

/// The listener task: runs until the store is dropped (it is aborted then). `listening` is
/// set while its `LISTEN` is known to hold. A lost connection is replaced by a new one;
/// once that one listens, the sweep hints tell the workers that notifications may have
/// been missed meanwhile (the first connection needs none: nothing was heard before it, and
/// a worker's pass that began before it listened does not count on hearing, RT-27).
pub(super) async fn listen(
    pool: PgPool,
    channel: String,
    origin: String,
    sender: broadcast::Sender<WakeUp>,
    listening: Arc<AtomicBool>,
    poll_interval: Duration,
    wanted: mpsc::UnboundedSender<String>,
) {
    let mut connected_once = false;
    loop {
        listening.store(false, Ordering::Release);
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
        listening.store(true, Ordering::Release);
        if connected_once {
            tracing::info!(%channel, "postgres store: the notification listener reconnected; the next queue and timer passes look at everything");
            sweep(&sender);
        } else {
            tracing::debug!(%channel, "postgres store: listening for other processes' wake-ups");
        }
        connected_once = true;
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    // First: a run about to claim an instance another process wants must
                    // not find its lease kept.
                    for id in wanted_ids(&origin, notification.payload()) {
                        // Ends only with the store.
                        let _ = wanted.send(id.to_owned());
                    }
                    for hint in parse(&origin, notification.payload()).unwrap_or_default() {
                        let _ = sender.send(hint);
                    }
                }
                // The connection was lost: notifications sent until a new one listens are
                // lost. Connect again here (not in `try_recv`), so the sweep hints follow
                // the new `LISTEN`.
                Ok(None) => {
                    tracing::info!(%channel, "postgres store: the notification listener lost its connection; reconnecting");
                    break;
                }
                Err(error) => {
                    listening.store(false, Ordering::Release);
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
            WakeUp::SlotFree {
                queue: "payments".into(),
                holder: Some("order 7/3/1".into()),
            },
            WakeUp::SlotFree {
                queue: "imports".into(),
                holder: None,
            },
        ];
        let text = payload("p1", &hints);
        assert_eq!(parse("p2", &text), Some(hints));
        assert_eq!(parse("p1", &text), None);
    }

    #[test]
    fn wanted_leases_are_heard_from_other_stores_only() {
        let text = wanted_payload("p1", &["a".to_owned(), "b c".to_owned()]);
        assert_eq!(wanted_ids("p2", &text), ["a", "b c"]);
        assert!(wanted_ids("p1", &text).is_empty());
        assert_eq!(parse("p2", &text), Some(Vec::new()));
        let control = payload("p1", &[WakeUp::ControlRequested { id: "d".into() }]);
        assert_eq!(wanted_ids("p2", &control), ["d"]);
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
