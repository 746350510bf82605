//! Debounced sends (RT-35).

use std::sync::Arc;

use super::fixtures::{SEC, T0};
use super::harness::{Harness, TestBackend};
use crate::store::DebounceRow;

fn send(id: &str, burst: &str, payload: &str, at: i64, window: i64) -> DebounceRow {
    DebounceRow {
        debounce_id: id.to_owned(),
        burst_id: burst.to_owned(),
        name: "edited".to_owned(),
        hash: format!("hash-{id}"),
        stimulus: format!("{{\"payload\":\"{payload}\"}}"),
        first_sent_at: at,
        last_sent_at: at,
        due_at: at + window,
        sends: 1,
    }
}

/// C-44: debounced sends: a send to an existing row replaces its stimulus and due time and
/// counts, keeping its burst and first send; due rows are claimed in order, once; a row
/// sent to while claimed survives its settlement and is claimed again; an expired claim is
/// claimed again; a settled row is gone and a new send starts a new burst.
pub async fn c44_debounce(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    assert_eq!(store.earliest_debounce(T0).await.unwrap(), None);

    let first = store
        .put_debounce(send("a", "burst-1", "v1", T0, SEC))
        .await
        .unwrap();
    assert_eq!((first.sends, first.due_at), (1, T0 + SEC));
    let second = store
        .put_debounce(send("a", "burst-ignored", "v2", T0 + SEC / 2, 2 * SEC))
        .await
        .unwrap();
    assert_eq!(second.sends, 2, "a second send counts");
    assert_eq!(second.burst_id, "burst-1", "the burst is kept");
    assert_eq!(second.first_sent_at, T0, "the first send time is kept");
    assert_eq!(second.last_sent_at, T0 + SEC / 2);
    assert_eq!(
        second.due_at,
        T0 + SEC / 2 + 2 * SEC,
        "the due time is pushed back"
    );
    assert!(second.stimulus.contains("v2"), "the last stimulus wins");
    store
        .put_debounce(send("b", "burst-b", "b1", T0, 5 * SEC))
        .await
        .unwrap();
    assert_eq!(
        store.earliest_debounce(T0).await.unwrap(),
        Some(T0 + 5 * SEC / 2)
    );

    // Not due yet: nothing claimed.
    let early = store
        .claim_due_debounces("p1", T0 + 2 * SEC, 10 * SEC, 10)
        .await
        .unwrap();
    assert!(early.claimed.is_empty());

    // Due: claimed once, by one claimer.
    let due = T0 + 5 * SEC / 2;
    let claimed = store
        .claim_due_debounces("p1", due, 10 * SEC, 10)
        .await
        .unwrap();
    assert_eq!(claimed.claimed, vec![second.clone()]);
    assert_eq!(
        claimed.next_due,
        Some(T0 + 5 * SEC),
        "the claimed row is not next"
    );
    let other = store
        .claim_due_debounces("p2", due, 10 * SEC, 10)
        .await
        .unwrap();
    assert!(
        other.claimed.is_empty(),
        "a live claim excludes other claimers"
    );

    // A send while the row is delivered: its settlement keeps the row, unclaimed.
    let third = store
        .put_debounce(send("a", "burst-ignored", "v3", due, SEC))
        .await
        .unwrap();
    assert_eq!((third.sends, third.burst_id.as_str()), (3, "burst-1"));
    assert!(!store.finish_debounce("a", "burst-1", 2).await.unwrap());
    let again = store
        .claim_due_debounces("p2", due + SEC, 10 * SEC, 10)
        .await
        .unwrap();
    assert_eq!(
        again.claimed,
        vec![third.clone()],
        "the later send is delivered"
    );
    assert!(store.finish_debounce("a", "burst-1", 3).await.unwrap());
    assert!(
        !store.finish_debounce("a", "burst-1", 3).await.unwrap(),
        "settled once"
    );

    // An expired claim is claimed again.
    let at = T0 + 5 * SEC;
    let b = store.claim_due_debounces("p1", at, SEC, 10).await.unwrap();
    assert_eq!(b.claimed.len(), 1);
    assert_eq!(b.next_due, None);
    let live = store
        .claim_due_debounces("p2", at + SEC / 2, SEC, 10)
        .await
        .unwrap();
    assert!(live.claimed.is_empty());
    let lapsed = store
        .claim_due_debounces("p2", at + SEC, SEC, 10)
        .await
        .unwrap();
    assert_eq!(lapsed.claimed, b.claimed, "the claim lapsed");
    assert!(store.finish_debounce("b", "burst-b", 1).await.unwrap());
    assert_eq!(store.earliest_debounce(at).await.unwrap(), None);

    // After a delivery, a send starts a new burst.
    let fresh = store
        .put_debounce(send("a", "burst-2", "v4", at, SEC))
        .await
        .unwrap();
    assert_eq!((fresh.sends, fresh.burst_id.as_str()), (1, "burst-2"));
    assert_eq!(fresh.first_sent_at, at);
}
