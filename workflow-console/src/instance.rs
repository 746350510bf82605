//! The instance page (`/instances/{id}`): status and where it is, the diagram of the version
//! it runs with its position and path, why it is (not) moving, what it waits for, its
//! incidents, journal and data, and the actions an operator may take on it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;
use workflow_model::Definition;
use workflow_runtime::store::{
    BookmarkRow, IncidentRecord, InstanceRecord, InstanceStatus, InstanceSubStatus, JournalRecord,
    Micros, Storage, StoreError, TimerRow,
};

use crate::diagram::{self, Marks};
use crate::html::{self, Section, escape, instant, relative, short_version, url_part};
use crate::{Base, Failure, Shared, State};

/// Everything the page shows of one instance, read from the store.
pub(crate) struct Detail {
    pub(crate) record: InstanceRecord,
    bookmarks: Vec<BookmarkRow>,
    timers: Vec<TimerRow>,
    incidents: Vec<IncidentRecord>,
    journal: Vec<JournalRecord>,
    definition: Result<Definition, String>,
    /// For each flow-control queue a task attempt of the instance waits in line in, the
    /// store's words for the wait (`QueueUsage::waiting_words`).
    slot_waits: Vec<String>,
}

/// Reads an instance and its rows; `None` for an unknown id.
pub(crate) async fn read(store: &Storage, id: &str) -> Result<Option<Detail>, StoreError> {
    let record = match store.load_instance(id).await {
        Ok(record) => record,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let definition =
        recorded_definition(store, &record.definition_name, &record.definition_version).await?;
    let slot_waits = store.slot_waits(id, crate::now()).await?;
    Ok(Some(Detail {
        slot_waits,
        bookmarks: store.list_bookmarks(id).await?,
        timers: store.list_timers(id).await?,
        incidents: store.list_incidents(id).await?,
        journal: store.read_journal(id, 0, 1000).await?,
        record,
        definition,
    }))
}

/// The definition version as the application recorded it; `Err` says why there is none.
pub(crate) async fn recorded_definition(
    store: &Storage,
    name: &str,
    version: &str,
) -> Result<Result<Definition, String>, StoreError> {
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

/// `GET /instances/{id}`.
pub(crate) async fn page(state: State, base: Base, Path(id): Path<String>) -> Response {
    render(&state, &base, &id, None).await
}

/// The outcome of an action, shown above the instance.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) refused: bool,
    pub(crate) message: String,
}

/// The instance page, with an action's outcome on top when there is one.
pub(crate) async fn render(
    state: &Shared,
    base: &Base,
    id: &str,
    outcome: Option<Outcome>,
) -> Response {
    let store = state.runtime.store();
    let detail = match read(store, id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => {
            let mut failure = Failure::not_found(base, format!("no instance `{id}` in this store"));
            if let Some(outcome) = outcome {
                failure = Failure::not_found(base, outcome.message);
            }
            return failure.into_response();
        }
        Err(error) => return Failure::store(base, &error).into_response(),
    };
    let status = match &outcome {
        Some(o) if o.refused => StatusCode::CONFLICT,
        _ => StatusCode::OK,
    };
    let body = body(state, base, &detail, outcome.as_ref());
    let title = format!("Instance {id}");
    (
        status,
        Html(html::page(&base.0, Section::Instances, &title, &body)),
    )
        .into_response()
}

/// Where an instance is, as its state document says: the current state of a root state
/// machine, else the root's nodes whose contexts have not completed.
fn position(state: &Value) -> Vec<String> {
    let contexts = state.get("contexts").and_then(Value::as_object);
    let root = state.get("root").and_then(Value::as_u64);
    let (Some(contexts), Some(root)) = (contexts, root) else {
        return Vec::new();
    };
    let root_context = contexts.get(&root.to_string());
    if let Some(current) = root_context
        .and_then(|c| c.pointer("/properties/current_state"))
        .and_then(Value::as_str)
    {
        return vec![current.to_owned()];
    }
    let mut nodes: Vec<String> = contexts
        .values()
        .filter(|c| c.get("id").and_then(Value::as_u64) != Some(root))
        .filter(|c| {
            matches!(
                c.get("status").and_then(Value::as_str),
                Some("Running" | "Pending" | "Faulted")
            )
        })
        .filter_map(|c| c.get("node_id").and_then(Value::as_str))
        .filter_map(top_node)
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// `root:review:inner` -> `review`: the root's node a path is in.
fn top_node(path: &str) -> Option<String> {
    path.split(':').nth(1).map(str::to_owned)
}

/// Where the instance is and has been, for the diagram.
fn marks(detail: &Detail) -> Marks {
    let record = &detail.record;
    let current: BTreeSet<String> = position(&record.state).into_iter().collect();
    let mut marks = Marks {
        started: true,
        ended: matches!(record.status, InstanceStatus::Finished),
        ..Marks::default()
    };
    for entry in &detail.journal {
        if matches!(entry.kind.as_str(), "state_changed" | "StateChanged") {
            let from = entry.detail.get("from").and_then(Value::as_str);
            let to = entry.detail.get("to").and_then(Value::as_str);
            if let (Some(from), Some(to)) = (from, to) {
                marks.visited.insert(from.to_owned());
                marks.visited.insert(to.to_owned());
                marks.taken.insert((from.to_owned(), to.to_owned()));
            }
        } else if let Some(node) = entry.node_id.as_deref().and_then(top_node) {
            marks.visited.insert(node);
        }
    }
    // A state machine's initial state, or the state it finished in.
    if let Ok(definition) = &detail.definition
        && let workflow_model::Activity::StateMachine(machine) = &definition.root
    {
        marks.visited.insert(machine.initial.clone());
        if let Some(state) = record
            .state
            .pointer("/contexts")
            .and_then(Value::as_object)
            .and_then(|c| {
                c.values()
                    .find_map(|c| c.pointer("/properties/current_state"))
            })
            .and_then(Value::as_str)
        {
            marks.visited.insert(state.to_owned());
        }
    }
    // Between visited nodes of a flowchart or sequence, the edges were taken.
    if let Ok(definition) = &detail.definition {
        match &definition.root {
            workflow_model::Activity::Flowchart(chart) => {
                for c in &chart.connections {
                    if marks.visited.contains(&c.source) && marks.visited.contains(&c.target) {
                        marks.taken.insert((c.source.clone(), c.target.clone()));
                    }
                }
            }
            workflow_model::Activity::Sequence(sequence) => {
                for pair in sequence.steps.windows(2) {
                    if let [a, b] = pair
                        && marks.visited.contains(a.id())
                        && (marks.visited.contains(b.id()) || current.contains(b.id()))
                    {
                        marks.taken.insert((a.id().to_owned(), b.id().to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    marks.current = current;
    marks
}

fn status_badge(status: InstanceStatus, sub: Option<InstanceSubStatus>) -> String {
    let mut out = format!(
        "<span class=\"status {0}\" data-status=\"{0}\">{0}</span>",
        status.as_str()
    );
    if let Some(sub) = sub {
        let _ = write!(out, " <span class=\"muted\">{}</span>", sub.as_str());
    }
    out
}

/// A bookmark's key, when the waiting activity recorded it in the document.
fn bookmark_key(state: &Value, bookmark_id: &str) -> Option<Value> {
    state
        .get("bookmarks")
        .and_then(Value::as_array)?
        .iter()
        .find(|b| b.get("id").and_then(Value::as_str) == Some(bookmark_id))?
        .pointer("/payload/key")
        .cloned()
}

fn incident_message(incident: &IncidentRecord) -> String {
    incident
        .record
        .pointer("/fault/message")
        .or_else(|| incident.record.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("(no message)")
        .to_owned()
}

/// Why the instance is (not) moving, one sentence a line, most important first.
fn why(detail: &Detail, now: Micros) -> Vec<String> {
    let r = &detail.record;
    let mut out = Vec::new();
    match r.status {
        InstanceStatus::Finished | InstanceStatus::Cancelled => {
            out.push(format!(
                "It is {} (last change {}): it will not move again.",
                r.status.as_str(),
                relative(r.updated_at, now)
            ));
            return out;
        }
        InstanceStatus::Faulted => out.push(
            "It is faulted: it runs again only after a retry (or is ended by a cancel).".to_owned(),
        ),
        InstanceStatus::Running => match &r.lease {
            Some(lease) if lease.expires_at > now => out.push(format!(
                "It is running in `{}`, whose lease expires {} unless renewed.",
                lease.owner,
                relative(lease.expires_at, now)
            )),
            Some(lease) => out.push(format!(
                "It was running in `{}`, whose lease expired {}: a process that runs `{}` \
                 picks it up at its next recovery sweep.",
                lease.owner,
                relative(lease.expires_at, now),
                r.definition_name
            )),
            None => out.push(format!(
                "It is runnable and waits for a process that runs `{}` version {}.",
                r.definition_name,
                short_version(&r.definition_version)
            )),
        },
        InstanceStatus::Suspended => {
            if r.sub_status == Some(InstanceSubStatus::Paused) {
                out.push("It is suspended by an operator: a resume lets it go on.".to_owned());
            } else if detail.bookmarks.is_empty() && detail.timers.is_empty() {
                out.push(
                    "It is suspended but waits for nothing: no bookmark and no timer.".to_owned(),
                );
            } else {
                out.push("It is suspended, waiting:".to_owned());
            }
        }
    }
    for b in &detail.bookmarks {
        let key = bookmark_key(&r.state, &b.bookmark_id)
            .map_or_else(String::new, |k| format!(" with key {k}"));
        out.push(format!(
            "for the event `{}`{key} (at node `{}`, since {})",
            b.name,
            b.node_id.rsplit(':').next().unwrap_or(&b.node_id),
            relative(b.created_at, now)
        ));
    }
    for t in &detail.timers {
        out.push(if t.parked {
            format!(
                "a {} timer due {}, parked while the instance is faulted",
                t.kind,
                relative(t.due_at, now)
            )
        } else if t.due_at <= now {
            format!(
                "a {} timer overdue by {}: it fires when a process that runs `{}` has its \
                 timer driver running",
                t.kind,
                html::duration(now - t.due_at),
                r.definition_name
            )
        } else {
            format!("a {} timer due {}", t.kind, relative(t.due_at, now))
        });
    }
    for wait in &detail.slot_waits {
        out.push(format!("for a slot: {wait}"));
    }
    for i in detail.incidents.iter().filter(|i| i.resolution.is_none()) {
        out.push(format!(
            "open incident {} ({}): {}",
            i.incident_id,
            i.kind,
            incident_message(i)
        ));
    }
    if let Some(request) = &r.control_request {
        out.push(format!(
            "a `{}` request is pending: the process that owns it applies it at its next step",
            request.kind.as_str()
        ));
    }
    if let Err(note) = &detail.definition {
        out.push(format!("(its definition is not at hand: {note})"));
    }
    out
}

/// The actions that make sense for the instance's status.
fn actions_for(record: &InstanceRecord) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    match record.status {
        InstanceStatus::Faulted => {
            out.push(("retry", "Retry"));
            out.push(("cancel", "Cancel"));
        }
        InstanceStatus::Running | InstanceStatus::Suspended => {
            if record.sub_status == Some(InstanceSubStatus::Paused) {
                out.push(("resume", "Resume"));
            } else {
                out.push(("suspend", "Suspend"));
            }
            out.push(("cancel", "Cancel"));
        }
        InstanceStatus::Finished | InstanceStatus::Cancelled => out.push(("purge", "Purge")),
    }
    out
}

fn body(state: &Shared, base: &Base, detail: &Detail, outcome: Option<&Outcome>) -> String {
    let r = &detail.record;
    let now = crate::now();
    let b = escape(&base.0);
    let id_url = escape(&url_part(&r.instance_id));
    let mut out = String::new();
    if let Some(outcome) = outcome {
        let class = if outcome.refused {
            "result refused"
        } else {
            "result"
        };
        let _ = write!(
            out,
            "<div class=\"{class}\" role=\"status\">{}</div>",
            escape(&outcome.message)
        );
    }
    let at = position(&r.state);
    let _ = write!(
        out,
        "<h1>Instance <span class=\"mono\">{}</span> {}</h1>",
        escape(&r.instance_id),
        status_badge(r.status, r.sub_status)
    );
    let _ = write!(
        out,
        "<dl class=\"facts\"><dt>Definition</dt><dd><a href=\"{b}/definitions#{}\">{}</a> \
         version <span class=\"mono\">{}</span></dd><dt>Where it is</dt><dd class=\"at\">{}</dd>",
        escape(&url_part(&r.definition_name)),
        escape(&r.definition_name),
        escape(short_version(&r.definition_version)),
        if at.is_empty() {
            "-".to_owned()
        } else {
            escape(&at.join(", "))
        }
    );
    if let Some(c) = &r.correlation_id {
        let _ = write!(out, "<dt>Correlation</dt><dd>{}</dd>", escape(c));
    }
    // The W3C trace its start carried: every run of it continues that trace.
    if let Some(text) = r.state.get("traceparent").and_then(Value::as_str) {
        match text.parse::<workflow_runtime::TraceParent>() {
            Ok(parent) => {
                let _ = write!(
                    out,
                    "<dt>Trace</dt><dd class=\"mono\" data-trace-id=\"{0}\" title=\"traceparent {1}\">{0}</dd>",
                    parent.trace_id(),
                    escape(text)
                );
            }
            Err(error) => {
                let _ = write!(out, "<dt>Trace</dt><dd>{}</dd>", escape(&error.to_string()));
            }
        }
    }
    let _ = write!(
        out,
        "<dt>Created</dt><dd>{} ({})</dd><dt>Changed</dt><dd>{} ({}), revision {}</dd>",
        instant(r.created_at),
        relative(r.created_at, now),
        instant(r.updated_at),
        relative(r.updated_at, now),
        r.version
    );
    if let Some(lease) = &r.lease {
        let _ = write!(
            out,
            "<dt>Lease</dt><dd>held by {}, {} {}</dd>",
            escape(&lease.owner),
            if lease.expires_at > now {
                "expires"
            } else {
                "expired"
            },
            relative(lease.expires_at, now)
        );
    }
    if let Some(request) = &r.control_request {
        let _ = write!(
            out,
            "<dt>Requested</dt><dd>{}</dd>",
            escape(request.kind.as_str())
        );
    }
    out.push_str("</dl>");
    if state.read_only {
        out.push_str("<p class=\"readonly\">Read-only console: no actions.</p>");
    } else {
        out.push_str("<div class=\"actions\">");
        for (action, label) in actions_for(r) {
            let class = if matches!(action, "cancel" | "purge") {
                "danger"
            } else {
                "primary"
            };
            let _ = write!(
                out,
                "<form method=\"post\" action=\"{b}/instances/{id_url}/{action}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button class=\"{class}\" type=\"submit\" name=\"do\" value=\"{action}\">{label}</button></form>",
                escape(&state.csrf)
            );
        }
        out.push_str("</div>");
    }
    out.push_str("<h2>Why</h2><ul class=\"why\">");
    for line in why(detail, now) {
        let _ = write!(out, "<li>{}</li>", escape(&line));
    }
    out.push_str("</ul><h2>Diagram</h2>");
    match &detail.definition {
        Ok(definition) => {
            let _ = write!(
                out,
                "<p class=\"legend\"><span style=\"background:#fff3b0;border-color:#e8a400\"></span>\
                 where it is<span style=\"border-color:#2d8a4e\"></span>where it has been</p>\
                 <div class=\"diagram\">{}</div>",
                diagram::svg(definition, &marks(detail))
            );
        }
        Err(note) => {
            let _ = write!(out, "<p class=\"muted\">{}</p>", escape(note));
        }
    }
    out.push_str("<div class=\"grid\"><div>");
    let _ = write!(out, "<h2>Bookmarks ({})</h2>", detail.bookmarks.len());
    out.push_str(
        "<table class=\"bookmarks\"><thead><tr><th>Event</th><th>Key</th><th>Node</th>\
         <th>Since</th></tr></thead><tbody>",
    );
    for bm in &detail.bookmarks {
        let key = bookmark_key(&r.state, &bm.bookmark_id)
            .map_or_else(|| "-".to_owned(), |k| k.to_string());
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&bm.name),
            escape(&key),
            escape(&bm.node_id),
            relative(bm.created_at, now)
        );
    }
    out.push_str("</tbody></table>");
    let _ = write!(out, "<h2>Timers ({})</h2>", detail.timers.len());
    out.push_str(
        "<table class=\"timers\"><thead><tr><th>Kind</th><th>Due</th><th></th></tr></thead><tbody>",
    );
    for t in &detail.timers {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{} ({})</td><td>{}</td></tr>",
            escape(&t.kind),
            instant(t.due_at),
            relative(t.due_at, now),
            if t.parked { "parked" } else { "" }
        );
    }
    out.push_str("</tbody></table>");
    let _ = write!(out, "<h2>Incidents ({})</h2>", detail.incidents.len());
    out.push_str(
        "<table class=\"incidents\"><thead><tr><th>Incident</th><th>Kind</th><th>Error</th>\
         <th>When</th><th>Resolution</th></tr></thead><tbody>",
    );
    for i in &detail.incidents {
        let _ = write!(
            out,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&i.incident_id),
            escape(&i.kind),
            escape(&incident_message(i)),
            instant(i.created_at),
            escape(i.resolution.as_deref().unwrap_or("open"))
        );
    }
    out.push_str("</tbody></table>");
    if !state.read_only
        && !matches!(
            r.status,
            InstanceStatus::Finished | InstanceStatus::Cancelled
        )
    {
        send_form(&mut out, state, base, detail);
    }
    out.push_str("</div><div>");
    let _ = write!(
        out,
        "<h2>Data</h2><pre class=\"data\">{}</pre>",
        escape(
            &serde_json::to_string_pretty(r.state.get("data").unwrap_or(&Value::Null))
                .unwrap_or_default()
        )
    );
    let _ = write!(
        out,
        "<h2>Journal ({} entries)</h2><ol class=\"timeline\">",
        detail.journal.len()
    );
    for j in &detail.journal {
        let _ = write!(
            out,
            "<li><span class=\"muted\">{}</span><span>{}</span><b>{}</b><span><span class=\"mono\">{}</span> \
             <span class=\"muted mono\">{}</span></span></li>",
            j.seq,
            instant(j.at),
            escape(&j.kind),
            escape(j.node_id.as_deref().unwrap_or("")),
            escape(&journal_detail(&j.detail))
        );
    }
    out.push_str("</ol></div></div>");
    out
}

/// A journal entry's detail in one short line (`{"from":"New","to":"Paid"}`), cut at 160
/// characters.
fn journal_detail(detail: &Value) -> String {
    if detail.is_null() || detail.as_object().is_some_and(serde_json::Map::is_empty) {
        return String::new();
    }
    let text = detail.to_string();
    match text.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The form sending an event to this instance, its waits offered as names.
fn send_form(out: &mut String, state: &Shared, base: &Base, detail: &Detail) {
    let r = &detail.record;
    let first = detail.bookmarks.first();
    let name = first.map_or("", |b| b.name.as_str());
    let key = first
        .and_then(|b| bookmark_key(&r.state, &b.bookmark_id))
        .map_or_else(String::new, |k| k.to_string());
    let _ = write!(
        out,
        "<h2>Send an event</h2><form class=\"action send\" method=\"post\" action=\"{}/send\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"instance\" value=\"{}\">\
         <label>Event name<input name=\"name\" required value=\"{}\" list=\"waits\"></label>\
         <datalist id=\"waits\">",
        escape(&base.0),
        escape(&state.csrf),
        escape(&r.instance_id),
        escape(name)
    );
    for b in &detail.bookmarks {
        let _ = write!(out, "<option value=\"{}\">", escape(&b.name));
    }
    let _ = write!(
        out,
        "</datalist><label>Key (JSON or text)<input name=\"key\" value=\"{}\"></label>\
         <label>Payload (JSON)<textarea name=\"payload\" rows=\"2\" cols=\"30\">{{}}</textarea></label>\
         <button class=\"primary\" type=\"submit\" name=\"do\" value=\"send\">Send</button></form>",
        escape(&key)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_position_is_the_current_state_or_the_root_nodes_still_open() {
        let machine = json!({"root": 1, "contexts": {"1": {"id": 1, "node_id": "root",
            "status": "Running", "properties": {"current_state": "Paid"}}}});
        assert_eq!(position(&machine), ["Paid"]);
        let chart = json!({"root": 1, "contexts": {
            "1": {"id": 1, "node_id": "root", "status": "Running"},
            "2": {"id": 2, "node_id": "root:review", "status": "Running"},
            "3": {"id": 3, "node_id": "root:review:inner", "status": "Running"},
            "4": {"id": 4, "node_id": "root:submit", "status": "Completed"}}});
        assert_eq!(position(&chart), ["review"]);
        assert!(position(&json!({})).is_empty());
    }
}
