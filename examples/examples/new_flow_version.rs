//! Deploying a new version of a `workflow!` flowchart: the previous version kept in a `v1`
//! module with the same `name`, both versions running side by side, then the instances
//! waiting in `v1` moved to the new version, node by node, by a migration rustc checks.
//!
//! ```text
//! cargo run -p examples --example new_flow_version
//! ```
//!
//! It plays three processes on one SQLite file (`target/new-flow-version-example.db`, made
//! anew on each run) and a manual clock: the old deploy leaves shipments waiting at an event
//! and at a timer, the new deploy migrates them (the timer re-armed from when it started),
//! and a last deploy runs the new version alone to the end.

#![allow(clippy::print_stdout)]

use std::error::Error;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    ManualClock, Migrate, Migration, MigrationOutcome, Runtime, SqliteStore, StartOptions,
    Stimulus, Workflow, workflow,
};

/// The data of the first version.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShipmentV1 {
    order_id: String,
    total: u64,
}

/// The data of the new version: the total in cents, and a currency.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Shipment {
    order_id: String,
    total_cents: u64,
    currency: String,
}

/// The first version, kept as it was deployed so that its instances still run.
mod v1 {
    use workflow_runtime::workflow;

    workflow! {
        /// A shipment as the first version knew it: paid, an hour to cancel, shipped.
        #[workflow(name = "shipping")]
        pub workflow Shipping(super::ShipmentV1) {
            paid = event("payment").key(order_id);
            cooling = after(hours(1));
            shipped = event("shipped").key(order_id);

            start -> paid -> cooling -> shipped;
        }
    }
}

workflow! {
    /// The new version: the payment wait renamed, two hours to cancel, and packing.
    #[workflow(name = "shipping")]
    pub workflow Shipping(Shipment) {
        wait_payment = event("payment").key(order_id);
        cool_off = after(hours(2));
        packed = event("packed").key(order_id);
        shipped = event("shipped").key(order_id);

        start -> wait_payment -> cool_off -> packed -> shipped;
    }
}

/// How a waiting `v1` shipment becomes a new one. `workflow!` generates `ShippingNode`, one
/// variant per node an instance waits at. Leave out a `v1` node and this does not compile
/// (non-exhaustive match); name a node the new version lacks and it does not either.
impl Migrate<v1::Shipping> for Shipping {
    fn state(old: v1::ShippingNode) -> ShippingNode {
        match old {
            v1::ShippingNode::Paid => ShippingNode::WaitPayment,
            v1::ShippingNode::Cooling => ShippingNode::CoolOff,
            v1::ShippingNode::Shipped => ShippingNode::Shipped,
        }
    }

    fn data(old: ShipmentV1) -> Shipment {
        Shipment {
            order_id: old.order_id,
            total_cents: old.total * 100,
            currency: "EUR".to_owned(),
        }
    }
}

fn open(path: &Path) -> Result<Arc<SqliteStore>, Box<dyn Error>> {
    Ok(Arc::new(SqliteStore::open(path)?))
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
    let path = Path::new("target/new-flow-version-example.db");
    std::fs::create_dir_all("target")?;
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let clock = ManualClock::new(ManualClock::DEFAULT_START);
    let builder = || {
        Runtime::builder()
            .clock(Arc::new(clock.clone()))
            .timer_driver(false)
    };

    println!(
        "deploy 1: `shipping` version {}",
        short(v1::Shipping::version())
    );
    {
        let runtime = builder()
            .store(open(path)?)
            .register::<v1::Shipping>()
            .build()?;
        for id in ["s-1", "s-2"] {
            let shipment = ShipmentV1 {
                order_id: id.to_owned(),
                total: 12,
            };
            let options = StartOptions {
                instance_id: Some(id.to_owned()),
                ..StartOptions::default()
            };
            runtime
                .start_with::<v1::Shipping>(shipment, options)
                .await?;
        }
        // `s-2` is paid and cools off for an hour; `s-1` waits for its payment.
        send(&runtime, "payment", "s-2").await?;
        runtime.shutdown(Duration::from_secs(5)).await;
    }

    // Half an hour later, the new version is deployed.
    clock.advance(Duration::from_secs(30 * 60));
    println!(
        "deploy 2: `shipping` version {} beside {}",
        short(Shipping::version()),
        short(v1::Shipping::version())
    );
    {
        let runtime = builder()
            .store(open(path)?)
            .register_previous::<v1::Shipping>()
            .register::<Shipping>()
            .build()?;
        let dry = runtime
            .migrate::<v1::Shipping, Shipping>(Migration::all().dry_run())
            .await?;
        println!(
            "  dry run: {:?} would move, nothing written",
            dry.migrated()
        );
        let report = runtime
            .migrate::<v1::Shipping, Shipping>(Migration::all())
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
        // `s-2` cools off for two hours from when it started cooling, not from the deploy.
        for timer in runtime.store().list_timers("s-2").await? {
            let minutes = (timer.due_at - ManualClock::DEFAULT_START) / 60_000_000;
            println!("  s-2 cools off until start + {minutes} min");
        }
        runtime.shutdown(Duration::from_secs(5)).await;
    }

    println!(
        "deploy 3: `shipping` version {} alone",
        short(Shipping::version())
    );
    let runtime = builder()
        .store(open(path)?)
        .register::<Shipping>()
        .build()?;
    send(&runtime, "payment", "s-1").await?;
    clock.advance(Duration::from_secs(2 * 3600));
    let fired = runtime.fire_due_timers().await?;
    println!("  two hours later: {} timers fired", fired.fired.len());
    for id in ["s-1", "s-2"] {
        send(&runtime, "packed", id).await?;
        send(&runtime, "shipped", id).await?;
        let status = runtime.get_state(id).await?.map(|s| s.status());
        println!("  {id}: {status:?}");
    }
    runtime.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    run().await
}
