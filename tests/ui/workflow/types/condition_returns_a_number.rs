#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn pay_out(_ctx: &mut TaskContext<Data>) {}

fn how_large(data: &Data) -> u64 {
    data.amount
}

workflow! {
    pub workflow Expense(Data) {
        check = decide(how_large);
        pay = task(pay_out);

        start -> check;
        check.true -> pay;
    }
}

fn main() {}
