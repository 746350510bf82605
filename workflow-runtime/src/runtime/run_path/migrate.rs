//! One instance's migration (ENG-54, ENG-55): under this process's turn and the instance's
//! lease, the waiting instance's position (its state machine's state, or the node its
//! flowchart or sequence waits at) and data are mapped to the new version, the new version's
//! run places it there (a state's transitions armed, its entry not run again; a node's wait
//! armed afresh, its timer counted from when it started) and one commit writes the document,
//! the status, the bookmark and timer diff, the journal entry and the new version on the
//! instance and its bookmark rows. Anything that fails before that commit leaves the instance
//! as it was. A dry run reads the instance without a lease and writes nothing.

use std::sync::Arc;

use serde_json::{Value, json};

use super::RunPath;
use crate::base::{lock, now_micros};
use crate::engine::executor::{RunError, RunTarget};
use crate::engine::graph::{Graph, NodeKind, Positions, local_name};
use crate::engine::names::{CURRENT_STATE, ENTERED_AT};
use crate::engine::state::{
    ActivityStatus, ContextId, JournalKind, SubStatus, WorkflowState, WorkflowStatus,
};
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
    /// That version's graph, to read where its instances wait.
    pub(crate) old: &'a Graph,
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
        let Checked {
            from: from_state,
            to: to_state,
            target,
            data,
        } = match outcome {
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
                    "`{to_state}` of the new version does not wait without the application's code; migrate from the application"
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
            Ok(Checked { from, to, .. }) => MigrationOutcome::WouldMigrate {
                from_state: from,
                to_state: to,
            },
            Err(why) => MigrationOutcome::Refused(why),
        }
    }

    /// Whether the loaded instance may move, and where to.
    fn checked_move(
        &self,
        state: &mut WorkflowState,
        plan: &Move<'_>,
    ) -> Result<Checked, MigrationRefusal> {
        if state.definition.name != plan.name || state.definition.version != plan.from {
            return Err(MigrationRefusal::OtherVersion {
                version: state.definition.version.clone(),
            });
        }
        match (state.status, state.sub_status) {
            // QU-11: an attempt waiting for a slot leaves the line with its bookmark (its
            // place expires with its lease).
            (WorkflowStatus::Suspended, Some(SubStatus::Waiting | SubStatus::WaitingForSlot)) => {}
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
        let (from, at) = match plan.old.positions() {
            Positions::Flow(_) => {
                let (node, started_at, input) = flow_position(state, plan.old)?;
                (node, Err((started_at, input)))
            }
            _ => {
                let (current, entered_at) =
                    machine_position(state).ok_or(MigrationRefusal::NoCurrentState)?;
                (current, Ok(entered_at))
            }
        };
        let (to, data) = (plan.map)(&from, std::mem::take(&mut state.data))?;
        let known = match plan.to.positions() {
            Positions::Machine(names) | Positions::Flow(names) => names.contains(&to),
            Positions::Other(_) => false,
        };
        if !known {
            return Err(MigrationRefusal::UnmappedState { state: from });
        }
        let target = match at {
            Ok(entered_at) => RunTarget::Migrated {
                state: to.clone(),
                entered_at,
            },
            Err((started_at, input)) => RunTarget::MigratedFlow {
                node: to.clone(),
                started_at,
                input,
            },
        };
        plan.to
            .check_data(&data)
            .map_err(|(path, message)| MigrationRefusal::Data {
                message: match path {
                    Some(path) => format!("{path}: {message}"),
                    None => message,
                },
            })?;
        Ok(Checked {
            from,
            to,
            target,
            data,
        })
    }
}

/// A move found possible: from where to where, the run that places the instance, its data.
struct Checked {
    from: String,
    to: String,
    target: RunTarget,
    data: Value,
}

/// ENG-55: the one node a flowchart or sequence root waits at, with when it started and its
/// input; refused when the instance waits where no migration places it.
fn flow_position(
    state: &WorkflowState,
    old: &Graph,
) -> Result<(String, Option<crate::base::Micros>, Option<Value>), MigrationRefusal> {
    let unplaceable = |reason: String| MigrationRefusal::Unplaceable { reason };
    let root_id = state.root.ok_or(MigrationRefusal::NoCurrentState)?;
    let root = state
        .context(root_id)
        .ok_or(MigrationRefusal::NoCurrentState)?;
    let children: Vec<ContextId> = state
        .contexts
        .values()
        .filter(|c| c.parent == Some(root_id) && !c.status.is_final())
        .map(|c| c.id)
        .collect();
    let node = old
        .node(old.root())
        .ok_or(MigrationRefusal::NoCurrentState)?;
    if let NodeKind::Flowchart(fc) = &node.kind
        && let Some(node) = join_in_progress(&root.properties, fc)
    {
        return Err(unplaceable(format!(
            "node `{node}` waits for more of its inbound connections (a join in progress)"
        )));
    }
    let [child] = children[..] else {
        let names: Vec<String> = children
            .iter()
            .filter_map(|&c| state.context(c))
            .map(|c| format!("`{}`", local_name(&c.node_id)))
            .collect();
        return Err(unplaceable(if names.is_empty() {
            "no node is active".to_owned()
        } else {
            format!(
                "{} nodes are active ({}): only an instance waiting at one node migrates",
                names.len(),
                names.join(", ")
            )
        }));
    };
    let context = state
        .context(child)
        .ok_or(MigrationRefusal::NoCurrentState)?;
    let name = local_name(&context.node_id).to_owned();
    let kind = old
        .index_of(&context.node_id)
        .and_then(|i| old.node(i))
        .map(|n| &n.kind);
    let waits = kind.is_some_and(NodeKind::is_migratable_wait)
        && context.status == ActivityStatus::Running
        && !state.contexts.values().any(|c| c.parent == Some(child));
    if !waits {
        return Err(unplaceable(format!(
            "it is at `{name}`, a {} node: only an instance waiting at an event, after, start_at or cron node migrates",
            kind.map_or("missing", NodeKind::name)
        )));
    }
    Ok((name, context.started_at, context.input.clone()))
}

/// FC-12, FC-17: a node of the flowchart with several forward inbound connections some of
/// which have arrived in its current round and some not: a join in progress, which a
/// migration does not carry over.
fn join_in_progress(
    properties: &serde_json::Map<String, Value>,
    fc: &crate::engine::graph::FlowchartNode,
) -> Option<String> {
    let count = |key: &str, name: &str| {
        properties
            .get(key)
            .and_then(|m| m.get(name))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    for (local, name) in fc.names.iter().enumerate() {
        let inbound = fc
            .analysis
            .forward_inbound
            .get(local)
            .map_or(&[][..], Vec::as_slice);
        if inbound.len() < 2 {
            continue;
        }
        let visits = count("visits", name);
        let arrived = inbound
            .iter()
            .filter_map(|&c| fc.connections.get(c))
            .filter(|c| count("evaluations", &c.key) > visits)
            .count();
        if arrived > 0 && arrived < inbound.len() {
            return Some(name.clone());
        }
    }
    None
}

/// A failed migration's message: the store's own words for a store error.
fn migration_failure(error: &RunError) -> String {
    match error {
        RunError::Store { error, .. } => error.to_string(),
        other => other.to_string(),
    }
}
