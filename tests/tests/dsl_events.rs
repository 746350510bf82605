//! Events written with the macros: the payload folded into the data with `.assign(field)`
//! and `.assign_with(fn)` (ACT-19) in `workflow!` and `#[state_machine]`; the payload as the
//! next step's input in a sequence (ACT-5); a payload that does not fit rejected for the
//! instance (RT-22); look-back set in the macro (RT-30).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, Runtime, Stimulus, TaskContext, TaskError, Workflow, WorkflowStatus, state_machine,
    workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Customer {
    id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    customer: Customer,
    payment: Option<Payment>,
    paid: u64,
    log: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

fn order(id: &str) -> Order {
    Order {
        order_id: id.to_owned(),
        customer: Customer {
            id: format!("c-{id}"),
        },
        ..Order::default()
    }
}

fn add_payment(order: &mut Order, payment: Payment) {
    order.paid += payment.amount;
}

async fn ship(ctx: &mut TaskContext<Order>) {
    let line = format!("ship after {}", ctx.data().paid);
    ctx.data_mut().log.push(line);
}

// The payload's documented way in: a task right after the event reads it as its input.
async fn read_input(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.input()?;
    ctx.data_mut().log.push(format!("input {}", payment.amount));
    Ok(())
}

workflow! {
    pub workflow Assigned(Order) = sequence [
        event::<Payment>("payment").key(order_id).assign(payment),
        task(read_input),
        event::<Payment>("top_up").key(customer.id).assign_with(add_payment),
        task(ship),
    ];
}

workflow! {
    pub workflow AssignedChart(Order) {
        pay  = event::<Payment>("payment").key(order_id).assign(payment).look_back(none);
        read = task(read_input);
        more = event::<Payment>("top_up").key(customer.id).assign_with(add_payment)
               .look_back(window(secs(60)));
        send = task(ship);

        start -> pay -> read -> more -> send;
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

async fn finished(rt: &Runtime, id: &str) -> Order {
    let Completion::Finished(output) = rt
        .await_completion(id, Duration::from_secs(5))
        .await
        .unwrap()
    else {
        panic!("not finished");
    };
    serde_json::from_value(output).unwrap()
}

fn drive<W: Workflow<Data = Order>>(key: &str) -> Order {
    block_on(async {
        let rt = Runtime::builder().register::<W>().build().unwrap();
        let id = rt.start::<W>(order(key)).await.unwrap().instance_id;
        // The typed constructors the macro generates: the payload type is checked by rustc.
        let report = rt
            .send(Assigned::payment(key, Payment { amount: 30 }))
            .await
            .unwrap();
        assert!(report.rejected.is_empty(), "{report:?}");
        rt.send(AssignedChart::top_up(
            format!("c-{key}"),
            Payment { amount: 12 },
        ))
        .await
        .unwrap();
        finished(&rt, &id).await
    })
}

#[test]
fn assign_folds_the_payload_into_the_data_in_a_sequence_and_a_flowchart() {
    for data in [drive::<Assigned>("o-1"), drive::<AssignedChart>("o-2")] {
        assert_eq!(data.payment, Some(Payment { amount: 30 }));
        assert_eq!(data.paid, 12);
        assert_eq!(data.log, ["input 30", "ship after 12"]);
    }
}

#[test]
fn the_macro_records_assign_and_look_back_in_the_definition() {
    let json = AssignedChart::definition().to_json_pretty();
    assert!(json.contains(r#""field": "payment""#), "{json}");
    assert!(json.contains(r#""function": "add_payment""#), "{json}");
    assert!(json.contains(r#""look_back": "none""#), "{json}");
    assert!(json.contains(r#""window""#), "{json}");
    assert!(AssignedChart::registry().has_assign("add_payment"));
}

#[test]
fn a_payload_that_does_not_fit_the_assigned_field_is_rejected_for_the_instance() {
    block_on(async {
        let rt = Runtime::builder().register::<Assigned>().build().unwrap();
        let id = rt
            .start::<Assigned>(order("o-3"))
            .await
            .unwrap()
            .instance_id;
        let report = rt
            .send(
                Stimulus::new("payment")
                    .key("o-3")
                    .payload(serde_json::json!({ "amount": "thirty" })),
            )
            .await
            .unwrap();
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Suspended);
        let data: Order = serde_json::from_value(snapshot.state.data().clone()).unwrap();
        assert_eq!(data.payment, None);
        // The instance still takes a payload that fits.
        rt.send(
            Stimulus::new("payment")
                .key("o-3")
                .payload(Payment { amount: 5 }),
        )
        .await
        .unwrap();
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        let data: Order = serde_json::from_value(snapshot.state.data().clone()).unwrap();
        assert_eq!(data.payment, Some(Payment { amount: 5 }));
    });
}

// The same two waits three times, the second with another look-back (RT-30): a `payment`
// sent while the instance waits for its `top_up` is queued before the `payment` wait exists,
// and `none` means that such an early event is not delivered to the wait.
workflow! {
    pub workflow EarlyNone(Order) {
        top = event::<Payment>("top_up").key(customer.id).assign_with(add_payment);
        pay = event::<Payment>("payment").key(order_id).assign(payment).look_back(none);
        send = task(ship);

        start -> top -> pay -> send;
    }
}

workflow! {
    pub workflow EarlyWindow(Order) {
        top = event::<Payment>("top_up").key(customer.id).assign_with(add_payment);
        pay = event::<Payment>("payment").key(order_id).assign(payment)
              .look_back(window(secs(60)));
        send = task(ship);

        start -> top -> pay -> send;
    }
}

workflow! {
    pub workflow EarlyDefault(Order) {
        top = event::<Payment>("top_up").key(customer.id).assign_with(add_payment);
        pay = event::<Payment>("payment").key(order_id).assign(payment);
        send = task(ship);

        start -> top -> pay -> send;
    }
}

/// Starts `W` for `key`, sends a `payment` of 1 while it waits for its `top_up`, then the
/// `top_up`, which moves it on to its `payment` wait: the instance's id.
async fn early_payment<W: Workflow<Data = Order>>(rt: &Runtime, key: &str) -> String {
    let id = rt.start::<W>(order(key)).await.unwrap().instance_id;
    let early = rt
        .send(
            Stimulus::new("payment")
                .key(key)
                .payload(Payment { amount: 1 }),
        )
        .await
        .unwrap();
    assert!(
        early.resumed.is_empty(),
        "nothing waits for it yet: {early:?}"
    );
    let top_up = rt
        .send(
            Stimulus::new("top_up")
                .key(format!("c-{key}"))
                .payload(Payment { amount: 2 }),
        )
        .await
        .unwrap();
    assert_eq!(top_up.resumed.len(), 1, "{top_up:?}");
    id
}

#[test]
fn look_back_none_does_not_deliver_an_event_sent_before_the_wait_exists() {
    block_on(async {
        let rt = Runtime::builder()
            .register::<EarlyNone>()
            .register::<EarlyWindow>()
            .register::<EarlyDefault>()
            .build()
            .unwrap();
        let none = early_payment::<EarlyNone>(&rt, "o-4").await;
        // A 60 s window and the default (`since_origin`) deliver the early payment to the
        // wait once it exists, and the instance finishes with it.
        for (workflow, key) in [("EarlyWindow", "o-6"), ("EarlyDefault", "o-7")] {
            let id = if workflow == "EarlyWindow" {
                early_payment::<EarlyWindow>(&rt, key).await
            } else {
                early_payment::<EarlyDefault>(&rt, key).await
            };
            let data = finished(&rt, &id).await;
            assert_eq!(data.payment, Some(Payment { amount: 1 }), "{workflow}");
        }
        // `none`: by then the early payment has not been delivered; the instance still waits.
        let snapshot = rt.get_state(&none).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Suspended);
        let data: Order = serde_json::from_value(snapshot.state.data().clone()).unwrap();
        assert_eq!((data.paid, data.payment), (2, None));
        // A payment sent now is delivered.
        rt.send(EarlyNone::payment("o-4", Payment { amount: 5 }))
            .await
            .unwrap();
        let data = finished(&rt, &none).await;
        assert_eq!(data.payment, Some(Payment { amount: 5 }));
        assert_eq!(data.log, ["ship after 2"]);
    });
}

// `#[state_machine]` takes the same event options.
#[state_machine(data = Order, initial = Waiting, name = "AssignedMachine")]
pub enum AssignedMachine {
    #[on(pay: event::<Payment>("payment").key(order_id).assign(payment).look_back(any) => Paid)]
    Waiting,
    #[on(top: event::<Payment>("top_up").key(customer.id).assign_with(add_payment) => Done)]
    Paid,
    Done,
}

#[test]
fn state_machine_events_assign_their_payloads() {
    block_on(async {
        let rt = Runtime::builder()
            .register::<AssignedMachine>()
            .build()
            .unwrap();
        let id = rt
            .start::<AssignedMachine>(order("o-5"))
            .await
            .unwrap()
            .instance_id;
        rt.send(
            Stimulus::new("payment")
                .key("o-5")
                .payload(Payment { amount: 7 }),
        )
        .await
        .unwrap();
        rt.send(AssignedMachine::top_up("c-o-5", Payment { amount: 8 }))
            .await
            .unwrap();
        let data = finished(&rt, &id).await;
        assert_eq!(data.payment, Some(Payment { amount: 7 }));
        assert_eq!(data.paid, 8);
    });
}

#[test]
fn generated_constructors_build_the_same_stimulus_as_the_untyped_builder() {
    let typed = Assigned::payment("o-9", Payment { amount: 3 });
    let untyped = Stimulus::new("payment")
        .key("o-9")
        .payload(Payment { amount: 3 });
    assert_eq!(typed.name, untyped.name);
    assert_eq!(typed.key, untyped.key);
    assert_eq!(typed.payload, untyped.payload);
    assert_eq!(
        AssignedMachine::payment("o-9", Payment { amount: 3 }).name,
        "payment"
    );
}
