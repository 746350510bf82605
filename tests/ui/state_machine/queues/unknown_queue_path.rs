#![allow(dead_code)]

use workflow_runtime::{state_machine, Queue, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub customer: String,
}

const PAYMENTS: Queue = Queue::new("payments").concurrency(5);

async fn charge(_ctx: &mut TaskContext<Charge>) {}

#[state_machine(data = Charge, initial = Open)]
pub enum Order {
    #[on(pay: event("pay") => Paid, action = charge.queue(PAYMENT))]
    Open,
    Paid,
}

fn main() {}
