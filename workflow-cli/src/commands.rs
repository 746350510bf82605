//! What each subcommand does; each returns the text to print.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use workflow_model::Definition;
use workflow_runtime::store::{
    DeadLetterFilter, DeadLetterReason, InstanceStatus, Micros, PurgeFilter, StoreError,
};
use workflow_runtime::{Control, Migration, MigrationOutcome, Runtime, Stimulus};

use crate::error::CliError;
use crate::inspect::{self, Detail, ListFilter};
use crate::operator::operator_runtime;
use crate::render::{Table, instant, or_dash, relative};
use crate::target::Target;
use crate::{Command, DeadLetterAction, DiagramFormat, ReasonArg, StatusArg};

fn now() -> Micros {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        Micros::try_from(d.as_micros()).unwrap_or(Micros::MAX)
    })
}

fn micros(duration: Duration) -> Micros {
    Micros::try_from(duration.as_micros()).unwrap_or(Micros::MAX)
}

fn json_line(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Runs one subcommand against the store at `url`.
pub(crate) async fn run(
    url: &str,
    schema: Option<&str>,
    command: Command,
) -> Result<String, CliError> {
    let target = Target::parse(url, schema)?;
    match command {
        Command::List {
            status,
            definition,
            older_than,
            newer_than,
            limit,
            json,
        } => {
            let store = target.open_read().await?;
            let now = now();
            let filter = ListFilter {
                status: status.map(instance_status),
                definition,
                updated_before: older_than.map(|d| now.saturating_sub(micros(d))),
                created_after: newer_than.map(|d| now.saturating_sub(micros(d))),
                limit,
            };
            let mut rows = inspect::list(&store, &filter).await?;
            rows.sort_by_key(|r| r.updated_at);
            if json {
                return Ok(rows.iter().map(|r| json_line(r) + "\n").collect());
            }
            let mut table = Table::new(&["ID", "DEFINITION", "VERSION", "STATUS", "AT", "CHANGED"]);
            for row in &rows {
                let status = match (&row.error, &row.sub_status) {
                    (Some(_), _) => "unreadable".to_owned(),
                    (None, Some(sub)) => format!("{} ({sub})", row.status),
                    (None, None) => row.status.clone(),
                };
                let at = row.error.clone().unwrap_or_else(|| {
                    or_dash(Some(row.at.join(", ").as_str()).filter(|s| !s.is_empty()))
                });
                table.row(vec![
                    row.instance_id.clone(),
                    row.definition.clone(),
                    inspect::short_version(&row.version).to_owned(),
                    status,
                    at,
                    relative(row.updated_at, now),
                ]);
            }
            Ok(table.render_or("no instances match"))
        }
        Command::Show { id, json, journal } => {
            let store = target.open_read().await?;
            let mut detail = inspect::detail(&store, &id)
                .await?
                .ok_or(CliError::NotFound(id))?;
            if json {
                if let Some(JournalShown::Last(n)) = journal {
                    let skip = detail.journal.len().saturating_sub(n);
                    detail.journal.drain(..skip);
                }
                let text = serde_json::to_string_pretty(&detail).unwrap_or_default();
                return Ok(text + "\n");
            }
            let journal = journal.unwrap_or(JournalShown::Last(SHOWN_JOURNAL_ENTRIES));
            Ok(show(&detail, journal, now()))
        }
        Command::Why { id } => {
            let store = target.open_read().await?;
            let detail = inspect::detail(&store, &id)
                .await?
                .ok_or(CliError::NotFound(id))?;
            let now = now();
            let mut lines = inspect::why(&detail, now);
            if !matches!(detail.summary.status.as_str(), "finished" | "cancelled") {
                let queued = store.queued(500).await?;
                lines.extend(inspect::queued_lines(&detail, &queued, now));
            }
            Ok(lines.join("\n") + "\n")
        }
        Command::Send {
            name,
            key,
            payload,
            instance,
            correlation,
            idempotency_key,
        } => {
            let store = target.open_write().await?;
            let mut stimulus = Stimulus::new(name.clone()).via_inbox();
            let key = key.as_deref().map(parse_json_or_string);
            // A send by key alone: the instances with its key are named when none waits.
            let by_key = instance.is_none() && correlation.is_none();
            if let Some(key) = &key {
                stimulus = stimulus.key(key.clone());
            }
            if let Some(payload) = payload {
                let value: Value = serde_json::from_str(&payload)
                    .map_err(|e| CliError::Input(format!("`--payload` is not JSON: {e}")))?;
                stimulus = stimulus.payload(value);
            }
            // What waits for it now is looked up with the same narrowing.
            let mut waits = workflow_runtime::store::BookmarkQuery::by_hash(String::new(), 20);
            waits.instance_id.clone_from(&instance);
            waits.correlation_id.clone_from(&correlation);
            if let Some(instance) = instance {
                stimulus = stimulus.instance(instance);
            }
            if let Some(correlation) = correlation {
                stimulus = stimulus.correlation(correlation);
            }
            if let Some(idempotency_key) = idempotency_key {
                stimulus = stimulus.idempotency_key(idempotency_key);
            }
            let runtime = operator_runtime(store.storage(), "workflow-cli")?;
            let report = runtime
                .send(stimulus)
                .await
                .map_err(|e| CliError::Send(format!("the send was refused: {e}")));
            // The running processes hear of what this one wrote before it exits.
            store.flush_hints().await;
            let report = report?;
            Ok(match report.inbox_item {
                Some(item) => {
                    // The store's bookmarks with the stimulus's hash: the instances that wait
                    // for it now (read by hash, the routing index).
                    waits.hash.clone_from(&report.hash);
                    let mut waiting: Vec<String> = store
                        .storage()
                        .find_bookmarks(waits)
                        .await?
                        .into_iter()
                        .map(|row| row.instance_id)
                        .collect();
                    waiting.sort();
                    waiting.dedup();
                    if waiting.is_empty() {
                        let keyed = match key.as_ref().filter(|_| by_key) {
                            Some(key) => instances_with_key(&store.storage(), key).await?,
                            None => String::new(),
                        };
                        format!(
                            "sent `{name}` to the inbox as {item}: no instance waits for it now{keyed}; the process running its workflows delivers it to one that comes to wait for it before it expires, else dead-letters it\n"
                        )
                    } else {
                        format!(
                            "sent `{name}` to the inbox as {item}: the process running its workflows delivers it; waiting for it now: {}\n",
                            waiting.join(", ")
                        )
                    }
                }
                None if report.duplicate => {
                    "already sent with this idempotency key: nothing done\n".to_owned()
                }
                None => format!("sent `{name}`\n"),
            })
        }
        Command::Cancel { id, reason, wait } => {
            control(&target, &id, Operation::Cancel(reason), wait).await
        }
        Command::Suspend { id, wait } => control(&target, &id, Operation::Suspend, wait).await,
        Command::Resume { id, wait } => control(&target, &id, Operation::Resume, wait).await,
        Command::Retry { id, wait } => control(&target, &id, Operation::Retry, wait).await,
        Command::Migrate {
            name,
            from,
            to,
            dry_run,
        } => migrate(&target, &name, &from, &to, dry_run).await,
        Command::Purge {
            older_than,
            definition,
        } => purge(&target, older_than, definition).await,
        Command::DeadLetters { action, json } => dead_letters(&target, action, json).await,
        Command::Incidents { all, json } => incidents(&target, all, json).await,
        Command::Queues { json } => queues(&target, json).await,
        Command::Diagram { what, format } => diagram(&target, &what, format).await,
        Command::Console {
            listen,
            read_only,
            allow_non_loopback,
        } => crate::console::serve(&target, listen, read_only, allow_non_loopback).await,
    }
}

fn instance_status(status: StatusArg) -> InstanceStatus {
    match status {
        StatusArg::Running => InstanceStatus::Running,
        StatusArg::Suspended => InstanceStatus::Suspended,
        StatusArg::Faulted => InstanceStatus::Faulted,
        StatusArg::Finished => InstanceStatus::Finished,
        StatusArg::Cancelled => InstanceStatus::Cancelled,
    }
}

/// `"o-1"` and `42` are JSON; `o-1` is taken as the string it reads as.
/// ` (with its key: o-1 is Finished, ...)`: the instances whose waits carried `key` (RT-36, at
/// most 20) with their status; empty when there is none.
async fn instances_with_key(
    storage: &workflow_runtime::store::Storage,
    key: &Value,
) -> Result<String, CliError> {
    // A key that does not digest could not have been sent: the send above refused it.
    let Ok(digest) = workflow_runtime::routing::key_digest(key) else {
        return Ok(String::new());
    };
    let mut found = Vec::new();
    for id in storage.instances_with_key(&digest, 20).await? {
        match storage.load_instance_text(&id).await {
            Ok(record) => found.push(format!("{id} is {}", record.status)),
            // Purged since it was looked up.
            Err(StoreError::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(if found.is_empty() {
        String::new()
    } else {
        format!(" (with its key: {})", found.join(", "))
    })
}

fn parse_json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// An operator's control request.
enum Operation {
    Cancel(Option<String>),
    Suspend,
    Resume,
    Retry,
}

impl Operation {
    fn verb(&self) -> &'static str {
        match self {
            Self::Cancel(_) => "cancel",
            Self::Suspend => "suspend",
            Self::Resume => "resume",
            Self::Retry => "retry",
        }
    }
}

/// Records the operator's request through a runtime without the application's code (so it is
/// always a request the owning process honours), then waits up to `wait` for that process to
/// apply it.
async fn control(
    target: &Target,
    id: &str,
    operation: Operation,
    wait: Duration,
) -> Result<String, CliError> {
    let store = target.open_write().await?;
    let runtime = operator_runtime(store.storage(), "workflow-cli")?;
    let verb = operation.verb();
    let refused = |message: String| {
        if message.contains("not found") {
            CliError::NotFound(id.to_owned())
        } else {
            CliError::Input(format!("cannot {verb} `{id}`: {message}"))
        }
    };
    let done = control_once(&runtime, id, operation).await;
    // The running processes hear of what this one wrote before it exits.
    store.flush_hints().await;
    let done = done.map_err(refused)?;
    if let Control::Applied(started) = done {
        return Ok(format!("{verb}: {}\n", Control::Applied(started)));
    }
    // The owning process clears the request in the commit that honours it.
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let record = store.load_instance(id).await?;
        if record.control_request.is_none() {
            let status = match record.sub_status {
                Some(sub) => format!("{} ({})", record.status.as_str(), sub.as_str()),
                None => record.status.as_str().to_owned(),
            };
            return Ok(format!(
                "{verb} of `{id}` applied by the process running `{}`: it is now {status}\n",
                record.definition_name
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            let waited = if wait.is_zero() {
                String::new()
            } else {
                format!(" (not yet within {}s: is it running?)", wait.as_secs())
            };
            return Ok(format!(
                "{verb} of `{id}` requested: the process running `{}` applies it at the \
                 instance's next step{waited}\n",
                record.definition_name
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A runtime with no workflows of its own: it only writes what an operator asks for, through
/// the same code paths as the application's runtime. It runs no background work: the
/// application's runtime does that.
/// Applies or requests `operation` on `id`; the error as text.
async fn control_once(
    runtime: &Runtime,
    id: &str,
    operation: Operation,
) -> Result<Control, String> {
    match operation {
        Operation::Cancel(reason) => runtime.cancel(id, reason).await.map_err(|e| e.to_string()),
        Operation::Suspend => runtime.suspend(id).await.map_err(|e| e.to_string()),
        Operation::Resume => runtime.resume(id).await.map_err(|e| e.to_string()),
        Operation::Retry => runtime.retry(id).await.map_err(|e| e.to_string()),
    }
}

/// The recorded version of `name` that `given` names: the fingerprint, or a unique prefix.
async fn recorded_version(
    store: &workflow_runtime::store::Storage,
    name: &str,
    given: &str,
) -> Result<String, CliError> {
    let recorded = store.list_definitions(Some(name)).await?;
    let matching: Vec<&str> = recorded
        .iter()
        .filter(|d| d.name == name && d.version.starts_with(given))
        .map(|d| d.version.as_str())
        .collect();
    match matching[..] {
        [version] => Ok(version.to_owned()),
        [] => Err(CliError::Input(format!(
            "no version `{given}` of `{name}` is recorded in this store{}",
            if recorded.is_empty() {
                String::new()
            } else {
                format!(
                    "; recorded: {}",
                    recorded
                        .iter()
                        .map(|d| inspect::short_version(&d.version))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ))),
        _ => Err(CliError::Input(format!(
            "`{given}` names {} recorded versions of `{name}`; give more of the fingerprint",
            matching.len()
        ))),
    }
}

/// `workflow migrate`: moves the waiting instances between two recorded versions.
async fn migrate(
    target: &Target,
    name: &str,
    from: &str,
    to: &str,
    dry_run: bool,
) -> Result<String, CliError> {
    let store = target.open_write().await?.storage();
    let from = recorded_version(&store, name, from).await?;
    let to = recorded_version(&store, name, to).await?;
    let runtime = operator_runtime(store, "workflow-cli")?;
    let migration = if dry_run {
        Migration::all().dry_run()
    } else {
        Migration::all()
    };
    let report = runtime
        .migrate_recorded(name, &from, &to, migration)
        .await
        .map_err(|e| CliError::Input(e.to_string()))?;
    let mut table = Table::new(&["ID", "FROM", "TO", "OUTCOME"]);
    for instance in &report.instances {
        let (from_state, to_state, outcome) = match &instance.outcome {
            MigrationOutcome::Migrated {
                from_state,
                to_state,
                status,
                ..
            } => (
                from_state.clone(),
                to_state.clone(),
                format!("migrated ({status})"),
            ),
            MigrationOutcome::WouldMigrate {
                from_state,
                to_state,
            } => (
                from_state.clone(),
                to_state.clone(),
                "would migrate".to_owned(),
            ),
            MigrationOutcome::Refused(why) => {
                ("-".to_owned(), "-".to_owned(), format!("refused: {why}"))
            }
        };
        table.row(vec![
            instance.instance_id.clone(),
            from_state,
            to_state,
            outcome,
        ]);
    }
    let moved = report.migrated().len();
    let refused = report.refused().len();
    let summary = if dry_run {
        format!(
            "dry run: {moved} instance(s) of `{name}` would move from {} to {}, {refused} refused; nothing was written\n",
            inspect::short_version(&from),
            inspect::short_version(&to)
        )
    } else {
        format!(
            "{moved} instance(s) of `{name}` moved from {} to {}, {refused} refused{}\n",
            inspect::short_version(&from),
            inspect::short_version(&to),
            if refused > 0 {
                " (migrate again to retry them)"
            } else {
                ""
            }
        )
    };
    Ok(table.render_or("no live instance is on that version") + &summary)
}

async fn purge(
    target: &Target,
    older_than: Duration,
    definition: Option<String>,
) -> Result<String, CliError> {
    let store = target.open_write().await?;
    let cut_off = now().saturating_sub(micros(older_than));
    let mut total = 0u64;
    // Batches of 500, each atomic; the progress line is redrawn after each batch.
    loop {
        let removed = store
            .purge(PurgeFilter {
                definition_name: definition.clone(),
                batch_size: 500,
                ..PurgeFilter::finished_before(cut_off)
            })
            .await?;
        total += removed;
        eprint!("\rpurging: {total} instance(s) removed");
        if removed < 500 {
            break;
        }
    }
    eprintln!();
    Ok(format!(
        "purged {total} finished or cancelled instance(s) that ended before {}\n",
        instant(cut_off)
    ))
}

async fn dead_letters(
    target: &Target,
    action: Option<DeadLetterAction>,
    json: bool,
) -> Result<String, CliError> {
    let reason = match action {
        Some(DeadLetterAction::Replay { item_id }) => {
            let runtime = operator_runtime(target.open_write().await?.storage(), "workflow-cli")?;
            let item = runtime.replay_dead_letter(&item_id).await?;
            return Ok(format!(
                "replayed `{}` ({}) into the inbox as {}\n",
                item.name, item_id, item.item_id
            ));
        }
        Some(DeadLetterAction::List { reason }) => reason,
        None => None,
    };
    let store = target.open_read().await?;
    let filter = DeadLetterFilter {
        reason: reason.map(|r| match r {
            ReasonArg::Expired => DeadLetterReason::Expired,
            ReasonArg::Failed => DeadLetterReason::Failed,
            ReasonArg::Rejected => DeadLetterReason::Rejected,
        }),
        limit: 500,
        ..DeadLetterFilter::default()
    };
    let letters = store.list_dead_letters(filter).await?;
    if json {
        return Ok(letters
            .iter()
            .map(|d| {
                json_line(&serde_json::json!({
                    "item_id": d.item.item_id,
                    "name": d.item.name,
                    "key": d.item.key_display,
                    "reason": d.reason.as_str(),
                    "error": d.error,
                    "dead_at": d.dead_at,
                    "payload": d.item.payload,
                })) + "\n"
            })
            .collect());
    }
    let now = now();
    let mut table = Table::new(&["ITEM", "EVENT", "KEY", "REASON", "DIED", "ERROR"]);
    for d in &letters {
        table.row(vec![
            d.item.item_id.clone(),
            d.item.name.clone(),
            or_dash(d.item.key_display.as_deref()),
            d.reason.as_str().to_owned(),
            relative(d.dead_at, now),
            or_dash(d.error.as_deref()),
        ]);
    }
    Ok(table.render_or("no dead letters"))
}

async fn incidents(target: &Target, all: bool, json: bool) -> Result<String, CliError> {
    let store = target.open_read().await?;
    let mut views = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_all_incidents(!all, after.clone(), 200).await?;
        let Some(last) = page.last() else { break };
        after = Some((last.created_at, last.incident_id.clone()));
        views.extend(page.iter().map(inspect::incident_view));
    }
    // Incidents kept only in state documents (faulted instances) are listed too.
    let mut cursor = None;
    loop {
        let page = store
            .list_instances(workflow_runtime::store::InstanceFilter {
                status: Some(InstanceStatus::Faulted),
                after: cursor.clone(),
                limit: 200,
                ..Default::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        cursor = Some(last.instance_id.clone());
        for listed in page {
            if listed.summary.is_ok()
                && let Ok(record) = store.load_instance(&listed.instance_id).await
            {
                let extra = inspect::state_incidents(&record, &views);
                views.extend(extra.into_iter().filter(|i| all || i.resolution.is_none()));
            }
        }
    }
    views.sort_by(|a, b| (a.created_at, &a.incident_id).cmp(&(b.created_at, &b.incident_id)));
    if json {
        return Ok(views.iter().map(|v| json_line(v) + "\n").collect());
    }
    let now = now();
    let mut table = Table::new(&["INSTANCE", "DEFINITION", "NODE", "KIND", "WHEN", "MESSAGE"]);
    for v in &views {
        table.row(vec![
            v.instance_id.clone(),
            v.definition.clone(),
            or_dash(v.node.as_deref()),
            v.kind.clone(),
            relative(v.created_at, now),
            or_dash(v.message.as_deref()),
        ]);
    }
    Ok(table.render_or("no open incidents"))
}

/// One flow-control queue as `workflow queues --json` prints it.
#[derive(serde::Serialize)]
struct QueueView {
    queue: String,
    concurrency: Option<u32>,
    per_process: Option<u32>,
    per_key: Option<u32>,
    rate_starts: Option<u32>,
    rate_period_us: Option<Micros>,
    running: u32,
    waiting: u32,
    oldest_wait: Option<Micros>,
    rate_used: u32,
}

async fn queues(target: &Target, json: bool) -> Result<String, CliError> {
    let store = target.open_read().await?;
    let now = now();
    let usage = store.queue_usage(now).await?;
    if json {
        return Ok(usage
            .iter()
            .map(|u| {
                json_line(&QueueView {
                    queue: u.queue.clone(),
                    concurrency: u.limits.concurrency,
                    per_process: u.limits.per_process,
                    per_key: u.limits.per_key,
                    rate_starts: u.limits.rate.map(|(starts, _)| starts),
                    rate_period_us: u.limits.rate.map(|(_, period)| period),
                    running: u.running,
                    waiting: u.waiting,
                    oldest_wait: u.oldest_wait,
                    rate_used: u.rate_used,
                }) + "\n"
            })
            .collect());
    }
    let mut table = Table::new(&[
        "QUEUE",
        "LIMITS",
        "RUNNING",
        "WAITING",
        "OLDEST WAIT",
        "RATE USED",
    ]);
    for u in &usage {
        let mut limits = Vec::new();
        if let Some(n) = u.limits.concurrency {
            limits.push(format!("{n} at once"));
        }
        if let Some(n) = u.limits.per_process {
            limits.push(format!("{n} per process"));
        }
        if let Some(n) = u.limits.per_key {
            limits.push(format!("{n} per key"));
        }
        if let Some((starts, period)) = u.limits.rate {
            limits.push(format!("{starts} per {}", crate::render::duration(period)));
        }
        let rate_used = match u.limits.rate {
            Some((starts, _)) => format!("{} of {starts}", u.rate_used),
            None => "-".to_owned(),
        };
        table.row(vec![
            u.queue.clone(),
            if limits.is_empty() {
                "-".to_owned()
            } else {
                limits.join(", ")
            },
            u.running.to_string(),
            u.waiting.to_string(),
            u.oldest_wait
                .map_or_else(|| "-".to_owned(), |at| relative(at, now)),
            rate_used,
        ]);
    }
    Ok(table.render_or("no flow-control queues"))
}

async fn diagram(target: &Target, what: &str, format: DiagramFormat) -> Result<String, CliError> {
    let draw = |definition: &Definition, at: &[String]| {
        let current = workflow_model::diagram::Highlight::new(at.iter().cloned());
        match format {
            DiagramFormat::Mermaid => workflow_model::diagram::mermaid_with(definition, &current),
            DiagramFormat::Dot => workflow_model::diagram::dot_with(definition, &current),
        }
    };
    if Path::new(what).is_file() {
        let text = std::fs::read_to_string(what)
            .map_err(|e| CliError::Input(format!("cannot read `{what}`: {e}")))?;
        let definition = Definition::from_json(&text)
            .map_err(|e| CliError::Input(format!("`{what}` is not a valid definition: {e}")))?;
        return Ok(draw(&definition, &[]));
    }
    let store = target.open_read().await?;
    // An instance: the version it runs, its position highlighted.
    match store.load_instance(what).await {
        Ok(record) => {
            let definition = inspect::recorded_definition(&store, &record)
                .await?
                .map_err(|note| {
                    CliError::Input(format!("cannot draw instance `{what}`: {note}"))
                })?;
            let at = match inspect::locate(&record.state) {
                inspect::Position::State(name) => vec![name],
                inspect::Position::Nodes(paths) => paths,
                inspect::Position::Nowhere => Vec::new(),
            };
            return Ok(draw(&definition, &at));
        }
        Err(StoreError::NotFound { .. }) => {}
        Err(error) => return Err(error.into()),
    }
    // A definition recorded by the application's runtime: its latest version.
    let Some(recorded) = store.definition(what, None).await? else {
        return Err(CliError::Input(format!(
            "`{what}` is neither a JSON definition file, nor an instance, nor a definition \
             recorded in this store"
        )));
    };
    let definition = Definition::from_json(&recorded.json).map_err(|e| {
        CliError::Input(format!(
            "the recorded definition `{what}` does not load: {e}"
        ))
    })?;
    Ok(draw(&definition, &[]))
}

/// The journal entries `workflow show` prints without `--journal`.
const SHOWN_JOURNAL_ENTRIES: usize = 20;

/// How much of the journal `workflow show` prints (`--journal N` or `--journal all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JournalShown {
    /// The newest N entries.
    Last(usize),
    /// Every entry the store keeps.
    All,
}

/// `all`, or a number of entries.
pub(crate) fn parse_journal_shown(text: &str) -> Result<JournalShown, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("all") {
        return Ok(JournalShown::All);
    }
    text.parse().map(JournalShown::Last).map_err(|_| {
        format!("`{text}` is not a number of journal entries: expected e.g. `50` or `all`")
    })
}

fn show(detail: &Detail, journal: JournalShown, now: Micros) -> String {
    let s = &detail.summary;
    let mut out = String::new();
    let _ = writeln!(out, "instance    {}", s.instance_id);
    let _ = writeln!(
        out,
        "definition  {} (version {})",
        s.definition,
        inspect::short_version(&detail.version)
    );
    let status = match &s.sub_status {
        Some(sub) => format!("{} ({sub})", s.status),
        None => s.status.clone(),
    };
    let _ = writeln!(out, "status      {status}");
    if detail.places.is_empty() {
        if !s.at.is_empty() {
            let _ = writeln!(out, "at          {}", s.at.join(", "));
        }
        if let Some(note) = &detail.definition_note {
            let _ = writeln!(out, "            ({note})");
        }
    }
    for place in &detail.places {
        let _ = writeln!(out, "at          {}", inspect::place_short(place));
        for next in &place.next {
            let _ = writeln!(out, "            next: {next}");
        }
    }
    if let Some(correlation) = &s.correlation_id {
        let _ = writeln!(out, "correlation {correlation}");
    }
    let _ = writeln!(
        out,
        "created     {} ({})",
        instant(s.created_at),
        relative(s.created_at, now)
    );
    let _ = writeln!(
        out,
        "changed     {} ({}), revision {}",
        instant(s.updated_at),
        relative(s.updated_at, now),
        detail.revision
    );
    if let Some(lease) = &detail.lease {
        let state = if lease.expires_at > now {
            "expires"
        } else {
            "expired"
        };
        let _ = writeln!(
            out,
            "lease       held by `{}`, {state} {}",
            lease.owner,
            relative(lease.expires_at, now)
        );
    }
    if let Some(request) = &detail.control_request {
        let _ = writeln!(out, "requested   {request}");
    }
    let _ = writeln!(out, "data        {}", detail.data);
    let _ = writeln!(out, "\nbookmarks ({})", detail.bookmarks.len());
    for b in &detail.bookmarks {
        let key = b
            .key
            .as_ref()
            .map_or_else(|| "-".to_owned(), Value::to_string);
        let _ = writeln!(out, "  {:<20} key {:<16} node {}", b.name, key, b.node);
    }
    let _ = writeln!(out, "\ntimers ({})", detail.timers.len());
    for damage in &detail.damaged_rows {
        let _ = writeln!(out, "  damaged: {damage}");
    }
    for t in &detail.timers {
        let parked = if t.parked { ", parked" } else { "" };
        let _ = writeln!(
            out,
            "  {:<10} due {} ({}{parked})",
            t.kind,
            instant(t.due_at),
            relative(t.due_at, now)
        );
    }
    let _ = writeln!(out, "\nincidents ({})", detail.incidents.len());
    for i in &detail.incidents {
        let _ = writeln!(
            out,
            "  {} {} at `{}`: {}{}",
            i.incident_id,
            i.kind,
            i.node.as_deref().unwrap_or("-"),
            i.message.as_deref().unwrap_or("(no message)"),
            i.resolution
                .as_deref()
                .map_or_else(String::new, |r| format!(" [{r}]"))
        );
    }
    let total = detail.journal.len();
    let shown = match journal {
        JournalShown::Last(n) => n.min(total),
        JournalShown::All => total,
    };
    if shown == total {
        let _ = writeln!(out, "\njournal ({total} entries, newest last)");
    } else {
        let _ = writeln!(
            out,
            "\njournal (the last {shown} of {total} entries, newest last; `--journal all` prints every one)"
        );
    }
    for j in detail.journal.iter().skip(total - shown) {
        let mut line = format!(
            "  {:>4} {} {:<16} {}",
            j.seq,
            instant(j.at),
            j.kind,
            j.node.as_deref().unwrap_or("")
        );
        if let Some(detail) = inspect::journal_detail_words(&j.detail) {
            let _ = write!(line, " {detail}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
