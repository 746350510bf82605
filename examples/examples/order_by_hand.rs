//! An order state machine run end to end in memory, written by hand against the public API:
//! no macro. This is the "no-macro twin" of the `#[state_machine]` order in the `order`
//! example: the model types build the definition, a `Registry` holds the user code, and
//! `Workflow` / `StateMachineWorkflow` are implemented by hand.
//!
//! ```text
//! cargo run -p examples --example order_by_hand
//! ```

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::model::{Activity, Definition, Event, State, StateMachine, Task, Transition};
use workflow_runtime::{
    Completion, JournalKind, Outcome, Registry, Runtime, StateMachineWorkflow, Stimulus,
    TaskContext, Workflow,
};

/// The order's data, persisted with the instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Order {
    order_id: String,
    total: u64,
    paid: u64,
    confirmation_sent: bool,
    stock_reserved: bool,
    tracking: Option<String>,
}

/// The payload of a `payment` event.
#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    amount: u64,
}

/// The payload of a `shipped` event.
#[derive(Debug, Serialize, Deserialize)]
struct Shipment {
    tracking: String,
}

/// The typed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderState {
    New,
    Paid,
    Shipped,
    Cancelled,
}

struct OrderFlow;

fn on(name: &str, from: &str, to: &str, trigger: Activity) -> Transition {
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
            let mut pay = on(
                "pay",
                "New",
                "Paid",
                Event::new("pay", "payment").with_key("order_id").into(),
            );
            pay.condition = Some("covers_amount".into());
            pay.action = Some(Task::new("pay_action", "record_payment").into());
            let cancel = on(
                "cancel",
                "New",
                "Cancelled",
                Event::new("cancel", "cancel").with_key("order_id").into(),
            );
            let mut ship = on(
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
                    transitions: vec![pay, cancel, ship],
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

async fn run() -> Result<(), Box<dyn Error>> {
    let runtime = Runtime::builder().register::<OrderFlow>().build()?;
    let order = Order {
        order_id: "o-42".into(),
        total: 100,
        ..Order::default()
    };
    let started = runtime.start::<OrderFlow>(order).await?;
    let id = started.instance_id;
    let state = runtime.current_state::<OrderFlow>(&id).await?;
    println!(
        "started {id}: {}, in state {}",
        started.status,
        state.map_or("?", OrderFlow::state_name)
    );

    for (name, payload) in [
        ("payment", serde_json::to_value(Payment { amount: 40 })?),
        ("payment", serde_json::to_value(Payment { amount: 100 })?),
        (
            "shipped",
            serde_json::to_value(Shipment {
                tracking: "TRK-1".into(),
            })?,
        ),
    ] {
        let report = runtime
            .send(Stimulus::new(name).key("o-42").payload(payload.clone()))
            .await?;
        let state = runtime.current_state::<OrderFlow>(&id).await?;
        let status = report
            .resumed
            .first()
            .map_or_else(|| "not resumed".to_owned(), |r| r.status.to_string());
        println!(
            "sent {name} {payload}: {status}, now in state {}",
            state.map_or("?", OrderFlow::state_name)
        );
    }

    let Completion::Finished(output) = runtime
        .await_completion(&id, Duration::from_secs(1))
        .await?
    else {
        return Err("the order did not finish".into());
    };
    println!("finished with data {output}");

    println!("transitions taken:");
    if let Some(snapshot) = runtime.get_state(&id).await? {
        for entry in snapshot
            .journal()
            .iter()
            .filter(|e| e.kind == JournalKind::StateChanged)
        {
            let from = entry.detail["from"].as_str().unwrap_or("(start)");
            let to = entry.detail["to"].as_str().unwrap_or("?");
            let via = entry.detail["transition"].as_str().unwrap_or("initial");
            println!("  {from:>8} -> {to:<8} via {via}");
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?
        .block_on(run())
}
