#![allow(dead_code)]

use workflow_runtime::{state_machine, Queue, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub customer: String,
}

const PAYMENTS: Queue = Queue::new("payments").concurrency(5);

async fn charge(_ctx: &mut TaskContext<Charge>) {}

#[state_machine(data = Charge, initial = Open, queue = PAYMENT)]
pub enum Order {
    #[on(pay: event("pay") => Paid, action = charge)]
    Open,
    Paid,
}

fn main() {}
