//! Triggers and trigger schedules.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{SEC, T0, TTL, create_leased, new_instance, timer, trigger, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{Micros, StoreError};

/// C-11: trigger replace by difference; re-running writes nothing; lookup by several hashes.
pub async fn c11_triggers(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let first = vec![
        trigger("root:a", "h1", json!({})),
        trigger("root:b", "h2", json!({})),
        trigger("root:c", "h3", json!({})),
    ];
    let diff = store.replace_triggers("order", first).await.unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (3, 0, 0));
    let mut other = trigger("root:x", "h1", json!({}));
    other.definition_name = "invoice".to_owned();
    store
        .replace_triggers("invoice", vec![other])
        .await
        .unwrap();

    let mut later_a = trigger("root:a", "h1", json!({}));
    later_a.registered_at = T0 + SEC; // only the registration time differs
    let second = vec![
        later_a,
        trigger("root:b", "h2", json!({ "changed": true })),
        trigger("root:d", "h4", json!({})),
    ];
    let diff = store
        .replace_triggers("order", second.clone())
        .await
        .unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (2, 1, 1));
    let diff = store.replace_triggers("order", second).await.unwrap();
    assert_eq!((diff.added, diff.removed, diff.unchanged), (0, 0, 3));

    let found = store
        .find_triggers(&["h1".to_owned(), "h2".to_owned(), "h3".to_owned()])
        .await
        .unwrap();
    let keys: Vec<(String, String)> = found
        .iter()
        .map(|t| (t.definition_name.clone(), t.node_id.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("invoice".to_owned(), "root:x".to_owned()),
            ("order".to_owned(), "root:a".to_owned()),
            ("order".to_owned(), "root:b".to_owned()),
        ]
    );
    assert_eq!(found[2].payload, json!({ "changed": true }));
    assert_eq!(found[1].registered_at, T0, "unchanged rows keep their row");
    let mut wrong = trigger("root:a", "h1", json!({}));
    wrong.definition_name = "invoice".to_owned();
    assert!(matches!(
        store.replace_triggers("order", vec![wrong]).await,
        Err(StoreError::Invalid { .. })
    ));
    let diff = store.replace_triggers("order", Vec::new()).await.unwrap();
    assert_eq!(diff.removed, 3);
}

/// ST-9, ST-17, TM-11 to TM-13: trigger schedules are timer rows without an instance; firing
/// creates the instance and advances the schedule in one operation, once per occurrence.
pub async fn trigger_schedules(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let schedule = |id: &str, kind: &str, due_at: Micros| crate::store::Schedule {
        schedule_id: id.to_owned(),
        definition_name: "report".to_owned(),
        node_id: "root:every_hour".to_owned(),
        kind: kind.to_owned(),
        due_at,
        fired: false,
    };
    assert!(
        store
            .put_schedule(schedule("cron-1", "cron", T0 + 10 * SEC))
            .await
            .unwrap()
    );
    // Re-registering keeps next_due.
    assert!(
        !store
            .put_schedule(schedule("cron-1", "cron", T0 + 99 * SEC))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_schedule(schedule("start-1", "start_at", T0 + 5 * SEC))
            .await
            .unwrap()
    );
    assert_eq!(store.earliest_timer(T0).await.unwrap(), Some(T0 + 5 * SEC));

    let now = T0 + 10 * SEC;
    let due = store.claim_due_timers("n", now, TTL, 10).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|t| t.timer_id.as_str()).collect();
    assert_eq!(ids, ["start-1", "cron-1"]);
    assert_eq!(due[1].instance_id, None);
    assert_eq!(due[1].definition_name.as_deref(), Some("report"));
    assert_eq!(due[1].node_id.as_deref(), Some("root:every_hour"));

    // Fire the cron occurrence: instance created, next_due advanced, claim released.
    let mut first = new_instance("report-t10");
    first.definition_name = "report".to_owned();
    first.activation_scope = Some("singleton:report".to_owned());
    assert_eq!(
        store
            .fire_schedule(
                "cron-1",
                T0 + 10 * SEC,
                Some(first.clone()),
                Some(T0 + 70 * SEC)
            )
            .await
            .unwrap(),
        crate::store::ScheduleFiring::Started
    );
    assert!(store.load_instance("report-t10").await.is_ok());
    // A late duplicate of the same occurrence writes nothing.
    let mut twin = first.clone();
    twin.instance_id = "report-twin".to_owned();
    assert_eq!(
        store
            .fire_schedule("cron-1", T0 + 10 * SEC, Some(twin), Some(T0 + 70 * SEC))
            .await
            .unwrap(),
        crate::store::ScheduleFiring::Stale
    );
    assert!(store.load_instance("report-twin").await.is_err());
    // Next occurrence: the singleton is still running, refused, but the schedule advances.
    let mut second = first.clone();
    second.instance_id = "report-t70".to_owned();
    assert_eq!(
        store
            .fire_schedule("cron-1", T0 + 70 * SEC, Some(second), Some(T0 + 130 * SEC))
            .await
            .unwrap(),
        crate::store::ScheduleFiring::Refused {
            existing: "report-t10".to_owned()
        }
    );
    let schedules = store.list_schedules("report").await.unwrap();
    assert_eq!(schedules.len(), 2);
    assert_eq!(schedules[0].schedule_id, "cron-1");
    assert_eq!(schedules[0].due_at, T0 + 130 * SEC);
    // Skipped occurrences (TM-19): no instance, the schedule only advances; a second skip of
    // the same occurrence finds it moved on.
    let instances_before = store
        .list_instances(Default::default())
        .await
        .unwrap()
        .len();
    for expected in [
        crate::store::ScheduleFiring::Skipped,
        crate::store::ScheduleFiring::Stale,
    ] {
        assert_eq!(
            store
                .fire_schedule(
                    "cron-1",
                    T0 + 130 * SEC,
                    None::<crate::store::NewInstance<serde_json::Value>>,
                    Some(T0 + 250 * SEC)
                )
                .await
                .unwrap(),
            expected
        );
    }
    assert_eq!(
        store
            .list_instances(Default::default())
            .await
            .unwrap()
            .len(),
        instances_before
    );
    let schedules = store.list_schedules("report").await.unwrap();
    assert_eq!(schedules[0].due_at, T0 + 250 * SEC);

    // StartAt fires once and is never claimed again.
    let mut start = new_instance("report-start");
    start.definition_name = "report".to_owned();
    assert_eq!(
        store
            .fire_schedule("start-1", T0 + 5 * SEC, Some(start), None)
            .await
            .unwrap(),
        crate::store::ScheduleFiring::Started
    );
    let schedules = store.list_schedules("report").await.unwrap();
    assert!(schedules[1].fired);
    assert!(
        !store
            .put_schedule(schedule("start-1", "start_at", T0))
            .await
            .unwrap()
    );
    let later = T0 + 1000 * SEC;
    let due = store.claim_due_timers("n", later, TTL, 10).await.unwrap();
    let ids: Vec<&str> = due.iter().map(|t| t.timer_id.as_str()).collect();
    assert_eq!(ids, ["cron-1"]);
    // Removing the trigger removes its schedule; an instance's timer is not a schedule.
    assert!(store.delete_schedule("cron-1").await.unwrap());
    assert!(!store.delete_schedule("cron-1").await.unwrap());
    let lease = create_leased(&store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.timers_added = vec![timer("t1", T0)];
    store.commit(c).await.unwrap();
    assert!(!store.delete_schedule("t1").await.unwrap());
    assert_eq!(store.list_timers("wf-1").await.unwrap().len(), 1);
}
