//! Loads workflow definitions from JSON, validates them and prints what the validator says.
//!
//! Run with `cargo run -p examples --example definitions`.

use workflow_runtime::model::{Definition, LoadError};

const ORDER: &str = include_str!("../../workflow-model/docs/order.json");
const EXPENSE: &str = include_str!("../../workflow-model/docs/expense.json");

/// The order machine with three mistakes: a misspelled initial state, a transition to a state
/// that does not exist, and a duplicate state.
const BROKEN: &str = r#"{
  "name": "Broken",
  "root": {
    "kind": "state_machine", "id": "root", "initial": "Nwe",
    "states": [ { "name": "New" }, { "name": "Paid" }, { "name": "Paid" } ],
    "transitions": [
      { "name": "pay", "from": "New", "to": "Payd",
        "trigger": { "kind": "event", "id": "pay", "event": "payment" } }
    ]
  }
}"#;

fn main() {
    for (label, text) in [("order", ORDER), ("expense", EXPENSE), ("broken", BROKEN)] {
        match Definition::from_json(text) {
            Ok(definition) => println!(
                "{label}: `{}` is valid, a {} with version {}",
                definition.name,
                definition.root.kind_name(),
                definition.fingerprint()
            ),
            Err(LoadError::Invalid(problems)) => {
                println!("{label}: rejected, {problems}");
            }
            Err(other) => println!("{label}: rejected, {other}"),
        }
    }
}
