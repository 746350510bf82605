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
    pub workflow Nightly(Order) = sequence [
        cron("0 9 * * MON-FRI", tz = "Europe/Berln"),
        task(ship),
    ];
}

fn main() {}
