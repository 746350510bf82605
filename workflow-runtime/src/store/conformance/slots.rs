//! Flow-control slots (QU-5 to QU-8): concurrency, leases and fencing, the rate window,
//! priority and round robin across keys, bad input.

use std::sync::Arc;
use std::time::Duration;

use workflow_model::{Priority, Queue};

use super::fixtures::{SEC, T0, TTL};
use super::harness::{Harness, TestBackend};
use crate::base::Micros;
use crate::store::{SlotAsk, SlotLease, SlotOutcome, SlotWait, StoreError, WaitReason};

const MS: Micros = 1_000;

fn ask(holder: &str, now: Micros) -> SlotAsk {
    SlotAsk {
        holder: holder.to_owned(),
        owner: "node-a".to_owned(),
        key: None,
        priority: Priority::MIN,
        now,
        ttl: TTL,
        place_ttl: None,
    }
}

fn keyed(holder: &str, key: &str, now: Micros) -> SlotAsk {
    SlotAsk {
        key: Some(key.to_owned()),
        ..ask(holder, now)
    }
}

fn prioritized(holder: &str, priority: i64, now: Micros) -> SlotAsk {
    SlotAsk {
        priority: Priority::new(priority).unwrap(),
        ..ask(holder, now)
    }
}

async fn granted(store: &Harness, queue: &Queue, ask: SlotAsk) -> SlotLease {
    let holder = ask.holder.clone();
    match store.acquire_slot(queue, ask).await.unwrap() {
        SlotOutcome::Granted { lease, .. } => lease,
        SlotOutcome::Waiting { wait, .. } => panic!("{holder} waits: {wait:?}"),
    }
}

async fn waiting(store: &Harness, queue: &Queue, ask: SlotAsk) -> SlotWait {
    let holder = ask.holder.clone();
    match store.acquire_slot(queue, ask).await.unwrap() {
        SlotOutcome::Waiting { wait, .. } => wait,
        SlotOutcome::Granted { lease, .. } => panic!("{holder} was granted {lease:?}"),
    }
}

/// C-38: a queue of 2 grants 2 slots and keeps the third in line; a release frees a slot
/// for the one in line and names it; tokens only grow; a holder asking again keeps its
/// slot; a wrong token is fenced; the usage counts slots and waiters.
pub async fn c38_slot_concurrency(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let queue = Queue::new("imports").concurrency(2);
    let a = granted(&store, &queue, ask("a", T0)).await;
    let b = granted(&store, &queue, ask("b", T0)).await;
    assert!(b.token > a.token);
    assert_eq!(a.expires_at, T0 + TTL);
    let wait = waiting(&store, &queue, ask("c", T0 + SEC)).await;
    assert_eq!(
        wait.reason,
        WaitReason::Concurrency {
            running: 2,
            limit: 2
        }
    );
    assert_eq!((wait.running, wait.ahead), (2, 0));
    let d = waiting(&store, &queue, ask("d", T0 + SEC)).await;
    assert_eq!(d.ahead, 1);
    // Asking again while holding: the same slot, renewed.
    let again = granted(&store, &queue, ask("a", T0 + 2 * SEC)).await;
    assert_eq!(again.token, a.token);
    assert_eq!(again.expires_at, T0 + 2 * SEC + TTL);

    let usage = store.queue_usage(T0 + 2 * SEC).await.unwrap();
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0].queue, "imports");
    assert_eq!((usage[0].running, usage[0].waiting), (2, 2));
    assert_eq!(usage[0].oldest_wait, Some(T0 + SEC));
    assert_eq!(usage[0].limits.concurrency, Some(2));

    // A wrong token is fenced and frees nothing.
    let forged = SlotLease {
        token: a.token + 100,
        ..a.clone()
    };
    assert!(matches!(
        store.release_slot(&forged, T0 + 3 * SEC).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store.renew_slot(&forged, T0 + 3 * SEC, TTL).await,
        Err(StoreError::Fenced { .. })
    ));
    let released = store.release_slot(&a, T0 + 3 * SEC).await.unwrap();
    assert!(released.released);
    assert_eq!(released.next.as_deref(), Some("c"));
    // Released twice: nothing more.
    assert!(!store.release_slot(&a, T0 + 3 * SEC).await.unwrap().released);
    // `d` is behind `c`: its turn does not come before `c`'s.
    let behind = waiting(&store, &queue, ask("d", T0 + 4 * SEC)).await;
    assert_eq!((behind.reason, behind.ahead), (WaitReason::Behind, 1));
    let c = granted(&store, &queue, ask("c", T0 + 4 * SEC)).await;
    assert!(c.token > b.token);
    // Leaving the line.
    assert!(
        store
            .leave_queue("imports", "d", T0 + 5 * SEC)
            .await
            .unwrap()
            .released
    );
    let usage = store.queue_usage(T0 + 5 * SEC).await.unwrap();
    assert_eq!((usage[0].running, usage[0].waiting), (2, 0));
}

/// C-39: a slot whose lease ended goes back to the queue at the next ask, named as expired;
/// its holder's renewal is fenced; a renewed slot is kept; a waiter that stops asking
/// loses its place.
pub async fn c39_slot_leases(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let queue = Queue::new("reports").concurrency(1);
    let a = granted(&store, &queue, ask("a", T0)).await;
    // Renewed before the end: still held past the first expiry.
    let a = store.renew_slot(&a, T0 + TTL - SEC, TTL).await.unwrap();
    assert_eq!(a.expires_at, T0 + 2 * TTL - SEC);
    let wait = waiting(&store, &queue, ask("b", T0 + TTL + SEC)).await;
    assert_eq!(wait.retry_at, Some(a.expires_at));
    // Past the renewed lease: `b` gets the slot, `a` is reported as expired.
    let late = a.expires_at + SEC;
    let outcome = store.acquire_slot(&queue, ask("b", late)).await.unwrap();
    let SlotOutcome::Granted { lease: b, expired } = outcome else {
        panic!("b waits: {outcome:?}")
    };
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].holder, "a");
    assert!(b.token > a.token);
    assert!(matches!(
        store.renew_slot(&a, late, TTL).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(!store.release_slot(&a, late).await.unwrap().released);
    // An ended lease cannot be renewed even when nobody took the slot yet.
    let after_b = b.expires_at + SEC;
    assert!(matches!(
        store.renew_slot(&b, after_b, TTL).await,
        Err(StoreError::Fenced { .. })
    ));
    // A waiter that stopped asking loses its place.
    let c = granted(&store, &queue, ask("c", after_b)).await;
    waiting(&store, &queue, ask("d", after_b)).await;
    let c = store
        .renew_slot(&c, after_b + TTL - SEC, TTL)
        .await
        .unwrap();
    let e = waiting(&store, &queue, ask("e", after_b + TTL + SEC)).await;
    assert_eq!(e.ahead, 0, "d stopped asking: e is first in line");
    let usage = store.queue_usage(after_b + TTL + SEC).await.unwrap();
    assert_eq!((usage[0].running, usage[0].waiting), (1, 1));
    assert!(
        store
            .release_slot(&c, after_b + TTL + SEC)
            .await
            .unwrap()
            .released
    );
}

/// C-40: a rate of 3 per second is a sliding window: a fourth start within the second
/// waits until the oldest leaves the window, then is granted; each waiter's retry time is
/// when the start its turn waits for leaves; a waiter behind others is granted when the room
/// is enough for them too. A release on a queue limited by its rate alone names no waiter:
/// they wait for the window, not for a slot.
pub async fn c40_slot_rate(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let queue = Queue::new("payments").rate(3, Duration::from_secs(1));
    for (i, at) in [0, 100 * MS, 200 * MS].into_iter().enumerate() {
        let lease = granted(&store, &queue, ask(&format!("s{i}"), T0 + at)).await;
        store.release_slot(&lease, T0 + at).await.unwrap();
    }
    let wait = waiting(&store, &queue, ask("s3", T0 + 300 * MS)).await;
    assert_eq!(wait.reason, WaitReason::Rate { next_at: T0 + SEC });
    assert_eq!(wait.retry_at, Some(T0 + SEC));
    let usage = store.queue_usage(T0 + 300 * MS).await.unwrap();
    assert_eq!(usage[0].rate_used, 3);
    waiting(&store, &queue, ask("s3", T0 + SEC - 1)).await;
    // The start at T0 left the window (now - 1 s, now].
    granted(&store, &queue, ask("s3", T0 + SEC)).await;
    let wait = waiting(&store, &queue, ask("s4", T0 + SEC + MS)).await;
    assert_eq!(
        wait.reason,
        WaitReason::Rate {
            next_at: T0 + 1_100 * MS
        }
    );
    // Much later the window is empty again.
    granted(&store, &queue, ask("s4", T0 + 10 * SEC)).await;
    assert_eq!(
        store.queue_usage(T0 + 10 * SEC).await.unwrap()[0].rate_used,
        1
    );

    // Each waiter is told when the start its turn waits for leaves the window: the n-th in
    // line when the n-th oldest leaves, a window later for each window's worth ahead of it.
    let queue = Queue::new("turns").rate(3, Duration::from_secs(1));
    for (i, at) in [0, 100 * MS, 200 * MS].into_iter().enumerate() {
        granted(&store, &queue, ask(&format!("g{i}"), T0 + at)).await;
    }
    let mut turns = Vec::new();
    for holder in ["w0", "w1", "w2", "w3"] {
        turns.push(
            waiting(&store, &queue, ask(holder, T0 + 300 * MS))
                .await
                .retry_at,
        );
    }
    assert_eq!(
        turns,
        [T0 + SEC, T0 + 1_100 * MS, T0 + 1_200 * MS, T0 + 2 * SEC].map(Some)
    );
    // Two starts left the window: `w1` asks before `w0` and is granted, as the room is
    // enough for both; `w2` then waits for the third.
    let now = T0 + 1_150 * MS;
    granted(&store, &queue, ask("w1", now)).await;
    granted(&store, &queue, ask("w0", now)).await;
    let wait = waiting(&store, &queue, ask("w2", now)).await;
    assert_eq!(
        (wait.reason, wait.retry_at),
        (
            WaitReason::Rate {
                next_at: T0 + 1_200 * MS
            },
            Some(T0 + 1_200 * MS)
        )
    );
    let held = granted(&store, &queue, ask("w2", T0 + 1_200 * MS)).await;
    waiting(&store, &queue, ask("w3", T0 + 1_200 * MS)).await;
    let release = store.release_slot(&held, T0 + 1_210 * MS).await.unwrap();
    assert!(release.released);
    assert_eq!(release.next, None, "a rate-only release woke a waiter");
}

/// C-41: higher priority first, arrival order within a priority; partition keys served
/// round robin (one busy key does not starve the others); a key at its share is passed over.
pub async fn c41_slot_order(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    // Priority.
    let queue = Queue::new("one").concurrency(1);
    let mut held = granted(&store, &queue, ask("x", T0)).await;
    let line = [("low", 0), ("high1", 5), ("high2", 5), ("top", 9)];
    for (holder, priority) in line {
        waiting(&store, &queue, prioritized(holder, priority, T0 + SEC)).await;
    }
    let mut served: Vec<String> = Vec::new();
    for step in 0..4 {
        let now = T0 + (2 + step) * SEC;
        let release = store.release_slot(&held, now).await.unwrap();
        let next = release.next.unwrap();
        // Everyone else still waits, in line behind `next`.
        for (other, priority) in line {
            if other != next && !served.iter().any(|s| s == other) {
                waiting(&store, &queue, prioritized(other, priority, now)).await;
            }
        }
        let priority = line.iter().find(|(h, _)| *h == next).unwrap().1;
        held = granted(&store, &queue, prioritized(&next, priority, now)).await;
        served.push(next);
    }
    assert_eq!(served, ["top", "high1", "high2", "low"]);

    // Round robin: key `a` has 4 waiting before `b` and `c` arrive.
    let queue = Queue::new("fair").concurrency(1);
    let mut held = granted(&store, &queue, keyed("x", "z", T0)).await;
    let line = [
        ("a1", "a"),
        ("a2", "a"),
        ("a3", "a"),
        ("a4", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("c1", "c"),
    ];
    for (holder, key) in line {
        waiting(&store, &queue, keyed(holder, key, T0 + SEC)).await;
    }
    let mut served = Vec::new();
    for step in 0..line.len() {
        let now = T0 + (2 + i64::try_from(step).unwrap()) * SEC;
        let next = store.release_slot(&held, now).await.unwrap().next.unwrap();
        let key = line.iter().find(|(h, _)| *h == next).unwrap().1;
        held = granted(&store, &queue, keyed(&next, key, now)).await;
        served.push(next);
    }
    assert_eq!(served, ["a1", "b1", "c1", "a2", "b2", "a3", "a4"]);

    // Per key: `a` at its share is passed over for `b`, though first in line.
    let queue = Queue::new("per-key").concurrency(10).per_key(1);
    granted(&store, &queue, keyed("a1", "a", T0)).await;
    let wait = waiting(&store, &queue, keyed("a2", "a", T0)).await;
    assert_eq!(
        wait.reason,
        WaitReason::PerKey {
            running: 1,
            limit: 1
        }
    );
    granted(&store, &queue, keyed("b1", "b", T0 + SEC)).await;
}

/// C-42: per-process limits count the asking owner's slots only; bad input (a limit of 0,
/// an absurd period, an empty holder, a ttl of 0) is `Invalid` naming the field, and
/// nothing is stored.
pub async fn c42_slot_limits_and_bad_input(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let queue = Queue::new("mixed").concurrency(3).per_process(1);
    granted(&store, &queue, ask("a", T0)).await;
    let wait = waiting(&store, &queue, ask("b", T0)).await;
    assert_eq!(
        wait.reason,
        WaitReason::PerProcess {
            running: 1,
            limit: 1
        }
    );
    let elsewhere = SlotAsk {
        owner: "node-b".to_owned(),
        ..ask("b", T0)
    };
    granted(&store, &queue, elsewhere).await;

    let bad = [
        (
            Queue::new("zero").concurrency(0),
            ask("q", T0),
            "concurrency",
        ),
        (
            Queue::new("slow").rate(1, Duration::from_secs(30 * 86_400)),
            ask("q", T0),
            "rate.period",
        ),
        (Queue::new("bad name"), ask("q", T0), "bad name"),
        (Queue::new("ok"), ask("", T0), "holder"),
        (
            Queue::new("ok"),
            SlotAsk {
                ttl: 0,
                ..ask("q", T0)
            },
            "ttl",
        ),
    ];
    for (queue, ask, field) in bad {
        let err = store.acquire_slot(&queue, ask).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid { .. }) && err.to_string().contains(field),
            "{err}"
        );
    }
    let usage = store.queue_usage(T0).await.unwrap();
    assert_eq!(
        usage.iter().map(|u| u.queue.as_str()).collect::<Vec<_>>(),
        ["mixed"],
        "nothing stored for a refused ask"
    );
}

/// C-43: asks made at once are counted exactly: of 20 concurrent asks on a queue of 3,
/// 3 are granted; of 20 on a rate of 5 per second, 5.
pub async fn c43_slot_concurrent_asks(backend: Arc<dyn TestBackend>) {
    let store = Arc::new(Harness::new(backend));
    for (queue, limit) in [
        (Queue::new("race").concurrency(3), 3),
        (Queue::new("burst").rate(5, Duration::from_secs(1)), 5),
    ] {
        let asks: Vec<_> = (0..20)
            .map(|i| {
                let (store, queue) = (Arc::clone(&store), queue.clone());
                tokio::spawn(async move {
                    store
                        .acquire_slot(&queue, ask(&format!("h{i}"), T0 + i * MS))
                        .await
                })
            })
            .collect();
        let mut granted = 0;
        for ask in asks {
            if let SlotOutcome::Granted { .. } = ask.await.unwrap().unwrap() {
                granted += 1;
            }
        }
        assert_eq!(granted, limit, "{queue}");
        let usage = store.queue_usage(T0 + 20 * MS).await.unwrap();
        let usage = usage.iter().find(|u| u.queue == queue.name()).unwrap();
        assert_eq!(usage.running, limit);
        assert_eq!(usage.waiting, 20 - limit);
    }
}

/// C-50: a waiter asking with a place lease longer than the slot's (an instance suspended
/// until its timer asks again, QU-11) keeps its place that long without asking: one asking
/// after the slot's lease is still behind it, and is first only once the place's lease
/// ended; granted, it holds its slot for the slot's lease only.
pub async fn c50_slot_place_lease(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let queue = Queue::new("suspended").concurrency(1);
    let a = granted(&store, &queue, ask("a", T0)).await;
    let long = |holder: &str, now: Micros| SlotAsk {
        place_ttl: Some(3 * TTL),
        ..ask(holder, now)
    };
    assert_eq!(waiting(&store, &queue, long("b", T0)).await.ahead, 0);
    // The slot's lease ended without `b` asking again: `a` is kept alive, `c` comes later.
    let a = store.renew_slot(&a, T0 + TTL - SEC, TTL).await.unwrap();
    let a = store
        .renew_slot(&a, T0 + 2 * TTL - 2 * SEC, TTL)
        .await
        .unwrap();
    let c = waiting(&store, &queue, ask("c", T0 + 2 * TTL)).await;
    assert_eq!(c.ahead, 1, "b keeps its place for its place lease");
    let usage = store.queue_usage(T0 + 2 * TTL).await.unwrap();
    assert_eq!(usage[0].line, ["b", "c"]);
    // Past the place lease, `b` lost its place: `c` (asking again) is first.
    let a = store
        .renew_slot(&a, T0 + 3 * TTL - 3 * SEC, TTL)
        .await
        .unwrap();
    let c = waiting(&store, &queue, ask("c", T0 + 3 * TTL + SEC)).await;
    assert_eq!(c.ahead, 0, "b's place lease ended");
    // `b` asking again now takes a place at the back.
    let b = waiting(&store, &queue, long("b", T0 + 3 * TTL + SEC)).await;
    assert_eq!(b.ahead, 1);
    // Granted with a long place lease, the slot is leased for the slot's lease only.
    let freed = T0 + 3 * TTL + 2 * SEC;
    let release = store.release_slot(&a, freed).await.unwrap();
    assert_eq!(release.next.as_deref(), Some("c"));
    let c = granted(&store, &queue, long("c", freed)).await;
    assert_eq!(c.expires_at, freed + TTL);
    // A place lease of 0 is refused, naming it.
    let err = store
        .acquire_slot(
            &queue,
            SlotAsk {
                place_ttl: Some(0),
                ..ask("d", freed)
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid { .. }) && err.to_string().contains("place_ttl"),
        "{err}"
    );
}
