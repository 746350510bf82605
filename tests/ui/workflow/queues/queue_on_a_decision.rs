#![allow(dead_code)]

use workflow_runtime::{workflow, Queue, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub customer: String,
}

const PAYMENTS: Queue = Queue::new("payments").concurrency(5);

async fn charge(_ctx: &mut TaskContext<Charge>) {}

workflow! {
    pub workflow Pay(Charge) {
        ok = decide(is_ok).queue(PAYMENTS);
        pay = task(charge);

        start -> ok;
        ok.true -> pay;
    }
}

fn is_ok(_data: &Charge) -> bool {
    true
}

fn main() {}
