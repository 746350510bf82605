//! The order machine of the README's tour, with every trigger kind and option.

use std::time::Duration;

use workflow_runtime::{Outcome, StateMachineWorkflow, TaskContext, TaskError, Workflow};
use workflow_runtime::state_machine;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    order_id: String,
    total: u64,
    paid: u64,
}

#[derive(serde::Deserialize)]
pub struct Payment {
    amount: u64,
}

async fn send_confirmation(_ctx: &mut TaskContext<Order>) {}

async fn log_exit(_ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    Ok(())
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<Outcome, TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(Outcome::done())
}

async fn run_audit(_ctx: &mut TaskContext<Order>) {}

fn covers_amount(order: &Order, payment: &Payment) -> bool {
    payment.amount >= order.total
}

fn is_free(order: &Order) -> bool {
    order.total == 0
}

mod shipping {
    pub async fn reserve_stock(_ctx: &mut workflow_runtime::TaskContext<super::Order>) {}
}

/// An order from checkout to delivery.
#[state_machine(data = Order, initial = New, name = "OrderFlow")]
pub enum OrderFlow {
    #[entry(send_confirmation)]
    #[exit(log_exit)]
    #[on(=> Paid, when = is_free)]
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled, display = "Cancel the order")]
    #[on(expire: after(Duration::from_secs(48 * 3600)) => Cancelled)]
    #[on(audit: task(run_audit) => New, id = "audit_task")]
    New,
    #[entry(shipping::reserve_stock)]
    #[on(ship: event("shipped") => Shipped)]
    Paid,
    #[state(name = "shipped", display = "Shipped to the customer")]
    Shipped,
    Cancelled,
}

fn main() {
    assert_eq!(OrderFlow::name(), "OrderFlow");
    assert_eq!(OrderFlow::version(), OrderFlow::definition().fingerprint());
    assert_eq!(OrderFlow::TRANSITION_PAY, "pay");
    assert_eq!(OrderFlow::TRIGGER_AUDIT_TASK, "audit_task");
    assert_eq!(OrderFlow::TRIGGER_EXPIRE, "expire");
    assert_eq!(OrderFlow::STATES.len(), 4);
    assert_eq!(OrderFlow::state_name(OrderFlow::Shipped), "shipped");
    assert_eq!(OrderFlow::state_from_name("Paid"), Some(OrderFlow::Paid));
    assert_eq!(serde_json::to_string(&OrderFlow::Shipped).unwrap(), "\"shipped\"");
    assert_eq!(serde_json::from_str::<OrderFlow>("\"New\"").unwrap(), OrderFlow::New);
    assert!(serde_json::from_str::<OrderFlow>("\"Nope\"").is_err());
    assert!(OrderFlow::mermaid().starts_with("stateDiagram-v2"));
    assert!(OrderFlow::dot().starts_with("digraph \"OrderFlow\""));
    let registry = OrderFlow::registry();
    for task in ["send_confirmation", "log_exit", "record_payment", "run_audit", "shipping::reserve_stock"] {
        assert!(registry.has_task(task), "{task}");
    }
    assert!(registry.has_condition("covers_amount"));
    assert!(registry.has_condition("is_free"));
}
