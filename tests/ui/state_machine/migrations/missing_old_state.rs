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
        #[on(ship: event("shipped") => Shipped)]
        Paid,
        Shipped,
    }
}

#[state_machine(data = Order, initial = Open, name = "order")]
pub enum OrderFlow {
    #[on(pay: event("payment") => Paid)]
    Open,
    #[on(ship: event("shipped") => Shipped)]
    Paid,
    Shipped,
}

// `v1::OrderFlow::Shipped` is left out: instances waiting there would have nowhere to go.
impl Migrate<v1::OrderFlow> for OrderFlow {
    fn state(old: v1::OrderFlow) -> Self {
        match old {
            v1::OrderFlow::New => OrderFlow::Open,
            v1::OrderFlow::Paid => OrderFlow::Paid,
        }
    }

    fn data(old: Order) -> Order {
        old
    }
}

fn main() {}
