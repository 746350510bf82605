//! An order state machine written by hand against the public API (no macro): the model types
//! for the definition, a `Registry` for the user code, and the `Workflow` and
//! `StateMachineWorkflow` traits.

#![allow(dead_code)]

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use workflow_runtime::model::{
    Activity, Definition, Delay, Event, State, StateMachine, Task, Transition,
};
use workflow_runtime::{Outcome, Registry, StateMachineWorkflow, TaskContext, TaskError, Workflow};

/// The order data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub total: u64,
    pub paid: u64,
    pub confirmation_sent: bool,
    pub stock_reserved: bool,
    pub tracking: Option<String>,
}

/// The payload of `payment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payment {
    pub amount: u64,
}

/// The payload of `shipped`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shipment {
    pub tracking: String,
}

/// The typed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderState {
    New,
    Paid,
    Shipped,
    Cancelled,
}

pub struct OrderFlow;

fn named(name: &str, from: &str, to: &str, trigger: Activity) -> Transition {
    let mut t = Transition::new(from, to);
    t.name = Some(name.to_owned());
    t.trigger = Some(trigger);
    t
}

impl Workflow for OrderFlow {
    type Data = Order;

    fn name() -> &'static str {
        "OrderFlow"
    }

    fn definition() -> &'static Definition {
        static DEFINITION: OnceLock<Definition> = OnceLock::new();
        DEFINITION.get_or_init(|| {
            let mut new = State::new("New");
            new.entry = Some(Task::new("New_entry", "send_confirmation").into());
            let mut paid = State::new("Paid");
            paid.entry = Some(Task::new("Paid_entry", "reserve_stock").into());
            let mut pay = named(
                "pay",
                "New",
                "Paid",
                Event::new("pay", "payment").with_key("order_id").into(),
            );
            pay.condition = Some("covers_amount".into());
            pay.action = Some(Task::new("pay_action", "record_payment").into());
            let cancel = named(
                "cancel",
                "New",
                "Cancelled",
                Event::new("cancel", "cancel").with_key("order_id").into(),
            );
            let expire = named(
                "expire",
                "New",
                "Cancelled",
                Delay::new("expire", 48 * 3600 * 1000).into(),
            );
            let mut ship = named(
                "ship",
                "Paid",
                "Shipped",
                Event::new("ship", "shipped").with_key("order_id").into(),
            );
            ship.action = Some(Task::new("ship_action", "record_shipment").into());
            Definition::new(
                "OrderFlow",
                StateMachine {
                    id: "root".into(),
                    initial: "New".into(),
                    states: vec![new, paid, State::new("Shipped"), State::new("Cancelled")],
                    transitions: vec![pay, cancel, expire, ship],
                },
            )
        })
    }

    fn registry() -> Registry<Order> {
        Registry::new()
            .task("send_confirmation", |cx: &mut TaskContext<Order>| {
                Box::pin(async move {
                    cx.data_mut().confirmation_sent = true;
                    Ok(Outcome::done())
                })
            })
            .task("reserve_stock", |cx: &mut TaskContext<Order>| {
                Box::pin(async move {
                    cx.data_mut().stock_reserved = true;
                    Ok(Outcome::done())
                })
            })
            .task("record_payment", |cx: &mut TaskContext<Order>| {
                Box::pin(async move {
                    let payment: Payment = cx.payload()?;
                    cx.data_mut().paid += payment.amount;
                    Ok(Outcome::done())
                })
            })
            .task("record_shipment", |cx: &mut TaskContext<Order>| {
                Box::pin(async move {
                    let shipment: Shipment = cx.payload()?;
                    if shipment.tracking.is_empty() {
                        return Err(TaskError::permanent("empty tracking number"));
                    }
                    cx.data_mut().tracking = Some(shipment.tracking);
                    Ok(Outcome::done())
                })
            })
            .condition_with_payload("covers_amount", |order: &Order, p: &Payment| {
                p.amount >= order.total
            })
    }
}

impl StateMachineWorkflow for OrderFlow {
    type State = OrderState;

    fn state_name(state: OrderState) -> &'static str {
        match state {
            OrderState::New => "New",
            OrderState::Paid => "Paid",
            OrderState::Shipped => "Shipped",
            OrderState::Cancelled => "Cancelled",
        }
    }

    fn state_from_name(name: &str) -> Option<OrderState> {
        match name {
            "New" => Some(OrderState::New),
            "Paid" => Some(OrderState::Paid),
            "Shipped" => Some(OrderState::Shipped),
            "Cancelled" => Some(OrderState::Cancelled),
            _ => None,
        }
    }
}

pub fn order(id: &str, total: u64) -> Order {
    Order {
        order_id: id.to_owned(),
        total,
        ..Order::default()
    }
}

/// A current-thread Tokio runtime with time, for the async API.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}
