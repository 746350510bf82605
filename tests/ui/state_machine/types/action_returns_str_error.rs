#![allow(dead_code)]

use workflow_runtime::{TaskContext, state_machine};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub paid: bool,
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), &'static str> {
    ctx.data_mut().paid = true;
    Ok(())
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid, action = record_payment)]
    New,
    Paid,
}
fn main() {}
