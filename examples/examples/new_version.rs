//! Deploying a new version of a state machine: the previous version kept in a `v1` module with
//! the same `name`, both versions running side by side, then the waiting instances of `v1`
//! moved to the new version by a migration rustc checks.
//!
//! ```text
//! cargo run -p examples --example new_version
//! ```
//!
//! It plays three processes on one SQLite file (`target/new-version-example.db`, made anew on
//! each run): the old deploy leaves orders waiting, the new deploy runs both versions and
//! migrates, and a last deploy runs the new version alone.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Migrate, Migration, MigrationOutcome, Runtime, SqliteStore, StartOptions, Stimulus, Workflow,
    state_machine,
};

/// The data of the first version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OrderV1 {
    order_id: String,
    total: u64,
}

/// The data of the new version: the total in cents, and a currency.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    total_cents: u64,
    currency: String,
}

/// The first version, kept as it was deployed so that its instances still run.
mod v1 {
    use workflow_runtime::state_machine;

    /// An order as the first version knew it.
    #[state_machine(data = super::OrderV1, initial = New, name = "order")]
    pub enum OrderFlow {
        /// Waiting for its payment.
        #[on(pay: event("payment").key(order_id) => Paid)]
        New,
        /// Waiting to be shipped.
        #[on(ship: event("shipped").key(order_id) => Shipped)]
        Paid,
        /// Done.
        Shipped,
    }
}

/// The new version: `New` is now `Open`, which can be cancelled and expires after a week.
#[state_machine(data = Order, initial = Open, name = "order")]
pub enum OrderFlow {
    /// Waiting for its payment.
    #[on(pay: event("payment").key(order_id) => Paid)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    #[on(expire: after(Duration::from_secs(7 * 24 * 3600)) => Cancelled)]
    Open,
    /// Waiting to be shipped.
    #[on(ship: event("shipped").key(order_id) => Shipped)]
    Paid,
    /// Done.
    Shipped,
    /// Cancelled or expired.
    Cancelled,
}

/// How a waiting `v1` order becomes a new one. Leave out a `v1` state and this does not
/// compile (non-exhaustive match); name a state the new version lacks and it does not either.
impl Migrate<v1::OrderFlow> for OrderFlow {
    fn state(old: v1::OrderFlow) -> Self {
        match old {
            v1::OrderFlow::New => OrderFlow::Open,
            v1::OrderFlow::Paid => OrderFlow::Paid,
            v1::OrderFlow::Shipped => OrderFlow::Shipped,
        }
    }

    fn data(old: OrderV1) -> Order {
        Order {
            order_id: old.order_id,
            total_cents: old.total * 100,
            currency: "EUR".to_owned(),
        }
    }
}

fn open(path: &Path) -> Result<Arc<SqliteStore>, Box<dyn Error>> {
    Ok(Arc::new(SqliteStore::open(path)?))
}

fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

async fn send(runtime: &Runtime, name: &str, key: &str) -> Result<(), Box<dyn Error>> {
    let report = runtime.send(Stimulus::new(name).key(key)).await?;
    let reached: Vec<&str> = report
        .resumed
        .iter()
        .map(|r| r.instance_id.as_str())
        .collect();
    println!("  sent `{name}` for {key}: reached {reached:?}");
    Ok(())
}

fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let path = Path::new("target/new-version-example.db");
    std::fs::create_dir_all("target")?;
    if path.exists() {
        std::fs::remove_file(path)?;
    }

    println!(
        "deploy 1: `order` version {}",
        short(v1::OrderFlow::version())
    );
    {
        let runtime = Runtime::builder()
            .store(open(path)?)
            .register::<v1::OrderFlow>()
            .build()?;
        for id in ["o-1", "o-2"] {
            let order = OrderV1 {
                order_id: id.to_owned(),
                total: 12,
            };
            runtime
                .start_with::<v1::OrderFlow>(order, with_id(id))
                .await?;
        }
        send(&runtime, "payment", "o-2").await?;
        runtime.shutdown(Duration::from_secs(5)).await;
    }

    println!(
        "deploy 2: `order` version {} beside {}",
        short(OrderFlow::version()),
        short(v1::OrderFlow::version())
    );
    {
        let runtime = Runtime::builder()
            .store(open(path)?)
            .register_previous::<v1::OrderFlow>()
            .register::<OrderFlow>()
            .build()?;
        // New orders start on the new version; the old ones go on on theirs.
        let order = Order {
            order_id: "o-3".to_owned(),
            total_cents: 900,
            currency: "EUR".to_owned(),
        };
        runtime
            .start_with::<OrderFlow>(order, with_id("o-3"))
            .await?;
        for id in ["o-1", "o-2", "o-3"] {
            if let Some(snapshot) = runtime.get_state(id).await? {
                println!("  {id} runs version {}", short(snapshot.version()));
            }
        }

        let dry = runtime
            .migrate::<v1::OrderFlow, OrderFlow>(Migration::all().dry_run())
            .await?;
        println!(
            "  dry run: {:?} would move, nothing written",
            dry.migrated()
        );
        let report = runtime
            .migrate::<v1::OrderFlow, OrderFlow>(Migration::all())
            .await?;
        for instance in &report.instances {
            if let MigrationOutcome::Migrated {
                from_state,
                to_state,
                ..
            } = &instance.outcome
            {
                println!(
                    "  migrated {}: {from_state} -> {to_state}",
                    instance.instance_id
                );
            } else {
                println!("  {}: {:?}", instance.instance_id, instance.outcome);
            }
        }
        runtime.shutdown(Duration::from_secs(5)).await;
    }

    println!(
        "deploy 3: `order` version {} alone",
        short(OrderFlow::version())
    );
    let runtime = Runtime::builder()
        .store(open(path)?)
        .register::<OrderFlow>()
        .build()?;
    println!(
        "  versions nobody here runs: {:?}",
        runtime.unregistered_versions().await?
    );
    send(&runtime, "cancel", "o-1").await?;
    send(&runtime, "shipped", "o-2").await?;
    send(&runtime, "payment", "o-3").await?;
    send(&runtime, "shipped", "o-3").await?;
    for id in ["o-1", "o-2", "o-3"] {
        let state = runtime.current_state::<OrderFlow>(id).await?;
        println!("  {id} ended in {state:?}");
    }
    runtime.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    run().await
}
