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

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Shipment {
    pub tracking: String,
}

async fn ship(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow OrderFlow(Order) = sequence [
        event::<Payment>("payment").key(order_id),
        task(ship),
    ];
}

async fn send(rt: &Runtime) {
    // The generated constructor takes a `Payment`: a `Shipment` does not compile.
    let _ = rt
        .send(OrderFlow::payment("o-1", Shipment { tracking: "T".into() }))
        .await;
}

fn main() {}
