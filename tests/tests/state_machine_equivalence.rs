//! A machine declared with `#[state_machine]` is the same definition, with the same
//! fingerprint, as the same machine written by hand against the model.

use std::time::Duration;

use workflow_runtime::model::{
    Activity, Definition, Delay, Event, LookBack, State, StateMachine, Task, Transition, diagram,
};
use workflow_runtime::{StateMachineWorkflow, TaskContext, Workflow, state_machine};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    order_id: String,
    total: u64,
}

#[derive(serde::Deserialize)]
pub struct Payment {
    amount: u64,
}

async fn send_confirmation(_ctx: &mut TaskContext<Order>) {}
async fn log_exit(_ctx: &mut TaskContext<Order>) {}
async fn record_payment(_ctx: &mut TaskContext<Order>) {}
async fn run_audit(_ctx: &mut TaskContext<Order>) {}

fn covers_amount(order: &Order, payment: &Payment) -> bool {
    payment.amount >= order.total
}

fn is_free(order: &Order) -> bool {
    order.total == 0
}

mod stock {
    pub(crate) async fn reserve(_ctx: &mut workflow_runtime::TaskContext<super::Order>) {}
}

#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[entry(send_confirmation)]
    #[exit(log_exit)]
    #[on(=> Paid, when = is_free)]
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled, display = "Cancel the order")]
    #[on(after(Duration::from_secs(48 * 3600)) => Cancelled)]
    #[on(audit: task(run_audit) => New, id = "audit_task")]
    New,
    #[entry(stock::reserve)]
    #[on(ship: event("shipped") => Shipped)]
    Paid,
    #[state(name = "shipped", display = "Shipped to the customer")]
    Shipped,
    Cancelled,
}

/// The same machine, written by hand with the model's public types and the documented
/// node-id conventions.
fn by_hand() -> Definition {
    let task = |id: &str, function: &str| Some(Activity::from(Task::new(id, function)));
    let transition = |from: &str, to: &str| Transition::new(from, to);

    let mut new = State::new("New");
    new.entry = task("New_entry", "send_confirmation");
    new.exit = task("New_exit", "log_exit");
    let mut paid = State::new("Paid");
    paid.entry = task("Paid_entry", "stock::reserve");
    let mut shipped = State::new("shipped");
    shipped.display_name = Some("Shipped to the customer".into());

    let mut free = transition("New", "Paid");
    free.condition = Some("is_free".into());

    let mut pay = transition("New", "Paid");
    pay.name = Some("pay".into());
    pay.trigger = Some(
        Event::new("pay", "payment")
            .with_key("order_id")
            .with_look_back(LookBack::SinceEntered)
            .into(),
    );
    pay.condition = Some("covers_amount".into());
    pay.action = task("pay_action", "record_payment");

    let mut cancel = transition("New", "Cancelled");
    cancel.name = Some("cancel".into());
    cancel.display_name = Some("Cancel the order".into());
    cancel.trigger = Some(
        Event::new("cancel", "cancel")
            .with_key("order_id")
            .with_look_back(LookBack::SinceEntered)
            .into(),
    );

    let mut expire = transition("New", "Cancelled");
    expire.trigger = Some(Delay::new("New_3", 48 * 3600 * 1000).into());

    let mut audit = transition("New", "New");
    audit.name = Some("audit".into());
    audit.trigger = task("audit_task", "run_audit");

    let mut ship = transition("Paid", "shipped");
    ship.name = Some("ship".into());
    ship.trigger = Some(
        Event::new("ship", "shipped")
            .with_look_back(LookBack::SinceEntered)
            .into(),
    );

    Definition::new(
        "OrderFlow",
        StateMachine {
            id: "root".into(),
            initial: "New".into(),
            states: vec![new, paid, shipped, State::new("Cancelled")],
            transitions: vec![free, pay, cancel, expire, audit, ship],
        },
    )
}

#[test]
fn the_macro_and_the_hand_written_machine_are_one_definition() {
    let hand = by_hand();
    assert_eq!(OrderFlow::definition(), &hand);
    assert_eq!(OrderFlow::version(), hand.fingerprint());
    assert_eq!(OrderFlow::definition().fingerprint(), hand.fingerprint());
    assert_eq!(OrderFlow::name(), hand.name);
    // The JSON form loads back into the same definition and fingerprint.
    let json = hand.to_json_pretty();
    let loaded = Definition::from_json(&json).unwrap();
    assert_eq!(loaded.fingerprint(), OrderFlow::version());
    // Diagrams are computed at compile time from the same definition.
    assert_eq!(OrderFlow::mermaid(), diagram::mermaid(&hand));
    assert_eq!(OrderFlow::dot(), diagram::dot(&hand));
}

#[test]
fn typed_state_and_registry() {
    assert_eq!(OrderFlow::state_name(OrderFlow::Shipped), "shipped");
    assert_eq!(
        OrderFlow::state_from_name("shipped"),
        Some(OrderFlow::Shipped)
    );
    assert_eq!(OrderFlow::state_from_name("Shipped"), None);
    assert_eq!(
        OrderFlow::STATES,
        [
            OrderFlow::New,
            OrderFlow::Paid,
            OrderFlow::Shipped,
            OrderFlow::Cancelled
        ]
    );
    assert_eq!(
        serde_json::to_value(OrderFlow::Paid).unwrap(),
        serde_json::json!("Paid")
    );
    assert_eq!(OrderFlow::TRIGGER_NEW_3, "New_3");
    assert_eq!(OrderFlow::TRIGGER_PAY, "pay");
    assert_eq!(OrderFlow::TRANSITION_CANCEL, "cancel");

    let registry = OrderFlow::registry();
    for task in [
        "send_confirmation",
        "log_exit",
        "record_payment",
        "run_audit",
        "stock::reserve",
    ] {
        assert!(registry.has_task(task), "{task}");
    }
    assert!(registry.has_condition("covers_amount"));
    assert!(registry.has_condition("is_free"));
}
