#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[state_machine(initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid)]
    New,
    Paid,
}
fn main() {}
