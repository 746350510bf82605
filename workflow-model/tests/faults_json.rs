//! JSON load tests for the timer and fault rules (TM-V, FLT-V): each asserts
//! the rule id, the JSON Pointer and the message that `Definition::from_json_value` reports.

#![allow(clippy::unwrap_used, clippy::panic)]

use serde_json::{Value, json};
use workflow_model::{Activity, Decimal, Definition, LoadError, SagaOnFailure};

fn load_problems(value: Value) -> Vec<(String, String, String)> {
    match Definition::from_json_value(value) {
        Ok(_) => Vec::new(),
        Err(LoadError::Invalid(diagnostics)) => diagnostics
            .iter()
            .map(|d| (d.rule.to_owned(), d.at.json_pointer(), d.message.clone()))
            .collect(),
        Err(other) => panic!("expected diagnostics, found {other}"),
    }
}

fn one(rule: &str, at: &str, message: &str) -> Vec<(String, String, String)> {
    vec![(rule.to_owned(), at.to_owned(), message.to_owned())]
}

#[allow(clippy::needless_pass_by_value)]
fn saga_chart(task: Value, on_failure: &str, connect_compensated: bool) -> Value {
    let mut connections = vec![json!({"source": "booking", "port": "done", "target": "ship"})];
    if connect_compensated {
        connections.push(json!({"source": "booking", "port": "compensated", "target": "ship"}));
    }
    json!({
        "name": "Booking",
        "retry": {"max_attempts": 5, "initial_delay_ms": 1000, "max_delay_ms": 60000,
                  "multiplier": 2, "jitter": 0.2, "retry_on": ["unavailable"]},
        "commit_strategy": {"periodic": {"interval_ms": 500}},
        "root": {"kind": "flowchart", "id": "root",
            "nodes": [
                {"kind": "saga", "id": "booking", "on_failure": on_failure,
                 "body": {"kind": "sequence", "id": "steps", "steps": [task]}},
                {"kind": "task", "id": "ship", "function": "ship", "commit": "before_and_after"}
            ],
            "connections": connections}
    })
}

fn charge() -> Value {
    json!({"kind": "task", "id": "charge", "function": "charge",
           "retry": {"max_attempts": 3, "multiplier": 1.5},
           "attempt_timeout_ms": 30000, "compensation": "refund"})
}

#[test]
fn a_saga_with_retries_loads_and_round_trips() {
    let value = saga_chart(charge(), "compensate_then_continue", true);
    let definition = Definition::from_json_value(value.clone()).unwrap();
    let retry = definition.retry.as_ref().unwrap();
    assert_eq!(retry.jitter, Some(Decimal::from_millis(200)));
    let Activity::Flowchart(chart) = &definition.root else {
        panic!("not a flowchart")
    };
    let Activity::Saga(saga) = &chart.nodes[0] else {
        panic!("not a saga")
    };
    assert_eq!(saga.on_failure, SagaOnFailure::CompensateThenContinue);
    let back: Value = serde_json::to_value(&definition).unwrap();
    assert_eq!(back, value);
}

#[test]
fn flt_v6_on_load() {
    assert_eq!(
        load_problems(saga_chart(charge(), "compensate_then_continue", false)),
        one(
            "FLT-V6",
            "/root/nodes/0/on_failure",
            "the `compensated` outcome of `booking` is not connected"
        )
    );
}

#[test]
fn fc_v3_compensated_port_of_a_fault_saga_is_undeclared() {
    let problems = load_problems(saga_chart(charge(), "compensate_then_fault", true));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].0, "FC-V3");
}

#[test]
fn flt_v1_to_v5_on_load() {
    let mut task = charge();
    task["retry"] = json!({"max_attempts": 0, "initial_delay_ms": 600000, "max_delay_ms": 60000,
                           "multiplier": 0.5, "jitter": -0.1});
    task["attempt_timeout_ms"] = json!(0);
    let value =
        json!({"name": "Demo", "root": {"kind": "sequence", "id": "root", "steps": [task]}});
    let at = "/root/steps/0";
    let expected: Vec<(String, String, String)> = [
        (
            "FLT-V1",
            "retry/max_attempts",
            "retry policy needs at least 1 attempt",
        ),
        (
            "FLT-V2",
            "retry/initial_delay_ms",
            "initial retry delay `10m` exceeds the maximum delay `1m`",
        ),
        (
            "FLT-V3",
            "retry/multiplier",
            "backoff multiplier must be at least 1",
        ),
        ("FLT-V3", "retry/jitter", "jitter must be between 0 and 1"),
        (
            "FLT-V4",
            "attempt_timeout_ms",
            "attempt timeout must be greater than zero",
        ),
        (
            "FLT-V5",
            "compensation",
            "compensation of `charge` can never run; `charge` is not inside a saga scope",
        ),
    ]
    .iter()
    .map(|(r, p, m)| ((*r).to_owned(), format!("{at}/{p}"), (*m).to_owned()))
    .collect();
    assert_eq!(load_problems(value), expected);
}

#[test]
fn tm_v1_to_v4_on_load() {
    let value = json!({"name": "Demo", "root": {"kind": "flowchart", "id": "root",
    "nodes": [
        {"kind": "cron", "id": "tick", "expression": "0 25 * * *", "time_zone": "UTX"},
        {"kind": "event", "id": "approval", "event": "approved", "deadline_ms": 0},
        {"kind": "task", "id": "ship", "function": "ship"}
    ],
    "connections": [
        {"source": "tick", "target": "approval"},
        {"source": "approval", "target": "ship"}
    ]}});
    // Diagnostics come sorted by the validator's order: flowchart rules first.
    let expected: Vec<(String, String, String)> = [
        ("TM-V3", "/root/nodes/1/deadline_ms", "the `timeout` outcome of `approval` is not connected; connect it or remove the deadline"),
        ("TM-V1", "/root/nodes/0/expression", "invalid cron expression `0 25 * * *`; hour `25` is out of range 0-23"),
        ("TM-V2", "/root/nodes/0/time_zone", "unknown time zone `UTX`; did you mean `UTC`?"),
        ("TM-V4", "/root/nodes/1/deadline_ms", "deadline of `approval` must be greater than zero"),
    ]
    .iter()
    .map(|(r, p, m)| ((*r).to_owned(), (*p).to_owned(), (*m).to_owned()))
    .collect();
    assert_eq!(load_problems(value), expected);
}
