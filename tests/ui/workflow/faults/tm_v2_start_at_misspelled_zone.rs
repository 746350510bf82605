#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn report(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow Opening(Order) = sequence [
        start_at("2026-03-29T09:00:00", tz = "Europe/Berln"),
        task(report),
    ];
}

fn main() {}
