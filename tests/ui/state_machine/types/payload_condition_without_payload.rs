#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

fn covers_amount(order: &Order, amount: &u64) -> bool {
    *amount >= order.total
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid, when = covers_amount)]
    New,
    Paid,
}
fn main() {}
