#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn charge(_ctx: &mut TaskContext<Order>) {}
async fn refund(_ctx: &mut TaskContext<Order>) {}
async fn ship(_ctx: &mut TaskContext<Order>) {}

workflow! {
    #[workflow(retry(jitter = -0.1))]
    pub workflow Pay(Order) = sequence [
        task(charge),
    ];
}

fn main() {}
