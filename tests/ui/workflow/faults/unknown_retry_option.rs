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
    pub workflow Pay(Order) = sequence [
        task(charge).retry(attempt = 3),
    ];
}

fn main() {}
