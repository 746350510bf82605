//! The operator's actions, each a `POST` carrying the console's CSRF token: the first asks
//! for a confirmation (a page with one more form), the confirmed one is done and its outcome
//! shown; a refused action says why.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::{Form, Path};
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;
use workflow_runtime::store::StoreError;
use workflow_runtime::{Control, Stimulus};

use crate::html::{self, Section, escape, url_part};
use crate::instance::{Outcome, render};
use crate::{Base, Failure, Shared, State};

/// How long a confirmed action waits for the process running the instance to honour a
/// request it recorded, before it shows the instance as it is.
const HONOUR_WAIT: Duration = Duration::from_secs(3);

type Fields = HashMap<String, String>;

/// Refuses the request unless actions are allowed and the form carries this console's token.
fn allowed(state: &Shared, base: &Base, fields: &Fields) -> Result<(), Failure> {
    if state.read_only {
        return Err(Failure::forbidden(
            base,
            "this console is read-only: it refuses every action",
        ));
    }
    let given = fields.get("csrf").map_or("", String::as_str);
    if !same(given.as_bytes(), state.csrf.as_bytes()) {
        return Err(Failure::forbidden(
            base,
            "the form's CSRF token is missing or not this console's: reload the page and \
             try again",
        ));
    }
    Ok(())
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn confirmed(fields: &Fields) -> bool {
    fields.get("confirmed").is_some_and(|v| v == "yes")
}

/// The confirmation page: `question`, and a form re-posting `fields` to `action` with
/// `confirmed=yes`.
#[allow(clippy::too_many_arguments)]
fn confirmation(
    state: &Shared,
    base: &Base,
    action: &str,
    question: &str,
    what_it_does: &str,
    button: &str,
    fields: &Fields,
    back: &str,
) -> Response {
    let mut body = format!(
        "<h1>{}</h1><p>{}</p><form class=\"action confirm\" method=\"post\" action=\"{}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"confirmed\" value=\"yes\">",
        escape(question),
        escape(what_it_does),
        escape(action),
        escape(&state.csrf)
    );
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    for key in keys {
        if matches!(key.as_str(), "csrf" | "confirmed" | "do") {
            continue;
        }
        let value = fields.get(key).map_or("", String::as_str);
        let _ = write!(
            body,
            "<label>{0}<input name=\"{0}\" value=\"{1}\" readonly></label>",
            escape(key),
            escape(value)
        );
    }
    let _ = write!(
        body,
        "<button class=\"danger\" type=\"submit\" name=\"do\" value=\"confirm\">{}</button>\
         <a href=\"{}\">Back</a></form>",
        escape(button),
        escape(back)
    );
    Html(html::page(&base.0, Section::Instances, question, &body)).into_response()
}

/// `POST /instances/{id}/{action}`: retry, cancel, suspend, resume or purge.
pub(crate) async fn instance_action(
    state: State,
    base: Base,
    Path((id, action)): Path<(String, String)>,
    Form(fields): Form<Fields>,
) -> Result<Response, Failure> {
    allowed(&state, &base, &fields)?;
    let (label, what_it_does) = match action.as_str() {
        "retry" => (
            "Retry",
            "The failed activity runs again with a fresh attempt budget.",
        ),
        "cancel" => (
            "Cancel",
            "The instance is cancelled at its next step (a running task has its cancellation \
             token fired); it will not run again.",
        ),
        "suspend" => (
            "Suspend",
            "A running task finishes its attempt, then nothing of the instance runs until it \
             is resumed; events sent to it meanwhile are held.",
        ),
        "resume" => (
            "Resume",
            "The instance goes on: its timers and held events are released.",
        ),
        "purge" => (
            "Purge",
            "The instance, its journal and its rows are removed from the store for good.",
        ),
        other => {
            return Err(Failure::not_found(
                &base,
                format!(
                    "no action `{other}`: the actions are retry, cancel, suspend, resume and \
                     purge"
                ),
            ));
        }
    };
    let back = format!("{}/instances/{}", base.0, url_part(&id));
    match state.runtime.store().load_instance(&id).await {
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(Failure::not_found(
                &base,
                format!("no instance `{id}` in this store"),
            ));
        }
        Err(error) => return Err(Failure::store(&base, &error)),
    }
    if !confirmed(&fields) {
        return Ok(confirmation(
            &state,
            &base,
            &format!("{back}/{action}"),
            &format!("{label} instance {id}?"),
            what_it_does,
            &format!("Yes, {action}"),
            &fields,
            &back,
        ));
    }
    let runtime = &state.runtime;
    let done: Result<Control, String> = match action.as_str() {
        "retry" => runtime.retry(&id).await.map_err(|e| e.to_string()),
        "cancel" => {
            let reason = fields
                .get("reason")
                .filter(|r| !r.trim().is_empty())
                .cloned()
                .or_else(|| Some("cancelled from the console".to_owned()));
            runtime.cancel(&id, reason).await.map_err(|e| e.to_string())
        }
        "suspend" => runtime.suspend(&id).await.map_err(|e| e.to_string()),
        "resume" => runtime.resume(&id).await.map_err(|e| e.to_string()),
        _ => {
            return Ok(match runtime.purge(&id).await {
                Ok(()) => {
                    state.recount();
                    let body = format!(
                        "<h1>Purged</h1><div class=\"result\" role=\"status\">Instance {} and \
                         its journal were removed.</div><p><a href=\"{}\">Back to the \
                         instances</a></p>",
                        escape(&id),
                        escape(&html::home(&base.0))
                    );
                    Html(html::page(&base.0, Section::Instances, "Purged", &body)).into_response()
                }
                Err(error) => {
                    let outcome = Outcome {
                        refused: true,
                        message: format!("cannot purge: {error}"),
                    };
                    render(&state, &base, &id, Some(outcome)).await
                }
            });
        }
    };
    // The running processes hear of what this one wrote.
    runtime.store().flush_hints().await;
    state.recount();
    let outcome = match done {
        Ok(Control::Requested) => Outcome {
            refused: false,
            message: honoured(&state, &id, &action).await,
        },
        Ok(control) => Outcome {
            refused: false,
            message: format!("{action}: {control}"),
        },
        Err(message) => Outcome {
            refused: true,
            message: format!("cannot {action}: {message}"),
        },
    };
    Ok(render(&state, &base, &id, Some(outcome)).await)
}

/// Waits a little for the owning process to honour a recorded request; says what happened.
async fn honoured(state: &Shared, id: &str, action: &str) -> String {
    let deadline = tokio::time::Instant::now() + HONOUR_WAIT;
    loop {
        match state.runtime.store().load_instance(id).await {
            Ok(record) if record.control_request.is_none() => {
                return format!(
                    "{action} applied by the process running `{}`: it is now {}",
                    record.definition_name,
                    record.status.as_str()
                );
            }
            Ok(record) if tokio::time::Instant::now() >= deadline => {
                return format!(
                    "{action} requested: the process running `{}` applies it at the \
                     instance's next step (not yet within {}s: is it running?)",
                    record.definition_name,
                    HONOUR_WAIT.as_secs()
                );
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(error) => return format!("{action} requested; reading it back failed: {error}"),
        }
    }
}

/// `"o-1"` and `42` are JSON; `o-1` is taken as the string it reads as.
fn json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// `POST /send`: sends an event (name, key, JSON payload, optionally to one instance)
/// through the store's inbox.
pub(crate) async fn send(
    state: State,
    base: Base,
    Form(fields): Form<Fields>,
) -> Result<Response, Failure> {
    allowed(&state, &base, &fields)?;
    let field = |name: &str| fields.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let Some(name) = field("name") else {
        return Err(Failure::bad_request(&base, "`name`: an event needs a name"));
    };
    let payload = match field("payload") {
        Some(text) => Some(
            serde_json::from_str::<Value>(text)
                .map_err(|e| Failure::bad_request(&base, format!("`payload` is not JSON: {e}")))?,
        ),
        None => None,
    };
    let instance = field("instance");
    if !confirmed(&fields) {
        let back = instance.map_or_else(
            || html::home(&base.0),
            |id| format!("{}/instances/{}", base.0, url_part(id)),
        );
        let target = instance.map_or_else(String::new, |id| format!(" to instance {id}"));
        return Ok(confirmation(
            &state,
            &base,
            &format!("{}/send", base.0),
            &format!("Send the event `{name}`{target}?"),
            "It goes to the store's inbox; the process running the workflows delivers it.",
            "Yes, send",
            &fields,
            &back,
        ));
    }
    let mut stimulus = Stimulus::new(name).via_inbox();
    if let Some(key) = field("key") {
        stimulus = stimulus.key(json_or_string(key));
    }
    if let Some(payload) = payload {
        stimulus = stimulus.payload(payload);
    }
    if let Some(id) = instance {
        stimulus = stimulus.instance(id);
    }
    let sent = state.runtime.send(stimulus).await;
    state.runtime.store().flush_hints().await;
    state.recount();
    let outcome = match sent {
        Ok(report) => Outcome {
            refused: false,
            message: match report.inbox_item {
                Some(item) => format!(
                    "sent `{name}` to the inbox as {item}: the process running its workflows delivers it"
                ),
                None if report.duplicate => {
                    "already sent with this idempotency key: nothing done".to_owned()
                }
                None => format!("sent `{name}`"),
            },
        },
        Err(error) => Outcome {
            refused: true,
            message: format!("the send was refused: {error}"),
        },
    };
    match instance {
        Some(id) => {
            if !outcome.refused {
                // Give the owning process a moment to deliver it before the page is read.
                wait_for_change(&state, id).await;
            }
            Ok(render(&state, &base, id, Some(outcome)).await)
        }
        None => {
            let class = if outcome.refused {
                "result refused"
            } else {
                "result"
            };
            let body = format!(
                "<h1>Send</h1><div class=\"{class}\" role=\"status\">{}</div><p><a \
                 href=\"{}\">Back to the instances</a></p>",
                escape(&outcome.message),
                escape(&html::home(&base.0))
            );
            Ok(Html(html::page(&base.0, Section::Instances, "Send", &body)).into_response())
        }
    }
}

/// Waits up to [`HONOUR_WAIT`] for the instance's revision to change.
async fn wait_for_change(state: &Shared, id: &str) {
    let store = state.runtime.store();
    let Ok(before) = store.load_instance(id).await else {
        return;
    };
    let deadline = tokio::time::Instant::now() + HONOUR_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match store.load_instance(id).await {
            Ok(now) if now.version == before.version => {}
            _ => return,
        }
    }
}

/// `POST /dead-letters/{item}/replay`: puts a dead letter back in the inbox.
pub(crate) async fn replay(
    state: State,
    base: Base,
    Path(item): Path<String>,
    Form(fields): Form<Fields>,
) -> Result<Response, Failure> {
    allowed(&state, &base, &fields)?;
    let back = format!("{}/dead-letters", base.0);
    if !confirmed(&fields) {
        return Ok(confirmation(
            &state,
            &base,
            &format!("{back}/{}/replay", url_part(&item)),
            &format!("Replay the dead letter {item}?"),
            "It goes back to the inbox with a fresh time to live.",
            "Yes, replay",
            &fields,
            &back,
        ));
    }
    match state.runtime.replay_dead_letter(&item).await {
        Ok(queued) => {
            state.runtime.store().flush_hints().await;
            let body = format!(
                "<h1>Replayed</h1><div class=\"result\" role=\"status\">Replayed `{}` ({}) into \
                 the inbox as {}.</div><p><a href=\"{}\">Back to the dead letters</a></p>",
                escape(&queued.name),
                escape(&item),
                escape(&queued.item_id),
                escape(&back)
            );
            Ok(Html(html::page(&base.0, Section::DeadLetters, "Replayed", &body)).into_response())
        }
        Err(StoreError::NotFound { .. }) => Err(Failure::not_found(
            &base,
            format!("no dead letter `{item}` in this store"),
        )),
        Err(error) => Err(Failure::store(&base, &error)),
    }
}
