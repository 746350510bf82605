//! The registered definitions (ENG-45, ENG-46): which workflow runs an instance's pinned
//! version, the activation strategy of each (RT-15, RT-16), and new instances of them, checked
//! and encoded but not yet stored.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use workflow_model::Activation;

use super::document::encode_document;
use super::errors::StartError;
use super::listing::listing_text;
use super::outcomes::StartOptions;
use super::registered::ErasedWorkflow;
use crate::base::new_ulid;
use crate::clock::Clock;
use crate::engine::executor::RunError;
use crate::engine::state::{
    DefinitionRef, Journal, JournalLevel, ParentLink, TriggerStart, WorkflowState,
};
use crate::routing::Refusal;
use crate::store::policy::SerializedState;
use crate::store::{InstanceRecord, InstanceStatus, InstanceSubStatus, NewInstance};
use crate::trace::TraceBridge;

/// The definitions this runtime runs: by name, each at its current version, and every
/// registered version, current and previous (ENG-45).
pub(crate) struct Definitions {
    workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
    versions: HashMap<(String, String), Arc<dyn ErasedWorkflow>>,
    /// Workflow time (TM-1): a new instance's creation instant.
    clock: Arc<dyn Clock>,
    /// The journal level and bound of new instances (ENG-42).
    journal_level: JournalLevel,
    max_journal_entries: usize,
    /// Where sends and starts take their trace context (ENG-61).
    trace: TraceBridge,
}

impl Definitions {
    pub(crate) fn new(
        workflows: HashMap<String, Arc<dyn ErasedWorkflow>>,
        versions: HashMap<(String, String), Arc<dyn ErasedWorkflow>>,
        clock: Arc<dyn Clock>,
        journal_level: JournalLevel,
        max_journal_entries: usize,
        trace: TraceBridge,
    ) -> Self {
        Self {
            workflows,
            versions,
            clock,
            journal_level,
            max_journal_entries,
            trace,
        }
    }

    /// The bridge to the application's tracing (ENG-61).
    pub(crate) fn trace(&self) -> &TraceBridge {
        &self.trace
    }

    /// The current version of the registered workflow `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn ErasedWorkflow>> {
        self.workflows.get(name)
    }

    /// The registered workflow `name` at `version`, current or previous (ENG-45).
    pub(crate) fn get_version(
        &self,
        name: &str,
        version: &str,
    ) -> Option<&Arc<dyn ErasedWorkflow>> {
        self.versions.get(&(name.to_owned(), version.to_owned()))
    }

    /// Every registered version of `name`, each with whether it is the current one.
    pub(crate) fn versions_of(&self, name: &str) -> Vec<(&Arc<dyn ErasedWorkflow>, bool)> {
        let current = self.workflows.get(name).map(|w| w.version());
        let mut found: Vec<(&Arc<dyn ErasedWorkflow>, bool)> = self
            .versions
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, v), w)| (w, Some(v.as_str()) == current))
            .collect();
        found.sort_by(|a, b| a.0.version().cmp(b.0.version()));
        found
    }

    /// The registered names, sorted.
    pub(crate) fn names(&self) -> Vec<&String> {
        let mut names: Vec<&String> = self.workflows.keys().collect();
        names.sort();
        names
    }

    /// Whether this runtime runs `name` at `version` (current or previous).
    pub(crate) fn runs(&self, name: &str, version: &str) -> bool {
        self.get_version(name, version).is_some()
    }

    /// Whether this runtime runs the record's definition version.
    pub(crate) fn runs_record(&self, record: &InstanceRecord<String>) -> bool {
        self.runs(&record.definition_name, &record.definition_version)
    }

    /// The registered workflow of the instance's pinned version, else `VersionNotRegistered`
    /// naming both fingerprints (ENG-46).
    pub(crate) fn workflow_for(
        &self,
        state: &WorkflowState,
    ) -> Result<Arc<dyn ErasedWorkflow>, RunError> {
        self.workflow_of(
            &state.instance_id,
            &state.definition.name,
            &state.definition.version,
        )
    }

    /// The registered workflow `name` at `version`, current or previous, else
    /// `VersionNotRegistered` naming the current version (ENG-46).
    pub(crate) fn workflow_of(
        &self,
        instance_id: &str,
        name: &str,
        version: &str,
    ) -> Result<Arc<dyn ErasedWorkflow>, RunError> {
        match self.get_version(name, version) {
            Some(w) => Ok(w.clone()),
            None => Err(RunError::VersionNotRegistered {
                instance: instance_id.to_owned(),
                name: name.to_owned(),
                version: version.to_owned(),
                registered: self.workflows.get(name).map(|w| w.version().to_owned()),
            }),
        }
    }

    /// The activation strategy of the registered definition `name` (`Always` if unknown).
    pub(crate) fn activation_of(&self, name: &str) -> Activation {
        self.workflows
            .get(name)
            .map(|w| w.activation())
            .unwrap_or_default()
    }

    /// The activation guard of a new instance of `name` (RT-15, RT-16), or why none may be
    /// created. One scope per instance: `singleton:<name>`, `correlation:<id>` or
    /// `correlated:<name>:<id>`. Instances of `Always` definitions hold none: a trigger of a
    /// `Correlation` definition also looks them up before creating (not atomically), while
    /// a start sees only instances of `Correlation` definitions.
    pub(crate) fn activation_scope(
        &self,
        name: &str,
        correlation_id: Option<&str>,
    ) -> Result<Option<String>, Refusal> {
        let missing = || Refusal::MissingCorrelationId {
            definition: name.to_owned(),
        };
        Ok(match self.activation_of(name) {
            Activation::Always => None,
            Activation::Singleton => Some(format!("singleton:{name}")),
            Activation::Correlation => Some(format!(
                "correlation:{}",
                correlation_id.ok_or_else(missing)?
            )),
            Activation::CorrelatedSingleton => Some(format!(
                "correlated:{name}:{}",
                correlation_id.ok_or_else(missing)?
            )),
        })
    }

    /// A new instance of `name` (`Running/Pending`, version 1), checked but not yet stored.
    pub(crate) fn new_instance(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
        trigger: Option<TriggerStart>,
    ) -> Result<NewInstance<SerializedState>, StartError> {
        self.new_instance_with_state(name, input, options, parent, trigger)
            .map(|(instance, _)| instance)
    }

    /// [`Definitions::new_instance`], with the state its document encodes.
    pub(crate) fn new_instance_with_state(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
        parent: Option<ParentLink>,
        trigger: Option<TriggerStart>,
    ) -> Result<(NewInstance<SerializedState>, WorkflowState), StartError> {
        let workflow =
            self.workflows
                .get(name)
                .ok_or_else(|| StartError::DefinitionNotRegistered {
                    name: name.to_owned(),
                })?;
        workflow
            .check_data(&input)
            .map_err(|(path, message)| StartError::Input { path, message })?;
        let instance_id = options.instance_id.unwrap_or_else(new_ulid);
        let now = self.clock.now();
        let mut state = WorkflowState::new(
            instance_id.clone(),
            DefinitionRef {
                name: name.to_owned(),
                version: workflow.version().to_owned(),
            },
            input.clone(),
            input,
            Journal::new(self.journal_level, self.max_journal_entries),
            now,
        );
        state.correlation_id = options.correlation_id;
        // ENG-61: the start's trace context, kept with the instance.
        state.traceparent = options
            .traceparent
            .or_else(|| self.trace.current())
            .map(|parent| parent.to_string());
        state.parent = parent;
        let receipt = trigger.as_ref().map(|t| t.stimulus_id.clone());
        state.trigger = trigger;
        let document = encode_document(&state)?;
        let instance = NewInstance {
            instance_id,
            definition_name: name.to_owned(),
            definition_version: workflow.version().to_owned(),
            status: InstanceStatus::Running,
            sub_status: Some(InstanceSubStatus::Pending),
            correlation_id: state.correlation_id.clone(),
            origin_at: now,
            created_at: now,
            state: document,
            receipt,
            consumed_queue_item: None,
            activation_scope: None,
            listing: listing_text(&state),
            idempotency: None,
        };
        Ok((instance, state))
    }
}
