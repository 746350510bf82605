//! The queues page (`/queues`): each flow-control queue the store keeps slots for, with its
//! limits, the slots held, the places in line, the longest wait and the rate used; the same
//! query as `workflow queues` ([`Storage::queue_usage`](workflow_runtime::store::Storage::queue_usage)).

use std::fmt::Write as _;

use axum::response::Html;
use workflow_runtime::store::QueueUsage;

use crate::html::{self, Section, duration, escape, instant};
use crate::{Base, Failure, State};

/// `GET /queues`.
pub(crate) async fn page(state: State, base: Base) -> Result<Html<String>, Failure> {
    let now = crate::now();
    let usage = state
        .runtime
        .store()
        .queue_usage(now)
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let mut body = String::from(
        "<h1>Queues</h1><table class=\"queues\"><thead><tr><th>Queue</th><th>Limits</th>\
         <th>Running</th><th>Waiting</th><th>Oldest wait</th><th>Rate used</th></tr></thead>\
         <tbody>",
    );
    for u in &usage {
        let _ = write!(
            body,
            "<tr data-queue=\"{}\"><td class=\"mono\">{}</td><td>{}</td>\
             <td class=\"running\">{}</td><td class=\"waiting\">{}</td>{}<td class=\"rate\">{}</td></tr>",
            escape(&u.queue),
            escape(&u.queue),
            escape(&limits(u)),
            running(u),
            u.waiting,
            match u.oldest_wait {
                Some(at) => format!(
                    "<td title=\"{}\">{}</td>",
                    instant(at),
                    // Waiting since `at`: how long, not when.
                    escape(&duration(now.saturating_sub(at)))
                ),
                None => "<td>-</td>".to_owned(),
            },
            escape(&rate_used(u)),
        );
    }
    if usage.is_empty() {
        body.push_str(
            "<tr><td colspan=\"6\" class=\"muted\">No flow-control queue has been used with \
             this store yet: a queue appears once a task or run first asks it for a \
             slot.</td></tr>",
        );
    }
    body.push_str("</tbody></table>");
    body.push_str(
        "<p class=\"muted\">Slots and places in line whose lease ended are not counted: \
         a killed process's slots leave the count as soon as its death is known on PostgreSQL, \
         at the latest when their lease ends.</p>",
    );
    Ok(Html(html::page(&base.0, Section::Queues, "Queues", &body)))
}

/// `4 at once, 1 per process, 2 per key, 25 per 1s`, or `none`.
fn limits(u: &QueueUsage) -> String {
    let mut out = Vec::new();
    if let Some(n) = u.limits.concurrency {
        out.push(format!("{n} at once"));
    }
    if let Some(n) = u.limits.per_process {
        out.push(format!("{n} per process"));
    }
    if let Some(n) = u.limits.per_key {
        out.push(format!("{n} per key"));
    }
    if let Some((starts, period)) = u.limits.rate {
        out.push(format!("{starts} per {}", duration(period)));
    }
    if out.is_empty() {
        "none".to_owned()
    } else {
        out.join(", ")
    }
}

/// `3 of 4` against the concurrency limit, else the bare count.
fn running(u: &QueueUsage) -> String {
    match u.limits.concurrency {
        Some(limit) => format!("{} of {limit}", u.running),
        None => u.running.to_string(),
    }
}

/// `7 of 25 in the last 1s`, `-` without a rate.
fn rate_used(u: &QueueUsage) -> String {
    match u.limits.rate {
        Some((starts, period)) => {
            format!(
                "{} of {starts} in the last {}",
                u.rate_used,
                duration(period)
            )
        }
        None => "-".to_owned(),
    }
}
