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

fn is_small(order: &Order) -> bool {
    order.total < 10
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(=> Paid, when = is_free, when = is_small)]
    New,
    Paid,
}
fn main() {}
