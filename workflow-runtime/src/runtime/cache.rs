//! The decoded states of instances whose run this runtime just ended (ENG-53): the next run
//! of such an instance takes its state from here instead of decoding the stored document
//! again, when the stored record is still the one this runtime committed.
//!
//! An entry is only used when the record a run loads, under its lease, has the entry's
//! version **and** the very text this runtime committed. Another process's commit (a new
//! version) or a document changed in place (same version, other text) makes the run decode
//! the record as before, so a cache entry can never shadow what the store holds; and since
//! the text is the same, the state is what decoding it would give (the entry is normalized
//! to its decoded form when it is kept). An entry is taken out when a run uses it and put
//! back only by that run's successful last commit: a run that loses its lease or whose
//! commit is refused leaves nothing behind.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::base::lock;
use crate::engine::state::{EntryPoint, WorkflowState};

/// How many instances' states are kept at most (each entry holds the document twice: as
/// text and decoded). Past it, an arbitrary entry makes room: a miss only costs a decode.
const CAPACITY: usize = 256;

/// A kept state with the version and the text it was committed as.
pub(crate) struct Cached {
    pub(crate) version: u64,
    pub(crate) document: String,
    pub(crate) state: WorkflowState,
}

/// The cache of decoded states, by instance id.
#[derive(Default)]
pub(crate) struct StateCache {
    /// Boxed: an entry travels with the claim of a run (ENG-53) through its futures, which
    /// move it as a pointer.
    entries: Mutex<HashMap<String, Box<Cached>>>,
}

impl std::fmt::Debug for StateCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache")
            .field("entries", &lock(&self.entries).len())
            .finish()
    }
}

impl StateCache {
    /// Keeps `state`, just committed as `document` at `version`.
    pub(crate) fn keep(&self, version: u64, document: String, mut state: WorkflowState) {
        normalize(&mut state);
        // Tests run in debug builds: there every entry is checked against a decode of its
        // document, so the suite still exercises serialization (ST-25) and would catch a
        // state the normalization above does not bring to its decoded form.
        #[cfg(debug_assertions)]
        {
            let decoded = super::document::decode_document(&state.instance_id, &document);
            debug_assert!(
                decoded.as_ref().is_ok_and(|decoded| *decoded == state),
                "a kept state differs from its decoded document: {decoded:?} != {state:?}"
            );
        }
        let mut entries = lock(&self.entries);
        if entries.len() >= CAPACITY
            && !entries.contains_key(&state.instance_id)
            && let Some(evicted) = entries.keys().next().cloned()
        {
            entries.remove(&evicted);
        }
        entries.insert(
            state.instance_id.clone(),
            Box::new(Cached {
                version,
                document,
                state,
            }),
        );
    }

    /// The entry of `instance_id`, removed: for a run that claims the instance with it, so
    /// that the store compares the text it holds instead of copying it out.
    pub(crate) fn take_entry(&self, instance_id: &str) -> Option<Box<Cached>> {
        lock(&self.entries).remove(instance_id)
    }

    /// The state of `instance_id` if the record loaded is the one kept: the same version and
    /// the same text. The entry is removed either way.
    pub(crate) fn take(
        &self,
        instance_id: &str,
        version: u64,
        document: &str,
    ) -> Option<WorkflowState> {
        let cached = lock(&self.entries).remove(instance_id)?;
        (cached.version == version && cached.document == document).then_some(cached.state)
    }
}

/// Brings `state` to the form decoding its document gives: an `Option<Value>` holding
/// `null` is written as `null` and read back as `None`.
fn normalize(state: &mut WorkflowState) {
    fn none_if_null(value: &mut Option<Value>) {
        if value.as_ref().is_some_and(Value::is_null) {
            *value = None;
        }
    }
    none_if_null(&mut state.output);
    for context in state.contexts.values_mut() {
        none_if_null(&mut context.input);
        none_if_null(&mut context.payload);
        none_if_null(&mut context.result);
        if let Some(EntryPoint::Continue { payload, .. }) = &mut context.executing_entry {
            none_if_null(payload);
        }
    }
    for item in &mut state.queue {
        if let EntryPoint::Continue { payload, .. } = &mut item.entry {
            none_if_null(payload);
        }
    }
}
