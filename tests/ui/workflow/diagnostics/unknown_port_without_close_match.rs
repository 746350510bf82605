#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn notify(_ctx: &mut TaskContext<Data>) {}
fn is_big(data: &Data) -> bool {
    data.amount > 100
}

workflow! {
    pub workflow Flow(Data) {
        check = decide(is_big);
        done = task(notify);

        start -> check;
        check.zzz -> done;
    }
}

fn main() {}
