//! The trigger index and activation (RT-9 to RT-16): the event triggers of every
//! registered definition written to the store (RT-9 to RT-11), the activation strategies that
//! decide whether a matching trigger may start an instance (RT-15, RT-16), and the trigger
//! phase of a send.

use serde_json::Value;
use workflow_model::Activation;

use super::Router;
use super::delivery::Origin;
use crate::base::{lock, now_micros};
use crate::engine::state::TriggerStart;
use crate::identity::sha_hex;
use crate::identity::stimulus_hash;
use crate::routing::{Refusal, SendError, SendReport, Stimulus};
use crate::runtime::outcomes::StartOptions;
use crate::runtime::run_path::RunOptions;
use crate::store::{DefinitionRecord, Micros, StoreError, TriggerRow};

impl Router {
    /// Writes the event triggers of every registered definition to the store, each
    /// definition's set replaced by difference (RT-9 to RT-11): a definition registered
    /// without triggers has its rows removed. Done once per runtime, by
    /// `Runtime::start_workers` or the first send; call it again after
    /// another process changed the index to re-assert this process's view.
    pub(crate) async fn index_triggers(&self) -> Result<(), StoreError> {
        let now = now_micros();
        for name in self.definitions().names() {
            let Some(workflow) = self.definitions().get(name) else {
                continue;
            };
            let mut rows = Vec::new();
            for (node_id, event) in workflow.event_triggers() {
                // RT-9: a trigger's key is a data path, unknown before the start: it matches
                // its name with any key, so it is indexed under the keyless hash.
                let Ok(hash) = stimulus_hash(&event, None, None) else {
                    continue;
                };
                rows.push(TriggerRow {
                    definition_name: name.clone(),
                    definition_version: workflow.version().to_owned(),
                    node_id,
                    hash,
                    name: event,
                    key_display: None,
                    payload: Value::Null,
                    activation: serde_json::to_value(workflow.activation()).unwrap_or(Value::Null),
                    registered_at: now,
                });
            }
            self.store.replace_triggers(name, rows).await?;
            // Each registered version, current or previous (ENG-45), is recorded (JSON form
            // and fingerprint), so tools can show it without this application's code.
            for (version, _) in self.definitions().versions_of(name) {
                self.store
                    .put_definition(DefinitionRecord {
                        name: name.clone(),
                        version: version.version().to_owned(),
                        json: version.json().to_owned(),
                        recorded_at: now,
                    })
                    .await?;
            }
        }
        Ok(())
    }

    pub(crate) async fn ensure_triggers(&self) -> Result<(), StoreError> {
        self.triggers_indexed
            .get_or_try_init(|| self.index_triggers())
            .await
            .map(drop)
    }

    /// A non-final instance other than `except` whose correlation id is `cid`.
    pub(crate) async fn live_with_correlation(
        &self,
        cid: &str,
        except: &str,
    ) -> Result<Option<String>, StoreError> {
        // One indexed query, not a walk over documents.
        self.store.live_with_correlation(cid, Some(except)).await
    }

    /// The trigger hashes a stimulus can start by (its own and, with a key, its name's
    /// alone, RT-9), once this runtime's triggers are in the store.
    pub(crate) async fn trigger_hashes(
        &self,
        stimulus: &Stimulus,
        hash: &str,
    ) -> Result<Vec<String>, SendError> {
        self.ensure_triggers().await.map_err(SendError::Store)?;
        let mut hashes = vec![hash.to_owned()];
        if stimulus.key.is_some() {
            hashes.push(stimulus_hash(&stimulus.name, None, None)?);
        }
        Ok(hashes)
    }

    /// RT-15, RT-16, RT-13: starts the definitions whose trigger matches (`rows`, from
    /// [`Storage::find_routes`](crate::store::Storage::find_routes)).
    /// Returns whether an instance was created for it (or found created by an earlier try):
    /// such an instance holds the stimulus's receipt; and whether one was found created by an
    /// earlier try (the stimulus was delivered then, it is not listed as started now).
    pub(crate) async fn trigger_phase(
        &self,
        rows: Vec<TriggerRow>,
        stimulus: &Stimulus,
        stimulus_id: &str,
        sent_at: Micros,
        origin: Origin,
        report: &mut SendReport,
    ) -> Result<(bool, bool), SendError> {
        let mut created = false;
        let mut found = false;
        for row in rows {
            let registered = self.definitions().get(&row.definition_name);
            if registered.is_none_or(|w| w.version() != row.definition_version) {
                report.refused.push(Refusal::VersionNotRegistered {
                    definition: row.definition_name,
                    version: row.definition_version,
                });
                continue;
            }
            let scope = match self
                .definitions()
                .activation_scope(&row.definition_name, stimulus.correlation_id.as_deref())
            {
                Ok(scope) => scope,
                Err(refusal) => {
                    report.refused.push(refusal);
                    continue;
                }
            };
            // RT-19: a retry derives the same instance id and finds the instance.
            let instance_id = format!(
                "trg-{}",
                sha_hex(&[stimulus_id, &row.definition_name, &row.node_id])
                    .get(..40)
                    .unwrap_or_default()
            );
            let options = StartOptions {
                instance_id: Some(instance_id.clone()),
                correlation_id: stimulus.correlation_id.clone(),
                traceparent: stimulus.traceparent,
            };
            let trigger = TriggerStart {
                node_id: row.node_id.clone(),
                stimulus_id: stimulus_id.to_owned(),
                payload: stimulus.payload.clone(),
            };
            // RT-15 `Correlation` spans definitions: instances of definitions without a
            // correlation strategy hold no activation guard, so they are looked up first (not
            // atomic with the creation; instances of `Correlation` definitions are, RT-16).
            if let (Activation::Correlation, Some(cid)) = (
                self.definitions().activation_of(&row.definition_name),
                stimulus.correlation_id.as_deref(),
            ) && let Some(existing) = self
                .live_with_correlation(cid, &instance_id)
                .await
                .map_err(SendError::Store)?
            {
                report.refused.push(Refusal::ActivationRefused {
                    strategy: Activation::Correlation,
                    existing,
                });
                continue;
            }
            let mut new = match self.definitions().new_instance(
                &row.definition_name,
                stimulus.payload.clone(),
                options,
                None,
                Some(trigger),
            ) {
                Ok(new) => new,
                Err(error) => {
                    report.refused.push(Refusal::Rejected {
                        definition: row.definition_name,
                        message: error.to_string(),
                    });
                    continue;
                }
            };
            new.activation_scope = scope;
            new.origin_at = sent_at;
            // RT-19: a direct send's record is written with the instance it starts, so a
            // send retried after a crash finds it and neither starts nor queues anything.
            new.idempotency = lock(&self.pending_records)
                .get(stimulus_id)
                .map(|(record, _)| record.clone());
            let existed = match self.store.create_instance(new).await {
                Ok(_) => false,
                // A concurrent send with the key, or an earlier try of this send (RT-19),
                // created it: it is run if its first run did not happen, and reported as
                // started unless this send carries on that earlier try (`Origin`).
                Err(StoreError::AlreadyExists { .. }) => true,
                Err(StoreError::ActivationConflict { existing, .. }) => {
                    report.refused.push(Refusal::ActivationRefused {
                        strategy: self.definitions().activation_of(&row.definition_name),
                        existing,
                    });
                    continue;
                }
                Err(error) => return Err(SendError::Store(error)),
            };
            created = true;
            found |= existed;
            match self.run_path.run(&instance_id, RunOptions::first()).await {
                Ok(Some(started)) if !existed || origin != Origin::CarriedOn => {
                    report.started.push(started);
                }
                Ok(_) => {}
                Err(error) => report.not_delivered.push(error),
            }
        }
        Ok((created, found))
    }

    /// Removes the trigger rows of a definition no process registers any more (RT-11).
    pub(crate) async fn retire_definition(&self, name: &str) -> Result<(), StoreError> {
        self.store
            .replace_triggers(name, Vec::new())
            .await
            .map(drop)
    }
}
