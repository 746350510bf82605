//! Property tests: whatever text or value it is given, the loader and the validator answer with
//! a definition or with diagnostics, never a panic; what loads round-trips, has a fingerprint
//! and draws.
//!
//! The case counts are kept small so the suite runs in seconds; `PROPTEST_CASES` raises them
//! for a longer hunt.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use workflow_model::{Activity, Definition, diagram, validate};

const ORDER: &str = include_str!("../docs/order.json");
const EXPENSE: &str = include_str!("../docs/expense.json");

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        // A failure is reported with its input; no files are written next to the sources.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Everything a loaded definition must survive: validation again, the JSON round trip, the
/// fingerprint and both diagrams.
fn check_loaded(definition: &Definition) -> Result<(), TestCaseError> {
    prop_assert_eq!(validate(definition), Ok(()));
    let again = Definition::from_json(&definition.to_json_pretty());
    prop_assert!(again.is_ok(), "round trip failed: {:?}", again.err());
    prop_assert_eq!(&again.ok(), &Some(definition.clone()));
    prop_assert_eq!(definition.fingerprint().len(), 64);
    prop_assert!(diagram::mermaid(definition).ends_with('\n'));
    let dot = diagram::dot(definition);
    prop_assert!(dot.ends_with("}\n"), "{}", dot);
    Ok(())
}

/// Loads `text`; every error is typed and displays.
fn load(text: &str) -> Result<(), TestCaseError> {
    match Definition::from_json(text) {
        Ok(definition) => check_loaded(&definition)?,
        Err(err) => {
            let shown = err.to_string();
            prop_assert!(!shown.is_empty());
            if let Some(diagnostics) = err.diagnostics() {
                prop_assert!(!diagnostics.is_empty());
            }
        }
    }
    Ok(())
}

/// Loads a JSON value; a value that loads is a valid definition.
fn load_value(value: Value) -> Result<(), TestCaseError> {
    match Definition::from_json_value(value) {
        Ok(definition) => check_loaded(&definition)?,
        Err(err) => prop_assert!(err.diagnostics().is_some_and(|d| !d.is_empty())),
    }
    Ok(())
}

/// Bits of JSON and of the model's vocabulary, spliced into valid definitions.
const SNIPPETS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "true",
    "-1",
    "0",
    "1e400",
    "-0.5",
    "18446744073709551616",
    "\"kind\"",
    "\"task\"",
    "\"flowchart\"",
    "\"state_machine\"",
    "\"id\"",
    "\"root\"",
    "\"name\"",
    "\"New\"",
    "\"Nwe\"",
    "\"wf.x\"",
    "\"\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "{\"kind\": \"fork\", \"id\": \"f\", \"branches\": []}",
    "{\"kind\": \"join\", \"id\": \"j\", \"mode\": \"any\"}",
    "\"é\"",
];

/// One edit of a text: delete a range, insert a snippet, duplicate a range.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    Duplicate(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..40usize).prop_map(|(at, len)| Edit::Delete(at, len)),
        (any::<usize>(), 0..SNIPPETS.len()).prop_map(|(at, i)| Edit::Insert(at, i)),
        (any::<usize>(), 1..200usize).prop_map(|(at, len)| Edit::Duplicate(at, len)),
    ]
}

/// The largest char boundary at or before `at` (modulo the length).
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_owned();
    for edit in edits {
        match *edit {
            Edit::Delete(at, len) => {
                let start = boundary(&text, at);
                let end = boundary(&text, start + len.min(text.len() - start));
                text.replace_range(start..end, "");
            }
            Edit::Insert(at, i) => {
                let at = boundary(&text, at);
                text.insert_str(at, SNIPPETS.get(i).copied().unwrap_or_default());
            }
            Edit::Duplicate(at, len) => {
                let start = boundary(&text, at);
                let end = boundary(&text, start + len.min(text.len() - start));
                let copy = text.get(start..end).unwrap_or_default().to_owned();
                text.insert_str(end, &copy);
            }
        }
    }
    text
}

/// Names: valid ones, near misses of each other, reserved and invalid ones.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "New", "Nwe", "Paid", "Done", "a", "b", "c", "done", "true", "false", "default",
            "timeout", "ok", "x_1", "root",
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec!["", "1bad", "wf.x", "a b", "é", "new\n"])
            .prop_map(str::to_owned),
        1 => "[a-zA-Z_][a-zA-Z0-9_]{0,12}",
    ]
}

/// A JSON value of arbitrary shape, with the model's field names as keys.
fn any_value() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "kind",
        "id",
        "name",
        "root",
        "initial",
        "states",
        "transitions",
        "from",
        "to",
        "trigger",
        "nodes",
        "connections",
        "source",
        "target",
        "port",
        "steps",
        "event",
        "function",
        "duration_ms",
        "branches",
        "mode",
        "body",
        "condition",
        "retry",
        "max_attempts",
        "entry",
        "exit",
        "start",
        "ports",
        "cases",
        "label",
        "unknown",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        prop::sample::select(Activity::KINDS.to_vec()).prop_map(|k| json!(k)),
        name().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6).prop_map(|entries| Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect()
            )),
        ]
    })
}

/// A well-shaped activity of a common kind, with random names and references, nested up to
/// `depth`.
fn activity() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        (name(), name()).prop_map(|(id, f)| json!({"kind": "task", "id": id, "function": f})),
        (name(), name()).prop_map(|(id, e)| json!({"kind": "event", "id": id, "event": e})),
        (name(), 0..100_000u64)
            .prop_map(|(id, ms)| json!({"kind": "delay", "id": id, "duration_ms": ms})),
        (name(), name()).prop_map(|(id, c)| json!({"kind": "if", "id": id, "condition": c})),
        (name(), prop::collection::vec(name(), 0..3))
            .prop_map(|(id, b)| json!({"kind": "fork", "id": id, "branches": b})),
        (name(), prop::sample::select(vec!["all", "any"]))
            .prop_map(|(id, m)| json!({"kind": "join", "id": id, "mode": m})),
        name().prop_map(|id| json!({"kind": "end", "id": id})),
        name().prop_map(|id| json!({"kind": "start", "id": id})),
        (name(), name()).prop_map(|(id, c)| json!({"kind": "fault", "id": id, "code": c})),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            (name(), prop::collection::vec(inner.clone(), 0..5))
                .prop_map(|(id, steps)| json!({"kind": "sequence", "id": id, "steps": steps})),
            (name(), name(), inner.clone()).prop_map(
                |(id, c, body)| json!({"kind": "while", "id": id, "condition": c, "body": body})
            ),
            flowchart(inner.clone()),
            state_machine(inner),
        ]
    })
}

fn flowchart(node: impl Strategy<Value = Value> + Clone) -> impl Strategy<Value = Value> {
    (
        name(),
        prop::collection::vec(node, 1..6),
        prop::collection::vec((name(), name(), name()), 0..8),
        prop::option::of(name()),
    )
        .prop_map(|(id, nodes, connections, start)| {
            let connections: Vec<Value> = connections
                .into_iter()
                .map(|(s, p, t)| json!({"source": s, "port": p, "target": t}))
                .collect();
            let mut chart = json!({"kind": "flowchart", "id": id, "nodes": nodes,
                "connections": connections});
            if let (Some(start), Some(object)) = (start, chart.as_object_mut()) {
                object.insert("start".into(), json!(start));
            }
            chart
        })
}

fn state_machine(slot: impl Strategy<Value = Value> + Clone) -> impl Strategy<Value = Value> {
    let state = (name(), prop::option::of(slot.clone())).prop_map(|(name, entry)| {
        let mut state = Map::new();
        state.insert("name".into(), json!(name));
        if let Some(entry) = entry {
            state.insert("entry".into(), entry);
        }
        Value::Object(state)
    });
    let transition = (
        name(),
        name(),
        prop::option::of(slot),
        prop::option::of(name()),
    )
        .prop_map(|(from, to, trigger, condition)| {
            let mut transition = Map::new();
            transition.insert("from".into(), json!(from));
            transition.insert("to".into(), json!(to));
            if let Some(trigger) = trigger {
                transition.insert("trigger".into(), trigger);
            }
            if let Some(condition) = condition {
                transition.insert("condition".into(), json!(condition));
            }
            Value::Object(transition)
        });
    (
        name(),
        name(),
        prop::collection::vec(state, 0..5),
        prop::collection::vec(transition, 0..6),
    )
        .prop_map(|(id, initial, states, transitions)| {
            json!({"kind": "state_machine", "id": id, "initial": initial, "states": states,
                "transitions": transitions})
        })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn random_bytes_never_panic_the_loader(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        load(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn edited_definitions_never_panic_the_loader(
        which in any::<bool>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let text = apply(if which { ORDER } else { EXPENSE }, &edits);
        load(&text)?;
    }

    #[test]
    fn values_of_any_shape_never_panic_the_loader(root in any_value(), top in any_value()) {
        let mut value = top;
        if let Some(object) = value.as_object_mut() {
            object.insert("root".into(), root);
            object.entry("name").or_insert_with(|| json!("Demo"));
        }
        load_value(value)?;
    }

    #[test]
    fn well_shaped_definitions_never_panic_the_validator(root in activity(), name in name()) {
        load_value(json!({"name": name, "root": root}))?;
    }
}

/// The generators above do reach valid definitions, so the round-trip checks are exercised:
/// with a fixed seed, a fair share of the well-shaped definitions loads.
#[test]
fn the_well_shaped_generator_reaches_valid_definitions() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = activity();
    let mut valid = 0;
    for _ in 0..400 {
        let root = strategy
            .new_tree(&mut runner)
            .expect("a value from the generator")
            .current();
        if Definition::from_json_value(json!({"name": "Demo", "root": root})).is_ok() {
            valid += 1;
        }
    }
    assert!(
        valid >= 10,
        "only {valid} of 400 generated definitions are valid"
    );
}
