//! Recorded definitions (the optional capability).

use std::sync::Arc;

use serde_json::json;

use super::fixtures::T0;
use super::harness::{Harness, TestBackend};
use crate::store::{DefinitionRecord, Micros};

/// C-36: recorded definitions. A `(name, version)` is recorded once (a second put is a no-op
/// that keeps the first JSON and time); lists are by `(name, recorded_at)`, all or one name;
/// the latest recorded version is the one [`Storage::definition`](crate::store::Storage::definition) returns without a version.
pub async fn c36_definitions(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let record = |name: &str, version: &str, at: Micros| DefinitionRecord {
        name: name.to_owned(),
        version: version.to_owned(),
        json: json!({ "name": name, "version": version, "nodes": ["\u{e9}t\u{e9}"] }).to_string(),
        recorded_at: at,
    };
    assert!(store.list_definitions(None).await.unwrap().is_empty());
    assert_eq!(store.definition("order", None).await.unwrap(), None);
    assert!(
        store
            .put_definition(record("order", "v1", T0))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_definition(record("order", "v2", T0 + 5))
            .await
            .unwrap()
    );
    assert!(
        store
            .put_definition(record("invoice", "v9", T0 + 1))
            .await
            .unwrap()
    );
    // A repeated (name, version) changes nothing.
    let mut again = record("order", "v1", T0 + 9);
    again.json = "{}".to_owned();
    assert!(!store.put_definition(again).await.unwrap());
    let all = store.list_definitions(None).await.unwrap();
    let keys: Vec<(&str, &str)> = all
        .iter()
        .map(|d| (d.name.as_str(), d.version.as_str()))
        .collect();
    assert_eq!(keys, [("invoice", "v9"), ("order", "v1"), ("order", "v2")]);
    assert_eq!(all[1], record("order", "v1", T0));
    let orders = store.list_definitions(Some("order")).await.unwrap();
    assert_eq!(orders.len(), 2);
    assert!(orders.iter().all(|d| d.name == "order"));
    assert_eq!(
        store.definition("order", None).await.unwrap(),
        Some(record("order", "v2", T0 + 5))
    );
    assert_eq!(
        store.definition("order", Some("v1")).await.unwrap(),
        Some(record("order", "v1", T0))
    );
    assert_eq!(store.definition("order", Some("v7")).await.unwrap(), None);
    assert!(
        store
            .list_definitions(Some("absent"))
            .await
            .unwrap()
            .is_empty()
    );
}
