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
            shipped = event("shipped");
            start -> paid -> shipped;
        }
    }
}

workflow! {
    #[workflow(name = "shipping")]
    pub workflow Shipping(Order) {
        wait_payment = event("payment");
        pack = task(pack);
        shipped = event("shipped");
        start -> wait_payment -> pack -> shipped;
    }
}

async fn pack(_ctx: &mut workflow_runtime::TaskContext<Order>) {}

// `Paid` is renamed `WaitPayment` in the new version, and `pack` is a task: an instance does
// not wait there, so it is no position to migrate to.
impl Migrate<v1::Shipping> for Shipping {
    fn state(old: v1::ShippingNode) -> ShippingNode {
        match old {
            v1::ShippingNode::Paid => ShippingNode::Paid,
            v1::ShippingNode::Shipped => ShippingNode::Pack,
        }
    }

    fn data(old: Order) -> Order {
        old
    }
}

fn main() {}
