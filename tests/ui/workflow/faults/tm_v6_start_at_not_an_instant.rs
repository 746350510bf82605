#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn report(_ctx: &mut TaskContext<Order>) {}

workflow! {
    pub workflow Opening(Order) {
        open = start_at("2026-03-29 at nine").trigger();
        run = task(report);

        open -> run;
    }
}

fn main() {}
