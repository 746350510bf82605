#![allow(dead_code)]

use workflow_runtime::{Migrate, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

mod v1 {
    use super::Order;

    workflow_runtime::workflow! {
        #[workflow(name = "shipping")]
        pub workflow Shipping(Order) {
            paid = event("payment");
            cooling = after(hours(1));
            shipped = event("shipped");
            start -> paid -> cooling -> shipped;
        }
    }
}

workflow! {
    #[workflow(name = "shipping")]
    pub workflow Shipping(Order) {
        wait_payment = event("payment");
        shipped = event("shipped");
        start -> wait_payment -> shipped;
    }
}

// `v1::ShippingNode::Cooling` is left out: instances waiting there would have nowhere to go.
impl Migrate<v1::Shipping> for Shipping {
    fn state(old: v1::ShippingNode) -> ShippingNode {
        match old {
            v1::ShippingNode::Paid => ShippingNode::WaitPayment,
            v1::ShippingNode::Shipped => ShippingNode::Shipped,
        }
    }

    fn data(old: Order) -> Order {
        old
    }
}

fn main() {}
