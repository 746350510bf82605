//! The main example: an order state machine declared with `#[state_machine]`, driven from
//! checkout to delivery by events sent from outside the workflow, durable on SQLite.
//!
//! ```text
//! cargo run -p examples --example order            # starts orders, leaves two waiting
//! cargo run -p examples --example order            # a new process resumes them
//! ```
//!
//! The database is `target/order-example.db`, or the path in `ORDER_EXAMPLE_DB` or the first
//! argument. Delete it to start over.
//!
//! The same machine written by hand against the public API, without the macro, is the
//! `order_by_hand` example.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{InstanceFilter, InstanceStatus, SqliteStore};
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

/// Sends one event to an order and says where it went.
async fn send(
    runtime: &Runtime,
    id: &str,
    order_id: &str,
    name: &str,
    payload: serde_json::Value,
) -> Result<(), Box<dyn Error>> {
    let report = runtime
        .send(Stimulus::new(name).key(order_id).payload(payload.clone()))
        .await?;
    let state = show(runtime.current_state::<OrderFlow>(id).await?);
    println!(
        "  {order_id}: sent `{name}` {payload}: resumed {} instance(s), now in state {state}",
        report.resumed.len()
    );
    Ok(())
}

fn payment(amount: u64) -> Result<serde_json::Value, Box<dyn Error>> {
    Ok(serde_json::to_value(Payment { amount })?)
}

fn shipment(order_id: &str) -> Result<serde_json::Value, Box<dyn Error>> {
    Ok(serde_json::to_value(Shipment {
        tracking: format!("TRK-{order_id}"),
    })?)
}

/// Waits for the order to finish and prints its data and the transitions it took.
async fn report(runtime: &Runtime, id: &str, order_id: &str) -> Result<(), Box<dyn Error>> {
    let Completion::Finished(output) = runtime.await_completion(id, Duration::from_secs(1)).await?
    else {
        return Err("the order did not finish".into());
    };
    println!("  {order_id}: finished with data {output}");
    if let Some(snapshot) = runtime.get_state(id).await? {
        for entry in snapshot
            .journal()
            .iter()
            .filter(|e| e.kind == JournalKind::StateChanged)
        {
            let from = entry.detail["from"].as_str().unwrap_or("(start)");
            let to = entry.detail["to"].as_str().unwrap_or("?");
            let via = entry.detail["transition"].as_str().unwrap_or("initial");
            println!("    {from:>8} -> {to:<8} via {via}");
        }
    }
    Ok(())
}

fn database() -> PathBuf {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ORDER_EXAMPLE_DB").ok())
        .map_or_else(|| PathBuf::from("target/order-example.db"), PathBuf::from)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let path = database();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let store = Arc::new(SqliteStore::open(&path)?);
    let runtime = Runtime::builder()
        .store(store.clone())
        .register::<OrderFlow>()
        .build()?;
    // Instances a crash interrupted mid-run are run again first (at least once).
    let recovered = runtime.recover().await?;
    println!(
        "workflow `{}` version {} on SQLite file {} ({} interrupted instance(s) recovered)",
        OrderFlow::name(),
        OrderFlow::version(),
        path.display(),
        recovered.recovered.len()
    );

    // Orders a previous run left waiting for their events.
    let waiting = runtime
        .store()
        .list_instances(InstanceFilter {
            status: Some(InstanceStatus::Suspended),
            definition_name: Some(OrderFlow::name().to_owned()),
            limit: 100,
            ..InstanceFilter::default()
        })
        .await?;
    let mut resumed = 0;
    for listed in waiting {
        let id = listed.instance_id;
        let Some(snapshot) = runtime.get_state(&id).await? else {
            continue;
        };
        let order: Order = snapshot.data()?;
        let state = runtime.current_state::<OrderFlow>(&id).await?;
        println!(
            "resuming order {} left in state {} by a previous run (instance {id})",
            order.order_id,
            show(state)
        );
        if state == Some(OrderFlow::New) {
            send(
                &runtime,
                &id,
                &order.order_id,
                "payment",
                payment(order.total)?,
            )
            .await?;
        }
        send(
            &runtime,
            &id,
            &order.order_id,
            "shipped",
            shipment(&order.order_id)?,
        )
        .await?;
        report(&runtime, &id, &order.order_id).await?;
        resumed += 1;
    }
    if resumed > 0 {
        println!("resumed {resumed} order(s) from the previous run; run again to start new ones");
        return Ok(());
    }

    // A fresh start: three orders, one driven to the end, two left waiting.
    let existing = runtime
        .store()
        .list_instances(InstanceFilter {
            definition_name: Some(OrderFlow::name().to_owned()),
            limit: 10_000,
            ..InstanceFilter::default()
        })
        .await?
        .len();
    let mut orders = Vec::new();
    for n in 1..=3 {
        let order_id = format!("o-{}", existing + n);
        let order = Order {
            order_id: order_id.clone(),
            total: 100,
            ..Order::default()
        };
        let started = runtime.start::<OrderFlow>(order).await?;
        let state = show(
            runtime
                .current_state::<OrderFlow>(&started.instance_id)
                .await?,
        );
        println!(
            "started order {order_id} as instance {}: {}, in state {state}",
            started.instance_id, started.status
        );
        orders.push((started.instance_id, order_id));
    }
    if let [
        (first, first_order),
        (second, second_order),
        (_, third_order),
    ] = orders.as_slice()
    {
        // The first payment does not cover the total: the transition's condition refuses it.
        send(&runtime, first, first_order, "payment", payment(40)?).await?;
        send(&runtime, first, first_order, "payment", payment(100)?).await?;
        send(
            &runtime,
            first,
            first_order,
            "shipped",
            shipment(first_order)?,
        )
        .await?;
        report(&runtime, first, first_order).await?;
        send(&runtime, second, second_order, "payment", payment(100)?).await?;
        println!(
            "left {second_order} (Paid) and {third_order} (New) waiting in {}: \
             run the example again to resume them",
            path.display()
        );
    }
    // Retention: finished orders older than a day are removed.
    let purged = runtime
        .purge_finished(Duration::from_secs(24 * 3600))
        .await?;
    if purged > 0 {
        println!("purged {purged} order(s) finished more than a day ago");
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
