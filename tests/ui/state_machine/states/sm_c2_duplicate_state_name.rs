#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid)]
    #[on(settle: event("settled") => Settled)]
    New,
    Paid,
    #[state(name = "Paid")]
    Settled,
}
fn main() {}
