#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

// `a` -> `b` -> `c` -> back to `Ping`: one error on `a`, the other two named in notes.
#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(start: event("start") => Ping)]
    New,
    #[on(a: => Pong)]
    Ping,
    #[on(b: => Pang)]
    Pong,
    #[on(c: => Ping)]
    Pang,
}
fn main() {}
