//! Routing end to end: start by trigger (RT-13, RT-15), resume by bookmark
//! (RT-17, RT-34), one stimulus that starts one definition and resumes another, activation
//! strategies (RT-15, RT-16), the early-stimulus race through the bookmark queue (RT-21,
//! RT-26, RT-27), TTL expiry to dead letters (RT-28), idempotent re-send (RT-19), the trigger
//! index by difference (RT-11) and look-back (RT-30 to RT-32). Every scenario runs on the
//! `MemoryStore` and on a `SqliteStore` in a temporary file.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::{Activation, Definition};
use workflow_runtime::routing::{RoutingError, stimulus_hash};
use workflow_runtime::store::{
    DeadLetterFilter, DeadLetterReason, InstanceFilter, LeaseKey, MemoryStore, SqliteStore, Storage,
};
use workflow_runtime::{
    Completion, Outcome, Refusal, Registry, Rejection, Runtime, SendError, StartError,
    StartOptions, Stimulus, TaskContext, WorkflowStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Order {
    order_id: String,
    log: Vec<String>,
    ticks: u32,
}

/// `placed` (trigger `order.placed`) -> reserve -> `paid` keyed by order id -> ship.
const ORDER: &str = r#"{
  "name": "Order",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "nodes": [
      { "kind": "event", "id": "placed", "event": "order.placed", "trigger": true },
      { "kind": "task", "id": "reserve", "function": "reserve" },
      { "kind": "event", "id": "paid", "event": "paid", "key": "order_id" },
      { "kind": "task", "id": "ship", "function": "ship" }
    ],
    "connections": [
      { "source": "placed", "target": "reserve" },
      { "source": "reserve", "target": "paid" },
      { "source": "paid", "target": "ship" }
    ]
  }
}"#;

/// Started by hand; waits for any `order.placed` (not a trigger here).
const AUDIT: &str = r#"{
  "name": "Audit",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "nodes": [
      { "kind": "event", "id": "seen", "event": "order.placed" },
      { "kind": "task", "id": "note", "function": "note" }
    ],
    "connections": [ { "source": "seen", "target": "note" } ]
  }
}"#;

/// Waits for `tick` in a loop, twice.
const TICKER: &str = r#"{
  "name": "Ticker",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "event", "id": "tick", "event": "tick" },
      { "kind": "task", "id": "count", "function": "count" }
    ],
    "connections": [
      { "source": "head", "target": "tick" },
      { "source": "tick", "target": "count" },
      { "source": "count", "port": "again", "target": "head" }
    ]
  }
}"#;

fn registry(gate: Option<Arc<tokio::sync::Notify>>) -> Registry<Order> {
    let mut registry = Registry::new();
    for name in ["ship", "note", "head"] {
        registry = registry.task(name, move |cx: &mut TaskContext<Order>| {
            Box::pin(async move {
                cx.data_mut().log.push(name.to_owned());
                Ok(Outcome::done())
            })
        });
    }
    registry
        .task("reserve", move |cx: &mut TaskContext<Order>| {
            let gate = gate.clone();
            Box::pin(async move {
                if let Some(gate) = gate {
                    gate.notified().await;
                }
                cx.data_mut().log.push("reserve".to_owned());
                Ok(Outcome::done())
            })
        })
        .task("count", |cx: &mut TaskContext<Order>| {
            Box::pin(async move {
                cx.data_mut().ticks += 1;
                Ok(if cx.data().ticks < 2 {
                    Outcome::named("again")
                } else {
                    Outcome::done()
                })
            })
        })
}

fn definition(json: &str, activation: Option<Activation>) -> Definition {
    let mut definition = Definition::from_json(json).unwrap();
    definition.activation = activation;
    definition
}

/// Both stores; the temporary directory lives as long as the store is used.
fn stores() -> Vec<(&'static str, Storage, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("routing.db")).unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()).into(), None),
        ("sqlite", Arc::new(sqlite).into(), Some(dir)),
    ]
}

fn runtime(store: &Storage, order_activation: Option<Activation>) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register_definition(definition(ORDER, order_activation), registry(None))
        .register_definition(definition(AUDIT, None), registry(None))
        .register_definition(definition(TICKER, None), registry(None))
        // These tests pass the queue themselves (`deliver_inbox`, or `start_workers`).
        .inbox_worker(false)
        .build()
        .unwrap()
}

fn placed(order_id: &str) -> Stimulus {
    Stimulus::new("order.placed").payload(json!({ "order_id": order_id }))
}

async fn data(rt: &Runtime, id: &str) -> Order {
    rt.get_state(id).await.unwrap().unwrap().data().unwrap()
}

#[test]
fn rt13_start_by_trigger_then_resume_by_correlated_event() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let report = rt.send(placed("o-1")).await.unwrap();
            assert_eq!(report.started.len(), 1, "{label}: {report:?}");
            assert!(
                report.resumed.is_empty() && report.inbox_item.is_none(),
                "{label}"
            );
            let id = report.started[0].instance_id.clone();
            assert_eq!(
                report.started[0].status,
                WorkflowStatus::Suspended,
                "{label}"
            );
            // FC-6 step 1: the trigger completed at once; the order waits for its payment.
            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            let names: Vec<&str> = snapshot
                .state
                .bookmarks()
                .iter()
                .map(|b| b.name.as_str())
                .collect();
            assert_eq!(names, ["paid"], "{label}");

            // A payment for another order queues; the right key resumes it.
            let other = rt
                .send(Stimulus::new("paid").key("o-2").inbox(false))
                .await
                .unwrap();
            assert!(other.unmatched, "{label}");
            let report = rt
                .send(
                    Stimulus::new("paid")
                        .key("o-1")
                        .payload(json!({"amount": 5})),
                )
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}");
            assert!(report.started.is_empty(), "{label}");
            assert_eq!(
                report.resumed[0].status,
                WorkflowStatus::Finished,
                "{label}"
            );
            assert_eq!(data(&rt, &id).await.log, ["reserve", "ship"], "{label}");
        });
    }
}

#[test]
fn rt34_resume_by_bookmark_id() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let started = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap();
            let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
            let bookmark = snapshot.state.bookmarks()[0].id.clone();
            let report = rt
                .send(
                    Stimulus::new("order.placed")
                        .bookmark(bookmark.clone())
                        .payload(json!({"order_id": "x"})),
                )
                .await
                .unwrap();
            assert!(
                report.started.is_empty(),
                "{label}: no trigger runs (RT-34)"
            );
            assert_eq!(report.resumed.len(), 1, "{label}");
            assert_eq!(
                report.resumed[0].status,
                WorkflowStatus::Finished,
                "{label}"
            );
            let gone = rt
                .send(Stimulus::new("order.placed").bookmark(bookmark))
                .await
                .unwrap_err();
            assert!(
                matches!(gone, SendError::BookmarkNotFound { .. }),
                "{label}"
            );
            let unknown = rt
                .send(Stimulus::new("paid").instance("nobody"))
                .await
                .unwrap_err();
            assert!(
                matches!(unknown, SendError::InstanceNotFound { .. }),
                "{label}"
            );
        });
    }
}

#[test]
fn rt15_rt17_one_stimulus_starts_one_definition_and_resumes_another() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let mut audits = Vec::new();
            for _ in 0..2 {
                let s = rt
                    .start_by_name("Audit", json!({}), StartOptions::default())
                    .await
                    .unwrap();
                audits.push(s.instance_id);
            }
            let report = rt.send(placed("o-7")).await.unwrap();
            assert_eq!(report.started.len(), 1, "{label}: {report:?}");
            assert_eq!(
                data(&rt, &report.started[0].instance_id).await.order_id,
                "o-7"
            );
            let mut resumed: Vec<String> = report
                .resumed
                .iter()
                .map(|s| s.instance_id.clone())
                .collect();
            resumed.sort();
            audits.sort();
            assert_eq!(resumed, audits, "{label}: every matching bookmark (RT-17)");
            for audit in &audits {
                assert_eq!(data(&rt, audit).await.log, ["note"], "{label}");
            }
        });
    }
}

#[test]
fn rt16_each_activation_strategy_refuses_a_second_instance() {
    for (label, store, _dir) in stores() {
        block_on(async {
            for strategy in [
                Activation::Singleton,
                Activation::Correlation,
                Activation::CorrelatedSingleton,
            ] {
                let store: Storage = if label == "memory" {
                    Arc::new(MemoryStore::new()).into()
                } else {
                    store.clone()
                };
                // A fresh correlation id per strategy on the shared SQLite file.
                let cid = format!("c-{strategy:?}");
                let rt = runtime(&store, Some(strategy));
                let first = rt
                    .send(placed("o-1").correlation(cid.clone()))
                    .await
                    .unwrap();
                assert_eq!(first.started.len(), 1, "{label} {strategy:?}: {first:?}");
                let second = rt
                    .send(placed("o-2").correlation(cid.clone()))
                    .await
                    .unwrap();
                assert!(second.started.is_empty(), "{label} {strategy:?}");
                assert!(
                    matches!(
                        &second.refused[..],
                        [Refusal::ActivationRefused { existing, .. }]
                            if *existing == first.started[0].instance_id
                    ),
                    "{label} {strategy:?}: {second:?}"
                );
                if strategy != Activation::Singleton {
                    let missing = rt.send(placed("o-3")).await.unwrap();
                    assert!(
                        matches!(&missing.refused[..], [Refusal::MissingCorrelationId { .. }]),
                        "{label} {strategy:?}: {missing:?}"
                    );
                }
                // Finish the first; a new one may start again.
                rt.send(Stimulus::new("paid").key("o-1").correlation(cid.clone()))
                    .await
                    .unwrap();
                let third = rt.send(placed("o-4").correlation(cid)).await.unwrap();
                assert_eq!(third.started.len(), 1, "{label} {strategy:?}: {third:?}");
                rt.send(Stimulus::new("paid").key("o-4")).await.unwrap();
            }
        });
    }
}

#[test]
fn rt21_rt26_an_event_sent_before_the_wait_point_is_not_lost() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let gate = Arc::new(tokio::sync::Notify::new());
            let rt = Runtime::builder()
                .store(store.clone())
                .register_definition(definition(ORDER, None), registry(Some(Arc::clone(&gate))))
                .build()
                .unwrap();
            rt.start_workers().await.unwrap();
            // The order is started by its trigger and blocks in `reserve`, before its `paid`
            // wait.
            let starter = {
                let rt = rt.clone();
                tokio::spawn(async move { rt.send(placed("o-9")).await })
            };
            // Wait until the instance exists (it is blocked in `reserve`, holding its lease).
            let mut exists = false;
            for _ in 0..500 {
                let listed = store
                    .list_instances(InstanceFilter::default())
                    .await
                    .unwrap();
                if !listed.is_empty() {
                    exists = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(exists, "{label}: the order was never created");
            let report = rt
                .send(
                    Stimulus::new("paid")
                        .key("o-9")
                        .payload(json!({"amount": 1})),
                )
                .await
                .unwrap();
            assert!(report.resumed.is_empty(), "{label}: no bookmark yet");
            assert!(report.inbox_item.is_some(), "{label}: queued (RT-21)");
            // Now the order reaches its wait; its commit rings the doorbell (RT-26).
            gate.notify_one();
            let started = starter.await.unwrap().unwrap();
            assert_eq!(started.started.len(), 1, "{label}");
            let id = started.started[0].instance_id.clone();
            let done = rt
                .await_completion(&id, Duration::from_secs(10))
                .await
                .unwrap();
            assert!(matches!(done, Completion::Finished(_)), "{label}");
            assert_eq!(data(&rt, &id).await.log, ["reserve", "ship"], "{label}");
            rt.shutdown(Duration::ZERO).await;
        });
    }
}

#[test]
fn rt28_unmatched_stimulus_expires_into_dead_letters() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .inbox_ttl(Duration::from_millis(30))
                .register_definition(definition(AUDIT, None), registry(None))
                .build()
                .unwrap();
            let report = rt
                .send(
                    Stimulus::new("nobody.listens")
                        .key(3)
                        .payload(json!({"x": 1})),
                )
                .await
                .unwrap();
            let item = report.inbox_item.clone().expect("queued");
            // A per-send TTL wins over the runtime's.
            let long = rt
                .send(Stimulus::new("nobody.listens").ttl(Duration::from_secs(600)))
                .await
                .unwrap();
            assert!(long.inbox_item.is_some(), "{label}");
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            let dead = rt
                .dead_letters(DeadLetterFilter::of_reason(DeadLetterReason::Expired, 10))
                .await
                .unwrap();
            assert_eq!(dead.len(), 1, "{label}: {dead:?}");
            assert_eq!(dead[0].item.item_id, item, "{label}");
            assert_eq!(dead[0].item.payload, json!({"x": 1}), "{label}");
        });
    }
}

#[test]
fn rt19_idempotent_resend_returns_the_first_report() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let first = rt
                .send(placed("o-5").idempotency_key("send-1"))
                .await
                .unwrap();
            assert_eq!(first.started.len(), 1, "{label}");
            assert!(!first.duplicate);
            let again = rt
                .send(placed("o-5").idempotency_key("send-1"))
                .await
                .unwrap();
            assert!(again.duplicate, "{label}");
            assert_eq!(again.started, first.started, "{label}");
            assert_eq!(again.stimulus_id, first.stimulus_id, "{label}");
            let listed = store
                .list_instances(InstanceFilter {
                    definition_name: Some("Order".into()),
                    ..InstanceFilter::default()
                })
                .await
                .unwrap();
            assert_eq!(listed.len(), 1, "{label}: no twin started");
            let reused = rt
                .send(placed("o-6").idempotency_key("send-1"))
                .await
                .unwrap_err();
            assert!(
                matches!(reused, SendError::IdempotencyKeyReused { .. }),
                "{label}"
            );
        });
    }
}

#[test]
fn rt11_trigger_index_is_replaced_by_difference() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let hash = stimulus_hash("order.placed", None, None).unwrap();
            let rt = runtime(&store, None);
            rt.index_triggers().await.unwrap();
            let rows = store
                .find_triggers(std::slice::from_ref(&hash))
                .await
                .unwrap();
            assert_eq!(rows.len(), 1, "{label}");
            assert_eq!(rows[0].node_id, "root:placed", "{label}");
            // Registering the definition without its trigger removes the row.
            let without = ORDER.replace(r#", "trigger": true"#, "");
            let rt2 = Runtime::builder()
                .store(store.clone())
                .register_definition(definition(&without, None), registry(None))
                .build()
                .unwrap();
            rt2.index_triggers().await.unwrap();
            let rows = store
                .find_triggers(std::slice::from_ref(&hash))
                .await
                .unwrap();
            assert!(rows.is_empty(), "{label}: {rows:?}");
            let report = rt2.send(placed("o-1").inbox(false)).await.unwrap();
            assert!(report.started.is_empty() && report.unmatched, "{label}");
        });
    }
}

#[test]
fn rt32_a_loop_never_takes_the_same_stimulus_twice() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let started = rt
                .start_by_name("Ticker", json!({}), StartOptions::default())
                .await
                .unwrap();
            let id = started.instance_id;
            let first = rt.send(Stimulus::new("tick")).await.unwrap();
            assert_eq!(first.resumed.len(), 1, "{label}");
            // Back at the wait in the next iteration: the first tick does not fire again.
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(snapshot.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(data(&rt, &id).await.ticks, 1, "{label}");
            // A second, new tick is taken by the second iteration.
            let second = rt.send(Stimulus::new("tick")).await.unwrap();
            assert_eq!(second.resumed.len(), 1, "{label}");
            assert_eq!(data(&rt, &id).await.ticks, 2, "{label}");
            assert_eq!(
                rt.get_state(&id).await.unwrap().unwrap().status(),
                WorkflowStatus::Finished,
                "{label}"
            );
        });
    }
}

#[test]
fn rt30_look_back_since_origin() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            // Sent before the instance existed: older than its origin, never delivered.
            let stale = rt.send(Stimulus::new("paid").key("o-8")).await.unwrap();
            assert!(stale.inbox_item.is_some(), "{label}");
            tokio::time::sleep(Duration::from_millis(2)).await;
            let report = rt.send(placed("o-8")).await.unwrap();
            let id = report.started[0].instance_id.clone();
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            assert_eq!(
                rt.get_state(&id).await.unwrap().unwrap().status(),
                WorkflowStatus::Suspended,
                "{label}: the stale payment is not taken"
            );
            // Published after the origin but before the wait (queued): taken.
            let gate_free = rt
                .send(Stimulus::new("paid").key("o-8").instance(id.clone()))
                .await
                .unwrap();
            assert_eq!(gate_free.resumed.len(), 1, "{label}: live delivery");
        });
    }
}

#[test]
fn rt18_an_instance_busy_in_another_process_is_deferred_then_delivered() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let id = rt.send(placed("o-3")).await.unwrap().started[0]
                .instance_id
                .clone();
            // Another process holds the instance's lease.
            let lease = store
                .acquire_lease(
                    &LeaseKey::instance(&id),
                    "other-process",
                    now_micros(),
                    60_000_000,
                )
                .await
                .unwrap();
            let report = rt.send(Stimulus::new("paid").key("o-3")).await.unwrap();
            assert_eq!(
                report.deferred,
                std::slice::from_ref(&id),
                "{label}: {report:?}"
            );
            assert!(
                report.resumed.is_empty() && report.inbox_item.is_none(),
                "{label}"
            );
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}: still busy");
            store
                .release_lease(&LeaseKey::instance(&id), lease.token)
                .await
                .unwrap();
            assert_eq!(rt.deliver_inbox().await.unwrap(), 1, "{label}");
            assert_eq!(
                rt.get_state(&id).await.unwrap().unwrap().status(),
                WorkflowStatus::Finished,
                "{label}"
            );
        });
    }
}

#[test]
fn rt16_start_applies_the_activation_strategy_and_rt28_dead_letters_replay() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .inbox_ttl(Duration::from_millis(20))
                .register_definition(
                    definition(AUDIT, Some(Activation::Singleton)),
                    registry(None),
                )
                .build()
                .unwrap();
            let first = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap();
            let second = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap_err();
            assert!(
                matches!(
                    &second,
                    StartError::ActivationRefused {
                        refusal: Refusal::ActivationRefused { existing, .. }
                    } if *existing == first.instance_id
                ),
                "{label}: {second:?}"
            );
            // A stimulus nobody waited for expires, then is replayed to a new waiter.
            let report = rt
                .send(Stimulus::new("order.placed").instance(first.instance_id.clone()))
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}");
            let queued = rt.send(Stimulus::new("late")).await.unwrap();
            tokio::time::sleep(Duration::from_millis(40)).await;
            rt.deliver_inbox().await.unwrap();
            let dead = rt.dead_letters(DeadLetterFilter::all(10)).await.unwrap();
            assert_eq!(dead.len(), 1, "{label}");
            let item = rt.replay_dead_letter(&dead[0].item.item_id).await.unwrap();
            assert_eq!(Some(item.item_id), queued.inbox_item, "{label}");
            assert_eq!(
                item.stimulus_id, queued.stimulus_id,
                "{label}: same stimulus id"
            );
            assert!(
                rt.dead_letters(DeadLetterFilter::all(10))
                    .await
                    .unwrap()
                    .is_empty(),
                "{label}"
            );
        });
    }
}

fn now_micros() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(now.as_micros()).unwrap()
}

#[test]
fn rt30_each_look_back_policy_decides_on_a_stimulus_queued_before_the_instance() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let cases = [
                (None, 0),
                (Some(r#""since_origin""#), 0),
                (Some(r#""none""#), 0),
                (Some(r#"{ "window": { "ms": 60000 } }"#), 1),
                (Some(r#""any""#), 1),
            ];
            for (i, (look_back, expected)) in cases.into_iter().enumerate() {
                let json = match look_back {
                    None => ORDER.to_owned(),
                    Some(policy) => ORDER.replace(
                        r#""key": "order_id" }"#,
                        &format!(r#""key": "order_id", "look_back": {policy} }}"#),
                    ),
                };
                let rt = Runtime::builder()
                    .store(store.clone())
                    .register_definition(definition(&json, None), registry(None))
                    // The test passes the queue itself.
                    .inbox_worker(false)
                    .build()
                    .unwrap();
                let order = format!("lb-{i}");
                let stale = rt.send(Stimulus::new("paid").key(&order)).await.unwrap();
                assert!(stale.inbox_item.is_some(), "{label} {look_back:?}");
                tokio::time::sleep(Duration::from_millis(2)).await;
                let started = rt.send(placed(&order)).await.unwrap();
                let id = started.started[0].instance_id.clone();
                assert_eq!(
                    rt.deliver_inbox().await.unwrap(),
                    expected,
                    "{label} {look_back:?}"
                );
                let status = rt.get_state(&id).await.unwrap().unwrap().status();
                let want = if expected == 1 {
                    WorkflowStatus::Finished
                } else {
                    WorkflowStatus::Suspended
                };
                assert_eq!(status, want, "{label} {look_back:?}");
            }
        });
    }
}

#[test]
fn rt15_correlation_spans_definitions_and_rt34_terminal_targets_fail() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, Some(Activation::Correlation));
            // An instance of another definition, without a strategy, holds the id.
            let audit = rt
                .start_by_name(
                    "Audit",
                    json!({}),
                    StartOptions {
                        correlation_id: Some("shared".into()),
                        ..StartOptions::default()
                    },
                )
                .await
                .unwrap();
            let refused = rt
                .send(placed("o-1").correlation("shared").inbox(false))
                .await
                .unwrap();
            assert!(
                matches!(
                    &refused.refused[..],
                    [Refusal::ActivationRefused { existing, .. }] if *existing == audit.instance_id
                ),
                "{label}: {refused:?}"
            );
            // The audit waits for `order.placed` and was resumed by the same send (RT-17):
            // it is final now, and a send addressed to it fails.
            assert_eq!(refused.resumed.len(), 1, "{label}");
            let error = rt
                .send(Stimulus::new("order.placed").instance(audit.instance_id.clone()))
                .await
                .unwrap_err();
            assert!(
                matches!(error, SendError::InstanceTerminal { .. }),
                "{label}: {error:?}"
            );
            // Now nothing live has the id: the order starts.
            let started = rt.send(placed("o-2").correlation("shared")).await.unwrap();
            assert_eq!(started.started.len(), 1, "{label}: {started:?}");
        });
    }
}

#[test]
fn rt23_mode_enqueue_lets_the_worker_start_and_resume() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let audit = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap();
            let report = rt.send(placed("o-1").via_inbox()).await.unwrap();
            assert!(report.inbox_item.is_some(), "{label}");
            assert!(
                report.started.is_empty() && report.resumed.is_empty(),
                "{label}"
            );
            assert_eq!(rt.deliver_inbox().await.unwrap(), 1, "{label}");
            let orders = store
                .list_instances(InstanceFilter {
                    definition_name: Some("Order".into()),
                    ..InstanceFilter::default()
                })
                .await
                .unwrap();
            assert_eq!(orders.len(), 1, "{label}: started by the worker");
            assert_eq!(
                rt.get_state(&audit.instance_id)
                    .await
                    .unwrap()
                    .unwrap()
                    .status(),
                WorkflowStatus::Finished,
                "{label}: resumed by the worker"
            );
            // Nothing more to do: the item is gone.
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            // Unmatched in mode Enqueue: queued anew (same stimulus id) for a later wait.
            let late = rt
                .send(Stimulus::new("paid").key("o-late").via_inbox())
                .await
                .unwrap();
            rt.deliver_inbox().await.unwrap();
            let pending = store
                .claim_queue_page("probe", now_micros(), 1, 10)
                .await
                .unwrap();
            assert!(
                pending.iter().any(|i| i.stimulus_id == late.stimulus_id
                    && Some(&i.item_id) != late.inbox_item.as_ref()),
                "{label}: {pending:?}"
            );
        });
    }
}

#[test]
fn rt12_a_trigger_of_an_unregistered_version_starts_nothing_and_rt34_mismatch() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let old = runtime(&store, None);
            assert_eq!(old.send(placed("o-1")).await.unwrap().started.len(), 1);
            // Another process registers a new version of Order: the trigger row is its own.
            let v2 = ORDER.replace(r#""function": "ship""#, r#""function": "note""#);
            let new = Runtime::builder()
                .store(store.clone())
                .register_definition(definition(&v2, None), registry(None))
                .build()
                .unwrap();
            new.index_triggers().await.unwrap();
            let report = old.send(placed("o-2").inbox(false)).await.unwrap();
            assert!(report.started.is_empty(), "{label}");
            assert!(
                matches!(&report.refused[..], [Refusal::VersionNotRegistered { .. }]),
                "{label}: {report:?}"
            );
            assert_eq!(new.send(placed("o-3")).await.unwrap().started.len(), 1);

            // A bookmark addressed with the wrong stimulus.
            let audit = old
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap();
            let snapshot = old.get_state(&audit.instance_id).await.unwrap().unwrap();
            let bookmark = snapshot.state.bookmarks()[0].id.clone();
            let error = old
                .send(
                    Stimulus::new("paid")
                        .instance(audit.instance_id.clone())
                        .bookmark(bookmark),
                )
                .await
                .unwrap_err();
            assert!(
                matches!(error, SendError::BookmarkStimulusMismatch { .. }),
                "{label}: {error:?}"
            );
        });
    }
}

/// A fork: one branch waits for `paid`, the other fails for good.
const FAULTY: &str = r#"{
  "name": "Faulty",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "split",
    "nodes": [
      { "kind": "fork", "id": "split", "branches": ["wait", "fail"] },
      { "kind": "event", "id": "paid", "event": "paid", "key": "order_id" },
      { "kind": "task", "id": "boom", "function": "boom" }
    ],
    "connections": [
      { "source": "split", "port": "wait", "target": "paid" },
      { "source": "split", "port": "fail", "target": "boom" }
    ]
  }
}"#;

#[test]
fn rt18_a_faulted_instance_gets_a_held_item() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let registry = registry(None).task("boom", |_cx: &mut TaskContext<Order>| {
                Box::pin(async move { Err(workflow_runtime::TaskError::permanent("boom")) })
            });
            let rt = Runtime::builder()
                .store(store.clone())
                .inbox_ttl(Duration::from_millis(10))
                .register_definition(definition(FAULTY, None), registry)
                .build()
                .unwrap();
            let started = rt
                .start_by_name(
                    "Faulty",
                    json!({"order_id": "f-1"}),
                    StartOptions::default(),
                )
                .await;
            let snapshot = rt
                .store()
                .list_instances(InstanceFilter::default())
                .await
                .unwrap();
            let id = snapshot[0].instance_id.clone();
            let state = rt.get_state(&id).await.unwrap().unwrap();
            assert!(started.is_ok(), "{label}: {started:?}");
            assert_eq!(state.status(), WorkflowStatus::Faulted, "{label}");
            assert!(
                !state.state.bookmarks().is_empty(),
                "{label}: the other branch waits"
            );
            let report = rt.send(Stimulus::new("paid").key("f-1")).await.unwrap();
            assert_eq!(
                report.deferred,
                std::slice::from_ref(&id),
                "{label}: {report:?}"
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
            rt.deliver_inbox().await.unwrap();
            let dead = rt.dead_letters(DeadLetterFilter::all(10)).await.unwrap();
            assert!(
                dead.is_empty(),
                "{label}: a held item does not expire: {dead:?}"
            );
        });
    }
}

/// A verdict: chooses the port of the `decide` event (ACT-19).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Verdict {
    verdict: String,
}

impl workflow_runtime::ChooseOutcome for Verdict {
    fn outcome(&self) -> &str {
        &self.verdict
    }
}

/// Started by hand; `decide` waits for `verdict` keyed by order id, its payload chooses the
/// port.
const DECIDER: &str = r#"{
  "name": "Decider",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "nodes": [
      { "kind": "event", "id": "decide", "event": "verdict", "key": "order_id",
        "payload": "Verdict", "ports": ["yes", "no"] },
      { "kind": "task", "id": "ship", "function": "ship" },
      { "kind": "task", "id": "note", "function": "note" }
    ],
    "connections": [
      { "source": "decide", "port": "yes", "target": "ship" },
      { "source": "decide", "port": "no", "target": "note" }
    ]
  }
}"#;

/// The one `Rejected` dead letter of a store, with its error.
async fn rejected_dead_letter(rt: &Runtime, label: &str) -> (String, String) {
    let dead = rt
        .dead_letters(DeadLetterFilter::of_reason(DeadLetterReason::Rejected, 10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{label}: {dead:?}");
    (
        dead[0].item.stimulus_id.clone(),
        dead[0].error.clone().unwrap_or_default(),
    )
}

// RT-22, ACT-19: a payload that does not decode into the event's payload type
// rejects the stimulus for that instance: nothing is committed (the bookmark stays, the
// version does not move), the stimulus is dead-lettered `Rejected` with the typed error, and
// the report names the instance, the node and the type; a good payload then resumes it.
#[test]
fn rt22_an_event_payload_that_does_not_decode_is_dead_lettered_and_the_instance_untouched() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .register_definition(
                    definition(DECIDER, None),
                    registry(None).outcome::<Verdict>("Verdict"),
                )
                .build()
                .unwrap();
            let started = rt
                .start_by_name(
                    "Decider",
                    json!({"order_id": "o-7"}),
                    StartOptions::default(),
                )
                .await
                .unwrap();
            let id = started.instance_id;
            let before = rt.get_state(&id).await.unwrap().unwrap();
            let report = rt
                .send(
                    Stimulus::new("verdict")
                        .key("o-7")
                        .payload(json!({"approved": true})),
                )
                .await
                .unwrap();
            assert!(report.resumed.is_empty(), "{label}: {report:?}");
            assert!(report.inbox_item.is_none() && !report.unmatched, "{label}");
            assert_eq!(report.rejected.len(), 1, "{label}: {report:?}");
            let Rejection::PayloadDecode {
                instance,
                bookmark,
                node,
                payload_type,
                ..
            } = &report.rejected[0]
            else {
                panic!("a payload rejection expected: {:?}", report.rejected);
            };
            assert_eq!(instance, &id, "{label}");
            assert!(node.ends_with("decide"), "{label}: {node}");
            assert!(payload_type.ends_with("Verdict"), "{label}: {payload_type}");
            assert_eq!(bookmark, &before.state.bookmarks()[0].id, "{label}");
            // Nothing committed: same version, same bookmark, still suspended.
            let after = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(
                after.journal.len(),
                before.journal.len(),
                "{label}: before {:?}, after {:?}",
                before.journal,
                after.journal
            );
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            let (stimulus_id, error) = rejected_dead_letter(&rt, label).await;
            assert_eq!(stimulus_id, report.stimulus_id, "{label}");
            assert!(
                error.contains("PayloadDecode") && error.contains("Verdict"),
                "{label}: {error}"
            );
            // A good payload resumes the same bookmark.
            let report = rt
                .send(
                    Stimulus::new("verdict")
                        .key("o-7")
                        .payload(json!({"verdict": "yes"})),
                )
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            assert_eq!(data(&rt, &id).await.log, ["ship"], "{label}");
        });
    }
}

// RT-22 for a state-machine transition whose condition takes a typed payload
// (`covers_amount` reads a `Payment`): the stimulus is rejected, the machine stays in `New`.
#[test]
fn rt22_a_transition_condition_payload_that_does_not_decode_is_rejected() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .register::<common::OrderFlow>()
                .build()
                .unwrap();
            let started = rt
                .start::<common::OrderFlow>(common::order("o-8", 100))
                .await
                .unwrap();
            let id = started.instance_id;
            let before = rt.get_state(&id).await.unwrap().unwrap();
            let report = rt
                .send(
                    Stimulus::new("payment")
                        .key("o-8")
                        .payload(json!({"amount": "a lot"})),
                )
                .await
                .unwrap();
            assert!(report.resumed.is_empty(), "{label}: {report:?}");
            assert_eq!(report.rejected.len(), 1, "{label}: {report:?}");
            let Rejection::PayloadDecode {
                instance,
                payload_type,
                ..
            } = &report.rejected[0]
            else {
                panic!("a payload rejection expected: {:?}", report.rejected);
            };
            assert_eq!(instance, &id, "{label}");
            assert!(payload_type.ends_with("Payment"), "{label}: {payload_type}");
            let after = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(after.journal.len(), before.journal.len(), "{label}");
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            let (stimulus_id, _) = rejected_dead_letter(&rt, label).await;
            assert_eq!(stimulus_id, report.stimulus_id, "{label}");
            // A good payment fires the transition.
            let report = rt
                .send(
                    Stimulus::new("payment")
                        .key("o-8")
                        .payload(json!({"amount": 100})),
                )
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            let order: common::Order = rt.get_state(&id).await.unwrap().unwrap().data().unwrap();
            assert_eq!(order.paid, 100, "{label}");
        });
    }
}

// RT-22 for a transition action that reads its payload with `ctx.payload()?` (`record_shipment`
// reads a `Shipment`): a `shipped` whose payload is not a `Shipment` is rejected for the
// instance. The machine stays in `Paid`, waiting on the same bookmark, with no incident; the
// stimulus is dead-lettered `Rejected` and the report lists it; the stored error and the
// report name the type without a Rust path (ST-20). A good payload then ships the order.
#[test]
fn rt22_an_action_payload_that_does_not_decode_is_rejected_not_faulted() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .register::<common::OrderFlow>()
                .build()
                .unwrap();
            let id = rt
                .start::<common::OrderFlow>(common::order("o-9", 100))
                .await
                .unwrap()
                .instance_id;
            let paid = rt
                .send(
                    Stimulus::new("payment")
                        .key("o-9")
                        .payload(json!({"amount": 100})),
                )
                .await
                .unwrap();
            assert_eq!(paid.resumed.len(), 1, "{label}: {paid:?}");
            let before = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(before.status(), WorkflowStatus::Suspended, "{label}");

            let report = rt
                .send(
                    Stimulus::new("shipped")
                        .key("o-9")
                        .payload(json!({"tracking": 42})),
                )
                .await
                .unwrap();
            assert!(report.resumed.is_empty(), "{label}: {report:?}");
            assert_eq!(report.rejected.len(), 1, "{label}: {report:?}");
            let Rejection::PayloadDecode {
                instance,
                bookmark,
                payload_type,
                message,
                ..
            } = &report.rejected[0]
            else {
                panic!("a payload rejection expected: {:?}", report.rejected);
            };
            assert_eq!(instance, &id, "{label}");
            assert_eq!(payload_type, "Shipment", "{label}");
            assert!(message.contains("ship_action"), "{label}: {message}");
            assert!(!message.contains("::"), "{label}: {message}");
            assert_eq!(bookmark, &before.state.bookmarks()[0].id, "{label}");

            // Nothing committed: same journal, same bookmark, no incident, still waiting.
            let after = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(after.journal.len(), before.journal.len(), "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            assert!(after.state.incidents().is_empty(), "{label}");
            let (stimulus_id, error) = rejected_dead_letter(&rt, label).await;
            assert_eq!(stimulus_id, report.stimulus_id, "{label}");
            assert!(
                error.contains("PayloadDecode") && error.contains("Shipment"),
                "{label}: {error}"
            );
            assert!(!error.contains("::"), "{label}: {error}");

            // A good shipment takes the same bookmark.
            let report = rt
                .send(
                    Stimulus::new("shipped")
                        .key("o-9")
                        .payload(json!({"tracking": "TRK-1"})),
                )
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            let order: common::Order = rt.get_state(&id).await.unwrap().unwrap().data().unwrap();
            assert_eq!(order.tracking.as_deref(), Some("TRK-1"), "{label}");
        });
    }
}

/// What `bill` reads: the payload of the `paid` event before it, as its input (ACT-5).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Bill {
    amount: u64,
}

// RT-22 in a flowchart: the event is untyped and the task after it reads the event's payload
// as its input (`ctx.input::<Bill>()?`). A payload that is not a `Bill` is rejected for the
// instance, which keeps waiting on the same bookmark with no incident; a good one goes on.
#[test]
fn rt22_a_task_that_cannot_read_the_event_payload_as_its_input_rejects_it() {
    const BILLED: &str = r#"{
      "name": "Billed",
      "root": {
        "kind": "flowchart",
        "id": "root",
        "nodes": [
          { "kind": "event", "id": "paid", "event": "paid", "key": "order_id" },
          { "kind": "task", "id": "bill", "function": "bill" }
        ],
        "connections": [ { "source": "paid", "target": "bill" } ]
      }
    }"#;
    for (label, store, _dir) in stores() {
        block_on(async {
            let registry = registry(None).task("bill", |cx: &mut TaskContext<Order>| {
                Box::pin(async move {
                    let bill: Bill = cx.input()?;
                    cx.data_mut().log.push(format!("billed {}", bill.amount));
                    Ok(Outcome::done())
                })
            });
            let rt = Runtime::builder()
                .store(store.clone())
                .register_definition(definition(BILLED, None), registry)
                .build()
                .unwrap();
            let id = rt
                .start_by_name(
                    "Billed",
                    json!({"order_id": "b-1"}),
                    StartOptions::default(),
                )
                .await
                .unwrap()
                .instance_id;
            let before = rt.get_state(&id).await.unwrap().unwrap();
            let report = rt
                .send(
                    Stimulus::new("paid")
                        .key("b-1")
                        .payload(json!({"amount": "ten"})),
                )
                .await
                .unwrap();
            assert_eq!(report.rejected.len(), 1, "{label}: {report:?}");
            let Rejection::PayloadDecode { payload_type, .. } = &report.rejected[0] else {
                panic!("a payload rejection expected: {:?}", report.rejected);
            };
            assert_eq!(payload_type, "Bill", "{label}");
            let after = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            assert!(after.state.incidents().is_empty(), "{label}");
            let (stimulus_id, _) = rejected_dead_letter(&rt, label).await;
            assert_eq!(stimulus_id, report.stimulus_id, "{label}");

            let report = rt
                .send(
                    Stimulus::new("paid")
                        .key("b-1")
                        .payload(json!({"amount": 10})),
                )
                .await
                .unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            assert_eq!(data(&rt, &id).await.log, ["billed 10"], "{label}");
        });
    }
}

// RT-22's boundary: once the run committed inside itself (here before each task), the event is
// consumed in the store, so an action that cannot read its payload faults the instance like
// any permanent error. The stored incident names the type without a Rust path (ST-20).
#[test]
fn rt22_past_a_commit_in_the_run_an_unreadable_payload_faults_with_a_neutral_incident() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = Runtime::builder()
                .store(store.clone())
                .register::<common::OrderFlow>()
                .commit_strategy(workflow_runtime::CommitStrategy::BeforeEachActivity)
                .build()
                .unwrap();
            let id = rt
                .start::<common::OrderFlow>(common::order("o-10", 100))
                .await
                .unwrap()
                .instance_id;
            let paid = rt
                .send(
                    Stimulus::new("payment")
                        .key("o-10")
                        .payload(json!({"amount": 100})),
                )
                .await
                .unwrap();
            assert_eq!(paid.resumed.len(), 1, "{label}: {paid:?}");
            let report = rt
                .send(
                    Stimulus::new("shipped")
                        .key("o-10")
                        .payload(json!({"tracking": 42})),
                )
                .await
                .unwrap();
            assert!(report.rejected.is_empty(), "{label}: {report:?}");
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            assert_eq!(report.resumed[0].status, WorkflowStatus::Faulted, "{label}");
            let incidents = rt.incidents(&id).await.unwrap().unwrap();
            assert_eq!(incidents.len(), 1, "{label}: {incidents:?}");
            let stored = serde_json::to_string(&incidents[0]).unwrap();
            assert!(stored.contains("`Shipment`"), "{label}: {stored}");
            assert!(!stored.contains("::"), "{label}: {stored}");
        });
    }
}

// RT-14: a send naming an instance and a bookmark of another instance is refused before any
// effect, naming both (and the bookmark's owner); nothing is resumed or queued.
#[test]
fn rt14_an_instance_and_a_bookmark_of_another_instance_conflict() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store, None);
            let a = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap()
                .instance_id;
            let b = rt
                .start_by_name("Audit", json!({}), StartOptions::default())
                .await
                .unwrap()
                .instance_id;
            let snapshot = rt.get_state(&a).await.unwrap().unwrap();
            let bookmark = snapshot.state.bookmarks()[0].id.clone();
            let error = rt
                .send(
                    Stimulus::new("order.placed")
                        .instance(b.clone())
                        .bookmark(bookmark.clone()),
                )
                .await
                .unwrap_err();
            assert_eq!(
                error,
                SendError::Routing(RoutingError::ConflictingTargets {
                    instance: b.clone(),
                    bookmark: bookmark.clone(),
                    owner: a.clone(),
                }),
                "{label}"
            );
            for id in [&a, &b] {
                let state = rt.get_state(id).await.unwrap().unwrap();
                assert_eq!(state.status(), WorkflowStatus::Suspended, "{label}");
                assert_eq!(state.state.bookmarks().len(), 1, "{label}");
            }
            let queued = rt
                .dead_letters(DeadLetterFilter::of_reason(DeadLetterReason::Rejected, 10))
                .await
                .unwrap();
            assert!(queued.is_empty(), "{label}");
        });
    }
}

// RT-22 through the bookmark queue (RT-27): a queued stimulus whose payload does not decode
// for the bookmark that appears later is dead-lettered `Rejected` once, leaves the queue, and
// the instance still waits untouched.
#[test]
fn rt22_a_queued_payload_that_does_not_decode_is_dead_lettered_by_the_worker() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let json = DECIDER.replace(
                r#""ports": ["yes", "no"] }"#,
                r#""ports": ["yes", "no"], "look_back": "any" }"#,
            );
            assert_ne!(json, DECIDER);
            let rt = Runtime::builder()
                .store(store.clone())
                .register_definition(
                    definition(&json, None),
                    registry(None).outcome::<Verdict>("Verdict"),
                )
                .build()
                .unwrap();
            let early = rt
                .send(Stimulus::new("verdict").key("o-9").payload(json!(42)))
                .await
                .unwrap();
            assert!(early.inbox_item.is_some(), "{label}: {early:?}");
            let id = rt
                .start_by_name(
                    "Decider",
                    json!({"order_id": "o-9"}),
                    StartOptions::default(),
                )
                .await
                .unwrap()
                .instance_id;
            let before = rt.get_state(&id).await.unwrap().unwrap();
            rt.deliver_inbox().await.unwrap();
            let (stimulus_id, error) = rejected_dead_letter(&rt, label).await;
            assert_eq!(stimulus_id, early.stimulus_id, "{label}");
            assert!(error.contains("Verdict"), "{label}: {error}");
            // Gone from the queue: a second pass rejects nothing more.
            rt.deliver_inbox().await.unwrap();
            rejected_dead_letter(&rt, label).await;
            let after = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            assert_eq!(after.journal.len(), before.journal.len(), "{label}");
        });
    }
}
