//! A flowchart declared with `workflow!` is the same definition, with the same fingerprint, as
//! the same flowchart loaded from JSON.

use workflow_runtime::model::{Activity, Definition, diagram};
use workflow_runtime::{ChooseOutcome, TaskContext, Workflow, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct ExpenseData {
    expense_id: String,
    amount: u64,
}

#[derive(serde::Deserialize)]
pub struct Decision {
    pub approved: bool,
}

impl ChooseOutcome for Decision {
    fn outcome(&self) -> &str {
        if self.approved {
            "approved"
        } else {
            "rejected"
        }
    }
}

async fn submit_expense(_ctx: &mut TaskContext<ExpenseData>) {}
async fn auto_review(_ctx: &mut TaskContext<ExpenseData>) {}
async fn pay_out(_ctx: &mut TaskContext<ExpenseData>) {}
async fn notify_rejected(_ctx: &mut TaskContext<ExpenseData>) {}

workflow! {
    /// Expense approval.
    pub workflow Expense(ExpenseData) {
        submit  = task(submit_expense);
        review  = task(auto_review) -> [approved, rejected, manual];
        manager = event::<Decision>("expense.decision").key(expense_id) -> [approved, rejected];
        pay     = task(pay_out);
        reject  = task(notify_rejected);

        start -> submit -> review;
        review.approved -> pay;   review.rejected -> reject;   review.manual -> manager;
        manager.approved -> pay;  manager.rejected -> reject;
    }
}

/// The expense flowchart of the model's docs, the JSON format's reference example.
const EXPENSE_JSON: &str = include_str!("../../workflow-model/docs/expense.json");

#[test]
fn the_macro_and_the_json_give_the_same_definition_and_fingerprint() {
    let from_json = Definition::from_json(EXPENSE_JSON).unwrap();
    assert_eq!(*Expense::definition(), from_json);
    assert_eq!(Expense::version(), from_json.fingerprint());
    assert_eq!(Expense::definition().fingerprint(), from_json.fingerprint());
    assert_eq!(Expense::mermaid(), diagram::mermaid(&from_json));
    assert_eq!(Expense::dot(), diagram::dot(&from_json));
}

#[test]
fn the_generated_json_round_trips() {
    let json = Expense::definition().to_json_pretty();
    assert_eq!(
        Definition::from_json(&json).unwrap(),
        *Expense::definition()
    );
}

#[test]
fn the_registry_has_every_task_under_its_json_name() {
    let registry = Expense::registry();
    let Activity::Flowchart(chart) = &Expense::definition().root else {
        panic!("a flowchart")
    };
    for node in &chart.nodes {
        if let Activity::Task(task) = node {
            assert!(registry.has_task(&task.function), "{}", task.function);
        }
    }
    assert_eq!(Expense::name(), "Expense");
    assert_eq!(
        Expense::NODES,
        ["submit", "review", "manager", "pay", "reject"]
    );
    assert_eq!(Expense::NODE_MANAGER, "manager");
}

#[test]
fn a_changed_graph_changes_the_fingerprint() {
    let changed = EXPENSE_JSON.replace(
        r#"{ "source": "manager", "port": "rejected", "target": "reject" }"#,
        r#"{ "source": "manager", "port": "rejected", "target": "pay" }"#,
    );
    let changed = Definition::from_json(&changed).unwrap();
    assert_ne!(Expense::version(), changed.fingerprint());
}

async fn start_step(_ctx: &mut TaskContext<ExpenseData>) {}
async fn continue_step(_ctx: &mut TaskContext<ExpenseData>) {}

workflow! {
    /// Waits between two steps.
    pub workflow Deferred(ExpenseData) = sequence [
        task(start_step),
        after(secs(5)),
        then = task(continue_step),
    ];
}

#[test]
fn the_sequence_form_equals_its_json() {
    let json = r#"{
      "name": "Deferred",
      "description": "Waits between two steps.",
      "root": { "kind": "sequence", "id": "root", "steps": [
        { "kind": "task", "id": "start_step", "function": "start_step", "ports": ["done"] },
        { "kind": "delay", "id": "after_1", "duration_ms": 5000 },
        { "kind": "task", "id": "then", "function": "continue_step", "ports": ["done"] }
      ] }
    }"#;
    let from_json = Definition::from_json(json).unwrap();
    assert_eq!(*Deferred::definition(), from_json);
    assert_eq!(Deferred::version(), from_json.fingerprint());
    assert!(Deferred::registry().has_task("continue_step"));
}
