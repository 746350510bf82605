#![allow(dead_code)]

use workflow_runtime::{Migration, Runtime, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order;

mod v1 {
    use super::Order;

    workflow_runtime::workflow! {
        #[workflow(name = "shipping")]
        pub workflow Shipping(Order) {
            paid = event("payment");
            start -> paid;
        }
    }
}

workflow! {
    #[workflow(name = "shipping")]
    pub workflow Shipping(Order) {
        paid = event("payment");
        start -> paid;
    }
}

// No `impl Migrate<v1::Shipping> for Shipping`.
async fn deploy(runtime: &Runtime) {
    let _ = runtime.migrate::<v1::Shipping, Shipping>(Migration::all()).await;
}

fn main() {}
