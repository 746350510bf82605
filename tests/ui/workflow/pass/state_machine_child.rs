//! A `#[state_machine]` type is a workflow too: a flowchart starts it as a sub-workflow.
use workflow_runtime::{state_machine, workflow, TaskContext, Workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

async fn checkout(_ctx: &mut TaskContext<Order>) {}

#[state_machine(data = Order, initial = New)]
pub enum Delivery {
    #[on(ship: event("shipped").key(order_id) => Shipped)]
    New,
    Shipped,
}

workflow! {
    pub workflow Shop(Order) {
        pay = task(checkout);
        deliver = workflow(Delivery);
        done = end;

        start -> pay -> deliver -> done;
    }
}

fn main() {
    let workflow_runtime::model::Activity::Flowchart(chart) = &Shop::definition().root else {
        unreachable!()
    };
    assert_eq!(chart.nodes[1].kind_name(), "sub_workflow");
    assert_eq!(Delivery::name(), "Delivery");
}
