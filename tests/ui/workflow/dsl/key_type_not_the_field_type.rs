#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

async fn ship(_ctx: &mut TaskContext<Order>) {}

// The key's type must be the field's: `order_id` is a `String`.
workflow! {
    pub workflow OrderFlow(Order) = sequence [
        event("payment").key(order_id: u64),
        task(ship),
    ];
}

fn main() {}
