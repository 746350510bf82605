//! The definitions page (each recorded version with its diagram and instance counts) and
//! the dead letters page (with replay).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::Query;
use axum::response::Html;
use workflow_model::Definition;
use workflow_runtime::store::{DeadLetterFilter, DeadLetterReason, Micros};

use crate::diagram::{self, Marks};
use crate::html::{self, Section, escape, instant, relative, short_version, url_part};
use crate::instances::STATUSES;
use crate::{Base, Failure, State};

/// `GET /definitions`.
pub(crate) async fn definitions(state: State, base: Base) -> Result<Html<String>, Failure> {
    let store = state.runtime.store();
    let recorded = store
        .list_definitions(None)
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let census = store
        .census()
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let by_version = store
        .version_census()
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let mut body = String::from("<h1>Definitions</h1>");
    if recorded.is_empty() {
        body.push_str(
            "<p class=\"muted\">No definition is recorded in this store: a process records \
             the versions it runs when it starts.</p>",
        );
    }
    let home = escape(&html::home(&base.0));
    let mut last_name = "";
    for record in &recorded {
        let name = escape(&url_part(&record.name));
        if record.name != last_name {
            // The instances of every version of the definition, by status.
            let _ = write!(
                body,
                "<h2 id=\"{name}\">{}</h2><div class=\"counts\" data-definition=\"{}\">",
                escape(&record.name),
                escape(&record.name)
            );
            for status in STATUSES {
                let n: u64 = census
                    .instances
                    .iter()
                    .filter(|c| c.status == status && c.definition_name == record.name)
                    .map(|c| c.count)
                    .sum();
                let s = status.as_str();
                let _ = write!(
                    body,
                    "<a class=\"count {s}\" href=\"{home}?definition={name}&amp;status={s}\">\
                     <b>{n}</b>{s}</a>"
                );
            }
            body.push_str("</div>");
            last_name = &record.name;
        }
        let instances = by_version
            .iter()
            .find(|(n, v, _)| *n == record.name && *v == record.version)
            .map_or(0, |(_, _, count)| *count);
        // Whether the console's own runtime runs this version (the `workflow console`
        // command's runs none: it shows what the store recorded).
        let registered = state
            .runtime
            .registered_versions(&record.name)
            .into_iter()
            .find(|(v, _)| *v == record.version)
            .map(|(_, current)| current);
        let runs_here = match registered {
            Some(true) => {
                " <span class=\"tag current\">current here: new instances start on it</span>"
            }
            Some(false) => " <span class=\"tag\">registered here beside the current one</span>",
            None => "",
        };
        let _ = write!(
            body,
            "<section class=\"definition\" data-definition=\"{}\" data-version=\"{}\"><p>Version \
             <span class=\"mono\">{}</span>, recorded {}: <a class=\"instances\" \
             data-count=\"{instances}\" href=\"{home}?definition={name}&amp;version={}\">{instances} \
             {}</a>{runs_here}</p>",
            escape(&record.name),
            escape(&record.version),
            escape(short_version(&record.version)),
            instant(record.recorded_at),
            escape(&url_part(short_version(&record.version))),
            if instances == 1 {
                "instance"
            } else {
                "instances"
            },
        );
        match Definition::from_json(&record.json) {
            Ok(definition) => {
                let _ = write!(
                    body,
                    "<div class=\"diagram\">{}</div>",
                    diagram::svg(&definition, &Marks::default())
                );
            }
            Err(error) => {
                let _ = write!(
                    body,
                    "<p class=\"muted\">This version does not load: {}</p>",
                    escape(&error.to_string())
                );
            }
        }
        body.push_str("</section>");
    }
    Ok(Html(html::page(
        &base.0,
        Section::Definitions,
        "Definitions",
        &body,
    )))
}

/// `GET /dead-letters`, `?reason=` one reason, `?after=` the keyset of the next page.
pub(crate) async fn dead_letters(
    state: State,
    base: Base,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Html<String>, Failure> {
    let mut filter = DeadLetterFilter::all(100);
    for (key, value) in &query {
        if value.is_empty() {
            continue;
        }
        match key.as_str() {
            "reason" => {
                filter.reason = Some(match value.as_str() {
                    "expired" => DeadLetterReason::Expired,
                    "failed" => DeadLetterReason::Failed,
                    "rejected" => DeadLetterReason::Rejected,
                    other => {
                        return Err(Failure::bad_request(
                            &base,
                            format!(
                                "`reason` is `{other}`: expected `expired`, `failed` or \
                                 `rejected`"
                            ),
                        ));
                    }
                });
            }
            "after" => {
                let parsed = value
                    .split_once('/')
                    .and_then(|(at, id)| Some((at.parse::<Micros>().ok()?, id.to_owned())));
                let Some(after) = parsed else {
                    return Err(Failure::bad_request(
                        &base,
                        format!("`after` is `{value}`: expected the link of a next page"),
                    ));
                };
                filter.after = Some(after);
            }
            other => {
                return Err(Failure::bad_request(
                    &base,
                    format!("unknown filter `{other}`: the filters are reason and after"),
                ));
            }
        }
    }
    let letters = state
        .runtime
        .store()
        .list_dead_letters(filter.clone())
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let b = escape(&base.0);
    let now = crate::now();
    let mut body = String::from(
        "<h1>Dead letters</h1><table class=\"dead-letters\"><thead><tr><th>Item</th>\
         <th>Event</th><th>Key</th><th>Reason</th><th>Died</th><th>Error</th><th>Payload</th>\
         <th></th></tr></thead><tbody>",
    );
    for d in &letters {
        let replay = if state.read_only {
            String::new()
        } else {
            format!(
                "<form method=\"post\" action=\"{b}/dead-letters/{}/replay\"><input type=\"hidden\" \
                 name=\"csrf\" value=\"{}\"><button type=\"submit\" name=\"do\" \
                 value=\"replay\">Replay</button></form>",
                escape(&url_part(&d.item.item_id)),
                escape(&state.csrf)
            )
        };
        let _ = write!(
            body,
            "<tr data-item=\"{}\"><td class=\"mono\">{}</td><td>{}</td><td class=\"mono\">{}</td>\
             <td>{}</td><td title=\"{}\">{}</td><td>{}</td><td class=\"mono\">{}</td><td>{replay}</td></tr>",
            escape(&d.item.item_id),
            escape(&d.item.item_id),
            escape(&d.item.name),
            escape(d.item.key_display.as_deref().unwrap_or("-")),
            escape(d.reason.as_str()),
            instant(d.dead_at),
            relative(d.dead_at, now),
            escape(d.error.as_deref().unwrap_or("")),
            escape(&d.item.payload.to_string()),
        );
    }
    if letters.is_empty() {
        body.push_str("<tr><td colspan=\"8\" class=\"muted\">No dead letters.</td></tr>");
    }
    body.push_str("</tbody></table>");
    if letters.len() == filter.limit
        && let Some(last) = letters.last()
    {
        let reason = filter
            .reason
            .map_or_else(String::new, |r| format!("reason={}&", r.as_str()));
        let _ = write!(
            body,
            "<div class=\"pager\"><a rel=\"next\" href=\"{b}/dead-letters?{}\">Next page</a></div>",
            escape(&format!(
                "{reason}after={}",
                url_part(&format!("{}/{}", last.dead_at, last.item.item_id))
            ))
        );
    }
    Ok(Html(html::page(
        &base.0,
        Section::DeadLetters,
        "Dead letters",
        &body,
    )))
}
