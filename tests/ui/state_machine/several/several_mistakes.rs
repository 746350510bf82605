#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[state_machine(data = Order, initial = Nwe, nmae = "Orders")]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid, wen = covers_amount)]
    #[on(expire: after(fortnights(2)) => Cancelled)]
    New,
    #[on(ship: event("shipped") => Shiped, id = "")]
    Paid,
    Shipped,
    Cancelled,
}
fn main() {}
