#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn report(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow Poll(Order) {
        tick = every(mins(5), missed = backfill(0)).trigger();
        run = task(report);

        tick -> run;
    }
}

fn main() {}
