#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub amount: u64,
}

async fn work(_ctx: &mut TaskContext<Data>) {}

workflow! {
    pub workflow Child(Data) = sequence [task(work)];
}

workflow! {
    pub workflow Parent(Data) = sequence [
        workflow(Child).detatch(),
    ];
}

fn main() {}
