#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[derive(serde::Deserialize)]
pub struct Payment {
    pub amount: u64,
}

#[state_machine(data = Order, initial = New)]
pub enum Flow {
    #[on(pay: event::<Payment>("payment").key(order_id) => Payd)]
    New,
    #[on(ship: evnt("shipped") => New)]
    Paid,
}

fn main() {}
