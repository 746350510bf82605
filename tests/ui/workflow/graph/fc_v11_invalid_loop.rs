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
        check = decide(is_large);
        a = task(submit_expense);
        b = task(auto_review);

        start -> check;
        check.true -> a -> b;
        check.false -> b;
        b -> a;
    }
}

fn main() {}
