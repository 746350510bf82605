#![allow(dead_code)]

use workflow_runtime::{state_machine, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn confirm(_ctx: &mut TaskContext<Order>) {}
async fn undo(_ctx: &mut TaskContext<Order>) {}

#[state_machine(data = Order, initial = New)]
pub enum Flow {
    #[entry(confirm.retry(attempts = 0))]
    #[on(=> Done)]
    New,
    Done,
}

fn main() {}
