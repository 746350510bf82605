#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub expense_id: String,
}

async fn pay_out(_ctx: &mut TaskContext<Data>) {}

// ACT-19: declared outcomes are chosen by a payload type, and this event has none.
workflow! {
    pub workflow Expense(Data) {
        decision = event("expense.decision") -> [approved, rejected];
        pay      = task(pay_out);

        start -> decision;
        decision.approved -> pay;
    }
}

fn main() {}
