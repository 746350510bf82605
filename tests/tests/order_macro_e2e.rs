//! End to end with the macro: an order machine declared with `#[state_machine]` is suspended
//! on its events and driven to a terminal state by stimuli carrying typed payloads
//! (SM-1..SM-5, SM-8 through the runtime's JSON round trip between runs).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, JournalKind, Runtime, Stimulus, SubStatus, TaskContext, TaskError, Workflow,
    WorkflowStatus, state_machine,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    total: u64,
    paid: u64,
    confirmations: u32,
    tracking: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Shipment {
    tracking: String,
}

async fn confirm(ctx: &mut TaskContext<Order>) {
    ctx.data_mut().confirmations += 1;
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(())
}

async fn record_shipment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let shipment: Shipment = ctx.payload()?;
    ctx.data_mut().tracking = Some(shipment.tracking);
    Ok(())
}

fn covers_amount(order: &Order, payment: &Payment) -> bool {
    payment.amount >= order.total
}

#[state_machine(data = Order, initial = New, name = "MacroOrder")]
pub enum MacroOrder {
    #[entry(confirm)]
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    New,
    #[on(ship: event::<Shipment>("shipped").key(order_id) => Shipped, action = record_shipment)]
    Paid,
    Shipped,
    Cancelled,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

fn order(id: &str, total: u64) -> Order {
    Order {
        order_id: id.into(),
        total,
        ..Order::default()
    }
}

#[test]
fn macro_order_is_driven_to_shipped_by_typed_payloads() {
    block_on(async {
        let rt = Runtime::builder().register::<MacroOrder>().build().unwrap();
        let started = rt.start::<MacroOrder>(order("o-1", 100)).await.unwrap();
        assert_eq!(started.status, WorkflowStatus::Suspended);
        assert_eq!(started.sub_status, Some(SubStatus::Waiting));
        let id = started.instance_id;
        assert_eq!(
            rt.current_state::<MacroOrder>(&id).await.unwrap(),
            Some(MacroOrder::New)
        );

        // SM-4: a payment that does not cover the total leaves the order in `New`.
        rt.send(
            Stimulus::new("payment")
                .key("o-1")
                .payload(Payment { amount: 30 }),
        )
        .await
        .unwrap();
        assert_eq!(
            rt.current_state::<MacroOrder>(&id).await.unwrap(),
            Some(MacroOrder::New)
        );

        // SM-5: the covering payment runs the action with its payload, then enters `Paid`.
        rt.send(
            Stimulus::new("payment")
                .key("o-1")
                .payload(Payment { amount: 100 }),
        )
        .await
        .unwrap();
        assert_eq!(
            rt.current_state::<MacroOrder>(&id).await.unwrap(),
            Some(MacroOrder::Paid)
        );

        // `cancel` was a competing trigger of `New`: cancelled with its bookmark (SM-5.1).
        let late_cancel = rt
            .send(Stimulus::new("cancel").key("o-1").inbox(false))
            .await
            .unwrap();
        assert!(
            late_cancel.unmatched,
            "a cancel after payment matched something"
        );

        rt.send(Stimulus::new("shipped").key("o-1").payload(Shipment {
            tracking: "TRK-9".into(),
        }))
        .await
        .unwrap();
        let Completion::Finished(output) = rt
            .await_completion(&id, Duration::from_secs(1))
            .await
            .unwrap()
        else {
            panic!("the order did not finish");
        };
        let data: Order = serde_json::from_value(output).unwrap();
        assert_eq!(
            data,
            Order {
                order_id: "o-1".into(),
                total: 100,
                paid: 100,
                confirmations: 1,
                tracking: Some("TRK-9".into()),
            }
        );

        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.state.definition().version, MacroOrder::version());
        let moves: Vec<(String, String)> = snapshot
            .journal()
            .iter()
            .filter(|e| e.kind == JournalKind::StateChanged)
            .map(|e| {
                (
                    e.detail["from"].as_str().unwrap_or("").to_owned(),
                    e.detail["to"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert_eq!(
            moves,
            [
                (String::new(), "New".to_owned()),
                ("New".to_owned(), "Paid".to_owned()),
                ("Paid".to_owned(), "Shipped".to_owned()),
            ]
        );
    });
}

#[test]
fn macro_order_can_be_cancelled_by_event() {
    block_on(async {
        let rt = Runtime::builder().register::<MacroOrder>().build().unwrap();
        let id = rt
            .start::<MacroOrder>(order("o-2", 50))
            .await
            .unwrap()
            .instance_id;
        rt.send(Stimulus::new("cancel").key("o-2")).await.unwrap();
        assert_eq!(
            rt.current_state::<MacroOrder>(&id).await.unwrap(),
            Some(MacroOrder::Cancelled)
        );
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        assert!(snapshot.state.bookmarks().is_empty());
    });
}
