#![allow(dead_code)]

use workflow_runtime::{state_machine, Runtime};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Customer {
    pub id: u64,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub customer: Customer,
}

#[state_machine(data = Order, initial = New)]
pub enum Flow {
    #[on(pay: event("payment").key(customer.id: u64) => Paid)]
    New,
    Paid,
}

async fn send(rt: &Runtime) {
    let _ = rt.send(Flow::payment(7)).await;
    let _ = rt.send(Flow::payment("7")).await;
}

fn main() {}
