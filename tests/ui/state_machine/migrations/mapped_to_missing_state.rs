#![allow(dead_code)]

use workflow_runtime::{Migrate, state_machine};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

mod v1 {
    #[workflow_runtime::state_machine(data = super::Order, initial = New, name = "order")]
    pub enum OrderFlow {
        #[on(pay: event("payment") => Paid)]
        New,
        Paid,
    }
}

#[state_machine(data = Order, initial = Open, name = "order")]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid)]
    Open,
    Paid,
}

// The new version has no state `New`: it was renamed `Open`.
impl Migrate<v1::OrderFlow> for OrderFlow {
    fn state(old: v1::OrderFlow) -> Self {
        match old {
            v1::OrderFlow::New => OrderFlow::New,
            v1::OrderFlow::Paid => OrderFlow::Paid,
        }
    }

    fn data(old: Order) -> Order {
        old
    }
}

fn main() {}
