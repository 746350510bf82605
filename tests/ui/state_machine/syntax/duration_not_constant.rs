#![allow(dead_code)]

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
}

const HOURS: u64 = 48;

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[on(expire: after(hours(HOURS)) => Expired)]
    New,
    Expired,
}
fn main() {}
