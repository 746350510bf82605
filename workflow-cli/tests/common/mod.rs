//! What the end-to-end tests of the `workflow` binary share: the application's workflows
//! (an order waiting for its payment, a job whose printer fails) and running the binary.

#![allow(clippy::unwrap_used, dead_code, unreachable_pub)]

use std::process::Command;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Runtime, RuntimeBuilder, StartOptions, TaskContext, TaskError, WorkflowStatus, state_machine,
    workflow,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub paid: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    pub amount: u64,
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(())
}

#[state_machine(data = Order, initial = New)]
pub enum CliOrder {
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, action = record_payment)]
    New,
    Paid,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
}

/// Jobs whose printer an operator has repaired: they print instead of failing.
pub static REPAIRED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn always_fails(ctx: &mut TaskContext<Job>) -> Result<(), TaskError> {
    let repaired = REPAIRED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&ctx.data().name);
    if repaired {
        return Ok(());
    }
    Err(TaskError::permanent("the printer is on fire"))
}

workflow! {
    pub workflow CliJob(Job) = sequence [print = task(always_fails)];
}

/// The application's builder over `builder`'s store: both workflows registered.
pub fn registered(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder.register::<CliOrder>().register::<CliJob>()
}

pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary with `store` (the arguments naming the store) then `args`.
pub fn run(store: &[String], args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_workflow"))
        .args(store)
        .args(args)
        .env_remove("WORKFLOW_STORE")
        .env_remove("WORKFLOW_SCHEMA")
        .output()
        .unwrap();
    Output {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// [`run`] without blocking the application's tasks.
pub async fn run_async(store: &[String], args: &[&str]) -> Output {
    let store = store.to_vec();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&store, &args)
    })
    .await
    .unwrap()
}

pub fn order(id: &str) -> Order {
    Order {
        order_id: id.to_owned(),
        paid: 0,
    }
}

pub fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

/// Two orders waiting for their payment (`o-1`, `o-2`) and one faulted job (`job-1`).
pub async fn populate(rt: &Runtime) {
    rt.start_with::<CliOrder>(order("o-1"), with_id("o-1"))
        .await
        .unwrap();
    rt.start_with::<CliOrder>(order("o-2"), with_id("o-2"))
        .await
        .unwrap();
    let job = rt
        .start_with::<CliJob>(
            Job {
                name: "report".into(),
            },
            with_id("job-1"),
        )
        .await;
    assert!(job.is_ok(), "{job:?}");
}

pub async fn status_in(
    app: &Runtime,
    id: &str,
) -> (WorkflowStatus, Option<workflow_runtime::SubStatus>) {
    let snapshot = app.get_state(id).await.unwrap().unwrap();
    (snapshot.status(), snapshot.sub_status())
}

/// Polls `id` until its current state is `state` (at most 5 s); returns the last one seen.
pub async fn wait_for_state(app: &Runtime, id: &str, state: &str) -> Option<String> {
    let mut seen = None;
    for _ in 0..100 {
        seen = app
            .get_state(id)
            .await
            .unwrap()
            .unwrap()
            .current_state()
            .map(str::to_owned);
        if seen.as_deref() == Some(state) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    seen
}
