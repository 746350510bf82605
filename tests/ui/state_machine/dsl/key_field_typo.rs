#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub payment: Option<Payment>,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Payment {
    pub amount: u64,
}

#[state_machine(data = Order, initial = New)]
pub enum Flow {
    #[on(pay: event::<Payment>("payment").key(orderid) => Paid)]
    New,
    Paid,
}

fn main() {}
