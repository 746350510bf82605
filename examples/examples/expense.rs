//! The expense approval flowchart declared with `workflow!`, run end to end: small expenses are
//! approved at once, large ones rejected, and the others wait for a manager's decision, an
//! `expense.decision` event whose payload chooses the outcome (ACT-19).
//!
//! ```text
//! cargo run -p examples --example expense
//! ```
//!
//! The same flowchart as JSON is `workflow-model/docs/expense.json` (the `definitions` example
//! loads it); both give the same definition and version fingerprint.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    ChooseOutcome, Completion, JournalKind, Outcome, Runtime, SqliteStore, Stimulus, TaskContext,
    TaskError, Workflow, workflow,
};

/// The expense's data, persisted with the instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExpenseData {
    expense_id: String,
    amount: u64,
    paid: bool,
    notified: bool,
}

/// The payload of an `expense.decision` event.
#[derive(Debug, Serialize, Deserialize)]
pub struct Decision {
    approved: bool,
}

/// The manager's decision chooses the event's outcome port.
impl ChooseOutcome for Decision {
    fn outcome(&self) -> &str {
        if self.approved {
            "approved"
        } else {
            "rejected"
        }
    }
}

async fn submit_expense(ctx: &mut TaskContext<ExpenseData>) -> Result<(), TaskError> {
    if ctx.data().expense_id.is_empty() {
        return Err(TaskError::permanent("an expense needs an id"));
    }
    Ok(())
}

/// Below 100 approved, from 10 000 rejected, otherwise a manager decides.
async fn auto_review(ctx: &mut TaskContext<ExpenseData>) -> Outcome {
    match ctx.data().amount {
        0..100 => Outcome::named("approved"),
        100..10_000 => Outcome::named("manual"),
        _ => Outcome::named("rejected"),
    }
}

async fn pay_out(ctx: &mut TaskContext<ExpenseData>) {
    ctx.data_mut().paid = true;
}

async fn notify_rejected(ctx: &mut TaskContext<ExpenseData>) {
    ctx.data_mut().notified = true;
}

workflow! {
    /// Expense approval.
    pub workflow Expense(ExpenseData) {
        submit  = task(submit_expense);
        review  = task(auto_review) -> [approved, rejected, manual];
        manager = event::<Decision>("expense.decision").key(expense_id) -> [approved, rejected];
        pay     = task(pay_out);
        reject  = task(notify_rejected);

        start -> submit -> review;
        review.approved -> pay;   review.rejected -> reject;   review.manual -> manager;
        manager.approved -> pay;  manager.rejected -> reject;
    }
}

/// The nodes an instance ran, in completion order, and those it skipped.
async fn visited(
    runtime: &Runtime,
    id: &str,
) -> Result<(Vec<String>, Vec<String>), Box<dyn Error>> {
    let Some(snapshot) = runtime.get_state(id).await? else {
        return Err(format!("instance {id} not found").into());
    };
    let local = |kind: JournalKind| -> Vec<String> {
        snapshot
            .journal()
            .iter()
            .filter(|e| e.kind == kind)
            .filter_map(|e| e.node_id.as_deref())
            .filter_map(|n| n.strip_prefix("root:"))
            .map(str::to_owned)
            .collect()
    };
    Ok((local(JournalKind::Completed), local(JournalKind::Skipped)))
}

async fn run() -> Result<(), Box<dyn Error>> {
    // The store: SQLite in a file, the embedded default. `MemoryStore::new()` would do for tests.
    let path = std::env::var_os("EXPENSE_EXAMPLE_DB")
        .map_or_else(|| PathBuf::from("target/expense-example.db"), PathBuf::from);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let store = Arc::new(SqliteStore::open(&path)?);
    let runtime = Runtime::builder()
        .store(store)
        .register::<Expense>()
        .build()?;
    runtime.recover().await?;
    println!(
        "workflow `{}` version {} on SQLite file {}",
        Expense::name(),
        Expense::version(),
        path.display()
    );

    // (expense id, amount, the manager's decision when one is asked for)
    let expenses = [
        ("e-1", 42, None),
        ("e-2", 25_000, None),
        ("e-3", 800, Some(true)),
        ("e-4", 1_500, Some(false)),
    ];
    for (expense_id, amount, decision) in expenses {
        let data = ExpenseData {
            expense_id: expense_id.into(),
            amount,
            ..ExpenseData::default()
        };
        let started = runtime.start::<Expense>(data).await?;
        let id = started.instance_id;
        println!(
            "\nexpense {expense_id} of {amount}: instance {id}, {}",
            started.status
        );
        if let Some(approved) = decision {
            let payload = serde_json::to_value(Decision { approved })?;
            let report = runtime
                .send(
                    Stimulus::new("expense.decision")
                        .key(expense_id)
                        .payload(payload.clone()),
                )
                .await?;
            println!(
                "  sent `expense.decision` {payload}: resumed {} instance(s)",
                report.resumed.len()
            );
        }
        let Completion::Finished(output) = runtime
            .await_completion(&id, Duration::from_secs(1))
            .await?
        else {
            return Err(format!("expense {expense_id} did not finish").into());
        };
        let (ran, skipped) = visited(&runtime, &id).await?;
        println!("  visited: {}", ran.join(" -> "));
        println!("  skipped: {}", skipped.join(", "));
        println!("  finished with data {output}");
    }

    println!("\n{}", Expense::mermaid());
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?
        .block_on(run())
}
