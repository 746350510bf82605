#![allow(dead_code)]

use workflow_runtime::{TaskContext, state_machine};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

async fn confirm(ctx: &mut TaskContext<Order>) -> Option<String> {
    Some(ctx.data().order_id.clone())
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid)]
    New,
    #[entry(confirm)]
    Paid,
}
fn main() {}
