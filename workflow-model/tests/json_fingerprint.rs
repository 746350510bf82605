//! JSON loading (shape errors with JSON Pointers, never a panic), round trips, and the
//! ENG-44 fingerprint's stability.

use workflow_model::{
    Activity, Connection, Definition, Event, Flowchart, LoadError, State, StateMachine, Task,
    Transition,
};

const ORDER: &str = include_str!("../docs/order.json");
const EXPENSE: &str = include_str!("../docs/expense.json");

fn problems(text: &str) -> Vec<(String, &'static str, String)> {
    match Definition::from_json(text) {
        Ok(_) => Vec::new(),
        Err(LoadError::Invalid(d)) => d
            .iter()
            .map(|d| (d.at.json_pointer(), d.rule, d.message.clone()))
            .collect(),
        Err(e @ LoadError::Syntax { .. }) => vec![(String::new(), "syntax", e.to_string())],
    }
}

fn order_machine() -> StateMachine {
    let mut pay = Transition::new("New", "Paid");
    pay.name = Some("pay".into());
    pay.trigger = Some(Event::new("pay", "payment").with_key("order_id").into());
    let mut ship = Transition::new("Paid", "Shipped");
    ship.name = Some("ship".into());
    ship.trigger = Some(Event::new("ship", "shipped").with_key("order_id").into());
    StateMachine {
        id: "root".into(),
        initial: "New".into(),
        states: vec![State::new("New"), State::new("Paid"), State::new("Shipped")],
        transitions: vec![pay, ship],
    }
}

#[test]
fn json_round_trip_keeps_the_definition() {
    for text in [ORDER, EXPENSE] {
        let definition = Definition::from_json(text).unwrap();
        let again = Definition::from_json(&definition.to_json_pretty()).unwrap();
        assert_eq!(again, definition);
        assert_eq!(again.fingerprint(), definition.fingerprint());
    }
}

#[test]
fn fingerprint_is_stable_for_the_same_input_eng_44() {
    let a = Definition::from_json(ORDER).unwrap();
    let b = Definition::from_json(ORDER).unwrap();
    assert_eq!(a.fingerprint(), b.fingerprint());
    // A known value: the same definition hashes the same on every machine and build. If this
    // changes, every stored instance would be pinned to a version nobody registers.
    let by_hand = Definition::new("Order", order_machine());
    assert_eq!(
        by_hand.fingerprint(),
        "9040797d98860c98aa8d00e45a4d0a89f728c81332cedba0b87bd9c822c6198e"
    );
}

#[test]
fn reordering_transitions_changes_the_fingerprint_eng_44() {
    let original = Definition::new("Order", order_machine());
    let mut reordered = original.clone();
    let Activity::StateMachine(machine) = &mut reordered.root else {
        unreachable!()
    };
    machine.transitions.reverse();
    assert_ne!(original.fingerprint(), reordered.fingerprint());
}

#[test]
fn graph_changes_change_the_fingerprint_and_presentation_does_not_eng_44() {
    let original = Definition::new("Order", order_machine());
    let fingerprint = original.fingerprint();

    let mut renamed_target = original.clone();
    let Activity::StateMachine(m) = &mut renamed_target.root else {
        unreachable!()
    };
    m.transitions[1].to = "Paid".into();
    assert_ne!(renamed_target.fingerprint(), fingerprint);

    let mut other_key = original.clone();
    let Activity::StateMachine(m) = &mut other_key.root else {
        unreachable!()
    };
    m.transitions[0].trigger = Some(Event::new("pay", "payment").with_key("customer_id").into());
    assert_ne!(other_key.fingerprint(), fingerprint);

    let mut documented = original.clone();
    documented.description = Some("An order".into());
    let Activity::StateMachine(m) = &mut documented.root else {
        unreachable!()
    };
    m.states[0].display_name = Some("Brand new".into());
    m.transitions[0].display_name = Some("Pay the order".into());
    assert_eq!(documented.fingerprint(), fingerprint);
}

#[test]
fn connection_changes_change_the_fingerprint_eng_44() {
    let chart = |connections: Vec<Connection>| {
        Definition::new(
            "Chart",
            Flowchart {
                id: "root".into(),
                start: vec!["a".into()],
                nodes: vec![Task::new("a", "fa").into(), Task::new("b", "fb").into()],
                connections,
            },
        )
    };
    let one = chart(vec![Connection::new("a", "done", "b")]);
    let other = chart(vec![Connection::new("a", "failed", "b")]);
    assert_ne!(one.fingerprint(), other.fingerprint());
}

#[test]
fn syntax_errors_say_where() {
    let err = Definition::from_json("{\n  \"name\": \"x\",\n  oops\n}").unwrap_err();
    match err {
        LoadError::Syntax { line, column, .. } => assert_eq!((line, column), (3, 3)),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn every_shape_problem_is_listed_with_its_json_pointer() {
    let text = r#"{
      "name": "Chart",
      "root": { "kind": "flowchart", "id": "root", "start": "a",
        "nodes": [
          { "kind": "task", "id": "a" },
          { "kind": "delya", "id": "b", "duration_ms": 5 },
          { "kind": "event", "id": "c", "event": "go", "trigers": true },
          { "kind": "task", "id": "d", "function": "fd" }
        ],
        "connections": [ { "source": "a", "target": "d" }, { "source": "d" } ] }
    }"#;
    let found = problems(text);
    assert_eq!(
        found,
        vec![
            (
                "/root/nodes/0".to_owned(),
                "DEF-1",
                "missing field `function`".to_owned()
            ),
            (
                "/root/nodes/1/kind".to_owned(),
                "FC-V17",
                "unknown activity kind `delya`; did you mean `delay`?".to_owned()
            ),
            (
                "/root/nodes/2".to_owned(),
                "DEF-1",
                "unknown field `trigers`, expected one of `id`, `event`, `key`, `payload`, \
                 `trigger`, `ports`, `deadline_ms`, `look_back`, `assign`"
                    .to_owned()
            ),
            (
                "/root/connections/1".to_owned(),
                "DEF-1",
                "missing field `target`".to_owned()
            ),
        ]
    );
}

#[test]
fn state_machine_lists_report_the_element() {
    let text = r#"{ "name": "M", "root": { "kind": "state_machine", "id": "root", "initial": "A",
        "states": [ { "name": "A" }, { "nam": "B" } ],
        "transitions": [ { "from": "A", "to": 3 } ] } }"#;
    let found = problems(text);
    let pointers: Vec<&str> = found.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(pointers, ["/root/states/1/nam", "/root/transitions/0/to"]);
    assert!(found[0].2.starts_with("unknown field `nam`"), "{found:?}");
    assert!(
        found[1].2.starts_with("invalid type: integer `3`"),
        "{found:?}"
    );
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "",
        "null",
        "[]",
        "42",
        r#"{"name": 1}"#,
        r#"{"name": "x", "root": null}"#,
        r#"{"name": "x", "root": {"kind": 7}}"#,
        r#"{"name": "x", "root": {"id": "root"}}"#,
        r#"{"name": "x", "root": {"kind": "sequence", "id": "root", "steps": [1, {"kind": []}]}}"#,
        r#"{"name": "x", "root": {"kind": "flowchart", "id": "root", "nodes": {"a": 1}}}"#,
        r#"{"name": "x", "root": {"kind": "state_machine", "id": "root", "initial": "A", "states": [{"name": "A", "entry": {"kind": "nope"}}]}}"#,
    ];
    for input in inputs {
        assert!(Definition::from_json(input).is_err(), "accepted {input}");
    }
}

#[test]
fn sibling_ids_are_unique_in_a_sequence_fc_1() {
    let text = r#"{ "name": "S", "root": { "kind": "sequence", "id": "root", "steps": [
        { "kind": "task", "id": "a", "function": "fa" },
        { "kind": "task", "id": "b", "function": "fb" },
        { "kind": "task", "id": "a", "function": "fc" } ] } }"#;
    assert_eq!(
        problems(text),
        vec![
            (
                "/root/steps/0/id".to_owned(),
                "FC-V1",
                "duplicate node `a`".to_owned()
            ),
            (
                "/root/steps/2/id".to_owned(),
                "FC-V1",
                "duplicate node `a`".to_owned()
            ),
        ]
    );
}
