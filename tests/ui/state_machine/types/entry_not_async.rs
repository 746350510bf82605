#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

fn send_confirmation(_ctx: &mut workflow_runtime::TaskContext<Order>) {}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[entry(send_confirmation)]
    #[on(pay: event("payment") => Paid)]
    New,
    Paid,
}
fn main() {}
