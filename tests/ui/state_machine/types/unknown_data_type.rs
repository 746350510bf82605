#![allow(dead_code)]

use workflow_runtime::state_machine;

async fn send_confirmation(_ctx: &mut workflow_runtime::TaskContext<Order>) {}

#[state_machine(data = Ordr, initial = New)]
pub enum OrderFlow {
    #[entry(send_confirmation)]
    #[on(pay: event("payment") => Paid)]
    New,
    Paid,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order;

fn main() {}
