//! JSON load tests for the flowchart rules (FC-V1 to FC-V18): each asserts the
//! rule id, the message and the JSON Pointer of what `Definition::from_json` reports.

// The helpers below are test code too; clippy only recognises `#[test]` fns as such.
#![allow(clippy::unwrap_used, clippy::panic)]

use serde_json::{Value, json};
use workflow_model::{Definition, LoadError};

const EXPENSE: &str = include_str!("../docs/expense.json");

/// The good flowchart of the docs, as a JSON value, after `edit`.
fn expense_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut value: Value = serde_json::from_str(EXPENSE).unwrap();
    edit(&mut value);
    value
}

/// `(rule, pointer, message)` of every problem reported on load.
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

fn assert_problems(value: Value, expected: &[(&str, &str, &str)]) {
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|&(r, a, m)| (r.to_owned(), a.to_owned(), m.to_owned()))
        .collect();
    assert_eq!(load_problems(value), expected);
}

#[test]
fn the_expense_flowchart_loads() {
    assert_problems(expense_with(|_| {}), &[]);
}

#[test]
fn fc_v1_duplicate_node() {
    let value = expense_with(|v| {
        v["root"]["nodes"][4]["id"] = json!("pay");
        v["root"]["connections"][2]["target"] = json!("pay");
        v["root"]["connections"][5]["target"] = json!("pay");
    });
    assert_problems(
        value,
        &[
            ("FC-V1", "/root/nodes/3/id", "duplicate node `pay`"),
            ("FC-V1", "/root/nodes/4/id", "duplicate node `pay`"),
        ],
    );
}

#[test]
fn fc_v2_unknown_node_in_a_connection_and_the_start() {
    let value = expense_with(|v| {
        v["root"]["start"] = json!("sbumit");
        v["root"]["connections"][1]["target"] = json!("pya");
    });
    let problems = load_problems(value.clone());
    assert_eq!(
        problems,
        [
            (
                "FC-V2".to_owned(),
                "/root/start".to_owned(),
                "unknown node `sbumit`; did you mean `submit`?".to_owned()
            ),
            (
                "FC-V2".to_owned(),
                "/root/connections/1/target".to_owned(),
                "unknown node `pya`; did you mean `pay`?".to_owned()
            ),
        ]
    );
    let err = Definition::from_json_value(value).unwrap_err();
    assert_eq!(
        err.to_string(),
        "2 problems in the definition\n  \
         FC-V2 at /root/start: unknown node `sbumit`; did you mean `submit`?\n  \
         FC-V2 at /root/connections/1/target: unknown node `pya`; did you mean `pay`?"
    );
    let suggestions: Vec<Option<String>> = err
        .diagnostics()
        .unwrap()
        .iter()
        .map(|d| d.suggestion.clone())
        .collect();
    assert_eq!(
        suggestions,
        [Some("submit".to_owned()), Some("pay".to_owned())]
    );
}

#[test]
fn fc_v3_unknown_port() {
    let value = expense_with(|v| {
        v["root"]["connections"][4]["port"] = json!("approve");
        v["root"]["connections"][5]["port"] = json!("nope");
    });
    assert_problems(
        value,
        &[
            (
                "FC-V3",
                "/root/connections/4/port",
                "node `manager` has no outcome `approve`; did you mean `approved`?",
            ),
            (
                "FC-V3",
                "/root/connections/5/port",
                "node `manager` has no outcome `nope`; expected one of `approved`, `rejected`",
            ),
        ],
    );
}

#[test]
fn fc_v6_more_than_one_start() {
    let value = expense_with(|v| v["root"]["start"] = json!(["submit", "review"]));
    assert_problems(
        value,
        &[
            (
                "FC-V6",
                "/root/start/0",
                "more than one start: `submit` and `review`",
            ),
            (
                "FC-V6",
                "/root/start/1",
                "more than one start: `submit` and `review`",
            ),
        ],
    );
}

#[test]
fn fc_v7_no_start_can_be_chosen() {
    let value = expense_with(|v| {
        let root = v["root"].as_object_mut().unwrap();
        root.remove("start");
        root["nodes"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "kind": "task", "id": "audit", "function": "audit" }));
        root["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "source": "audit", "target": "pay" }));
    });
    assert_problems(
        value,
        &[(
            "FC-V7",
            "/root",
            "cannot choose a start node: `submit` and `audit` have no inbound connection; add `start -> <node>`",
        )],
    );
    // Without `start`, the one node without inbound connections is the start (FC-6 step 5).
    let value = expense_with(|v| {
        v["root"].as_object_mut().unwrap().remove("start");
    });
    assert_problems(value, &[]);
}

#[test]
fn fc_v8_unreachable_node() {
    let value = expense_with(|v| {
        v["root"]["nodes"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "kind": "task", "id": "audit", "function": "audit" }));
    });
    assert_problems(
        value,
        &[(
            "FC-V8",
            "/root/nodes/5/id",
            "node `audit` is unreachable from the start",
        )],
    );
}

#[test]
fn fc_v10_terminal_node_with_outbound_connection() {
    let value = expense_with(|v| {
        let nodes = v["root"]["nodes"].as_array_mut().unwrap();
        nodes.push(json!({ "kind": "join", "id": "merge", "mode": "all" }));
        nodes.push(json!({ "kind": "end", "id": "done" }));
        let connections = v["root"]["connections"].as_array_mut().unwrap();
        connections.push(json!({ "source": "pay", "target": "merge" }));
        connections.push(json!({ "source": "reject", "target": "done" }));
        connections.push(json!({ "source": "done", "target": "merge" }));
    });
    assert_problems(
        value,
        &[(
            "FC-V10",
            "/root/connections/8/source",
            "end node `done` cannot have outbound connections",
        )],
    );
}

#[test]
fn fc_v11_invalid_loop() {
    let value = expense_with(|v| {
        v["root"]["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "source": "reject", "target": "manager" }));
    });
    assert_problems(
        value,
        &[(
            "FC-V11",
            "/root/connections/5",
            "invalid loop: `manager.rejected -> reject` returns to `reject`, but `manager` can be reached without passing through `reject`",
        )],
    );
}

#[test]
fn fc_v12_loop_that_never_ends() {
    let value = json!({
        "name": "Spin",
        "root": { "kind": "flowchart", "id": "root", "start": "submit",
            "nodes": [
                { "kind": "task", "id": "submit", "function": "submit" },
                { "kind": "if", "id": "check", "condition": "ready" },
                { "kind": "if", "id": "route", "condition": "urgent" },
                { "kind": "end", "id": "done" }
            ],
            "connections": [
                { "source": "submit", "target": "check" },
                { "source": "check", "port": "true", "target": "route" },
                { "source": "check", "port": "false", "target": "done" },
                { "source": "route", "port": "true", "target": "check" },
                { "source": "route", "port": "false", "target": "done" }
            ] }
    });
    assert_problems(
        value,
        &[(
            "FC-V12",
            "/root/connections/3",
            "loop `check -> route -> check` can neither wait nor change data, so it would never end",
        )],
    );
}

#[test]
fn fc_v13_workflow_without_nodes() {
    let value = json!({ "name": "Expense", "root": { "kind": "flowchart", "id": "root" } });
    assert_problems(
        value,
        &[("FC-V13", "/root", "workflow `Expense` has no nodes")],
    );
}

#[test]
fn fc_v14_trigger_with_forward_inbound_connection() {
    let value = expense_with(|v| v["root"]["nodes"][2]["trigger"] = json!(true));
    assert_problems(
        value,
        &[(
            "FC-V14",
            "/root/connections/3/target",
            "trigger `manager` must be an entry point of the top-level flowchart; only a loop may lead back to it",
        )],
    );
}

#[test]
fn fc_v15_fork_without_branches() {
    let value = expense_with(|v| {
        v["root"]["nodes"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "kind": "fork", "id": "split", "branches": [] }));
        v["root"]["connections"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "source": "pay", "target": "split" }));
    });
    assert_problems(
        value,
        &[(
            "FC-V15",
            "/root/nodes/5/branches",
            "fork `split` has no branches",
        )],
    );
}
