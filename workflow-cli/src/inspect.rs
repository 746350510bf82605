//! Reading instances out of a store: summaries, details, and why one is not moving.
//!
//! Everything here reads the store's rows and the instance's state document as stored, so it
//! needs none of the application's code.

use serde::Serialize;
use serde_json::Value;
use workflow_model::Definition;
use workflow_runtime::store::{
    BookmarkRow, IncidentRecord, InstanceFilter, InstanceListing, InstanceRecord, InstanceStatus,
    InstanceSummary, JournalRecord, LATEST_DUE, Micros, Storage, StoreError, TimerRow,
};

use crate::explain::{self, Place, short_node};
// Where an instance is: decoded by `explain`, named here too for the commands.
pub(crate) use crate::explain::{Position, locate};
use crate::render::{duration, instant, relative};

/// One line of `workflow list`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) instance_id: String,
    pub(crate) definition: String,
    /// The definition version the instance is pinned to (its fingerprint).
    pub(crate) version: String,
    pub(crate) status: String,
    pub(crate) sub_status: Option<String>,
    /// The current state of a state machine, or the running nodes of a flowchart.
    pub(crate) at: Vec<String>,
    pub(crate) correlation_id: Option<String>,
    pub(crate) created_at: Micros,
    pub(crate) updated_at: Micros,
    /// Set when the row could not be decoded: the rest is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The filters of `workflow list`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListFilter {
    pub(crate) status: Option<InstanceStatus>,
    pub(crate) definition: Option<String>,
    /// Only instances last changed before this instant.
    pub(crate) updated_before: Option<Micros>,
    /// Only instances created after this instant.
    pub(crate) created_after: Option<Micros>,
    pub(crate) limit: usize,
}

/// Lists instances matching `filter`, in id order, at most `filter.limit`.
pub(crate) async fn list(store: &Storage, filter: &ListFilter) -> Result<Vec<Summary>, StoreError> {
    let mut out = Vec::new();
    let mut after = None;
    while out.len() < filter.limit {
        let page = store
            .list_instances(InstanceFilter {
                status: filter.status,
                definition_name: filter.definition.clone(),
                correlation_id: None,
                after: after.clone(),
                limit: 200,
                ..InstanceFilter::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.instance_id.clone());
        for listed in page {
            // The position is the row's stored listing (a finished state machine's names the
            // state it ended in), or read from the document of a row written without one.
            let stored = match &listed.summary {
                Ok(row) => row
                    .listing
                    .as_deref()
                    .and_then(InstanceListing::decode)
                    .map(|listing| from_listing(row, listing)),
                Err(_) => None,
            };
            let loaded = match (stored, listed.summary) {
                (Some(summary), _) => Ok(summary),
                (None, Ok(_)) => store
                    .load_instance(&listed.instance_id)
                    .await
                    .map(|record| summary(&record)),
                (None, Err(error)) => Err(error),
            };
            let summary = match loaded {
                Ok(summary) => summary,
                Err(error) => Summary {
                    instance_id: listed.instance_id,
                    definition: String::new(),
                    version: String::new(),
                    status: "unreadable".to_owned(),
                    sub_status: None,
                    at: Vec::new(),
                    correlation_id: None,
                    created_at: 0,
                    updated_at: 0,
                    error: Some(error.to_string()),
                },
            };
            let old_enough = filter.updated_before.is_none_or(|t| summary.updated_at < t);
            let new_enough = filter.created_after.is_none_or(|t| summary.created_at > t);
            if summary.error.is_some() || (old_enough && new_enough) {
                out.push(summary);
            }
            if out.len() >= filter.limit {
                break;
            }
        }
    }
    Ok(out)
}

/// The summary of a listed row from its stored listing.
fn from_listing(row: &InstanceSummary, listing: InstanceListing) -> Summary {
    Summary {
        instance_id: row.instance_id.clone(),
        definition: row.definition_name.clone(),
        version: row.definition_version.clone(),
        status: row.status.as_str().to_owned(),
        sub_status: row.sub_status.map(|s| s.as_str().to_owned()),
        at: listing.at,
        correlation_id: row.correlation_id.clone(),
        created_at: row.created_at,
        updated_at: row.updated_at,
        error: None,
    }
}

fn summary(record: &InstanceRecord) -> Summary {
    Summary {
        instance_id: record.instance_id.clone(),
        definition: record.definition_name.clone(),
        version: record.definition_version.clone(),
        status: record.status.as_str().to_owned(),
        sub_status: record.sub_status.map(|s| s.as_str().to_owned()),
        at: position(&record.state),
        correlation_id: record.correlation_id.clone(),
        created_at: record.created_at,
        updated_at: record.updated_at,
        error: None,
    }
}

/// Where an instance is, as people name it: its state, or its innermost nodes' ids.
pub(crate) fn position(state: &Value) -> Vec<String> {
    match locate(state) {
        Position::State(name) => vec![name],
        Position::Nodes(paths) => paths.iter().map(|p| short_node(p).to_owned()).collect(),
        Position::Nowhere => Vec::new(),
    }
}

/// Everything `workflow show` prints.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Detail {
    #[serde(flatten)]
    pub(crate) summary: Summary,
    pub(crate) version: String,
    pub(crate) revision: u64,
    pub(crate) lease: Option<LeaseView>,
    pub(crate) control_request: Option<String>,
    pub(crate) bookmarks: Vec<BookmarkView>,
    pub(crate) timers: Vec<TimerView>,
    /// Rows of the instance that did not decode (ST-22), each as its error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) damaged_rows: Vec<String>,
    pub(crate) incidents: Vec<IncidentView>,
    pub(crate) journal: Vec<JournalView>,
    pub(crate) data: Value,
    /// Where it is, as the definition recorded in the store describes it.
    pub(crate) places: Vec<Place>,
    /// Why `places` is empty for an instance that is somewhere: its definition version is
    /// not recorded in the store, or does not load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) definition_note: Option<String>,
    /// The time triggers of its definition, with their zone, missed-occurrence policy and
    /// next due time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) schedules: Vec<ScheduleView>,
    /// Its attempts waiting in line for a flow-control slot, in words (QU-13).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) slot_waits: Vec<String>,
}

/// A time trigger of an instance's definition (TM-11 to TM-13, TM-16, TM-19).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScheduleView {
    pub(crate) node: String,
    /// What it does, in words: its schedule, zone and missed-occurrence policy.
    pub(crate) does: String,
    /// When it fires next, as the store's schedule says; `None` once a `start_at` fired or
    /// before a process that runs the definition wrote the schedule.
    pub(crate) next_due: Option<Micros>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LeaseView {
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) expires_at: Micros,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct BookmarkView {
    pub(crate) name: String,
    pub(crate) node: String,
    /// The key the stimulus must carry, when the waiting activity recorded it.
    pub(crate) key: Option<Value>,
    pub(crate) created_at: Micros,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TimerView {
    pub(crate) timer_id: String,
    pub(crate) kind: String,
    pub(crate) due_at: Micros,
    pub(crate) parked: bool,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct IncidentView {
    pub(crate) incident_id: String,
    pub(crate) instance_id: String,
    pub(crate) definition: String,
    pub(crate) kind: String,
    pub(crate) node: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) created_at: Micros,
    pub(crate) resolution: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct JournalView {
    pub(crate) seq: u64,
    pub(crate) at: Micros,
    pub(crate) kind: String,
    pub(crate) node: Option<String>,
    /// What the entry records beyond its kind (`{"from": "New", "to": "Paid"}`), as stored.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub(crate) detail: Value,
}

/// Reads one instance and its rows; `None` when there is no such instance.
pub(crate) async fn detail(store: &Storage, id: &str) -> Result<Option<Detail>, StoreError> {
    let record = match store.load_instance(id).await {
        Ok(record) => record,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let bookmarks = store.list_bookmarks(id).await?;
    // A timer row that does not decode is named, not a failure of the whole instance.
    let mut damaged_rows = Vec::new();
    let timers = match store.list_timers(id).await {
        Ok(timers) => timers,
        Err(error @ StoreError::Decode { .. }) => {
            damaged_rows.push(error.to_string());
            Vec::new()
        }
        Err(error) => return Err(error),
    };
    let mut incidents: Vec<IncidentView> = store
        .list_incidents(id)
        .await?
        .iter()
        .map(incident_view)
        .collect();
    incidents.extend(state_incidents(&record, &incidents));
    let journal = whole_journal(store, id).await?;
    let position = locate(&record.state);
    let (places, definition_note, schedules) = match recorded_definition(store, &record).await? {
        Ok(definition) => {
            let schedules = schedule_views(store, &definition).await?;
            (explain::places(&definition, &position), None, schedules)
        }
        Err(_) if position == Position::Nowhere => (Vec::new(), None, Vec::new()),
        Err(note) => (Vec::new(), Some(note), Vec::new()),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            Micros::try_from(d.as_micros()).unwrap_or(Micros::MAX)
        });
    let slot_waits = store.slot_waits(id, now).await?;
    Ok(Some(Detail {
        summary: summary(&record),
        version: record.definition_version.clone(),
        revision: record.version,
        lease: record.lease.as_ref().map(|l| LeaseView {
            owner: l.owner.clone(),
            token: l.token,
            expires_at: l.expires_at,
        }),
        control_request: record
            .control_request
            .as_ref()
            .map(|c| c.kind.as_str().to_owned()),
        bookmarks: bookmarks
            .iter()
            .map(|b| bookmark_view(b, &record.state))
            .collect(),
        timers: timers.iter().map(timer_view).collect(),
        damaged_rows,
        incidents,
        journal: journal.iter().map(journal_view).collect(),
        data: record.state.get("data").cloned().unwrap_or(Value::Null),
        places,
        definition_note,
        schedules,
        slot_waits,
    }))
}

/// The definition's time triggers with the next due time of their schedules in the store.
async fn schedule_views(
    store: &Storage,
    definition: &Definition,
) -> Result<Vec<ScheduleView>, StoreError> {
    let triggers = explain::time_triggers(definition);
    if triggers.is_empty() {
        return Ok(Vec::new());
    }
    let stored = store.list_schedules(&definition.name).await?;
    Ok(triggers
        .into_iter()
        .map(|(node, does)| {
            let next_due = stored
                .iter()
                .find(|s| short_node(&s.node_id) == node && !s.fired)
                .map(|s| s.due_at);
            ScheduleView {
                node,
                does,
                next_due,
            }
        })
        .collect())
}

/// Every journal entry the store keeps for `id`, oldest first, read a page at a time.
async fn whole_journal(store: &Storage, id: &str) -> Result<Vec<JournalRecord>, StoreError> {
    const PAGE: usize = 1000;
    let mut entries: Vec<JournalRecord> = Vec::new();
    loop {
        let from = entries.last().map_or(0, |last| last.seq.saturating_add(1));
        let page = store.read_journal(id, from, PAGE).await?;
        let full = page.len() == PAGE;
        entries.extend(page);
        if !full {
            return Ok(entries);
        }
    }
}

/// The definition version the instance runs, as the application recorded it in the store;
/// `Err` says why there is none to read.
pub(crate) async fn recorded_definition(
    store: &Storage,
    record: &InstanceRecord,
) -> Result<Result<Definition, String>, StoreError> {
    let (name, version) = (&record.definition_name, &record.definition_version);
    let Some(recorded) = store.definition(name, Some(version)).await? else {
        return Ok(Err(format!(
            "`{name}` version {} is not recorded in this store: a process that runs it \
             records it when it starts",
            short_version(version)
        )));
    };
    Ok(Definition::from_json(&recorded.json).map_err(|e| {
        format!(
            "the recorded `{name}` version {} does not load: {e}",
            short_version(version)
        )
    }))
}

fn bookmark_view(row: &BookmarkRow, state: &Value) -> BookmarkView {
    let key = state
        .get("bookmarks")
        .and_then(Value::as_array)
        .and_then(|all| {
            all.iter()
                .find(|b| b.get("id").and_then(Value::as_str) == Some(&row.bookmark_id))
        })
        .and_then(|b| b.pointer("/payload/key"))
        .cloned();
    BookmarkView {
        name: row.name.clone(),
        node: short_node(&row.node_id).to_owned(),
        key,
        created_at: row.created_at,
    }
}

fn timer_view(row: &TimerRow) -> TimerView {
    TimerView {
        timer_id: row.timer_id.clone(),
        kind: row.kind.clone(),
        due_at: row.due_at,
        parked: row.parked,
    }
}

pub(crate) fn incident_view(row: &IncidentRecord) -> IncidentView {
    IncidentView {
        incident_id: row.incident_id.clone(),
        instance_id: row.instance_id.clone(),
        definition: row.definition_name.clone(),
        kind: row.kind.clone(),
        node: row
            .record
            .get("node_id")
            .and_then(Value::as_str)
            .map(|n| short_node(n).to_owned()),
        message: row
            .record
            .pointer("/fault/message")
            .or_else(|| row.record.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        created_at: row.created_at,
        resolution: row.resolution.clone(),
    }
}

/// Incidents recorded in the state document that the incident table does not have.
pub(crate) fn state_incidents(
    record: &InstanceRecord,
    known: &[IncidentView],
) -> Vec<IncidentView> {
    let Some(list) = record.state.get("incidents").and_then(Value::as_array) else {
        return Vec::new();
    };
    // A document of format 1 (the previous release) counted instants in milliseconds; later
    // formats count microseconds, like the store.
    let per_unit: i64 = match record.state.get("format").and_then(Value::as_u64) {
        Some(1) => 1000,
        _ => 1,
    };
    list.iter()
        .filter_map(|i| {
            let id = i.get("id").and_then(Value::as_str)?;
            if known.iter().any(|k| k.incident_id == id) {
                return None;
            }
            let at = i.get("at").and_then(Value::as_i64).unwrap_or(0);
            Some(IncidentView {
                incident_id: id.to_owned(),
                instance_id: record.instance_id.clone(),
                definition: record.definition_name.clone(),
                kind: i
                    .pointer("/fault/kind")
                    .and_then(Value::as_str)
                    .unwrap_or("fault")
                    .to_owned(),
                node: i
                    .get("node_id")
                    .and_then(Value::as_str)
                    .map(|n| short_node(n).to_owned()),
                message: i
                    .pointer("/fault/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                created_at: at.saturating_mul(per_unit),
                resolution: i
                    .get("resolution")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        })
        .collect()
}

fn journal_view(row: &JournalRecord) -> JournalView {
    JournalView {
        seq: row.seq,
        at: row.at,
        kind: row.kind.clone(),
        node: row.node_id.as_deref().map(|n| short_node(n).to_owned()),
        detail: row.detail.clone(),
    }
}

/// A journal entry's detail on one line of `workflow show`: its JSON, cut after 120
/// characters; `None` when it records nothing.
pub(crate) fn journal_detail_words(detail: &Value) -> Option<String> {
    const MAX: usize = 120;
    let empty = match detail {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        _ => false,
    };
    if empty {
        return None;
    }
    let text = detail.to_string();
    if text.chars().count() <= MAX {
        return Some(text);
    }
    let cut: String = text.chars().take(MAX).collect();
    Some(format!("{cut}..."))
}

/// Why an instance is (not) moving, one sentence a line, most important first.
pub(crate) fn why(detail: &Detail, now: Micros) -> Vec<String> {
    let s = &detail.summary;
    let mut out = Vec::new();
    let open_incidents: Vec<&IncidentView> = detail
        .incidents
        .iter()
        .filter(|i| i.resolution.is_none())
        .collect();
    match s.status.as_str() {
        "finished" | "cancelled" => {
            out.push(format!(
                "{} is {} (last change {}): it will not move again",
                s.instance_id,
                s.status,
                relative(s.updated_at, now)
            ));
            return out;
        }
        "faulted" => {
            out.push(format!(
                "{} is faulted: it runs again only after `workflow retry {}` (or is ended by \
                 `workflow cancel {}`)",
                s.instance_id, s.instance_id, s.instance_id
            ));
        }
        "running" => match &detail.lease {
            Some(lease) if lease.expires_at > now => out.push(format!(
                "{} is running in `{}`, whose lease expires {} unless renewed",
                s.instance_id,
                lease.owner,
                relative(lease.expires_at, now)
            )),
            Some(lease) => out.push(format!(
                "{} was running in `{}`, whose lease expired {}: a process that runs `{}` \
                 picks it up at its next recovery sweep; if none is running, start one",
                s.instance_id,
                lease.owner,
                relative(lease.expires_at, now),
                s.definition
            )),
            None => out.push(format!(
                "{} is runnable and waits for a process that runs `{}` version {}",
                s.instance_id,
                s.definition,
                short_version(&detail.version)
            )),
        },
        _ => {
            if s.sub_status.as_deref() == Some("paused") {
                out.push(format!(
                    "{} is suspended by an operator: `workflow resume {}` lets it go on",
                    s.instance_id, s.instance_id
                ));
            } else if detail.bookmarks.is_empty() && detail.timers.is_empty() {
                out.push(format!(
                    "{} is suspended but waits for nothing: no bookmark and no timer",
                    s.instance_id
                ));
            } else if s.sub_status.as_deref() == Some("waiting_for_slot") {
                // QU-11, QU-14: the `for a slot` lines below say which queue and where in line.
                out.push(format!(
                    "{} is suspended, waiting for a slot of a flow-control queue:",
                    s.instance_id
                ));
            } else {
                out.push(format!("{} is suspended, waiting:", s.instance_id));
            }
        }
    }
    for bookmark in &detail.bookmarks {
        let key = bookmark
            .key
            .as_ref()
            .map_or_else(String::new, |k| format!(" with key {k}"));
        out.push(format!(
            "  - for the event `{}`{key} (at node `{}`, since {})",
            bookmark.name,
            bookmark.node,
            relative(bookmark.created_at, now)
        ));
    }
    for damage in &detail.damaged_rows {
        out.push(format!("  - a damaged row: {damage}"));
    }
    for timer in &detail.timers {
        let line = if timer.due_at > LATEST_DUE {
            format!(
                "  - a damaged {} timer `{}`: its due time `{}` is not a time, so it cannot \
                 fire; repair its `due_at`, then retry the instance",
                timer.kind, timer.timer_id, timer.due_at
            )
        } else if timer.parked {
            format!(
                "  - a {} timer due {}, parked while the instance is faulted",
                timer.kind,
                relative(timer.due_at, now)
            )
        } else if timer.due_at <= now {
            format!(
                "  - a {} timer overdue by {}: it fires when a process that runs `{}` has its \
                 timer driver running",
                timer.kind,
                duration(now - timer.due_at),
                s.definition
            )
        } else {
            format!(
                "  - a {} timer due {} ({})",
                timer.kind,
                relative(timer.due_at, now),
                instant(timer.due_at)
            )
        };
        out.push(line);
    }
    for wait in &detail.slot_waits {
        out.push(format!("  - for a slot: {wait}"));
    }
    for incident in open_incidents {
        out.push(format!(
            "  - open incident {} ({}) at node `{}`: {}",
            incident.incident_id,
            incident.kind,
            incident.node.as_deref().unwrap_or("-"),
            incident.message.as_deref().unwrap_or("(no message)")
        ));
    }
    if s.status != "running"
        && let Some(lease) = detail.lease.as_ref().filter(|l| l.expires_at <= now)
    {
        out.push(format!(
            "  - a lease of `{}` expired {} without being released: that process stopped \
             while it ran the instance; the next run takes the lease over",
            lease.owner,
            relative(lease.expires_at, now)
        ));
    }
    if let Some(request) = &detail.control_request {
        out.push(format!(
            "  - a `{request}` request is pending: the process that owns it applies it at \
             its next step"
        ));
    }
    if !detail.places.is_empty() {
        out.push("where it is, by its recorded definition:".to_owned());
        for place in &detail.places {
            out.push(format!("  - {}", place_line(place)));
            out.extend(place.next.iter().map(|n| format!("      next: {n}")));
        }
    } else if let Some(note) = &detail.definition_note {
        out.push(format!("(its definition is not at hand: {note})"));
    }
    if !detail.schedules.is_empty() {
        out.push(format!(
            "`{}` is started by its time triggers:",
            s.definition
        ));
        for schedule in &detail.schedules {
            let next = schedule.next_due.map_or_else(String::new, |due| {
                format!(" (next due {}, {})", relative(due, now), instant(due))
            });
            out.push(format!("  - `{}` {}{next}", schedule.node, schedule.does));
        }
    }
    out
}

/// `state `New` "Waiting for payment"`, `event `approval`: waits for the event ...`.
pub(crate) fn place_line(place: &Place) -> String {
    let (shown, does) = place_parts(place);
    format!("{} `{}`{shown}{does}", place.kind, place.name)
}

/// `New "Waiting for payment" (state)`, `approval (event: waits for the event ...)`.
pub(crate) fn place_short(place: &Place) -> String {
    let (shown, does) = place_parts(place);
    format!("{}{shown} ({}{does})", place.name, place.kind)
}

fn place_parts(place: &Place) -> (String, String) {
    let shown = place
        .display_name
        .as_deref()
        .map_or_else(String::new, |d| format!(" \"{d}\""));
    let does = place
        .does
        .as_deref()
        .map_or_else(String::new, |d| format!(": {d}"));
    (shown, does)
}

/// The first 12 characters of a fingerprint, as people quote them.
pub(crate) fn short_version(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// `why`'s lines about queued stimuli: the ones addressed to the instance, and the ones for
/// the events it waits for (or a name close to one) that do not match it, each with why.
pub(crate) fn queued_lines(
    detail: &Detail,
    queued: &[workflow_runtime::store::QueueItem],
    now: Micros,
) -> Vec<String> {
    let s = &detail.summary;
    let waiting: Vec<&str> = detail.bookmarks.iter().map(|b| b.name.as_str()).collect();
    let mut out = Vec::new();
    for item in queued {
        let targets = &item.targets;
        let addressed = targets.get("instance_id").and_then(Value::as_str) == Some(&s.instance_id);
        let key = item
            .key_display
            .as_deref()
            .map_or_else(String::new, |k| format!(" with key {k}"));
        let sent = relative(item.sent_at, now);
        let same_name: Vec<&BookmarkView> = detail
            .bookmarks
            .iter()
            .filter(|b| b.name == item.name)
            .collect();
        let key_matches = |b: &&BookmarkView| {
            b.key.as_ref().map(Value::to_string) == item.key_display
                || (b.key.is_none() && item.key_display.is_none())
        };
        let line = if addressed && item.held {
            format!(
                "  - `{}`{key} (sent {sent}) is held for it until it runs again (`workflow \
                 resume` or `workflow retry`)",
                item.name
            )
        } else if addressed {
            match same_name.is_empty() {
                true => format!(
                    "  - `{}`{key} (sent {sent}) is addressed to it, but it waits for no `{}`{}",
                    item.name,
                    item.name,
                    waits_for(&waiting)
                ),
                false => format!(
                    "  - `{}`{key} (sent {sent}) is addressed to it and waits for the inbox \
                     worker of the process running `{}`",
                    item.name, s.definition
                ),
            }
        } else if !same_name.is_empty() {
            if !same_name.iter().any(key_matches) {
                let wanted: Vec<String> = same_name
                    .iter()
                    .map(|b| {
                        b.key
                            .as_ref()
                            .map_or_else(|| "none".to_owned(), Value::to_string)
                    })
                    .collect();
                format!(
                    "  - `{}`{key} (sent {sent}) does not match: it waits for key {}",
                    item.name,
                    wanted.join(" or ")
                )
            } else if item.sent_at < s.created_at {
                format!(
                    "  - `{}`{key} was sent {sent}, before the instance began: its wait only \
                     takes events sent since its start",
                    item.name
                )
            } else {
                format!(
                    "  - `{}`{key} (sent {sent}) matches and waits for the inbox worker of the \
                     process running `{}`",
                    item.name, s.definition
                )
            }
        } else if let Some(close) = workflow_model::suggest(&item.name, waiting.iter().copied()) {
            format!(
                "  - `{}`{key} (sent {sent}) is not `{close}`, the event it waits for",
                item.name
            )
        } else {
            continue;
        };
        out.push(line);
    }
    if !out.is_empty() {
        out.insert(0, "stimuli in the inbox that concern it:".to_owned());
    }
    out
}

fn waits_for(waiting: &[&str]) -> String {
    if waiting.is_empty() {
        " (it waits for no event at all)".to_owned()
    } else {
        format!(" (it waits for {})", waiting.join(", "))
    }
}
