//! The instances page (`/`): counts per status, the filters, and one page of instances in
//! id order (keyset paging), read from the store's indexed listing and each row's stored
//! listing: no instance document is loaded.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::Query;
use axum::response::{Html, IntoResponse, Redirect, Response};
use workflow_runtime::store::{
    InstanceFilter, InstanceListing, InstanceStatus, InstanceSubStatus, InstanceSummary, Micros,
    Storage, StoreError,
};

use crate::html::{self, Section, escape, instant, relative, short_version, url_part};
use crate::{Base, Failure, State};

/// The statuses, in the order the counts show them.
pub(crate) const STATUSES: [InstanceStatus; 5] = [
    InstanceStatus::Running,
    InstanceStatus::Suspended,
    InstanceStatus::Faulted,
    InstanceStatus::Finished,
    InstanceStatus::Cancelled,
];

const SUB_STATUSES: [InstanceSubStatus; 6] = [
    InstanceSubStatus::Pending,
    InstanceSubStatus::Executing,
    InstanceSubStatus::Waiting,
    InstanceSubStatus::WaitingForSlot,
    InstanceSubStatus::Paused,
    InstanceSubStatus::Stalled,
];

/// The most rows one request reads while filters the store cannot apply drop rows: past it
/// the page shows what it found and a link that goes on from there.
const SCAN_LIMIT: usize = 5000;

/// The instances page's filters, parsed from the query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filters {
    pub(crate) status: Option<InstanceStatus>,
    pub(crate) sub_status: Option<InstanceSubStatus>,
    pub(crate) definition: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) at: Option<String>,
    pub(crate) correlation: Option<String>,
    pub(crate) created_from: Option<Micros>,
    pub(crate) created_to: Option<Micros>,
    pub(crate) updated_from: Option<Micros>,
    pub(crate) updated_to: Option<Micros>,
    pub(crate) after: Option<String>,
    pub(crate) limit: usize,
    pub(crate) id: Option<String>,
    /// The filters as given, to fill the form and build the next page's link.
    raw: Vec<(String, String)>,
}

impl Filters {
    /// Parses the query; an unknown parameter or a value that does not parse is an error
    /// naming it and what it accepts.
    pub(crate) fn parse(query: &HashMap<String, String>) -> Result<Self, String> {
        let mut f = Self {
            limit: 50,
            ..Self::default()
        };
        let mut keys: Vec<&String> = query.keys().collect();
        keys.sort();
        for key in keys {
            let value = query.get(key).map_or("", |v| v.trim());
            if value.is_empty() {
                continue;
            }
            let time = |name: &str| {
                html::parse_instant(value).ok_or_else(|| {
                    format!(
                        "`{name}` is `{value}`: expected a UTC date and time like \
                         `2026-01-31T08:00` or a date like `2026-01-31`"
                    )
                })
            };
            match key.as_str() {
                "status" => {
                    f.status = Some(InstanceStatus::parse(value).ok_or_else(|| {
                        format!(
                            "`status` is `{value}`: expected one of {}",
                            names(STATUSES.iter().map(|s| s.as_str()))
                        )
                    })?);
                }
                "sub_status" => {
                    f.sub_status = Some(InstanceSubStatus::parse(value).ok_or_else(|| {
                        format!(
                            "`sub_status` is `{value}`: expected one of {}",
                            names(SUB_STATUSES.iter().map(|s| s.as_str()))
                        )
                    })?);
                }
                "definition" => f.definition = Some(value.to_owned()),
                "version" => f.version = Some(value.to_owned()),
                "at" => f.at = Some(value.to_owned()),
                "correlation" => f.correlation = Some(value.to_owned()),
                "created_from" => f.created_from = Some(time("created_from")?),
                "created_to" => f.created_to = Some(time("created_to")?),
                "updated_from" => f.updated_from = Some(time("updated_from")?),
                "updated_to" => f.updated_to = Some(time("updated_to")?),
                "after" => f.after = Some(value.to_owned()),
                "id" => f.id = Some(value.to_owned()),
                "limit" => {
                    f.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=500).contains(n))
                        .ok_or_else(|| {
                            format!("`limit` is `{value}`: expected a number from 1 to 500")
                        })?;
                }
                other => {
                    return Err(format!(
                        "unknown filter `{other}`: the filters are status, sub_status, \
                         definition, version, at, correlation, created_from, created_to, \
                         updated_from, updated_to, id, after and limit"
                    ));
                }
            }
            if key != "after" {
                f.raw.push((key.clone(), value.to_owned()));
            }
        }
        for (from, to, name) in [
            (f.created_from, f.created_to, "created"),
            (f.updated_from, f.updated_to, "updated"),
        ] {
            if let (Some(from), Some(to)) = (from, to)
                && from > to
            {
                return Err(format!(
                    "`{name}_from` is after `{name}_to`: the range holds no instant"
                ));
            }
        }
        Ok(f)
    }

    /// Whether a row the store returned passes the filters the store did not apply.
    fn keeps(&self, row: &InstanceSummary, listing: Option<&InstanceListing>) -> bool {
        self.sub_status.is_none_or(|s| row.sub_status == Some(s))
            && self
                .version
                .as_deref()
                .is_none_or(|v| row.definition_version.starts_with(v))
            && self
                .at
                .as_deref()
                .is_none_or(|at| listing.is_some_and(|l| l.at.iter().any(|a| a == at)))
            && self.created_from.is_none_or(|t| row.created_at >= t)
            && self.created_to.is_none_or(|t| row.created_at <= t)
            && self.updated_from.is_none_or(|t| row.updated_at >= t)
            && self.updated_to.is_none_or(|t| row.updated_at <= t)
    }

    /// The query string of these filters, with `after` for the page after `last`.
    fn query_after(&self, last: &str) -> String {
        let mut out = String::new();
        for (k, v) in &self.raw {
            let _ = write!(out, "{}={}&", url_part(k), url_part(v));
        }
        let _ = write!(out, "after={}", url_part(last));
        out
    }

    fn value(&self, key: &str) -> &str {
        self.raw
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

fn names<'a>(all: impl Iterator<Item = &'a str>) -> String {
    all.map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// One listed instance.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) instance_id: String,
    pub(crate) summary: Result<InstanceSummary, String>,
    pub(crate) listing: Option<InstanceListing>,
}

/// One page of the listing.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) rows: Vec<Row>,
    /// Where the next page starts, when there may be one.
    pub(crate) next: Option<String>,
    /// Whether the scan stopped at [`SCAN_LIMIT`] before the page was full.
    pub(crate) scan_stopped: bool,
}

/// Reads one page of instances matching `f`: the store applies status, definition,
/// correlation and the keyset; the rest is applied to the rows' columns and stored listings.
pub(crate) async fn list(store: &Storage, f: &Filters) -> Result<Listed, StoreError> {
    let mut rows = Vec::new();
    let mut after = f.after.clone();
    let mut scanned = 0;
    let only_store_filters = f.sub_status.is_none()
        && f.version.is_none()
        && f.at.is_none()
        && f.created_from.is_none()
        && f.created_to.is_none()
        && f.updated_from.is_none()
        && f.updated_to.is_none();
    loop {
        let want = f.limit + 1 - rows.len();
        let batch = if only_store_filters { want } else { 500 };
        let page = store
            .list_instances(InstanceFilter {
                status: f.status,
                definition_name: f.definition.clone(),
                correlation_id: f.correlation.clone(),
                after: after.clone(),
                limit: batch,
                ..InstanceFilter::default()
            })
            .await?;
        let exhausted = page.len() < batch;
        for listed in page {
            scanned += 1;
            after = Some(listed.instance_id.clone());
            let row = match listed.summary {
                Ok(summary) => {
                    let listing = summary.listing.as_deref().and_then(InstanceListing::decode);
                    if !f.keeps(&summary, listing.as_ref()) {
                        continue;
                    }
                    Row {
                        instance_id: listed.instance_id,
                        summary: Ok(summary),
                        listing,
                    }
                }
                // An unreadable row is listed, never skipped, unless a filter needs its
                // columns.
                Err(error) if only_store_filters => Row {
                    instance_id: listed.instance_id,
                    summary: Err(error.to_string()),
                    listing: None,
                },
                Err(_) => continue,
            };
            rows.push(row);
            if rows.len() > f.limit {
                break;
            }
        }
        if rows.len() > f.limit {
            rows.truncate(f.limit);
            let next = rows.last().map(|r| r.instance_id.clone());
            return Ok(Listed {
                rows,
                next,
                scan_stopped: false,
            });
        }
        if exhausted {
            return Ok(Listed {
                rows,
                next: None,
                scan_stopped: false,
            });
        }
        if scanned >= SCAN_LIMIT {
            return Ok(Listed {
                rows,
                next: after,
                scan_stopped: true,
            });
        }
    }
}

/// `GET /`: the instances page; `?id=` goes to that instance.
pub(crate) async fn page(
    state: State,
    base: Base,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, Failure> {
    let f = Filters::parse(&query).map_err(|m| Failure::bad_request(&base, m))?;
    let store = state.runtime.store();
    if let Some(id) = &f.id {
        return match store.load_instance(id).await {
            Ok(_) => {
                Ok(Redirect::to(&format!("{}/instances/{}", base.0, url_part(id))).into_response())
            }
            Err(StoreError::NotFound { .. }) => Err(Failure::not_found(
                &base,
                format!("no instance `{id}` in this store"),
            )),
            Err(error) => Err(Failure::store(&base, &error)),
        };
    }
    let (counted, census) = state
        .counts()
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let listed = list(store, &f)
        .await
        .map_err(|e| Failure::store(&base, &e))?;
    let mut definitions: Vec<&str> = census
        .instances
        .iter()
        .map(|c| c.definition_name.as_str())
        .collect();
    definitions.dedup();
    let b = escape(&base.0);
    let h = escape(&html::home(&base.0));
    let mut body = String::from("<h1>Instances</h1><div class=\"counts\">");
    let total: u64 = census
        .instances
        .iter()
        .filter(|c| {
            f.definition
                .as_ref()
                .is_none_or(|d| *d == c.definition_name)
        })
        .map(|c| c.count)
        .sum();
    let _ = write!(
        body,
        "<a class=\"count{}\" href=\"{h}\" data-status=\"all\"><b>{total}</b>all</a>",
        if f.status.is_none() { " selected" } else { "" }
    );
    for status in STATUSES {
        let n: u64 = census
            .instances
            .iter()
            .filter(|c| c.status == status)
            .filter(|c| {
                f.definition
                    .as_ref()
                    .is_none_or(|d| *d == c.definition_name)
            })
            .map(|c| c.count)
            .sum();
        let selected = if f.status == Some(status) {
            " selected"
        } else {
            ""
        };
        let s = status.as_str();
        let _ = write!(
            body,
            "<a class=\"count {s}{selected}\" href=\"{h}?status={s}\" data-status=\"{s}\">\
             <b>{n}</b>{s}</a>"
        );
    }
    let _ = write!(
        body,
        "<span class=\"muted counted\">counted {} ago</span></div>",
        html::duration(i64::try_from(counted.elapsed().as_micros()).unwrap_or(i64::MAX))
    );
    filter_form(&mut body, &base, &f, &definitions);
    body.push_str(
        "<table class=\"instances\"><thead><tr><th>Instance</th><th>Definition</th>\
         <th>Status</th><th>At</th><th>Waiting for</th><th>Correlation</th><th>Created</th>\
         <th>Changed</th></tr></thead><tbody>",
    );
    let now = crate::now();
    for row in &listed.rows {
        let link = format!("{b}/instances/{}", escape(&url_part(&row.instance_id)));
        match &row.summary {
            Ok(s) => {
                let status = match s.sub_status {
                    Some(sub) => format!(
                        "<span class=\"status {0}\">{0}</span> <span class=\"muted\">{1}</span>",
                        s.status.as_str(),
                        sub.as_str()
                    ),
                    None => format!("<span class=\"status {0}\">{0}</span>", s.status.as_str()),
                };
                let (at, waiting) = match &row.listing {
                    Some(l) => (escape(&l.at.join(", ")), escape(&l.waiting_for.join(", "))),
                    None => ("?".to_owned(), "?".to_owned()),
                };
                let _ = write!(
                    body,
                    "<tr data-id=\"{}\"><td><a class=\"mono\" href=\"{link}\">{}</a></td>\
                     <td>{} <span class=\"muted mono\">{}</span></td><td>{status}</td>\
                     <td>{at}</td><td>{waiting}</td><td>{}</td><td title=\"{}\">{}</td>\
                     <td title=\"{}\">{}</td></tr>",
                    escape(&row.instance_id),
                    escape(&row.instance_id),
                    escape(&s.definition_name),
                    escape(short_version(&s.definition_version)),
                    escape(s.correlation_id.as_deref().unwrap_or("")),
                    instant(s.created_at),
                    relative(s.created_at, now),
                    instant(s.updated_at),
                    relative(s.updated_at, now),
                );
            }
            Err(error) => {
                let _ = write!(
                    body,
                    "<tr data-id=\"{}\"><td><a class=\"mono\" href=\"{link}\">{}</a></td>\
                     <td colspan=\"7\" class=\"muted\">unreadable: {}</td></tr>",
                    escape(&row.instance_id),
                    escape(&row.instance_id),
                    escape(error)
                );
            }
        }
    }
    if listed.rows.is_empty() {
        body.push_str("<tr><td colspan=\"8\" class=\"muted\">No instance matches.</td></tr>");
    }
    body.push_str("</tbody></table><div class=\"pager\">");
    if f.after.is_some() {
        let _ = write!(body, "<a href=\"{h}?{}\">First page</a>", {
            let mut first = String::new();
            for (k, v) in &f.raw {
                let _ = write!(first, "{}={}&", url_part(k), url_part(v));
            }
            escape(&first)
        });
    }
    if let Some(next) = &listed.next {
        let note = if listed.scan_stopped {
            format!("<span>Read {SCAN_LIMIT} instances for this page; more may match.</span>")
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "{note}<a rel=\"next\" href=\"{h}?{}\">Next page</a>",
            escape(&f.query_after(next))
        );
    }
    body.push_str("</div>");
    Ok(Html(html::page(&base.0, Section::Instances, "Instances", &body)).into_response())
}

fn filter_form(body: &mut String, base: &Base, f: &Filters, definitions: &[&str]) {
    let h = escape(&html::home(&base.0));
    let _ = write!(
        body,
        "<form class=\"filters\" method=\"get\" action=\"{h}\"><label>Instance id\
         <input name=\"id\" placeholder=\"go to an id\"></label>"
    );
    let select = |body: &mut String, name: &str, label: &str, options: &[&str], chosen: &str| {
        let _ = write!(
            body,
            "<label>{label}<select name=\"{name}\"><option value=\"\">any</option>"
        );
        for option in options {
            let selected = if *option == chosen { " selected" } else { "" };
            let _ = write!(
                body,
                "<option{selected} value=\"{0}\">{0}</option>",
                escape(option)
            );
        }
        body.push_str("</select></label>");
    };
    let statuses: Vec<&str> = STATUSES.iter().map(|s| s.as_str()).collect();
    select(body, "status", "Status", &statuses, f.value("status"));
    let subs: Vec<&str> = SUB_STATUSES.iter().map(|s| s.as_str()).collect();
    select(
        body,
        "sub_status",
        "Sub-status",
        &subs,
        f.value("sub_status"),
    );
    select(
        body,
        "definition",
        "Definition",
        definitions,
        f.value("definition"),
    );
    for (name, label, kind) in [
        ("version", "Version", "text"),
        ("at", "State or node", "text"),
        ("correlation", "Correlation key", "text"),
        ("created_from", "Created from (UTC)", "datetime-local"),
        ("created_to", "Created to", "datetime-local"),
        ("updated_from", "Changed from", "datetime-local"),
        ("updated_to", "Changed to", "datetime-local"),
    ] {
        let _ = write!(
            body,
            "<label>{label}<input type=\"{kind}\" name=\"{name}\" value=\"{}\"></label>",
            escape(f.value(name))
        );
    }
    let _ = write!(
        body,
        "<button class=\"primary\" type=\"submit\">Filter</button><a href=\"{h}\">Clear</a></form>"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Filters, String> {
        let query = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Filters::parse(&query)
    }

    #[test]
    fn filters_parse_or_say_what_is_wrong() {
        let f = parse(&[
            ("status", "faulted"),
            ("created_from", "2026-01-31"),
            ("at", ""),
        ]);
        assert_eq!(
            f.as_ref().map(|f| f.status).ok(),
            Some(Some(InstanceStatus::Faulted))
        );
        assert_eq!(f.map(|f| f.at).ok(), Some(None));
        // An instance waiting for a flow-control slot has a sub-status of its own.
        assert_eq!(
            parse(&[("sub_status", "waiting_for_slot")]).map(|f| f.sub_status),
            Ok(Some(InstanceSubStatus::WaitingForSlot))
        );
        let bad = parse(&[("sub_status", "dozing")]).err();
        assert!(bad.is_some_and(|m| m.contains("waiting_for_slot")));
        let bad = parse(&[("status", "asleep")]).err();
        assert!(bad.is_some_and(|m| m.contains("`status` is `asleep`: expected one of")));
        let bad = parse(&[("created_to", "soon")]).err();
        assert!(bad.is_some_and(|m| m.contains("`created_to` is `soon`")));
        let bad = parse(&[("colour", "red")]).err();
        assert!(bad.is_some_and(|m| m.contains("unknown filter `colour`")));
        let bad = parse(&[("limit", "0")]).err();
        assert!(bad.is_some_and(|m| m.contains("from 1 to 500")));
        let bad = parse(&[("updated_from", "2026-02-01"), ("updated_to", "2026-01-01")]).err();
        assert!(bad.is_some_and(|m| m.contains("`updated_from` is after `updated_to`")));
    }
}
