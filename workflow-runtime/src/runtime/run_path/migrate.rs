//! One instance's migration (ENG-54): under this process's turn and the instance's lease, the
//! waiting instance's state machine state and data are mapped to the new version, the new
//! version's run places the machine there (its transitions armed, its entry not run again)
//! and one commit writes the document, the status, the bookmark and timer diff, the journal
//! entry and the new version on the instance and its bookmark rows. Anything that fails
//! before that commit leaves the instance as it was. A dry run reads the instance without
//! a lease and writes nothing.

use std::sync::Arc;

use serde_json::{Value, json};

use super::RunPath;
use crate::base::{lock, now_micros};
use crate::engine::executor::{RunError, RunTarget};
use crate::engine::names::{CURRENT_STATE, ENTERED_AT};
use crate::engine::state::{JournalKind, SubStatus, WorkflowState, WorkflowStatus};
use crate::runtime::document::decode_loaded;
use crate::runtime::migration::{MigrationOutcome, MigrationRefusal};
use crate::runtime::registered::ErasedWorkflow;
use crate::store::StoreError;

/// Maps a previous version's state name and data to the new version's.
pub(crate) type StateMap<'a> =
    dyn Fn(&str, Value) -> Result<(String, Value), MigrationRefusal> + Send + Sync + 'a;

/// What one instance's migration moves it between.
pub(crate) struct Move<'a> {
    /// The definition name.
    pub(crate) name: &'a str,
    /// The version the instance must be pinned to.
    pub(crate) from: &'a str,
    /// The registered version it moves to.
    pub(crate) to: Arc<dyn ErasedWorkflow>,
    /// The state and data mapping.
    pub(crate) map: &'a StateMap<'a>,
    /// Report only.
    pub(crate) dry_run: bool,
    /// The new version runs without the application's code (a recorded definition): a move
    /// whose first run does not leave the instance waiting is refused.
    pub(crate) without_code: bool,
}

/// The root state machine's current state and when it was entered, if the root is one.
fn machine_position(state: &WorkflowState) -> Option<(String, Option<Value>)> {
    let root = state.root.and_then(|r| state.context(r))?;
    let current = root.properties.get(CURRENT_STATE)?.as_str()?.to_owned();
    Some((current, root.properties.get(ENTERED_AT).cloned()))
}

impl RunPath {
    /// Migrates one instance (see the module docs); the outcome says what happened to it.
    pub(crate) async fn migrate_instance(
        &self,
        instance_id: &str,
        plan: &Move<'_>,
    ) -> MigrationOutcome {
        let refused = MigrationOutcome::Refused;
        // A run of this process holds the instance: it is running.
        let Some(_turn) = self.try_turn(instance_id) else {
            return refused(MigrationRefusal::Running);
        };
        if plan.dry_run {
            return self.dry_run_instance(instance_id, plan).await;
        }
        let guard = match self.lease(instance_id).await {
            Ok(guard) => guard,
            Err(StoreError::LeaseHeld { .. }) => return refused(MigrationRefusal::Running),
            Err(error) => {
                return refused(MigrationRefusal::Failed {
                    message: error.to_string(),
                });
            }
        };
        let (mut state, commits) = match self.load(&guard).await {
            Ok(loaded) => loaded,
            Err(error) => {
                guard.release().await;
                return refused(MigrationRefusal::Failed {
                    message: error.to_string(),
                });
            }
        };
        let outcome = self.checked_move(&mut state, plan);
        let (from_state, to_state, entered_at, data) = match outcome {
            Ok(found) => found,
            Err(why) => {
                guard.release().await;
                return refused(why);
            }
        };
        let to_version = plan.to.version().to_owned();
        let now = self.now();
        // The instance keeps its identity, links, journal and counters; its activity tree,
        // work and waits are the new version's, built by the run below.
        state.definition.version.clone_from(&to_version);
        state.contexts.clear();
        state.root = None;
        state.queue.clear();
        state.callbacks.clear();
        state.bookmarks.clear();
        state.trigger = None;
        state.data = data;
        state.journal.record(
            JournalKind::Migrated,
            None,
            &json!({
                "from_version": plan.from,
                "to_version": to_version,
                "from": from_state,
                "to": to_state,
            }),
            now,
        );
        let target = RunTarget::Migrated {
            state: to_state.clone(),
            entered_at,
        };
        let settings = self.engine_settings(None);
        let output = match plan
            .to
            .run(state, target, settings, self.middleware(), None)
            .await
        {
            Ok(output) => output,
            Err(error) => {
                guard.release().await;
                return refused(MigrationRefusal::Failed {
                    message: error.to_string(),
                });
            }
        };
        if plan.without_code
            && (output.state.status, output.state.sub_status)
                != (WorkflowStatus::Suspended, Some(SubStatus::Waiting))
        {
            guard.release().await;
            return refused(MigrationRefusal::Failed {
                message: format!(
                    "state `{to_state}` of the new version does not wait without the application's code; migrate from the application"
                ),
            });
        }
        lock(&commits.tracker).repin = Some(to_version);
        match self.commit_and_publish(&commits, output, true).await {
            Ok((_, started)) => {
                guard.released_by_commit();
                MigrationOutcome::Migrated {
                    from_state,
                    to_state,
                    status: started.status,
                    sub_status: started.sub_status,
                }
            }
            Err(error) => {
                guard.release().await;
                refused(MigrationRefusal::Failed {
                    message: migration_failure(&error),
                })
            }
        }
    }

    /// A dry run's check of one instance: read without a lease (nothing is written, not even
    /// a lease), a lease held by anyone reported as running.
    async fn dry_run_instance(&self, instance_id: &str, plan: &Move<'_>) -> MigrationOutcome {
        let failed =
            |message: String| MigrationOutcome::Refused(MigrationRefusal::Failed { message });
        let record = match self.store().load_instance_text(instance_id).await {
            Ok(record) => record,
            Err(error) => return failed(error.to_string()),
        };
        if record
            .lease
            .as_ref()
            .is_some_and(|lease| lease.expires_at > now_micros())
        {
            return MigrationOutcome::Refused(MigrationRefusal::Running);
        }
        let mut state = match decode_loaded(instance_id, &record.state) {
            Ok(state) => state,
            Err(error) => return failed(error.to_string()),
        };
        match self.checked_move(&mut state, plan) {
            Ok((from_state, to_state, _, _)) => MigrationOutcome::WouldMigrate {
                from_state,
                to_state,
            },
            Err(why) => MigrationOutcome::Refused(why),
        }
    }

    /// Whether the loaded instance may move, and where to: its state, the new state, when
    /// it was entered and the new data.
    fn checked_move(
        &self,
        state: &mut WorkflowState,
        plan: &Move<'_>,
    ) -> Result<(String, String, Option<Value>, Value), MigrationRefusal> {
        if state.definition.name != plan.name || state.definition.version != plan.from {
            return Err(MigrationRefusal::OtherVersion {
                version: state.definition.version.clone(),
            });
        }
        match (state.status, state.sub_status) {
            (WorkflowStatus::Suspended, Some(SubStatus::Waiting)) => {}
            (WorkflowStatus::Running, Some(SubStatus::Executing)) => {
                // Interrupted mid-run (its process died): recovery runs it first.
                return Err(MigrationRefusal::Running);
            }
            (status, sub) => {
                let status = match sub {
                    Some(sub) => format!("{status}/{sub}"),
                    None => status.to_string(),
                };
                return Err(MigrationRefusal::NotWaiting { status });
            }
        }
        let (from_state, entered_at) =
            machine_position(state).ok_or(MigrationRefusal::NoCurrentState)?;
        let (to_state, data) = (plan.map)(&from_state, std::mem::take(&mut state.data))?;
        let known = plan
            .to
            .machine_states()
            .is_some_and(|states| states.contains(&to_state));
        if !known {
            return Err(MigrationRefusal::UnmappedState { state: from_state });
        }
        plan.to
            .check_data(&data)
            .map_err(|(path, message)| MigrationRefusal::Data {
                message: match path {
                    Some(path) => format!("{path}: {message}"),
                    None => message,
                },
            })?;
        Ok((from_state, to_state, entered_at, data))
    }
}

/// A failed migration's message: the store's own words for a store error.
fn migration_failure(error: &RunError) -> String {
    match error {
        RunError::Store { error, .. } => error.to_string(),
        other => other.to_string(),
    }
}
