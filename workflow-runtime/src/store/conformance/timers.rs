//! Timers.

use std::sync::Arc;

use super::fixtures::{SEC, T0, create_leased, timer, waiting};
use super::harness::{Harness, TestBackend};

/// C-12: timers: earliest due time, due claims in order, disjoint claimers, expired claims,
/// parked timers, deletion by commit.
pub async fn c12_timers(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    assert_eq!(store.earliest_timer(T0).await.unwrap(), None);
    let a = create_leased(&store, "wf-a").await;
    let b = create_leased(&store, "wf-b").await;
    let mut c = waiting("wf-a", 1, a.token, 1);
    c.timers_added = vec![
        timer("t3", T0 + 30 * SEC),
        timer("t1", T0 + 10 * SEC),
        timer("t2", T0 + 20 * SEC),
    ];
    store.commit(c).await.unwrap();
    let mut c = waiting("wf-b", 1, b.token, 1);
    c.timers_added = vec![timer("t0", T0 + 5 * SEC), timer("t9", T0 + 90 * SEC)];
    store.commit(c).await.unwrap();
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 5 * SEC));

    // Park wf-b's timers: never returned.
    let mut c = waiting("wf-b", 2, b.token, 2);
    c.timers_parked = Some(true);
    store.commit(c).await.unwrap();
    assert!(
        store
            .list_timers("wf-b")
            .await
            .unwrap()
            .iter()
            .all(|t| t.parked)
    );
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 10 * SEC));

    let now = T0 + 25 * SEC;
    let claim_ttl = 30 * SEC;
    let first = store
        .claim_due_timers("node-a", now, claim_ttl, 1)
        .await
        .unwrap();
    let second = store
        .claim_due_timers("node-b", now, claim_ttl, 10)
        .await
        .unwrap();
    let ids = |rows: &[crate::store::TimerRow]| -> Vec<String> {
        rows.iter().map(|t| t.timer_id.clone()).collect()
    };
    assert_eq!(ids(&first), ["t1"]);
    assert_eq!(ids(&second), ["t2"], "disjoint, and only due_at <= now");
    assert_eq!(first[0].instance_id.as_deref(), Some("wf-a"));
    assert!(
        store
            .claim_due_timers("node-c", now, claim_ttl, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Claimed timers are not "earliest" while claimed.
    assert_eq!(
        store.earliest_timer(now).await.unwrap(),
        Some(T0 + 30 * SEC)
    );
    // The claims expire: claimable again.
    let after = now + claim_ttl;
    let again = store
        .claim_due_timers("node-c", after, claim_ttl, 10)
        .await
        .unwrap();
    assert_eq!(ids(&again), ["t1", "t2", "t3"]);

    // A commit that deletes t1 removes it; unparking wf-b brings t0 back.
    let mut c = waiting("wf-a", 2, a.token, 2);
    c.timers_removed = vec!["t1".to_owned()];
    store.commit(c).await.unwrap();
    assert_eq!(ids(&store.list_timers("wf-a").await.unwrap()), ["t2", "t3"]);
    let mut c = waiting("wf-b", 3, b.token, 3);
    c.timers_parked = Some(false);
    store.commit(c).await.unwrap();
    let later = after + claim_ttl;
    let due = store
        .claim_due_timers("node-d", later, claim_ttl, 10)
        .await
        .unwrap();
    assert_eq!(ids(&due), ["t0", "t2", "t3"]);
}
