#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(start: event("start") => Ping)]
    New,
    #[on(a: => Pong)]
    Ping,
    #[on(b: => Ping)]
    Pong,
}
fn main() {}
