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

fn covers(order: &Order, payment: &String) -> bool {
    payment.len() as u64 >= order.total
}

#[state_machine(data = Order, initial = New)]
pub enum Flow {
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers)]
    New,
    Paid,
}

fn main() {}
