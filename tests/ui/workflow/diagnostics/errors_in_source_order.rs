#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn notify(_ctx: &mut TaskContext<Data>) {}
async fn pay(_ctx: &mut TaskContext<Data>) {}

workflow! {
    pub workflow Flow(Data) {
        first = task(notify);
        second = task(pay);

        start -> first -> secnd;
        second = tsak(pay);
    }
}

fn main() {}
