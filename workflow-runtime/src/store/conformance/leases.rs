//! Leases and fencing, runnable claims, control requests, the clock.

use std::sync::Arc;

use super::fixtures::{SEC, T0, TTL, create_leased, doc, new_instance, queue_item, timer, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{
    Commit, ControlKind, ControlRequest, InstanceFilter, InstanceStatus, InstanceSubStatus,
    LeaseKey, Storage, StoreError,
};

/// C-37: a claim made with a kept document (ENG-53) answers no state exactly when the stored
/// record has the kept version and, byte for byte, the kept text, and the stored text
/// otherwise; the lease is taken (or refused) as by any claim.
pub async fn c37_claim_known(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let stored = store.load_instance_raw("wf-1").await.unwrap().state;
    let claim = |owner: &str, now| crate::store::LeaseClaim {
        owner: owner.to_owned(),
        token: None,
        now,
        ttl: TTL,
    };
    let unchanged = store
        .claim_instance_raw_known("wf-1", claim("node-a", T0), 1, &stored)
        .await
        .unwrap();
    assert_eq!(unchanged.record.state, None);
    assert_eq!(unchanged.record.version, 1);
    assert_eq!(unchanged.record.instance_id, "wf-1");
    // Held: another owner is refused, kept text or not.
    assert!(matches!(
        store
            .claim_instance_raw_known("wf-1", claim("node-b", T0 + SEC), 1, &stored)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    let key = LeaseKey::instance("wf-1");
    store
        .release_lease(&key, unchanged.lease.token)
        .await
        .unwrap();
    // Another text at the same version (a document edited in place), or the same text at
    // another version: the stored text.
    let mut edited = stored.clone();
    edited.push(' ');
    for (version, text) in [(1, edited.as_str()), (2, stored.as_str())] {
        let claimed = store
            .claim_instance_raw_known("wf-1", claim("node-a", T0 + 2 * SEC), version, text)
            .await
            .unwrap();
        assert_eq!(claimed.record.state.as_deref(), Some(stored.as_str()));
        assert!(claimed.lease.token > unchanged.lease.token);
        store
            .release_lease(&key, claimed.lease.token)
            .await
            .unwrap();
    }
}

/// C-6: a superseded lease token is fenced even with the right version.
pub async fn c06_fencing(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = create_leased(&store, "wf-1").await;
    assert_eq!(a.expires_at, T0 + TTL);
    let later = T0 + TTL + SEC;
    let b = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", later, TTL)
        .await
        .unwrap();
    assert!(b.token > a.token);
    let err = store
        .commit(waiting("wf-1", 1, a.token, 1))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Fenced {
            resource: "instance:wf-1".to_owned(),
            token: a.token,
            current: b.token
        }
    );
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::instance("wf-1"), a.token, later, TTL)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .release_lease(&LeaseKey::instance("wf-1"), a.token)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.load_instance("wf-1").await.unwrap().version, 1);
    assert_eq!(
        store.commit(waiting("wf-1", 1, b.token, 2)).await.unwrap(),
        2
    );
    // A commit without any held lease is fenced too.
    store
        .release_lease(&LeaseKey::instance("wf-1"), b.token)
        .await
        .unwrap();
    assert!(matches!(
        store.commit(waiting("wf-1", 2, b.token, 3)).await,
        Err(StoreError::Fenced { .. })
    ));
}

/// C-7: leases: held, renew, release, takeover; tokens never reused.
pub async fn c07_leases(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = create_leased(&store, "wf-1").await;
    assert_eq!(a.token, 1);
    let err = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + SEC, TTL)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::LeaseHeld {
            resource: "instance:wf-1".to_owned(),
            holder: "node-a".to_owned(),
            until: T0 + TTL
        }
    );
    assert!(err.is_transient());
    let renewed = store
        .renew_lease(&LeaseKey::instance("wf-1"), a.token, T0 + 20 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewed.lease.token, a.token);
    assert_eq!(renewed.lease.expires_at, T0 + 50 * SEC);
    assert_eq!(renewed.control_request, None);
    // Still held after the original expiry because it was renewed.
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + 40 * SEC, TTL)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    store
        .release_lease(&LeaseKey::instance("wf-1"), a.token)
        .await
        .unwrap();
    let b = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0 + 41 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(b.token, a.token + 1, "release then acquire: a higher token");
    let record = store.load_instance("wf-1").await.unwrap();
    assert_eq!(
        record.lease.map(|l| (l.owner, l.token)),
        Some(("node-b".to_owned(), b.token))
    );
    // Expired: taken over.
    let c = store
        .acquire_lease(
            &LeaseKey::instance("wf-1"),
            "node-c",
            T0 + 41 * SEC + TTL,
            TTL,
        )
        .await
        .unwrap();
    assert_eq!(c.token, b.token + 1);
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("nope"), "x", T0, TTL)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// C-7 for named leases (ST-11).
pub async fn c07_named_leases(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let a = store
        .acquire_lease(&LeaseKey::named("purge"), "node-a", T0, TTL)
        .await
        .unwrap();
    assert_eq!(a.token, 1);
    assert!(matches!(
        store.acquire_lease(&LeaseKey::named("purge"), "node-b", T0 + SEC, TTL).await,
        Err(StoreError::LeaseHeld { holder, .. }) if holder == "node-a"
    ));
    let renewed = store
        .renew_lease(&LeaseKey::named("purge"), a.token, T0 + 10 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewed.lease.expires_at, T0 + 40 * SEC);
    let b = store
        .acquire_lease(&LeaseKey::named("purge"), "node-b", T0 + 41 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(b.token, 2);
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::named("purge"), a.token, T0 + 42 * SEC, TTL)
            .await,
        Err(StoreError::Fenced {
            token: 1,
            current: 2,
            ..
        })
    ));
    store
        .release_lease(&LeaseKey::named("purge"), b.token)
        .await
        .unwrap();
    assert!(matches!(
        store
            .release_lease(&LeaseKey::named("purge"), b.token)
            .await,
        Err(StoreError::Fenced { .. })
    ));
    let c = store
        .acquire_lease(&LeaseKey::named("purge"), "node-c", T0 + 43 * SEC, TTL)
        .await
        .unwrap();
    assert_eq!(c.token, 3, "tokens are never reused");
    assert!(matches!(
        store
            .renew_lease(&LeaseKey::named("other"), 1, T0, TTL)
            .await,
        Err(StoreError::Fenced { current: 0, .. })
    ));
}

/// C-13: `claim_runnable` gives `Running` instances without a live lease, each to one claimer.
pub async fn c13_claim_runnable(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for (id, at) in [("r1", 3), ("r2", 1), ("r3", 2)] {
        let mut new = new_instance(id);
        new.created_at = T0 + at;
        store.create_instance(new).await.unwrap();
    }
    for (id, status) in [
        ("s1", InstanceStatus::Suspended),
        ("f1", InstanceStatus::Faulted),
        ("d1", InstanceStatus::Finished),
        ("x1", InstanceStatus::Cancelled),
    ] {
        let mut new = new_instance(id);
        new.status = status;
        new.sub_status = None;
        store.create_instance(new).await.unwrap();
    }
    // An interrupted one (Running/Executing) with a live lease.
    let held = create_leased(&store, "e1").await;
    let mut c = Commit::new(
        "e1",
        1,
        held.token,
        T0,
        doc(1),
        InstanceStatus::Running,
        Some(InstanceSubStatus::Executing),
    );
    c.correlation_id = None;
    store.commit(c).await.unwrap();

    let now = T0 + SEC;
    let first = store.claim_runnable("node-a", now, TTL, 2).await.unwrap();
    let second = store.claim_runnable("node-b", now, TTL, 10).await.unwrap();
    let ids = |rows: &[crate::store::ClaimedInstance]| -> Vec<String> {
        rows.iter().map(|c| c.instance_id.clone()).collect()
    };
    assert_eq!(ids(&first), ["r2", "r3"], "oldest updated_at first");
    assert_eq!(ids(&second), ["r1"]);
    assert!(first.iter().all(|c| c.lease.expires_at == now + TTL));
    assert_eq!(first[0].sub_status, Some(InstanceSubStatus::Pending));
    let record = store.load_instance("r2").await.unwrap();
    assert_eq!(
        record.lease.map(|l| (l.owner, l.token)),
        Some(("node-a".to_owned(), first[0].lease.token))
    );
    assert!(
        store
            .claim_runnable("node-c", now, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // After the leases expire: all four Running ones, e1 interrupted.
    let later = now + TTL + SEC;
    let third = store
        .claim_runnable("node-c", later, TTL, 10)
        .await
        .unwrap();
    let mut got = ids(&third);
    got.sort();
    assert_eq!(got, ["e1", "r1", "r2", "r3"]);
    let e1 = third.iter().find(|c| c.instance_id == "e1").unwrap();
    assert_eq!(e1.sub_status, Some(InstanceSubStatus::Executing));
    assert!(e1.lease.token > held.token);
}

/// C-29: a control request does not change the version, is returned by renewal, and is
/// cleared by the commit that honours it.
pub async fn c29_control_requests(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let request = ControlRequest {
        kind: ControlKind::Cancel,
        reason: Some("operator".to_owned()),
    };
    store
        .request_control("wf-1", request.clone())
        .await
        .unwrap();
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.version, 1);
    assert_eq!(loaded.control_request.as_ref(), Some(&request));
    // The owning runtime finds the requested instances, and only those.
    store.create_instance(new_instance("wf-2")).await.unwrap();
    let requested = |store: Storage| async move {
        store
            .list_instances(InstanceFilter {
                control_requested: true,
                ..InstanceFilter::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.instance_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(requested(store.storage().clone()).await, ["wf-1"]);
    let renewal = store
        .renew_lease(&LeaseKey::instance("wf-1"), lease.token, T0 + SEC, TTL)
        .await
        .unwrap();
    assert_eq!(renewal.control_request, Some(request));
    // The running commit (version 1) still succeeds.
    assert_eq!(
        store
            .commit(waiting("wf-1", 1, lease.token, 1))
            .await
            .unwrap(),
        2
    );
    assert!(
        store
            .load_instance("wf-1")
            .await
            .unwrap()
            .control_request
            .is_some()
    );
    let mut honour = Commit::new(
        "wf-1",
        2,
        lease.token,
        T0 + 2 * SEC,
        doc(2),
        InstanceStatus::Cancelled,
        None,
    );
    honour.clear_control_request = true;
    store.commit(honour).await.unwrap();
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.control_request, None);
    assert_eq!(loaded.finished_at, Some(T0 + 2 * SEC));
    assert!(requested(store.storage().clone()).await.is_empty());
    assert!(matches!(
        store
            .request_control(
                "wf-1",
                ControlRequest {
                    kind: ControlKind::Suspend,
                    reason: None
                }
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
    // Refused: nothing recorded.
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!(loaded.control_request, None);
    assert!(requested(store.storage().clone()).await.is_empty());
}

/// C-34: with `now` jumping forward and back, leases, claims, due times and TTLs follow it and
/// nothing else.
pub async fn c34_clock(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let far = T0 + 1000 * SEC;
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", far, TTL)
        .await
        .unwrap();
    // Back in time: the lease is still live there.
    assert!(matches!(
        store
            .acquire_lease(&LeaseKey::instance("wf-1"), "node-b", T0, TTL)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.timers_added = vec![timer("t1", T0 + 10 * SEC)];
    store.commit(c).await.unwrap();
    assert!(
        store
            .claim_due_timers("x", T0, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .claim_due_timers("x", T0 + 10 * SEC, TTL, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // Back again: the claim is live in the past and the future alike until it expires.
    assert!(
        store
            .claim_due_timers("y", T0 + 11 * SEC, TTL, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut item = queue_item("q1", T0);
    item.expires_at = T0 + 5 * SEC;
    store.enqueue(item).await.unwrap();
    assert_eq!(store.expire_queue(T0 + 4 * SEC, 10).await.unwrap(), 0);
    assert_eq!(
        store.claim_queue_page("z", T0, 1, 10).await.unwrap().len(),
        1,
        "not expired at T0"
    );
    assert_eq!(store.expire_queue(T0 + 5 * SEC, 10).await.unwrap(), 1);
}

/// A claim of a fresh lease for `owner` at `now`, as a run makes it.
fn run_claim(owner: &str, now: crate::base::Micros) -> crate::store::LeaseClaim {
    crate::store::LeaseClaim {
        owner: owner.to_owned(),
        token: None,
        now,
        ttl: TTL,
    }
}

/// C-48: a commit that releases the lease of an instance it leaves waiting frees it for
/// another owner at once, whatever the store does with it meanwhile (a PostgreSQL store keeps
/// it for its holder, ST-38): the other owner's claim succeeds with a higher token, and the
/// first holder's commits under its old token are fenced. The first holder's next claim
/// of the version it committed, after that, is refused while the other owner holds it.
pub async fn c48_released_lease_is_free_for_others(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let a = store
        .claim_instance_raw("wf-1", run_claim("node-a", T0))
        .await
        .unwrap();
    let mut commit = waiting("wf-1", 1, a.lease.token, 1);
    commit.release_lease = true;
    assert_eq!(store.commit(commit).await.unwrap(), 2);
    let text = store.load_instance_raw("wf-1").await.unwrap().state;
    // Before the TTL of the claim: only the release frees it.
    let b = store
        .claim_instance_raw("wf-1", run_claim("node-b", T0 + 2 * SEC))
        .await
        .unwrap();
    assert!(b.lease.token > a.lease.token);
    assert_eq!(b.record.version, 2);
    assert_eq!(b.record.state, text);
    let err = store
        .commit(waiting("wf-1", 2, a.lease.token, 2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    assert!(matches!(
        store
            .claim_instance_raw_known("wf-1", run_claim("node-a", T0 + 3 * SEC), 2, &text)
            .await,
        Err(StoreError::LeaseHeld { .. })
    ));
    // The other owner's run commits and releases; the first owner claims again.
    let mut commit = waiting("wf-1", 2, b.lease.token, 3);
    commit.release_lease = true;
    assert_eq!(store.commit(commit).await.unwrap(), 3);
    let again = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "node-a", T0 + 4 * SEC, TTL)
        .await
        .unwrap();
    assert!(again.token > b.lease.token);
}

/// C-49: the run that claims an instance again after a commit released its lease (a run of
/// the same owner, with the text it committed) sees what was written meanwhile: a control
/// request made after the release is in the record it claims; without one, the claim
/// answers the kept text unchanged and its commit, under the token it returned, applies.
pub async fn c49_claim_after_release_sees_writes(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let mut version = 1;
    let mut token = store
        .claim_instance_raw("wf-1", run_claim("node-a", T0))
        .await
        .unwrap()
        .lease
        .token;
    for n in 1..=3 {
        let mut commit = waiting("wf-1", version, token, n);
        commit.release_lease = true;
        version = store.commit(commit).await.unwrap();
        let text = store.load_instance_raw("wf-1").await.unwrap().state;
        let claimed = store
            .claim_instance_raw_known("wf-1", run_claim("node-a", T0 + n * SEC), version, &text)
            .await
            .unwrap();
        assert_eq!(claimed.record.state, None);
        assert_eq!(claimed.record.version, version);
        assert_eq!(claimed.record.status, InstanceStatus::Suspended);
        assert_eq!(claimed.record.sub_status, Some(InstanceSubStatus::Waiting));
        assert_eq!(claimed.record.control_request, None);
        token = claimed.lease.token;
    }
    let mut commit = waiting("wf-1", version, token, 9);
    commit.release_lease = true;
    version = store.commit(commit).await.unwrap();
    let text = store.load_instance_raw("wf-1").await.unwrap().state;
    let request = ControlRequest {
        kind: ControlKind::Cancel,
        reason: Some("stop".into()),
    };
    store
        .request_control("wf-1", request.clone())
        .await
        .unwrap();
    let claimed = store
        .claim_instance_raw_known("wf-1", run_claim("node-a", T0 + 6 * SEC), version, &text)
        .await
        .unwrap();
    assert_eq!(claimed.record.control_request, Some(request));
    let mut commit = waiting("wf-1", version, claimed.lease.token, 10);
    commit.clear_control_request = true;
    commit.release_lease = true;
    assert_eq!(store.commit(commit).await.unwrap(), version + 1);
}
