#![allow(dead_code)]

use workflow_runtime::{workflow, Queue, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub customer: String,
}

const PAYMENTS: Queue = Queue::new("payments").concurrency(5);

async fn charge(_ctx: &mut TaskContext<Charge>) {}

workflow! {
    pub workflow Pay(Charge) = sequence [event("paid").queue(PAYMENTS), task(charge)];
}

fn main() {}
