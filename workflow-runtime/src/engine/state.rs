//! The persisted instance: [`WorkflowState`] and everything it holds (ENG-1 to ENG-7).
//!
//! Every type here round-trips through serde; the runtime stores the state as a JSON document
//! with a top-level `"format"` (ST-19) and serde names only, no Rust type names (ST-20), so
//! each suspension is a real persistence round trip (SM-8).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::base::Micros;
use crate::engine::names::Reserved;
use crate::store::NewTimer;

/// The format version of the persisted [`WorkflowState`] document.
pub const FORMAT_VERSION: u32 = 2;

/// The previous document format, whose instants were milliseconds since the epoch: still read,
/// and converted to this format by [`WorkflowState::upgrade_stored`] (ST-19).
pub(crate) const FORMAT_VERSION_MS: u32 = 1;

/// An activity context id: from a per-instance counter, never reused (ENG-3).
pub type ContextId = u64;

pub use crate::status::{SubStatus, WorkflowStatus};

/// The status of one activity context (ENG-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActivityStatus {
    /// Created, not yet run.
    Pending,
    /// Running or suspended on bookmarks or children.
    Running,
    /// Completed. Final.
    Completed,
    /// Failed for good.
    Faulted,
    /// Cancelled. Final.
    Canceled,
}

impl ActivityStatus {
    /// `Completed` or `Canceled`.
    pub fn is_final(self) -> bool {
        matches!(self, ActivityStatus::Completed | ActivityStatus::Canceled)
    }
}

/// The `{name, version}` an instance is pinned to (ENG-44).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionRef {
    /// The stable definition name.
    pub name: String,
    /// The version fingerprint.
    pub version: String,
}

/// One execution of one node (ENG-3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityContext {
    /// The context id.
    pub id: ContextId,
    /// The node's ancestor path, `root:review:manager`.
    pub node_id: String,
    /// The owning context; `None` only for the root.
    pub parent: Option<ContextId>,
    /// The status.
    pub status: ActivityStatus,
    /// Set while user code of this context runs (ENG-5).
    pub is_executing: bool,
    /// The entry point being run while `is_executing` is set, for recovery (ENG-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executing_entry: Option<EntryPoint>,
    /// The completion tag its owner chose (ENG-11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Durable activity state (ENG-6): a sequence's index, a machine's current state.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    /// Local variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// The input it was scheduled with (ACT-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The payload of the stimulus that led here (a transition's event payload for its exit,
    /// action and the target's entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// How many times an entry point of it ran.
    pub execution_count: u32,
    /// When it first ran (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Micros>,
    /// When it became final (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Micros>,
    /// Its result once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Its outcomes once completed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<String>,
    /// The per-instance completion sequence number (ACT-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_seq: Option<u64>,
    /// The fault record once faulted (ENG-17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultRecord>,
}

/// Why an activity failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// `Error` for a returned error, `Panicked` for a panic, `Engine` for a contract violation
    /// (`NotAChild`, an unregistered fn, a key that cannot be routed...).
    pub kind: FaultKind,
    /// The message.
    pub message: String,
    /// The attempt that failed, from 1.
    pub attempt: u32,
}

/// The kind of a [`FaultRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// User code returned an error.
    Error,
    /// User code panicked.
    Panicked,
    /// The activity broke an engine rule or its configuration is wrong.
    Engine,
}

/// An entry point of an activity: what a work item runs (ENG-8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum EntryPoint {
    /// Run the activity.
    Execute,
    /// Resume it from a bookmark with a stimulus payload (ENG-21).
    Resume {
        /// The bookmark resumed.
        bookmark: String,
        /// The stimulus payload.
        payload: Value,
    },
    /// Run one of its own callbacks by name, with itself as the child: a continuation such as
    /// the state machine's `"continuing"` (SM-6).
    Continue {
        /// The callback name.
        callback: String,
        /// The tag passed to the callback.
        tag: String,
        /// Data carried to the callback.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<Value>,
    },
}

/// A scheduled unit of work: run this context with this entry point (ENG-8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkItem {
    /// The context to run.
    pub context: ContextId,
    /// The entry point.
    #[serde(flatten)]
    pub entry: EntryPoint,
}

/// A completion callback persisted by name (ENG-11, ENG-12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackEntry {
    /// The context that scheduled the child.
    pub owner: ContextId,
    /// The child.
    pub child: ContextId,
    /// The callback name, resolved in the owner kind's table.
    pub callback: String,
    /// The completion tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A bookmark: a context waiting for a stimulus (ENG-19).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bookmark {
    /// A ULID.
    pub id: String,
    /// Its stimulus name: an event name, or a reserved `wf.` name.
    pub name: String,
    /// The stimulus hash (RT-5), scoped for bookmarks resumed by id (RT-7).
    pub hash: String,
    /// The owning node.
    pub node_id: String,
    /// The owning context.
    pub context_id: ContextId,
    /// What the activity needs when it resumes.
    #[serde(default)]
    pub payload: Value,
    /// Removed once resumed without fault (ENG-21).
    pub auto_burn: bool,
    /// The callback run on resume; with none the context completes with the payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
    /// When it was created (µs since the epoch).
    pub created_at: Micros,
}

impl Bookmark {
    /// The timer row this bookmark owns (TM-3): `None` for a bookmark of no timer-backed
    /// reserved name, or one without a `due_at` (µs since the epoch, the store's unit).
    pub(crate) fn timer(&self) -> Option<NewTimer> {
        let kind = Reserved::from_name(&self.name)?.timer_kind()?;
        let due_at = self.payload.get("due_at").and_then(Value::as_i64)?;
        Some(NewTimer {
            timer_id: self.id.clone(),
            kind: kind.to_owned(),
            due_at,
        })
    }
}

/// A failure for good recorded against the instance (ENG-17, FLT-6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Incident {
    /// A ULID.
    pub id: String,
    /// The faulted context.
    pub context_id: ContextId,
    /// Its node.
    pub node_id: String,
    /// What happened.
    pub fault: FaultRecord,
    /// When (µs since the epoch).
    pub at: Micros,
    /// `open` until the instance is retried or cancelled.
    pub resolution: Option<String>,
    /// What kind of failure faulted the instance (FLT-6). Incidents stored before kinds
    /// were recorded read as [`IncidentKind::ActivityFailed`].
    #[serde(default)]
    pub kind: IncidentKind,
    /// The id of the stimulus whose run the incident stopped, when that stimulus was not
    /// consumed (a `state_too_large` incident, ST-24): it was written to the dead letters,
    /// from where an operator replays it after the retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stimulus_id: Option<String>,
}

/// The kind of an [`Incident`] (FLT-6), stored as its snake-case name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentKind {
    /// An activity failed for good (FLT-5).
    #[default]
    ActivityFailed,
    /// A run's state document exceeded the store's size limit (ST-24): the instance was
    /// faulted from its last committed state, which it keeps.
    StateTooLarge,
    /// A timer row of the instance holds a due time that does not decode (ST-22): the
    /// instance was faulted so that the damage is seen instead of the instance sleeping
    /// forever. Repair the row, then retry the instance.
    DamagedTimer,
}

impl IncidentKind {
    /// The stored name: `activity_failed`, `state_too_large` or `damaged_timer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ActivityFailed => "activity_failed",
            Self::StateTooLarge => "state_too_large",
            Self::DamagedTimer => "damaged_timer",
        }
    }
}

/// The kind of a [`JournalEntry`] (ENG-41).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JournalKind {
    /// A context was scheduled.
    Scheduled,
    /// A context started an entry point.
    Started,
    /// A context completed.
    Completed,
    /// A context faulted.
    Faulted,
    /// A context was cancelled.
    Canceled,
    /// A bookmark was created.
    BookmarkCreated,
    /// A bookmark was resumed.
    BookmarkResumed,
    /// A bookmark was burned.
    BookmarkBurned,
    /// A stimulus was consumed.
    StimulusConsumed,
    /// The instance status changed.
    StatusChanged,
    /// A step was declined (ENG-37), or an activity ignored a completion (stale, SM-4).
    Declined,
    /// Older entries were compacted (ENG-42).
    Compacted,
    /// A state machine changed state (detail: `{from, to, transition}`).
    StateChanged,
    /// A flowchart node was skipped (FC-13): no context was created. `node_id` is the skipped
    /// node, `context_id` the flowchart's context; the detail carries the `reason`.
    Skipped,
    /// The instance moved to another version of its definition (ENG-54; detail:
    /// `{from_version, to_version, from, to}`, the states before and after).
    Migrated,
}

/// One journal entry (ENG-41).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Per-instance sequence number.
    pub seq: u64,
    /// Time (µs since the epoch).
    pub at: Micros,
    /// The kind.
    pub kind: JournalKind,
    /// The context concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<ContextId>,
    /// Its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Small JSON detail.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

/// How much the journal keeps (ENG-42).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub enum JournalLevel {
    /// Nothing.
    Off,
    /// Status changes and state changes only.
    Lifecycle,
    /// Activity completions, faults, cancellations, bookmarks (the default).
    #[default]
    Activities,
    /// Everything, scheduling and starts included.
    Verbose,
}

impl JournalKind {
    /// The stored name: the variant's serde name (`Completed`, `StateChanged`...).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JournalKind::Scheduled => "Scheduled",
            JournalKind::Started => "Started",
            JournalKind::Completed => "Completed",
            JournalKind::Faulted => "Faulted",
            JournalKind::Canceled => "Canceled",
            JournalKind::BookmarkCreated => "BookmarkCreated",
            JournalKind::BookmarkResumed => "BookmarkResumed",
            JournalKind::BookmarkBurned => "BookmarkBurned",
            JournalKind::StimulusConsumed => "StimulusConsumed",
            JournalKind::StatusChanged => "StatusChanged",
            JournalKind::Declined => "Declined",
            JournalKind::Compacted => "Compacted",
            JournalKind::StateChanged => "StateChanged",
            JournalKind::Skipped => "Skipped",
            JournalKind::Migrated => "Migrated",
        }
    }

    fn level(self) -> JournalLevel {
        match self {
            JournalKind::StatusChanged
            | JournalKind::StateChanged
            | JournalKind::Compacted
            | JournalKind::Migrated => JournalLevel::Lifecycle,
            JournalKind::Completed
            | JournalKind::Faulted
            | JournalKind::Canceled
            | JournalKind::BookmarkCreated
            | JournalKind::BookmarkResumed
            | JournalKind::StimulusConsumed
            | JournalKind::Skipped
            | JournalKind::Declined => JournalLevel::Activities,
            JournalKind::Scheduled | JournalKind::Started | JournalKind::BookmarkBurned => {
                JournalLevel::Verbose
            }
        }
    }
}

/// The append-only, bounded journal of one instance (ENG-41, ENG-42).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Journal {
    /// What is kept.
    pub level: JournalLevel,
    /// At most this many entries are kept; older ones are compacted into one entry.
    pub max_entries: usize,
    /// The next sequence number.
    pub next_seq: u64,
    /// The entries recorded since the last commit, oldest first. Not part of the state
    /// document: a commit moves them to the journal stored apart from the state, which is
    /// never read to execute (ENG-41), so the document stays small.
    #[serde(skip)]
    pub(crate) entries: Vec<PendingEntry>,
}

/// A journal entry recorded by a run and not yet committed: its detail is already the JSON
/// text the store keeps (ENG-41), written at once for the entries every run records, so no
/// `serde_json::Value` map is built only to be encoded at the commit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingEntry {
    /// Per-instance sequence number.
    pub(crate) seq: u64,
    /// Time (µs since the epoch).
    pub(crate) at: Micros,
    /// The kind.
    pub(crate) kind: JournalKind,
    /// The context concerned.
    pub(crate) context_id: Option<ContextId>,
    /// Its node.
    pub(crate) node_id: Option<String>,
    /// The detail as JSON text.
    pub(crate) detail: Detail,
}

impl PendingEntry {
    /// The entry with its detail decoded, as a snapshot shows it.
    pub(crate) fn to_entry(&self) -> JournalEntry {
        JournalEntry {
            seq: self.seq,
            at: self.at,
            kind: self.kind,
            context_id: self.context_id,
            node_id: self.node_id.clone(),
            detail: self.detail.to_value(),
        }
    }

    fn of_entry(entry: JournalEntry) -> Self {
        Self {
            seq: entry.seq,
            at: entry.at,
            kind: entry.kind,
            context_id: entry.context_id,
            node_id: entry.node_id,
            detail: Detail::of_value(&entry.detail),
        }
    }
}

/// A journal entry's detail as the JSON text it is stored as: the same bytes
/// `serde_json::to_string` gives for the `Value` it stands for (object members in key
/// order, serde_json's string escapes), so rows written either way read the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Detail(String);

impl Detail {
    /// `null`: no detail.
    pub(crate) fn null() -> Self {
        Self("null".to_owned())
    }

    /// The text of a `Value`.
    pub(crate) fn of_value(value: &Value) -> Self {
        Self(serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()))
    }

    /// An object written member by member: see [`DetailObject`].
    pub(crate) fn object() -> DetailObject {
        let mut text = String::with_capacity(96);
        text.push('{');
        DetailObject {
            text,
            #[cfg(debug_assertions)]
            last_key: None,
        }
    }

    /// The JSON text.
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub(crate) fn into_text(self) -> String {
        self.0
    }

    /// The detail decoded (`null` for text that does not decode, which this type never
    /// holds).
    pub(crate) fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// A JSON object detail written straight to text. Members must be added in ascending key
/// order, the order serde_json writes a `Value` object in (checked in debug builds).
pub(crate) struct DetailObject {
    text: String,
    #[cfg(debug_assertions)]
    last_key: Option<&'static str>,
}

impl DetailObject {
    fn key(&mut self, key: &'static str) {
        #[cfg(debug_assertions)]
        {
            debug_assert!(
                self.last_key.is_none_or(|last| last < key),
                "detail keys out of order: {key}"
            );
            self.last_key = Some(key);
        }
        if self.text.len() > 1 {
            self.text.push(',');
        }
        self.string(key);
        self.text.push(':');
    }

    fn string(&mut self, value: &str) {
        // serde_json escapes `"`, `\` and the control characters only; a string without
        // them (ids, node paths, state names) is copied as is, any other goes through
        // serde_json's own escaping: the same bytes as its `Value` encoding either way.
        if value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
            self.json(&value);
        } else {
            self.text.reserve(value.len() + 2);
            self.text.push('"');
            self.text.push_str(value);
            self.text.push('"');
        }
    }

    /// serde_json's encoding of `value`, appended (`null` should it fail, which a string or
    /// a `Value` cannot).
    fn json<T: Serialize + ?Sized>(&mut self, value: &T) {
        match serde_json::to_string(value) {
            Ok(text) => self.text.push_str(&text),
            Err(_) => self.text.push_str("null"),
        }
    }

    /// Adds a string member.
    pub(crate) fn str(mut self, key: &'static str, value: &str) -> Self {
        self.key(key);
        self.string(value);
        self
    }

    /// Adds a member holding a string or `null`.
    pub(crate) fn opt_str(mut self, key: &'static str, value: Option<&str>) -> Self {
        self.key(key);
        match value {
            Some(value) => self.string(value),
            None => self.text.push_str("null"),
        }
        self
    }

    /// Adds a member holding any serializable value.
    pub(crate) fn value(mut self, key: &'static str, value: &Value) -> Self {
        self.key(key);
        self.json(value);
        self
    }

    /// The object's text.
    pub(crate) fn finish(mut self) -> Detail {
        self.text.push('}');
        Detail(self.text)
    }
}

impl Journal {
    /// An empty journal.
    pub fn new(level: JournalLevel, max_entries: usize) -> Self {
        Self {
            level,
            max_entries: max_entries.max(2),
            next_seq: 1,
            entries: Vec::new(),
        }
    }

    /// Whether the level keeps entries of this kind.
    pub(crate) fn keeps(&self, kind: JournalKind) -> bool {
        self.level != JournalLevel::Off && kind.level() <= self.level
    }

    /// Appends an entry if the level keeps its kind.
    pub(crate) fn record(
        &mut self,
        kind: JournalKind,
        context: Option<(ContextId, &str)>,
        detail: &Value,
        now: Micros,
    ) {
        if self.keeps(kind) {
            self.push(kind, context, Detail::of_value(detail), now);
        }
    }

    /// [`Journal::record`] with a detail already written as text.
    pub(crate) fn record_detail(
        &mut self,
        kind: JournalKind,
        context: Option<(ContextId, &str)>,
        detail: Detail,
        now: Micros,
    ) {
        if self.keeps(kind) {
            self.push(kind, context, detail, now);
        }
    }

    fn push(
        &mut self,
        kind: JournalKind,
        context: Option<(ContextId, &str)>,
        detail: Detail,
        now: Micros,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.push(PendingEntry {
            seq,
            at: now,
            kind,
            context_id: context.map(|c| c.0),
            node_id: context.map(|c| c.1.to_owned()),
            detail,
        });
    }

    /// Replaces the oldest entries with one `Compacted` entry when over the bound (ENG-42).
    pub(crate) fn compact(&mut self) {
        if self.entries.len() <= self.max_entries {
            return;
        }
        // Rare (more entries in one run than the journal keeps): the details are decoded
        // for the summary's counts.
        let entries: Vec<JournalEntry> = self.entries.iter().map(PendingEntry::to_entry).collect();
        self.entries = compact_entries(entries, self.max_entries)
            .into_iter()
            .map(PendingEntry::of_entry)
            .collect();
    }
}

/// Replaces the oldest of `entries` with one `Compacted` entry when there are more than
/// `max_entries` (ENG-42).
pub(crate) fn compact_entries(
    mut entries: Vec<JournalEntry>,
    max_entries: usize,
) -> Vec<JournalEntry> {
    if entries.len() <= max_entries {
        return entries;
    }
    let excess = entries.len() - max_entries + 1;
    let removed: Vec<JournalEntry> = entries.drain(..excess).collect();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut nodes: BTreeMap<String, u64> = BTreeMap::new();
    for entry in &removed {
        if entry.kind == JournalKind::Compacted {
            // Fold an earlier compaction's counts into this one.
            for (map, field) in [(&mut kinds, "kinds"), (&mut nodes, "nodes")] {
                if let Some(Value::Object(counts)) = entry.detail.get(field) {
                    for (k, v) in counts {
                        *map.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
                    }
                }
            }
            continue;
        }
        *kinds.entry(format!("{:?}", entry.kind)).or_default() += 1;
        if let Some(node) = &entry.node_id {
            *nodes.entry(node.clone()).or_default() += 1;
        }
    }
    let first = removed.first();
    let last = removed.last();
    let from_seq = first
        .and_then(|e| e.detail.get("from_seq").and_then(Value::as_u64))
        .or(first.map(|e| e.seq));
    let compacted = JournalEntry {
        seq: last.map_or(0, |e| e.seq),
        at: last.map_or(0, |e| e.at),
        kind: JournalKind::Compacted,
        context_id: None,
        node_id: None,
        detail: serde_json::json!({
            "from_seq": from_seq,
            "to_seq": last.map(|e| e.seq),
            "first_at": first.map(|e| e.at),
            "last_at": last.map(|e| e.at),
            "kinds": kinds,
            "nodes": nodes,
        }),
    };
    entries.insert(0, compacted);
    entries
}

/// The trigger an instance was created by (RT-13): its first run begins at `node`
/// (FC-6 step 1), which completes at once with `payload` instead of waiting (ACT-7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerStart {
    /// The trigger node's full path id (`root:placed`).
    pub node_id: String,
    /// The stimulus that started the instance.
    pub stimulus_id: String,
    /// Its payload, the trigger node's output.
    pub payload: Value,
}

/// The parent of an instance started by a SubWorkflow (ACT-24): the child's final commit
/// resumes the parent's `wf.sub_workflow` bookmark with its final status and output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent instance.
    pub instance_id: String,
    /// The parent's `wf.sub_workflow` bookmark; `None` for a detached child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark_id: Option<String>,
    /// The nesting depth: 1 for a child of a top-level instance.
    pub depth: u32,
}

/// One workflow instance, as persisted (ENG-1). Read-only for users: every field has an
/// accessor of the same name; only the engine and the runtime change the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowState {
    /// The document format (see [`FORMAT_VERSION`]).
    #[serde(rename = "format")]
    pub(crate) format_version: u32,
    /// The instance id.
    pub(crate) instance_id: String,
    /// The pinned definition.
    pub(crate) definition: DefinitionRef,
    /// An optional caller-chosen correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) correlation_id: Option<String>,
    /// The parent, for an instance started by a SubWorkflow (ACT-24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) parent: Option<ParentLink>,
    /// The trigger that created this instance (RT-13), until its node consumed the payload
    /// (FC-6 step 1, ACT-7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) trigger: Option<TriggerStart>,
    /// When it was created (µs since the epoch).
    pub(crate) created_at: Micros,
    /// When it last changed (µs since the epoch).
    pub(crate) updated_at: Micros,
    /// The status.
    pub(crate) status: WorkflowStatus,
    /// The sub-status, for `Running` and `Suspended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sub_status: Option<SubStatus>,
    /// The activity contexts by id: a tree with one root (ENG-3).
    pub(crate) contexts: BTreeMap<ContextId, ActivityContext>,
    /// The root context, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) root: Option<ContextId>,
    /// The next context id.
    pub(crate) next_context_id: ContextId,
    /// The FIFO work queue (ENG-8).
    pub(crate) queue: VecDeque<WorkItem>,
    /// Completion callbacks by name (ENG-12).
    pub(crate) callbacks: Vec<CallbackEntry>,
    /// Bookmarks, in creation order (ENG-19).
    pub(crate) bookmarks: Vec<Bookmark>,
    /// The workflow data as JSON (ENG-43).
    pub(crate) data: Value,
    /// The start input.
    pub(crate) input: Value,
    /// The output once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Value>,
    /// Workflow-level variables.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub(crate) variables: Map<String, Value>,
    /// The last completion sequence number handed out (ACT-1).
    pub(crate) completion_seq: u64,
    /// Failures for good (ENG-17).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) incidents: Vec<Incident>,
    /// Why it was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cancel_reason: Option<String>,
    /// The W3C trace context its start carried (ENG-61): its runs continue that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
    /// The last lifecycle event sequence number (ENG-39).
    #[serde(default)]
    pub(crate) event_seq: u64,
    /// The execution journal (ENG-41).
    pub(crate) journal: Journal,
}

impl WorkflowState {
    /// A new instance, `Running/Pending`, with no context yet.
    pub fn new(
        instance_id: String,
        definition: DefinitionRef,
        input: Value,
        data: Value,
        journal: Journal,
        now: Micros,
    ) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            instance_id,
            definition,
            correlation_id: None,
            parent: None,
            trigger: None,
            created_at: now,
            updated_at: now,
            status: WorkflowStatus::Running,
            sub_status: Some(SubStatus::Pending),
            contexts: BTreeMap::new(),
            root: None,
            next_context_id: 1,
            queue: VecDeque::new(),
            callbacks: Vec::new(),
            bookmarks: Vec::new(),
            data,
            input,
            output: None,
            variables: Map::new(),
            completion_seq: 0,
            incidents: Vec::new(),
            cancel_reason: None,
            traceparent: None,
            event_seq: 0,
            journal,
        }
    }

    /// The document format (see [`FORMAT_VERSION`]).
    pub fn format_version(&self) -> u32 {
        self.format_version
    }

    /// The instance id.
    pub fn instance_id(&self) -> &String {
        &self.instance_id
    }

    /// The pinned definition.
    pub fn definition(&self) -> &DefinitionRef {
        &self.definition
    }

    /// An optional caller-chosen correlation id.
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }

    /// The W3C `traceparent` its start carried, as stored (ENG-61).
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The parent, for an instance started by a SubWorkflow (ACT-24).
    pub fn parent(&self) -> Option<&ParentLink> {
        self.parent.as_ref()
    }

    /// (FC-6 step 1, ACT-7).
    pub fn trigger(&self) -> Option<&TriggerStart> {
        self.trigger.as_ref()
    }

    /// When it was created, in µs since the epoch (ST-23).
    pub fn created_at_micros(&self) -> Micros {
        self.created_at
    }

    /// When it last changed, in µs since the epoch (ST-23).
    pub fn updated_at_micros(&self) -> Micros {
        self.updated_at
    }

    /// The status.
    pub fn status(&self) -> WorkflowStatus {
        self.status
    }

    /// The sub-status, for `Running` and `Suspended`.
    pub fn sub_status(&self) -> Option<SubStatus> {
        self.sub_status
    }

    /// The activity contexts by id: a tree with one root (ENG-3).
    pub fn contexts(&self) -> &BTreeMap<ContextId, ActivityContext> {
        &self.contexts
    }

    /// The root context, once created.
    pub fn root(&self) -> Option<ContextId> {
        self.root
    }

    /// The next context id.
    pub fn next_context_id(&self) -> ContextId {
        self.next_context_id
    }

    /// The FIFO work queue (ENG-8).
    pub fn queue(&self) -> &VecDeque<WorkItem> {
        &self.queue
    }

    /// Completion callbacks by name (ENG-12).
    pub fn callbacks(&self) -> &[CallbackEntry] {
        &self.callbacks
    }

    /// Bookmarks, in creation order (ENG-19).
    pub fn bookmarks(&self) -> &[Bookmark] {
        &self.bookmarks
    }

    /// The workflow data as JSON (ENG-43).
    pub fn data(&self) -> &Value {
        &self.data
    }

    /// The start input.
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// The output once finished.
    pub fn output(&self) -> Option<&Value> {
        self.output.as_ref()
    }

    /// Workflow-level variables.
    pub fn variables(&self) -> &Map<String, Value> {
        &self.variables
    }

    /// The last completion sequence number handed out (ACT-1).
    pub fn completion_seq(&self) -> u64 {
        self.completion_seq
    }

    /// Failures for good (ENG-17).
    pub fn incidents(&self) -> &[Incident] {
        &self.incidents
    }

    /// Why it was cancelled.
    pub fn cancel_reason(&self) -> Option<&str> {
        self.cancel_reason.as_deref()
    }

    /// The last lifecycle event sequence number (ENG-39).
    pub fn event_seq(&self) -> u64 {
        self.event_seq
    }

    /// The execution journal (ENG-41).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The context `id`.
    pub fn context(&self, id: ContextId) -> Option<&ActivityContext> {
        self.contexts.get(&id)
    }

    pub(crate) fn context_mut(&mut self, id: ContextId) -> Option<&mut ActivityContext> {
        self.contexts.get_mut(&id)
    }

    /// The live (non-final) children of `id`, in creation order.
    pub fn live_children(&self, id: ContextId) -> Vec<ContextId> {
        self.contexts
            .values()
            .filter(|c| c.parent == Some(id) && !c.status.is_final())
            .map(|c| c.id)
            .collect()
    }

    /// Checks the tree invariants of ENG-3: one root, existing parents, no cycles.
    ///
    /// # Errors
    ///
    /// A message naming the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "format version {} is not {FORMAT_VERSION}",
                self.format_version
            ));
        }
        let roots = self
            .contexts
            .values()
            .filter(|c| c.parent.is_none())
            .count();
        if roots > 1 {
            return Err(format!("{roots} root contexts"));
        }
        for context in self.contexts.values() {
            if context.parent.is_some_and(|p| p >= context.id) {
                // Parents are created before children, so ids strictly increase down the tree;
                // this also excludes cycles.
                return Err(format!(
                    "context {} has parent {:?} not created before it",
                    context.id, context.parent
                ));
            }
            if let Some(parent) = context.parent
                && !self.contexts.contains_key(&parent)
            {
                return Err(format!(
                    "context {} has missing parent {parent}",
                    context.id
                ));
            }
        }
        for item in &self.queue {
            if !self.contexts.contains_key(&item.context) {
                return Err(format!("queued work for missing context {}", item.context));
            }
        }
        Ok(())
    }

    /// Brings a document of an earlier format read from the store to [`FORMAT_VERSION`]
    /// (ST-19): a format-1 document counted every instant in milliseconds since the epoch;
    /// each one it holds becomes microseconds. The instants are the instance's `created_at`
    /// and `updated_at`, each context's `started_at` and `completed_at`, each bookmark's
    /// `created_at`, each incident's `at`, and what the built-in activities keep: a Timer's
    /// `anchor` property, the `started_at` and `ended_at` of each entry of a task's `attempts`
    /// property, the `due_at` and `fired_at` of a timer-backed bookmark's payload (`wf.delay`,
    /// `wf.timer`, `wf.start_at`, `wf.cron`, `wf.deadline`, `wf.retry`) and of a queued
    /// resume of one. Results of contexts already completed are outputs handed on as they
    /// were, and stay untouched. A document of this format is left as it is.
    pub(crate) fn upgrade_stored(&mut self) {
        if self.format_version != FORMAT_VERSION_MS {
            return;
        }
        let ms = |at: Micros| at.saturating_mul(1000);
        self.created_at = ms(self.created_at);
        self.updated_at = ms(self.updated_at);
        let timer_bookmarks: Vec<String> = self
            .bookmarks
            .iter()
            .filter(|b| is_timer_name(&b.name))
            .map(|b| b.id.clone())
            .collect();
        for context in self.contexts.values_mut() {
            context.started_at = context.started_at.map(ms);
            context.completed_at = context.completed_at.map(ms);
            if let Some(anchor) = context.properties.get_mut("anchor") {
                scale_instant(anchor);
            }
            if let Some(Value::Array(attempts)) = context.properties.get_mut("attempts") {
                for attempt in attempts {
                    scale_fields(attempt, &["started_at", "ended_at"]);
                }
            }
        }
        for bookmark in &mut self.bookmarks {
            bookmark.created_at = ms(bookmark.created_at);
            if is_timer_name(&bookmark.name) {
                scale_fields(&mut bookmark.payload, &["due_at", "fired_at"]);
            }
        }
        for item in &mut self.queue {
            if let EntryPoint::Resume { bookmark, payload } = &mut item.entry
                && timer_bookmarks.contains(bookmark)
            {
                scale_fields(payload, &["due_at", "fired_at"]);
            }
        }
        for incident in &mut self.incidents {
            incident.at = ms(incident.at);
        }
        self.format_version = FORMAT_VERSION;
    }

    /// Removes final contexts that are not the root (ENG-7): their owner was signalled when
    /// they became final, and their descendants are final too.
    pub(crate) fn prune(&mut self) {
        let root = self.root;
        let keep_faulted_parents: Vec<ContextId> = self
            .contexts
            .values()
            .filter(|c| !c.status.is_final())
            .filter_map(|c| c.parent)
            .collect();
        self.contexts.retain(|id, c| {
            Some(*id) == root || !c.status.is_final() || keep_faulted_parents.contains(id)
        });
    }
}

/// Whether a bookmark name is one of the timer-backed reserved names, whose payload holds
/// `due_at` (TM-3).
fn is_timer_name(name: &str) -> bool {
    Reserved::from_name(name).is_some_and(|r| r.timer_kind().is_some())
}

/// A millisecond instant (a JSON integer) made microseconds; anything else is left alone.
fn scale_instant(value: &mut Value) {
    if let Some(at) = value.as_i64() {
        *value = Value::from(at.saturating_mul(1000));
    }
}

/// [`scale_instant`] on the named fields of a JSON object.
fn scale_fields(value: &mut Value, fields: &[&str]) {
    if let Value::Object(map) = value {
        for field in fields {
            if let Some(at) = map.get_mut(*field) {
                scale_instant(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eng42_journal_compacts_oldest_entries_into_one() {
        let mut journal = Journal::new(JournalLevel::Verbose, 10);
        for i in 0..25 {
            journal.record(
                JournalKind::Completed,
                Some((i, "root:a")),
                &Value::Null,
                i64::try_from(i).unwrap_or(0),
            );
            journal.compact();
        }
        assert_eq!(journal.entries.len(), 10);
        let first = journal.entries[0].to_entry();
        assert_eq!(first.kind, JournalKind::Compacted);
        assert_eq!(first.detail["from_seq"], 1);
        assert_eq!(first.detail["kinds"]["Completed"], 16);
        assert_eq!(journal.entries[1].seq, 17);
    }

    // ST-19: every instant a format-1 document holds (ms) is µs after the upgrade; counts,
    // user data and the non-timer bookmarks' payloads are left as they were.
    #[test]
    fn st19_a_format_1_document_has_every_instant_made_micros() {
        let old = serde_json::json!({
            "format": 1, "instance_id": "i", "definition": {"name": "D", "version": "v"},
            "created_at": 1_000, "updated_at": 2_000, "status": "Suspended",
            "sub_status": "Waiting",
            "contexts": {
                "1": {"id": 1, "node_id": "root", "parent": null, "status": "Running",
                      "is_executing": false, "execution_count": 1, "started_at": 1_000,
                      "properties": {"anchor": 1_000, "ticks": 3, "grid": 3}},
                "2": {"id": 2, "node_id": "root:t", "parent": 1, "status": "Running",
                      "is_executing": false, "execution_count": 2, "started_at": 1_100,
                      "completed_at": 1_900,
                      "properties": {"attempt": 2, "attempts": [
                          {"attempt": 1, "started_at": 1_100, "ended_at": 1_200,
                           "error": "e", "code": null}]}}
            },
            "root": 1, "next_context_id": 3,
            "queue": [{"context": 1, "entry": "resume", "bookmark": "tick",
                       "payload": {"due_at": 4_000, "fired_at": 4_100}}],
            "callbacks": [],
            "bookmarks": [
                {"id": "tick", "name": "wf.timer", "hash": "h", "node_id": "root",
                 "context_id": 1, "payload": {"due_at": 4_000, "tick": 4, "missed": 0},
                 "auto_burn": true, "callback": "tick", "created_at": 3_000},
                {"id": "retry", "name": "wf.retry", "hash": "h", "node_id": "root:t",
                 "context_id": 2, "payload": {"attempt": 2, "due_at": 5_000},
                 "auto_burn": true, "created_at": 1_200},
                {"id": "go", "name": "go", "hash": "h", "node_id": "root:t",
                 "context_id": 2, "payload": {"due_at": 7}, "auto_burn": true,
                 "created_at": 1_300}
            ],
            "data": {"at": 9}, "input": {}, "completion_seq": 1,
            "incidents": [{"id": "x", "context_id": 2, "node_id": "root:t",
                           "fault": {"kind": "Error", "message": "m", "attempt": 1},
                           "at": 1_500, "resolution": null}],
            "event_seq": 0,
            "journal": {"level": "Activities", "max_entries": 10, "next_seq": 1}
        });
        let mut state: WorkflowState = serde_json::from_value(old).unwrap();
        state.upgrade_stored();
        assert_eq!(state.format_version, FORMAT_VERSION);
        assert_eq!((state.created_at, state.updated_at), (1_000_000, 2_000_000));
        let root = &state.contexts[&1];
        assert_eq!(root.started_at, Some(1_000_000));
        assert_eq!(root.properties["anchor"], 1_000_000);
        assert_eq!(root.properties["ticks"], 3);
        let task = &state.contexts[&2];
        assert_eq!(task.completed_at, Some(1_900_000));
        assert_eq!(task.properties["attempt"], 2);
        assert_eq!(task.properties["attempts"][0]["started_at"], 1_100_000);
        assert_eq!(task.properties["attempts"][0]["ended_at"], 1_200_000);
        assert_eq!(state.bookmarks[0].created_at, 3_000_000);
        assert_eq!(
            state.bookmarks[0].payload,
            serde_json::json!({"due_at": 4_000_000, "tick": 4, "missed": 0})
        );
        assert_eq!(state.bookmarks[1].payload["due_at"], 5_000_000);
        assert_eq!(state.bookmarks[1].payload["attempt"], 2);
        assert_eq!(state.bookmarks[2].created_at, 1_300_000);
        assert_eq!(
            state.bookmarks[2].payload["due_at"], 7,
            "a user event's payload"
        );
        let EntryPoint::Resume { payload, .. } = &state.queue[0].entry else {
            panic!("a queued resume: {:?}", state.queue[0]);
        };
        assert_eq!(payload["due_at"], 4_000_000);
        assert_eq!(payload["fired_at"], 4_100_000);
        assert_eq!(state.incidents[0].at, 1_500_000);
        assert_eq!(state.data["at"], 9);

        // A document of this format is left alone.
        let before = state.clone();
        state.upgrade_stored();
        assert_eq!(state, before);
    }

    #[test]
    fn a_journal_kind_is_stored_under_its_serde_name() {
        use JournalKind::*;
        // Exhaustive, so a new kind does not compile until it is listed below as well.
        let listed = |kind: JournalKind| match kind {
            Scheduled | Started | Completed | Faulted | Canceled | BookmarkCreated
            | BookmarkResumed | BookmarkBurned | StimulusConsumed | StatusChanged | Declined
            | Compacted | StateChanged | Skipped | Migrated => kind,
        };
        for kind in [
            Scheduled,
            Started,
            Completed,
            Faulted,
            Canceled,
            BookmarkCreated,
            BookmarkResumed,
            BookmarkBurned,
            StimulusConsumed,
            StatusChanged,
            Declined,
            Compacted,
            StateChanged,
            Skipped,
            Migrated,
        ] {
            assert_eq!(serde_json::to_value(listed(kind)).unwrap(), kind.as_str());
        }
    }

    // ENG-41: a detail written as text is byte for byte what the `Value` it stands for
    // encodes to, so rows written before and after read the same.
    #[test]
    fn eng41_a_detail_written_as_text_is_the_encoding_of_its_value() {
        let odd = "quote \" backslash \\ newline \n tab \t bell \u{7} nul \u{0} é ✓ \u{1F600}";
        let text = Detail::object()
            .str("bookmark", odd)
            .value("due_at", &serde_json::json!(-12))
            .value("fired_at", &serde_json::json!({"b": [1, 2.5], "a": null}))
            .opt_str("name", None)
            .opt_str("tag", Some("1:go"))
            .str("to", "état ✓ \u{7f}")
            .finish();
        let value = serde_json::json!({
            "bookmark": odd,
            "due_at": -12,
            "fired_at": {"b": [1, 2.5], "a": null},
            "name": null,
            "tag": "1:go",
            "to": "état ✓ \u{7f}",
        });
        assert_eq!(text.as_str(), serde_json::to_string(&value).unwrap());
        assert_eq!(text.to_value(), value);
        assert_eq!(Detail::object().finish().as_str(), "{}");
        assert_eq!(
            Detail::null().as_str(),
            serde_json::to_string(&Value::Null).unwrap()
        );
        assert_eq!(Detail::of_value(&value), text);
    }

    #[test]
    fn journal_level_filters_kinds() {
        let mut journal = Journal::new(JournalLevel::Lifecycle, 10);
        journal.record(JournalKind::Completed, None, &Value::Null, 0);
        journal.record(JournalKind::StatusChanged, None, &Value::Null, 0);
        assert_eq!(journal.entries.len(), 1);
    }
}
