#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn report(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow Daily(Order) {
        tick = cron("0 9 * * *", tz = "America/New_York", missed = sometimes).trigger();
        run = task(report);

        tick -> run;
    }
}

fn main() {}
