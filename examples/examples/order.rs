//! The main example: an order state machine declared with `#[state_machine]`, driven from
//! checkout to delivery by events sent from outside the workflow.
//!
//! ```text
//! cargo run -p examples --example order
//! ```
//!
//! The same machine written by hand against the public API, without the macro, is the
//! `order_by_hand` example.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, JournalKind, Outcome, Runtime, Stimulus, TaskContext, TaskError, Workflow,
    state_machine,
};

/// The order's data, persisted with the instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    total: u64,
    paid: u64,
    confirmation_sent: bool,
    stock_reserved: bool,
    tracking: Option<String>,
}

/// The payload of a `payment` event.
#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

/// The payload of a `shipped` event.
#[derive(Debug, Serialize, Deserialize)]
pub struct Shipment {
    tracking: String,
}

async fn send_confirmation(ctx: &mut TaskContext<Order>) {
    ctx.data_mut().confirmation_sent = true;
}

async fn reserve_stock(ctx: &mut TaskContext<Order>) {
    ctx.data_mut().stock_reserved = true;
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<Outcome, TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(Outcome::done())
}

async fn record_shipment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let shipment: Shipment = ctx.payload()?;
    ctx.data_mut().tracking = Some(shipment.tracking);
    Ok(())
}

fn covers_amount(order: &Order, payment: &Payment) -> bool {
    payment.amount >= order.total
}

/// An order from checkout to delivery.
#[state_machine(data = Order, initial = New)]
pub enum OrderFlow {
    #[entry(send_confirmation)]
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    New,
    #[entry(reserve_stock)]
    #[on(ship: event::<Shipment>("shipped").key(order_id) => Shipped, action = record_shipment)]
    Paid,
    Shipped,
    Cancelled,
}

fn show(state: Option<OrderFlow>) -> String {
    state.map_or_else(|| "(unknown)".to_owned(), |s| format!("{s:?}"))
}

async fn run() -> Result<(), Box<dyn Error>> {
    let runtime = Runtime::builder().register::<OrderFlow>().build()?;
    println!(
        "workflow `{}` version {}",
        OrderFlow::name(),
        OrderFlow::version()
    );

    let order = Order {
        order_id: "o-42".into(),
        total: 100,
        ..Order::default()
    };
    let started = runtime.start::<OrderFlow>(order).await?;
    let id = started.instance_id;
    let state = show(runtime.current_state::<OrderFlow>(&id).await?);
    println!(
        "started order o-42 as instance {id}: {}, in state {state}",
        started.status
    );

    let events = [
        ("payment", serde_json::to_value(Payment { amount: 40 })?),
        ("payment", serde_json::to_value(Payment { amount: 100 })?),
        (
            "shipped",
            serde_json::to_value(Shipment {
                tracking: "TRK-1".into(),
            })?,
        ),
    ];
    for (name, payload) in events {
        let report = runtime
            .send(Stimulus::new(name).key("o-42").payload(payload.clone()))
            .await?;
        let state = show(runtime.current_state::<OrderFlow>(&id).await?);
        println!(
            "sent `{name}` {payload}: resumed {} instance(s), now in state {state}",
            report.resumed.len()
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
    println!("\n{}", OrderFlow::mermaid());
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?
        .block_on(run())
}
