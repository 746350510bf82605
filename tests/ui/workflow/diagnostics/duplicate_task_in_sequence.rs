#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn notify(_ctx: &mut TaskContext<Data>) {}
async fn pay(_ctx: &mut TaskContext<Data>) {}

workflow! {
    pub workflow Twice(Data) = sequence [
        task(notify),
        task(pay),
        task(notify),
    ];
}

fn main() {}
