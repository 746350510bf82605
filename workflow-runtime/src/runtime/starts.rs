//! Starting instances (ENG-48): a new instance is created in the store (`Running/Pending`,
//! version 1) and its first run follows in the caller's task; a start whose first run fails
//! keeps nothing.

use std::sync::Arc;

use serde_json::Value;

use super::document::{decode_document, encode_document, run_store_error};
use super::errors::StartError;
use super::outcomes::StartOptions;
use super::run_path::{RunOptions, RunPath};
use crate::base::now_micros;
use crate::engine::executor::RunError;
use crate::engine::state::{ParentLink, WorkflowStatus};
use crate::routing::Refusal;
use crate::status::Started;
use crate::store::{Commit, InstanceStatus, StoreError};

/// Starts instances.
pub(crate) struct Starts {
    run_path: Arc<RunPath>,
}

impl Starts {
    pub(crate) fn new(run_path: Arc<RunPath>) -> Self {
        Self { run_path }
    }

    /// Creates the instance in the store (`Running/Pending`, version 1) and runs its first
    /// run, with its parent when a SubWorkflow starts it (ACT-24).
    pub(crate) async fn start(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
    ) -> Result<Started, StartError> {
        let run_path = &*self.run_path;
        let definitions = run_path.definitions();
        let correlation = options.correlation_id.clone();
        let (mut new, state) =
            definitions.new_instance_with_state(name, input, options, parent.clone(), None)?;
        if parent.is_none() {
            // RT-16: `start` applies the activation strategy too.
            new.activation_scope = definitions
                .activation_scope(name, correlation.as_deref())
                .map_err(|refusal| StartError::ActivationRefused { refusal })?;
        }
        let instance_id = new.instance_id.clone();
        // Held from the creation through the first run: this process's recovery sweep leaves
        // the new instance to it.
        let turn = run_path.turn(&instance_id).await;
        let document = new.state.0.clone();
        let created = run_path.store().create_instance(new).await;
        match created {
            // ENG-53: its first run, just below, starts from this state.
            Ok(version) => run_path.keep_state(version, document, state),
            Err(StoreError::AlreadyExists { .. }) => {
                return Err(StartError::InstanceExists {
                    instance: instance_id,
                });
            }
            Err(StoreError::ActivationConflict { existing, .. }) => {
                return Err(StartError::ActivationRefused {
                    refusal: Refusal::ActivationRefused {
                        strategy: definitions.activation_of(name),
                        existing,
                    },
                });
            }
            Err(StoreError::Invalid {
                what: "instance_id",
                reason,
            }) => {
                return Err(StartError::InvalidInstanceId {
                    id: instance_id,
                    reason,
                });
            }
            Err(StoreError::Invalid { reason, .. }) => {
                return Err(StartError::Input {
                    path: None,
                    message: reason,
                });
            }
            Err(StoreError::TooLarge { size, limit, .. }) => {
                return Err(StartError::StateTooLarge {
                    instance: instance_id,
                    size,
                    limit,
                });
            }
            Err(error) => return Err(StartError::Run(run_store_error(&instance_id, error))),
        }
        let first = RunOptions::first().refusing_too_large().in_turn(&turn);
        match run_path.run(&instance_id, first).await {
            Ok(Some(started)) => Ok(started),
            Ok(None) => Err(StartError::Run(RunError::Store {
                instance: instance_id.clone(),
                error: StoreError::NotFound {
                    what: "instance",
                    id: instance_id,
                },
            })),
            // ST-24: the first run grew over the limit after it had committed; the instance
            // stays, faulted with a `state_too_large` incident.
            Err(error @ RunError::StateTooLarge { .. }) => Err(StartError::Run(error)),
            Err(error) => {
                // Nothing is kept of a start whose first run failed (unless the store is
                // unreachable: then recovery runs it later).
                self.discard(&instance_id).await;
                match error {
                    // ST-24: refused to the caller, who still holds the input.
                    RunError::Store {
                        error: StoreError::TooLarge { size, limit, .. },
                        ..
                    } => Err(StartError::StateTooLarge {
                        instance: instance_id,
                        size,
                        limit,
                    }),
                    error => Err(StartError::Run(error)),
                }
            }
        }
    }

    /// Creates the instance inside the application's transaction `conn` (ST-37), without
    /// running it: after the commit, the recovery sweep of whichever process hears of it
    /// runs it. Nothing exists if the transaction rolls back. Returns its id.
    #[cfg(feature = "postgres")]
    pub(crate) async fn start_in(
        &self,
        conn: &mut sqlx::PgConnection,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> Result<String, StartError> {
        let run_path = &*self.run_path;
        let definitions = run_path.definitions();
        let correlation = options.correlation_id.clone();
        let (mut new, _) = definitions.new_instance_with_state(name, input, options, None, None)?;
        new.activation_scope = definitions
            .activation_scope(name, correlation.as_deref())
            .map_err(|refusal| StartError::ActivationRefused { refusal })?;
        let instance_id = new.instance_id.clone();
        let store = run_path.store();
        let Some(postgres) = store.backend().capabilities().postgres else {
            return Err(StartError::Run(run_store_error(
                &instance_id,
                StoreError::Invalid {
                    what: "store",
                    reason: "a start inside an application's transaction needs a PostgresStore"
                        .to_owned(),
                },
            )));
        };
        let created = match store.encode_instance(new) {
            Ok(encoded) => postgres.create_instance_in(conn, &encoded).await,
            Err(error) => Err(error),
        };
        match created {
            Ok(()) => Ok(instance_id),
            Err(StoreError::AlreadyExists { .. }) => Err(StartError::InstanceExists {
                instance: instance_id,
            }),
            Err(StoreError::ActivationConflict { existing, .. }) => {
                Err(StartError::ActivationRefused {
                    refusal: Refusal::ActivationRefused {
                        strategy: definitions.activation_of(name),
                        existing,
                    },
                })
            }
            Err(StoreError::Invalid {
                what: "instance_id",
                reason,
            }) => Err(StartError::InvalidInstanceId {
                id: instance_id,
                reason,
            }),
            Err(StoreError::TooLarge { size, limit, .. }) => Err(StartError::StateTooLarge {
                instance: instance_id,
                size,
                limit,
            }),
            Err(error) => Err(StartError::Run(run_store_error(&instance_id, error))),
        }
    }

    /// Removes an instance whose first run failed: committed `Cancelled`, then deleted.
    pub(crate) async fn discard(&self, instance_id: &str) {
        let store = self.run_path.store();
        let Ok(guard) = self.run_path.lease(instance_id).await else {
            return;
        };
        if let Ok(record) = store.load_instance_text(instance_id).await
            && record.status == InstanceStatus::Running
        {
            // The document says `Cancelled` too, should the delete below fail: a reader of
            // the state (and a retried start, told the id exists) sees what the row says.
            let state = match decode_document(instance_id, &record.state) {
                Ok(mut state) => {
                    state.status = WorkflowStatus::Cancelled;
                    state.sub_status = None;
                    state.cancel_reason =
                        Some("its start failed before its first commit".to_owned());
                    encode_document(&state).map_or(record.state, |s| s.0)
                }
                Err(_) => record.state,
            };
            let mut commit = Commit::new(
                instance_id,
                record.version,
                guard.token(),
                now_micros(),
                state,
                InstanceStatus::Cancelled,
                None,
            );
            commit.release_lease = true;
            if store.commit(commit).await.is_ok() {
                guard.released_by_commit();
                let _ = store.delete_instance(instance_id).await;
                return;
            }
        }
        guard.release().await;
    }
}
