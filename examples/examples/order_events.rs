//! An order workflow started by an event and driven by correlated events sent from outside
//! the workflow code (RT-13 to RT-32): `order.placed` is a trigger, so sending it starts
//! an instance; `order.paid` and `order.shipped` are keyed by the order id, so each reaches
//! only its own order (RT-3, RT-17). One event is sent before the order waits for it: the
//! bookmark queue keeps it and the queue worker delivers it when the wait appears (RT-21,
//! RT-26). An idempotency key makes a retried send harmless (RT-19), and the
//! `correlated_singleton` activation strategy refuses a second live order with the same
//! correlation id (RT-15, RT-16).
//!
//! ```text
//! cargo run -p examples --example order_events
//! ```

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{Completion, Runtime, Stimulus, TaskContext, workflow};

/// The order's data; the `order.placed` payload becomes it (RT-13).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OrderData {
    order_id: String,
    total: u64,
    reserved: bool,
    paid: u64,
    tracking: Option<String>,
}

/// The payload of `order.paid`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

/// The payload of `order.shipped`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Shipment {
    tracking: String,
}

async fn reserve_stock(ctx: &mut TaskContext<OrderData>) {
    ctx.data_mut().reserved = true;
}

async fn record_payment(ctx: &mut TaskContext<OrderData>) {
    let amount = ctx.input::<Payment>().map(|p| p.amount).unwrap_or_default();
    ctx.data_mut().paid = amount;
}

async fn record_shipment(ctx: &mut TaskContext<OrderData>) {
    let tracking = ctx.input::<Shipment>().ok().map(|s| s.tracking);
    ctx.data_mut().tracking = tracking;
}

workflow! {
    /// An order, started by `order.placed`; one live instance per correlation id (RT-15).
    #[workflow(activation = correlated_singleton)]
    pub workflow OrderEvents(OrderData) {
        placed   = event::<OrderData>("order.placed").trigger();
        reserve  = task(reserve_stock);
        paid     = event::<Payment>("order.paid").key(order_id);
        payment  = task(record_payment);
        shipped  = event::<Shipment>("order.shipped").key(order_id);
        shipment = task(record_shipment);

        placed -> reserve -> paid -> payment -> shipped -> shipment;
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let runtime = Runtime::builder().register::<OrderEvents>().build()?;
    // Index the trigger and start the bookmark-queue worker.
    runtime.start_workers().await?;

    // Two orders are placed: each event starts one instance.
    let mut ids = Vec::new();
    for (order_id, total) in [("o-1", 120), ("o-2", 80)] {
        let placed = Stimulus::new("order.placed")
            .payload(OrderData {
                order_id: order_id.into(),
                total,
                ..OrderData::default()
            })
            .correlation(order_id)
            .idempotency_key(format!("placed-{order_id}"));
        let report = runtime.send(placed.clone()).await?;
        let started = &report.started[0];
        println!(
            "order.placed {order_id}: started {} ({:?})",
            started.instance_id, started.status
        );
        // The sender retries (a lost acknowledgement, say): nothing starts twice.
        let retry = runtime.send(placed).await?;
        println!(
            "  retried send: duplicate = {}, same instance = {}",
            retry.duplicate,
            retry.started[0].instance_id == started.instance_id
        );
        ids.push((order_id, started.instance_id.clone()));
    }
    // The shop places o-1 again under a new request id: the activation strategy refuses a
    // second live order with the same correlation id.
    let twice = runtime
        .send(
            Stimulus::new("order.placed")
                .payload(OrderData {
                    order_id: "o-1".into(),
                    ..OrderData::default()
                })
                .correlation("o-1")
                .inbox(false),
        )
        .await?;
    println!(
        "order.placed o-1 again: started {}, refused {:?}",
        twice.started.len(),
        twice.refused
    );

    // The carrier reports o-2 shipped before it was even paid: nothing waits for that yet,
    // so the stimulus waits in the bookmark queue.
    let early = runtime
        .send(Stimulus::new("order.shipped").key("o-2").payload(Shipment {
            tracking: "TRK-2".into(),
        }))
        .await?;
    println!(
        "order.shipped o-2 (early): queued = {:?}",
        early.inbox_item.is_some()
    );

    // Payments, correlated by the order id.
    for (order_id, amount) in [("o-1", 120), ("o-2", 80)] {
        let report = runtime
            .send(
                Stimulus::new("order.paid")
                    .key(order_id)
                    .payload(Payment { amount }),
            )
            .await?;
        println!(
            "order.paid {order_id}: resumed {:?}",
            report
                .resumed
                .iter()
                .map(|s| (&s.instance_id, s.status))
                .collect::<Vec<_>>()
        );
    }
    runtime
        .send(Stimulus::new("order.shipped").key("o-1").payload(Shipment {
            tracking: "TRK-1".into(),
        }))
        .await?;

    for (order_id, id) in &ids {
        let done = runtime
            .await_completion(id, Duration::from_secs(30))
            .await?;
        let data: OrderData = match runtime.get_state(id).await? {
            Some(snapshot) => snapshot.data()?,
            None => return Err(format!("instance {id} vanished").into()),
        };
        println!(
            "{order_id}: {} reserved={} paid={} tracking={:?}",
            if matches!(done, Completion::Finished(_)) {
                "finished"
            } else {
                "cancelled"
            },
            data.reserved,
            data.paid,
            data.tracking
        );
    }
    runtime.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?
        .block_on(run())
}
