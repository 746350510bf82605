#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub expense_id: String,
}

// ACT-V8: the event declares its outcomes, but `Decision` does not implement `ChooseOutcome`.
#[derive(serde::Deserialize)]
pub struct Decision {
    pub approved: bool,
}

async fn pay_out(_ctx: &mut TaskContext<Data>) {}
async fn notify_rejected(_ctx: &mut TaskContext<Data>) {}

workflow! {
    pub workflow Expense(Data) {
        decision = event::<Decision>("expense.decision").key(expense_id) -> [approved, rejected];
        pay      = task(pay_out);
        reject   = task(notify_rejected);

        start -> decision;
        decision.approved -> pay;
        decision.rejected -> reject;
    }
}

fn main() {}
