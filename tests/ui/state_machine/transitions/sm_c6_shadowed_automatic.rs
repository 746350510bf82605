#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

fn is_free(order: &Order) -> bool {
    order.total == 0
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(a: => Paid)]
    #[on(b: => Cancelled, when = is_free)]
    New,
    Paid,
    Cancelled,
}
fn main() {}
