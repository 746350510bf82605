#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid, id = "1st-payment")]
    New,
    Paid,
}
fn main() {}
