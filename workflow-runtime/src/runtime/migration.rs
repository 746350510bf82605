//! What a migration is asked and what it reports (ENG-54, ENG-55): which instances of a previous
//! version move to another version, and what happened to each.

use crate::engine::state::{SubStatus, WorkflowStatus};

/// Which waiting instances [`Runtime::migrate`](crate::Runtime::migrate) moves, and whether it
/// writes anything.
///
/// # Examples
///
/// ```
/// use workflow_runtime::Migration;
///
/// let plan = Migration::all().dry_run();
/// assert!(plan.dry_run);
/// let one = Migration::only(["01J0ORDER"]);
/// assert_eq!(one.instance_ids.as_deref(), Some(&["01J0ORDER".to_owned()][..]));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migration {
    /// Only these instances (by id); `None`: every instance of the previous version.
    pub instance_ids: Option<Vec<String>>,
    /// Only instances with this correlation id.
    pub correlation_id: Option<String>,
    /// Report what would happen to each instance, writing nothing.
    pub dry_run: bool,
}

impl Migration {
    /// Every instance of the previous version.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the instances with these ids.
    pub fn only<I, S>(ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            instance_ids: Some(ids.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

    /// Only the instances with this correlation id.
    #[must_use]
    pub fn correlated(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// A dry run: each instance is checked and reported, nothing is written.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// What [`Runtime::migrate`](crate::Runtime::migrate) did, instance by instance.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationReport {
    /// The definition name.
    pub name: String,
    /// The version the instances were pinned to.
    pub from_version: String,
    /// The version they move to.
    pub to_version: String,
    /// Whether this was a dry run (nothing written).
    pub dry_run: bool,
    /// Each instance of `from_version` the filter selected, in id order.
    pub instances: Vec<InstanceMigration>,
}

impl MigrationReport {
    /// The ids of the instances moved (or, in a dry run, that would move).
    pub fn migrated(&self) -> Vec<&str> {
        self.instances
            .iter()
            .filter(|i| !matches!(i.outcome, MigrationOutcome::Refused(_)))
            .map(|i| i.instance_id.as_str())
            .collect()
    }

    /// The instances refused, each with why.
    pub fn refused(&self) -> Vec<(&str, &MigrationRefusal)> {
        self.instances
            .iter()
            .filter_map(|i| match &i.outcome {
                MigrationOutcome::Refused(why) => Some((i.instance_id.as_str(), why)),
                _ => None,
            })
            .collect()
    }
}

/// What happened to one instance in a migration.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceMigration {
    /// The instance.
    pub instance_id: String,
    /// What happened to it.
    pub outcome: MigrationOutcome,
}

/// What happened to one instance in a migration (ENG-54).
#[derive(Debug, Clone, PartialEq)]
pub enum MigrationOutcome {
    /// Moved, in one commit: state, data, waits and timers of the new position, a journal
    /// entry. `status` is where the new version's first run left it.
    Migrated {
        /// The state it was in (for a `workflow!`, the node it waited at, ENG-55).
        from_state: String,
        /// The state it is in now (for a `workflow!`, the node it waits at).
        to_state: String,
        /// Its status after the move.
        status: WorkflowStatus,
        /// Its sub-status after the move.
        sub_status: Option<SubStatus>,
    },
    /// A dry run: it would move so, and nothing was written.
    WouldMigrate {
        /// The state it is in (for a `workflow!`, the node it waits at, ENG-55).
        from_state: String,
        /// The state it would be in (for a `workflow!`, the node it would wait at).
        to_state: String,
    },
    /// Not moved; nothing of it was written.
    Refused(MigrationRefusal),
}

/// Why one instance was not moved (ENG-54). Nothing of it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MigrationRefusal {
    /// A run of it is in progress (here or in another process): migrate it again later.
    #[error("the instance is running; migrate it again once it waits")]
    Running,
    /// It is not waiting (finished, faulted, paused or not yet run).
    #[error("the instance is {status}, not waiting: only waiting instances are migrated")]
    NotWaiting {
        /// Its status.
        status: String,
    },
    /// It is no longer pinned to the previous version (another process migrated it).
    #[error("the instance is pinned to version `{version}` now")]
    OtherVersion {
        /// The version it is pinned to.
        version: String,
    },
    /// Its document names no current state of a state machine at its root.
    #[error("the instance has no current state of a state machine")]
    NoCurrentState,
    /// Its state has no counterpart in the new version (a recorded definition's migration
    /// maps states by name).
    #[error("state `{state}` has no state of the same name in the new version")]
    UnmappedState {
        /// The state.
        state: String,
    },
    /// A flowchart or sequence instance waits where no migration places it (ENG-55): at
    /// several nodes at once, in a join that waits for more branches, at a node whose
    /// execution is not its wait (a task, a sub-workflow), or inside a nested activity.
    #[error("the instance does not migrate from where it waits: {reason}")]
    Unplaceable {
        /// Where it waits, and why that does not migrate.
        reason: String,
    },
    /// Its data does not decode as the previous version's data type, or the new data does
    /// not encode.
    #[error("the instance's data does not migrate: {message}")]
    Data {
        /// The decoder's message.
        message: String,
    },
    /// The new version's first run or the commit failed; the instance stays as it was.
    #[error("the move failed and the instance stays on its version: {message}")]
    Failed {
        /// What failed.
        message: String,
    },
}

/// Why a migration as a whole was refused (ENG-54). Nothing was written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MigrateError {
    /// The two definitions do not share a name: they are unrelated.
    #[error(
        "definitions `{from}` and `{to}` are unrelated: a migration moves instances between versions of one name"
    )]
    Unrelated {
        /// The previous definition's name.
        from: String,
        /// The new definition's name.
        to: String,
    },
    /// Both sides are the same version.
    #[error("`{name}` version `{version}` is both the previous and the new version")]
    SameVersion {
        /// The definition name.
        name: String,
        /// The version.
        version: String,
    },
    /// The version to move to is not registered in this runtime.
    #[error(
        "`{name}` version `{version}` is not registered in this runtime: register it to migrate to it"
    )]
    NotRegistered {
        /// The definition name.
        name: String,
        /// The version.
        version: String,
    },
    /// A definition this engine does not compile (a kind it does not run), so where its
    /// instances wait is unknown. Roots of two different kinds are [`MigrateError::KindsDiffer`].
    #[error(
        "`{name}` version `{version}` is not a definition this engine runs: nothing of it migrates"
    )]
    NotAStateMachine {
        /// The definition name.
        name: String,
        /// The version.
        version: String,
    },
    /// States of the previous version have no state of the same name in the new one (a
    /// recorded definition's migration maps states by name).
    #[error(
        "`{name}`: the new version has no state named {}; a migration by name needs one for each",
        .states.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
    )]
    UnmappedStates {
        /// The definition name.
        name: String,
        /// The previous version's states without a counterpart.
        states: Vec<String>,
    },
    /// The two versions' roots differ in kind (a state machine and a flowchart), or one is
    /// of a kind no migration moves (ENG-55).
    #[error(
        "`{name}` does not migrate from version `{from_version}` (a {from_kind}) to version `{to_version}` (a {to_kind}): a migration moves instances between two state machines, or between two flowcharts or sequences"
    )]
    KindsDiffer {
        /// The definition name.
        name: String,
        /// The previous version.
        from_version: String,
        /// The kind of its root.
        from_kind: String,
        /// The new version.
        to_version: String,
        /// The kind of its root.
        to_kind: String,
    },
    /// Waiting nodes of the previous version of a flowchart or sequence have no waiting node
    /// of the same name in the new one (a recorded definition's migration maps nodes by
    /// name, ENG-55).
    #[error(
        "`{name}`: the new version has no waiting node named {}; a migration by name needs one for each",
        .nodes.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
    )]
    UnmappedNodes {
        /// The definition name.
        name: String,
        /// The previous version's waiting nodes without a counterpart.
        nodes: Vec<String>,
    },
    /// The previous version is not recorded in the store.
    #[error("`{name}` version `{version}` is not recorded in this store")]
    NotRecorded {
        /// The definition name.
        name: String,
        /// The version.
        version: String,
    },
    /// The store failed while listing the instances.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}
