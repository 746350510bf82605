#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn submit_expense(_ctx: &mut TaskContext<Data>) {}
async fn auto_review(_ctx: &mut TaskContext<Data>) {}
async fn pay_out(_ctx: &mut TaskContext<Data>) {}
fn is_large(data: &Data) -> bool {
    data.amount > 1_000
}

workflow! {
    pub workflow Expense(Data) {
        start = task(submit_expense);
        pay = task(pay_out);

        start -> pay;
    }
}

fn main() {}
