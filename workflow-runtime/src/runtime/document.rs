//! The state document and the journal as the store holds them (ST-19, ST-20): encoding and
//! decoding, and the store's errors as a run reports them. Every service uses these; they
//! use nothing of the runtime.

use serde_json::Value;

use crate::engine::executor::RunError;
use crate::engine::state::{JournalEntry, PendingEntry, WorkflowState};
use crate::store::policy::{SerializedState, check_stored_format};
use crate::store::{JournalRecord, NewJournalRecord, Storage, StoreError};

use super::errors::StateError;

/// The state document as stored: serde names only, a top-level `"format"` (ST-19, ST-20).
/// Serialized straight to its text: no `Value` tree on the way (the store checks the text).
pub(crate) fn encode_document(state: &WorkflowState) -> Result<SerializedState, RunError> {
    encode_document_sized(state, 0)
}

/// [`encode_document`] into a buffer of `capacity` bytes: the length of the instance's last
/// document and a little more, so a run's commit writes its text into one allocation instead
/// of growing a small buffer by doubling (each step a copy, the last ones above the size
/// from which the allocator consolidates its free lists).
pub(crate) fn encode_document_sized(
    state: &WorkflowState,
    capacity: usize,
) -> Result<SerializedState, RunError> {
    encode_document_into(state, Vec::with_capacity(capacity.max(128)))
}

/// [`encode_document`] into `buffer` (emptied first): a commit reuses the text of the
/// document its run loaded, when nothing else holds it, instead of a new allocation.
pub(crate) fn encode_document_into(
    state: &WorkflowState,
    mut buffer: Vec<u8>,
) -> Result<SerializedState, RunError> {
    let corrupt = |reason: String| RunError::StateCorrupt {
        instance: state.instance_id.clone(),
        reason,
    };
    buffer.clear();
    serde_json::to_writer(&mut buffer, state)
        .map_err(|e| corrupt(format!("state does not serialize: {e}")))?;
    // serde_json writes UTF-8; the check only keeps this free of `unsafe`.
    String::from_utf8(buffer)
        .map(SerializedState)
        .map_err(|e| corrupt(format!("state does not serialize to UTF-8: {e}")))
}

/// The state decoded straight from its stored text (format already checked by
/// [`Storage::load_instance_text`](crate::store::Storage::load_instance_text)).
pub(crate) fn decode_document(
    instance_id: &str,
    document: &str,
) -> Result<WorkflowState, StateError> {
    let mut state: WorkflowState =
        serde_json::from_str(document).map_err(|e| StateError::Decode {
            instance: instance_id.to_owned(),
            message: e.to_string(),
        })?;
    // ST-19: a document of the previous format (instants in ms) is read in this one (µs).
    state.upgrade_stored();
    Ok(state)
}

/// The state of a loaded record, decoded straight from its text: the store's own format
/// check runs only when that fails or finds a newer format, for its typed error (ST-19,
/// ST-22), so a readable document is parsed once.
pub(crate) fn decode_loaded(instance_id: &str, text: &str) -> Result<WorkflowState, RunError> {
    let decoded = match decode_document(instance_id, text) {
        Ok(state) if u64::from(state.format_version()) <= crate::store::STATE_FORMAT => {
            return Ok(state);
        }
        other => other,
    };
    check_stored_format(instance_id, text).map_err(|error| run_store_error(instance_id, error))?;
    Err(match decoded {
        Err(e) => RunError::StateCorrupt {
            instance: instance_id.to_owned(),
            reason: e.to_string(),
        },
        Ok(state) => run_store_error(
            instance_id,
            StoreError::FormatTooNew {
                what: "instance",
                id: instance_id.to_owned(),
                found: u64::from(state.format_version()),
                supported: crate::store::STATE_FORMAT,
            },
        ),
    })
}

/// A recorded entry as the commit carries it: its detail is already the stored text.
pub(crate) fn journal_record(entry: PendingEntry) -> NewJournalRecord<String> {
    NewJournalRecord {
        at: entry.at,
        kind: entry.kind.as_str().to_owned(),
        context_id: entry.context_id,
        node_id: entry.node_id,
        detail: entry.detail.into_text(),
    }
}

pub(crate) fn journal_entry(record: JournalRecord) -> Option<JournalEntry> {
    Some(JournalEntry {
        seq: record.seq,
        at: record.at,
        kind: serde_json::from_value(Value::String(record.kind)).ok()?,
        context_id: record.context_id,
        node_id: record.node_id,
        detail: record.detail,
    })
}

pub(crate) fn run_store_error(instance_id: &str, error: StoreError) -> RunError {
    match error {
        StoreError::Decode { message, .. } => RunError::StateCorrupt {
            instance: instance_id.to_owned(),
            reason: message,
        },
        error => RunError::Store {
            instance: instance_id.to_owned(),
            error,
        },
    }
}

/// The stored state document alone (no journal), or `None` for an unknown id.
pub(crate) async fn load_state(
    store: &Storage,
    instance_id: &str,
) -> Result<Option<WorkflowState>, StateError> {
    match store.load_instance_text(instance_id).await {
        Ok(record) => decode_document(instance_id, &record.state).map(Some),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(StoreError::Decode { message, .. }) => Err(StateError::Decode {
            instance: instance_id.to_owned(),
            message,
        }),
        Err(error) => Err(StateError::Store {
            instance: instance_id.to_owned(),
            error,
        }),
    }
}
