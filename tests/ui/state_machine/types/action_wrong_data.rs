#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

pub struct Invoice;

async fn record_payment(_ctx: &mut workflow_runtime::TaskContext<Invoice>) {}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid, action = record_payment)]
    New,
    Paid,
}
fn main() {}
