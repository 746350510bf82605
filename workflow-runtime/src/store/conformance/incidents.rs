//! Incidents.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{SEC, T0, create_leased, final_commit, new_instance, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{
    InstanceStatus, InstanceSubStatus, Micros, NewIncident, PurgeFilter, StoreError,
};

/// ST-12, FLT-6, FLT-8, FLT-9: the faulting commit opens an incident, the commit of the
/// operator action resolves it, an `unreadable_state` incident is inserted alone, purge
/// removes them with their instance.
pub async fn incidents(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let opened = |id: &str, at: Micros| NewIncident {
        incident_id: id.to_owned(),
        kind: "activity_failed".to_owned(),
        created_at: at,
        record: json!({ "node_id": "root:pay", "error": "card declined" }),
    };
    let mut fault = waiting("wf-1", 1, lease.token, 1);
    fault.status = InstanceStatus::Faulted;
    fault.sub_status = None;
    fault.incidents_opened = vec![opened("i-1", T0 + 2)];
    store.commit(fault).await.unwrap();
    // A rejected commit opens nothing.
    let mut stale = waiting("wf-1", 1, lease.token, 1);
    stale.incidents_opened = vec![opened("i-x", T0)];
    assert!(store.commit(stale).await.is_err());
    // Inserted alone for another instance whose state is unreadable.
    store.create_instance(new_instance("wf-2")).await.unwrap();
    store.write_raw_state("wf-2", "garbage").await.unwrap();
    store
        .insert_incident(
            "wf-2",
            NewIncident {
                incident_id: "i-2".to_owned(),
                kind: "unreadable_state".to_owned(),
                created_at: T0 + 1,
                record: json!({}),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        store.insert_incident("wf-2", opened("i-2", T0)).await,
        Err(StoreError::AlreadyExists {
            what: "incident",
            ..
        })
    ));
    assert!(matches!(
        store.insert_incident("nope", opened("i-3", T0)).await,
        Err(StoreError::NotFound { .. })
    ));
    let listed = store.list_incidents("wf-1").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].instance_id, "wf-1");
    assert_eq!(listed[0].definition_name, "order");
    assert_eq!(listed[0].record["error"], json!("card declined"));
    assert_eq!(listed[0].resolved_at, None);
    let all = store.list_all_incidents(true, None, 10).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|i| i.incident_id.as_str()).collect();
    assert_eq!(ids, ["i-2", "i-1"], "created_at order across instances");
    let after = store
        .list_all_incidents(false, Some((T0 + 1, "i-2".to_owned())), 10)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);

    // The retry commit resolves it.
    let mut retry = waiting("wf-1", 2, lease.token, 2);
    retry.status = InstanceStatus::Running;
    retry.sub_status = Some(InstanceSubStatus::Executing);
    retry.incidents_resolved = vec![("i-1".to_owned(), "retried".to_owned())];
    retry
        .incidents_resolved
        .push(("i-2".to_owned(), "not mine".to_owned()));
    store.commit(retry).await.unwrap();
    let listed = store.list_incidents("wf-1").await.unwrap();
    assert_eq!(listed[0].resolved_at, Some(T0 + SEC));
    assert_eq!(listed[0].resolution.as_deref(), Some("retried"));
    let open: Vec<String> = store
        .list_all_incidents(true, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.incident_id)
        .collect();
    assert_eq!(open, ["i-2"], "another instance's incident is not resolved");

    // Purge removes an instance's incidents.
    store
        .commit(final_commit("wf-1", 3, lease.token, T0 + 2 * SEC))
        .await
        .unwrap();
    assert_eq!(
        store
            .purge(PurgeFilter::finished_before(T0 + 3 * SEC))
            .await
            .unwrap(),
        1
    );
    assert!(store.list_incidents("wf-1").await.unwrap().is_empty());
}
