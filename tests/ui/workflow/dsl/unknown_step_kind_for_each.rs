#![allow(dead_code)]

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Customer {
    pub id: String,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub request_id: String,
    pub customer: Customer,
    pub amount: u64,
    pub lines: Vec<u32>,
    pub approval: Option<Approval>,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Approval {
    pub approved: bool,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Payment {
    pub amount: u64,
}

async fn work(_ctx: &mut TaskContext<Data>) {}

fn lines(data: &Data) -> Vec<u32> {
    data.lines.clone()
}

workflow! {
    pub workflow Lines(Data) = sequence [
        for_eahc(lines) [task(work)],
    ];
}

fn main() {}
