#![allow(dead_code)]

use workflow_runtime::{workflow, Runtime, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Payment {
    pub amount: u64,
}

async fn ship(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow OrderFlow(Order) = sequence [
        event::<Payment>("payment").key(order_id: String),
        task(ship),
    ];
}

async fn send(rt: &Runtime) {
    // The key is typed `String`: a `&str` or a `String` compiles, a number does not (it would
    // never match the field).
    let _ = rt.send(OrderFlow::payment("o-1", Payment { amount: 1 })).await;
    let _ = rt.send(OrderFlow::payment(String::from("o-1"), Payment { amount: 1 })).await;
    let _ = rt.send(OrderFlow::payment(42_u64, Payment { amount: 1 })).await;
}

fn main() {}
