//! The runtime the command line acts through: one without the application's workflows, so
//! each action is a request that the process running the instance honours.

use workflow_runtime::store::Storage;
use workflow_runtime::{Retention, Runtime};

use crate::error::CliError;

/// A runtime over `store` that runs no background work and owns no instance: `who` names it
/// as the lease owner (`workflow-cli`, `workflow console`).
pub(crate) fn operator_runtime(store: Storage, who: &str) -> Result<Runtime, CliError> {
    Runtime::builder()
        .store(store)
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .retention(Retention::off())
        .owner(format!("{who} pid {}", std::process::id()))
        .build()
        .map_err(|e| CliError::Input(format!("cannot prepare the {who} runtime: {e}")))
}
