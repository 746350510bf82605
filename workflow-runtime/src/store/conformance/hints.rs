//! Wake-up hints.

use std::sync::Arc;

use super::fixtures::{
    SEC, T0, TTL, bookmark, drain, final_commit, new_instance, queue_item, timer, waiting,
};
use super::harness::{Harness, TestBackend};
use crate::store::{
    ControlKind, ControlRequest, InstanceStatus, InstanceSubStatus, LeaseKey, WakeUp,
};

/// C-28: enqueue, a commit adding a bookmark, a runnable instance and a terminal instance
/// each produce a hint (sent before the operation's future completes).
pub async fn c28_wake_ups(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let mut rx = store.subscribe();
    store.enqueue(queue_item("q1", T0)).await.unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::QueueChanged));

    store.create_instance(new_instance("wf-1")).await.unwrap();
    let runnable = WakeUp::InstanceRunnable {
        id: "wf-1".to_owned(),
    };
    assert!(drain(&mut rx).contains(&runnable));

    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    c.timers_added = vec![timer("t1", T0 + 5 * SEC), timer("t2", T0 + 3 * SEC)];
    store.commit(c).await.unwrap();
    let hints = drain(&mut rx);
    assert!(hints.contains(&WakeUp::QueueChanged), "{hints:?}");
    assert!(hints.contains(&WakeUp::TimersChanged {
        earliest: Some(T0 + 3 * SEC)
    }));

    store
        .request_control(
            "wf-1",
            ControlRequest {
                kind: ControlKind::Cancel,
                reason: None,
            },
        )
        .await
        .unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::ControlRequested {
        id: "wf-1".to_owned()
    }));

    let mut c = waiting("wf-1", 2, lease.token, 2);
    c.status = InstanceStatus::Running;
    c.sub_status = Some(InstanceSubStatus::Pending);
    c.release_lease = true;
    store.commit(c).await.unwrap();
    assert!(drain(&mut rx).contains(&runnable));

    let lease = store
        .acquire_lease(&LeaseKey::instance("wf-1"), "n", T0, TTL)
        .await
        .unwrap();
    store
        .commit(final_commit("wf-1", 3, lease.token, T0 + SEC))
        .await
        .unwrap();
    assert!(drain(&mut rx).contains(&WakeUp::InstanceTerminal {
        id: "wf-1".to_owned()
    }));
    // A failed operation sends nothing.
    assert!(
        store
            .commit(waiting("wf-1", 1, lease.token, 9))
            .await
            .is_err()
    );
    assert!(drain(&mut rx).is_empty());
}
