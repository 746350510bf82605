//! Migrations between versions of one definition (ENG-54, ENG-55): which instances of the previous
//! version a migration visits, and the checks made before any of them is touched. Each
//! instance is then moved by the run path, one by one, atomically.

use std::sync::Arc;

use serde_json::Value;
use workflow_model::Definition;

use super::migration::{
    InstanceMigration, MigrateError, Migration, MigrationRefusal, MigrationReport,
};
use super::registered::{ErasedWorkflow, Registered};
use super::run_path::{Move, RunPath, StateMap};
use crate::engine::graph::{Graph, Positions};
use crate::engine::registry::Registry;
use crate::store::{InstanceFilter, StoreError};

/// One side of a migration: a definition name and version.
pub(crate) struct Side<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: &'a str,
}

/// The migrations service.
pub(crate) struct Versions {
    run_path: Arc<RunPath>,
}

impl Versions {
    pub(crate) fn new(run_path: Arc<RunPath>) -> Self {
        Self { run_path }
    }

    /// Moves the instances of `from` (whose definition is `old`) that `migration` selects to
    /// the registered version `to`, each mapped by `map`.
    pub(crate) async fn migrate(
        &self,
        from: Side<'_>,
        old: &Definition,
        to: Side<'_>,
        map: &StateMap<'_>,
        migration: Migration,
    ) -> Result<MigrationReport, MigrateError> {
        check_related(&from, &to)?;
        let workflow = self
            .run_path
            .definitions()
            .get_version(to.name, to.version)
            .cloned()
            .ok_or_else(|| MigrateError::NotRegistered {
                name: to.name.to_owned(),
                version: to.version.to_owned(),
            })?;
        let old_graph = Graph::build(old).map_err(|_| not_compiled(&from))?;
        check_kinds(&from, &old_graph.positions(), &to, &workflow.positions())?;
        self.move_all(&from, &old_graph, workflow, map, migration, false)
            .await
    }

    /// Moves the instances of `from` to `to`, both versions as recorded in the store (their
    /// JSON form), states mapped by name and data kept as it is. Refused as a whole, before
    /// any instance is touched, when a state of `from` has no state of the same name in
    /// `to`. The new version runs without the application's code: an instance whose new
    /// state would need it at once (an automatic transition's condition, an entry) is
    /// refused and left as it was.
    pub(crate) async fn migrate_recorded(
        &self,
        from: Side<'_>,
        to: Side<'_>,
        migration: Migration,
    ) -> Result<MigrationReport, MigrateError> {
        check_related(&from, &to)?;
        let old = self.recorded(&from).await?;
        let new = self.recorded(&to).await?;
        let old_graph = Graph::build(&old).map_err(|_| not_compiled(&from))?;
        let graph = Graph::build(&new).map_err(|_| not_compiled(&to))?;
        let (old_positions, new_positions) = (old_graph.positions(), graph.positions());
        check_kinds(&from, &old_positions, &to, &new_positions)?;
        let (old_states, new_states, flow) = match (old_positions, new_positions) {
            (Positions::Machine(old), Positions::Machine(new)) => (old, new, false),
            (Positions::Flow(old), Positions::Flow(new)) => (old, new, true),
            _ => return Err(not_compiled(&from)),
        };
        let unmapped: Vec<String> = old_states
            .iter()
            .filter(|s| !new_states.contains(s))
            .cloned()
            .collect();
        if !unmapped.is_empty() {
            let name = from.name.to_owned();
            return Err(if flow {
                MigrateError::UnmappedNodes {
                    name,
                    nodes: unmapped,
                }
            } else {
                MigrateError::UnmappedStates {
                    name,
                    states: unmapped,
                }
            });
        }
        let workflow: Arc<dyn ErasedWorkflow> = Arc::new(Registered::<Value> {
            version: to.version.to_owned(),
            json: new.to_json_pretty(),
            graph,
            registry: Registry::new(),
            activation: new.activation.unwrap_or_default(),
            run_queue: new.queue.clone(),
        });
        let map = move |state: &str, data: Value| -> Result<(String, Value), MigrationRefusal> {
            if new_states.iter().any(|s| s == state) {
                Ok((state.to_owned(), data))
            } else {
                Err(MigrationRefusal::UnmappedState {
                    state: state.to_owned(),
                })
            }
        };
        self.move_all(&from, &old_graph, workflow, &map, migration, true)
            .await
    }

    /// A version recorded in the store, loaded.
    async fn recorded(&self, side: &Side<'_>) -> Result<Definition, MigrateError> {
        let not_recorded = || MigrateError::NotRecorded {
            name: side.name.to_owned(),
            version: side.version.to_owned(),
        };
        let record = self
            .run_path
            .store()
            .definition(side.name, Some(side.version))
            .await?
            .ok_or_else(not_recorded)?;
        Definition::from_json(&record.json).map_err(|_| not_recorded())
    }

    /// Visits every non-final instance of `from` the filter selects, in id order.
    async fn move_all(
        &self,
        from: &Side<'_>,
        old: &Graph,
        to: Arc<dyn ErasedWorkflow>,
        map: &StateMap<'_>,
        migration: Migration,
        without_code: bool,
    ) -> Result<MigrationReport, MigrateError> {
        let plan = Move {
            name: from.name,
            from: from.version,
            old,
            to: Arc::clone(&to),
            map,
            dry_run: migration.dry_run,
            without_code,
        };
        let mut report = MigrationReport {
            name: from.name.to_owned(),
            from_version: from.version.to_owned(),
            to_version: to.version().to_owned(),
            dry_run: migration.dry_run,
            instances: Vec::new(),
        };
        for instance_id in self.candidates(from, &migration).await? {
            let outcome = self.run_path.migrate_instance(&instance_id, &plan).await;
            report.instances.push(InstanceMigration {
                instance_id,
                outcome,
            });
        }
        Ok(report)
    }

    /// The ids of the live instances pinned to `from` that the filter selects.
    async fn candidates(
        &self,
        from: &Side<'_>,
        migration: &Migration,
    ) -> Result<Vec<String>, StoreError> {
        let mut filter = InstanceFilter {
            definition_name: Some(from.name.to_owned()),
            correlation_id: migration.correlation_id.clone(),
            live_only: true,
            limit: 500,
            ..InstanceFilter::default()
        };
        let mut found = Vec::new();
        loop {
            let page = self.run_path.store().list_instances(filter.clone()).await?;
            let Some(last) = page.last() else { break };
            filter.after = Some(last.instance_id.clone());
            for listed in page {
                let Ok(summary) = &listed.summary else {
                    continue;
                };
                let selected = migration
                    .instance_ids
                    .as_ref()
                    .is_none_or(|ids| ids.contains(&listed.instance_id));
                if selected
                    && summary.definition_version == from.version
                    && !summary.status.is_final()
                {
                    found.push(listed.instance_id);
                }
            }
        }
        Ok(found)
    }
}

/// A migration moves instances between two different versions of one name.
fn check_related(from: &Side<'_>, to: &Side<'_>) -> Result<(), MigrateError> {
    if from.name != to.name {
        return Err(MigrateError::Unrelated {
            from: from.name.to_owned(),
            to: to.name.to_owned(),
        });
    }
    if from.version == to.version {
        return Err(MigrateError::SameVersion {
            name: from.name.to_owned(),
            version: from.version.to_owned(),
        });
    }
    Ok(())
}

/// A migration moves instances between two state machines, or between two flowcharts or
/// sequences (ENG-55).
fn check_kinds(
    from: &Side<'_>,
    old: &Positions,
    to: &Side<'_>,
    new: &Positions,
) -> Result<(), MigrateError> {
    let kind = |positions: &Positions| match positions {
        Positions::Machine(_) => "state machine",
        Positions::Flow(_) => "flowchart or sequence",
        Positions::Other(kind) => kind,
    };
    match (old, new) {
        (Positions::Machine(_), Positions::Machine(_))
        | (Positions::Flow(_), Positions::Flow(_)) => Ok(()),
        _ => Err(MigrateError::KindsDiffer {
            name: from.name.to_owned(),
            from_version: from.version.to_owned(),
            from_kind: kind(old).to_owned(),
            to_version: to.version.to_owned(),
            to_kind: kind(new).to_owned(),
        }),
    }
}

/// A version whose definition does not compile into a graph.
fn not_compiled(side: &Side<'_>) -> MigrateError {
    MigrateError::NotAStateMachine {
        name: side.name.to_owned(),
        version: side.version.to_owned(),
    }
}
