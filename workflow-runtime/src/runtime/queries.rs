//! Reading instances (ENG-48, ENG-51): snapshots with their journal, typed current states,
//! awaiting completion, listings, the definitions live instances pin, incidents; and removing
//! final instances (ST-31).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::document::{journal_entry, load_state};
use super::errors::{AwaitError, PurgeError, StateError};
use super::list::{InstanceQuery, InstanceSummary, list_instances};
use super::outcomes::{Completion, InstanceSnapshot};
use super::run_path::RunPath;
use crate::base::now_micros;
use crate::engine::state::{Incident, WorkflowState, WorkflowStatus};
use crate::store::{InstanceFilter, InstanceStatus, PurgeFilter, StoreError};
use crate::workflow::StateMachineWorkflow;

/// How often [`Queries::await_completion`] re-reads the store without a local commit.
const AWAIT_POLL: Duration = Duration::from_millis(200);

/// Reads instances.
pub(crate) struct Queries {
    run_path: Arc<RunPath>,
}

impl Queries {
    pub(crate) fn new(run_path: Arc<RunPath>) -> Self {
        Self { run_path }
    }

    async fn load_state(&self, instance_id: &str) -> Result<Option<WorkflowState>, StateError> {
        load_state(self.run_path.store(), instance_id).await
    }

    /// A snapshot of an instance, or `None` for an unknown id (ENG-51).
    pub(crate) async fn get_state(
        &self,
        instance_id: &str,
    ) -> Result<Option<InstanceSnapshot>, StateError> {
        let store_error = |error| StateError::Store {
            instance: instance_id.to_owned(),
            error,
        };
        let Some(state) = self.load_state(instance_id).await? else {
            return Ok(None);
        };
        let mut entries = Vec::new();
        let mut journal_damage = Vec::new();
        let mut from = 1;
        loop {
            let page = match self
                .run_path
                .store()
                .read_journal(instance_id, from, 1000)
                .await
            {
                Ok(page) => page,
                // ST-22: a journal row that does not decode hides neither the state nor the
                // other rows: it is named in the snapshot, and the reading goes on past it.
                Err(StoreError::Decode {
                    what: "journal row",
                    id,
                    path,
                    message,
                }) => {
                    tracing::warn!(
                        instance = instance_id,
                        row = id.as_str(),
                        message = message.as_str(),
                        "get_state: a journal row does not decode; its entries are left out"
                    );
                    let past = damaged_row_end(&id).filter(|last| *last >= from);
                    journal_damage.push(format!("journal row {id} at `{path}`: {message}"));
                    match past {
                        Some(last) => {
                            from = last + 1;
                            continue;
                        }
                        None => break,
                    }
                }
                Err(error) => return Err(store_error(error)),
            };
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            entries.extend(page.into_iter().filter_map(journal_entry));
        }
        // ENG-42: the journal shown is bounded like the instance's.
        let journal =
            crate::engine::state::compact_entries(entries, state.journal.max_entries.max(2));
        Ok(Some(InstanceSnapshot {
            state,
            journal,
            journal_damage,
        }))
    }

    /// Definitions pinned by live instances that this runtime does not run (ENG-46).
    pub(crate) async fn unregistered_versions(
        &self,
    ) -> Result<Vec<(String, String, u64)>, StoreError> {
        let mut found: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for status in [
            InstanceStatus::Running,
            InstanceStatus::Suspended,
            InstanceStatus::Faulted,
        ] {
            let mut filter = InstanceFilter {
                status: Some(status),
                limit: 500,
                ..InstanceFilter::default()
            };
            loop {
                let page = self.run_path.store().list_instances(filter.clone()).await?;
                let Some(last) = page.last() else { break };
                filter.after = Some(last.instance_id.clone());
                for listed in &page {
                    let Ok(record) = &listed.summary else {
                        continue;
                    };
                    // ENG-45: a previous version registered here runs its instances.
                    if !self
                        .run_path
                        .definitions()
                        .runs(&record.definition_name, &record.definition_version)
                    {
                        *found
                            .entry((
                                record.definition_name.clone(),
                                record.definition_version.clone(),
                            ))
                            .or_default() += 1;
                    }
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|((name, version), count)| (name, version, count))
            .collect())
    }

    /// The typed current state of a state-machine instance.
    pub(crate) async fn current_state<W: StateMachineWorkflow>(
        &self,
        instance_id: &str,
    ) -> Result<Option<W::State>, StateError> {
        let snapshot = self
            .load_state(instance_id)
            .await?
            .map(|state| InstanceSnapshot {
                journal_damage: Vec::new(),
                state,
                journal: Vec::new(),
            });
        Ok(snapshot
            .as_ref()
            .and_then(InstanceSnapshot::current_state)
            .and_then(W::state_from_name))
    }

    /// Waits until the instance is final or faulted, at most `timeout` (ENG-48).
    pub(crate) async fn await_completion(
        &self,
        instance_id: &str,
        timeout: Duration,
    ) -> Result<Completion, AwaitError> {
        let watches = self.run_path.watches();
        let mut receiver = watches.subscribe(instance_id);
        let not_found = || AwaitError::InstanceNotFound {
            instance: instance_id.to_owned(),
        };
        let mut status = WorkflowStatus::Running;
        let wait = async {
            loop {
                receiver.borrow_and_update();
                let state = match self.load_state(instance_id).await {
                    Ok(Some(state)) => state,
                    Ok(None) => return Err(not_found()),
                    Err(error) => {
                        return Err(AwaitError::State {
                            instance: instance_id.to_owned(),
                            error,
                        });
                    }
                };
                status = state.status;
                match state.status {
                    WorkflowStatus::Finished => {
                        return Ok(Completion::Finished(state.output.unwrap_or(Value::Null)));
                    }
                    WorkflowStatus::Cancelled => {
                        return Ok(Completion::Cancelled(state.cancel_reason));
                    }
                    WorkflowStatus::Faulted => {
                        if let Some(incident) = state.incidents.last().cloned() {
                            return Err(AwaitError::Faulted {
                                incident: Box::new(incident),
                            });
                        }
                    }
                    WorkflowStatus::Running | WorkflowStatus::Suspended => {}
                }
                // Woken by this runtime's commits, and re-reading the store now and then for
                // another process's.
                if let Ok(Err(_)) = tokio::time::timeout(AWAIT_POLL, receiver.changed()).await {
                    return Err(not_found());
                }
            }
        };
        let result = match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result,
            Err(_) => Err(AwaitError::Timeout {
                instance: instance_id.to_owned(),
                status,
            }),
        };
        drop(receiver);
        // The last awaiter of the instance forgets its watch.
        watches.release(instance_id);
        result
    }

    /// Lists the store's instances matching `query`.
    pub(crate) async fn list_instances(
        &self,
        query: InstanceQuery,
    ) -> Result<Vec<InstanceSummary>, StoreError> {
        list_instances(self.run_path.store(), query).await
    }

    /// The incidents recorded against an instance (FLT-6); `None` for an unknown id.
    pub(crate) async fn incidents(
        &self,
        instance_id: &str,
    ) -> Result<Option<Vec<Incident>>, StateError> {
        Ok(self.load_state(instance_id).await?.map(|s| s.incidents))
    }

    /// Removes a final instance with its journal (ST-31).
    pub(crate) async fn purge(&self, instance_id: &str) -> Result<(), PurgeError> {
        match self.run_path.store().delete_instance(instance_id).await {
            Ok(()) => {
                self.run_path.watches().remove(instance_id);
                Ok(())
            }
            Err(StoreError::NotFound { .. }) => Err(PurgeError::InstanceNotFound {
                instance: instance_id.to_owned(),
            }),
            Err(StoreError::NotTerminal { status, .. }) => Err(PurgeError::NotTerminal { status }),
            Err(error) => Err(PurgeError::Store {
                instance: instance_id.to_owned(),
                error,
            }),
        }
    }

    /// Removes the final instances that became final more than `older_than` ago (ST-31).
    pub(crate) async fn purge_finished(&self, older_than: Duration) -> Result<u64, StoreError> {
        let age = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let cut_off = now_micros().saturating_sub(age);
        self.run_path
            .store()
            .purge(PurgeFilter::finished_before(cut_off))
            .await
    }
}

/// The last entry of a journal row named by its `Decode` error (`"<instance> (entries <first>
/// to <last>)"`, ST-22), to read on past it.
fn damaged_row_end(id: &str) -> Option<u64> {
    let (_, tail) = id.rsplit_once(" to ")?;
    tail.strip_suffix(')')?.parse().ok()
}
