#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn notify(_ctx: &mut TaskContext<Data>) {}
async fn pay(_ctx: &mut TaskContext<Data>) {}

pub struct Payment {
    pub amount: u64,
}

fn is_big(data: &Data, amount: &String) -> bool {
    data.amount > amount.len() as u64
}

workflow! {
    pub workflow Flow(Data) {
        check = decide(is_big);
        done = task(pay);

        start -> check;
        check.true -> done;
    }
}

fn main() {}
