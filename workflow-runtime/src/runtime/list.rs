//! Listing instances (ENG-51): `Runtime::list_instances` with filters, one summary per
//! instance, in id order with keyset paging.

use std::time::Duration;

use super::document::decode_document;
use super::listing::listing_of;
use crate::base::now_micros;
use crate::engine::state::{SubStatus, WorkflowStatus};
use crate::store::{
    ControlKind, InstanceFilter, InstanceListing, InstanceRecord, Micros, Storage, StoreError,
};

/// What [`Runtime::list_instances`](crate::Runtime::list_instances) lists. The default lists every instance, 100 at most.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workflow_runtime::{InstanceQuery, WorkflowStatus};
///
/// // Faulted orders that nobody touched for an hour, 50 at a time.
/// let query = InstanceQuery {
///     status: Some(WorkflowStatus::Faulted),
///     definition: Some("Order".to_owned()),
///     unchanged_for: Some(Duration::from_secs(3600)),
///     limit: 50,
///     ..InstanceQuery::default()
/// };
/// # let _ = query;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceQuery {
    /// Only this status.
    pub status: Option<WorkflowStatus>,
    /// Only this sub-status (`Paused`, `Stalled`, ...).
    pub sub_status: Option<SubStatus>,
    /// Only instances of this definition.
    pub definition: Option<String>,
    /// Only instances with this correlation id.
    pub correlation_id: Option<String>,
    /// Only instances not changed for at least this long.
    pub unchanged_for: Option<Duration>,
    /// Only instances created within this long.
    pub created_within: Option<Duration>,
    /// Keyset paging: only ids after this one (the last id of the previous page).
    pub after: Option<String>,
    /// At most this many (0 means 100).
    pub limit: usize,
}

/// One instance as [`Runtime::list_instances`](crate::Runtime::list_instances) lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InstanceSummary {
    /// The instance id.
    pub instance_id: String,
    /// Its definition's name.
    pub definition: String,
    /// The definition version (fingerprint) it is pinned to.
    pub version: String,
    /// Its status.
    pub status: WorkflowStatus,
    /// Its sub-status.
    pub sub_status: Option<SubStatus>,
    /// Where it is: the current state of a root state machine, else the innermost nodes
    /// still running (empty once final).
    pub at: Vec<String>,
    /// The names of the events and timers it waits for.
    pub waiting_for: Vec<String>,
    /// Its correlation id.
    pub correlation_id: Option<String>,
    /// Its open incidents.
    pub open_incidents: usize,
    /// A control request not yet honoured by the runtime that owns it.
    pub control_request: Option<ControlKind>,
    /// Created, µs since the epoch.
    pub created_at: Micros,
    /// Last changed, µs since the epoch.
    pub updated_at: Micros,
    /// Why its stored state could not be read, when it could not (its other fields then come
    /// from the store's columns alone).
    pub unreadable: Option<String>,
}

/// Lists the store's instances matching `query` (see `Runtime::list_instances`).
pub(crate) async fn list_instances(
    store: &Storage,
    query: InstanceQuery,
) -> Result<Vec<InstanceSummary>, StoreError> {
    let limit = if query.limit == 0 { 100 } else { query.limit };
    let now = now_micros();
    let micros = |d: Duration| Micros::try_from(d.as_micros()).unwrap_or(Micros::MAX);
    let changed_before = query.unchanged_for.map(|d| now.saturating_sub(micros(d)));
    let created_after = query.created_within.map(|d| now.saturating_sub(micros(d)));
    let mut filter = InstanceFilter {
        status: query.status,
        definition_name: query.definition.clone(),
        correlation_id: query.correlation_id.clone(),
        after: query.after.clone(),
        limit: limit.clamp(50, 500),
        ..InstanceFilter::default()
    };
    let mut out = Vec::new();
    loop {
        let page = store.list_instances(filter.clone()).await?;
        let Some(last) = page.last() else { break };
        filter.after = Some(last.instance_id.clone());
        for listed in page {
            // The summary's position and waits come from the row's listing, or from the
            // document for a row written without one.
            let stored = match &listed.summary {
                Ok(row) => row
                    .listing
                    .as_deref()
                    .and_then(InstanceListing::decode)
                    .map(|listing| from_listing(row, listing)),
                Err(_) => None,
            };
            let loaded = match (stored, listed.summary) {
                (Some(summary), _) => Ok(Ok(summary)),
                (None, Ok(_)) => store.load_instance_text(&listed.instance_id).await.map(Err),
                (None, Err(error)) => Err(error),
            };
            let summary = match loaded {
                Ok(Ok(summary)) => summary,
                Ok(Err(record)) => summary(record),
                Err(error) => {
                    // The row itself does not decode: listed, never skipped (ST-22).
                    InstanceSummary {
                        instance_id: listed.instance_id,
                        definition: query.definition.clone().unwrap_or_default(),
                        version: String::new(),
                        status: query.status.unwrap_or(WorkflowStatus::Running),
                        sub_status: None,
                        at: Vec::new(),
                        waiting_for: Vec::new(),
                        correlation_id: None,
                        open_incidents: 0,
                        control_request: None,
                        created_at: 0,
                        updated_at: 0,
                        unreadable: Some(error.to_string()),
                    }
                }
            };
            let unreadable = summary.unreadable.is_some();
            let keep = unreadable
                || (query
                    .sub_status
                    .is_none_or(|s| summary.sub_status == Some(s))
                    && changed_before.is_none_or(|t| summary.updated_at < t)
                    && created_after.is_none_or(|t| summary.created_at > t));
            if keep {
                out.push(summary);
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// The summary of a row whose listing was stored with it.
fn from_listing(row: &crate::store::InstanceSummary, listing: InstanceListing) -> InstanceSummary {
    InstanceSummary {
        instance_id: row.instance_id.clone(),
        definition: row.definition_name.clone(),
        version: row.definition_version.clone(),
        status: row.status,
        sub_status: row.sub_status,
        at: listing.at,
        waiting_for: listing.waiting_for,
        correlation_id: row.correlation_id.clone(),
        open_incidents: listing.open_incidents,
        control_request: row.control_request.as_ref().map(|r| r.kind),
        created_at: row.created_at,
        updated_at: row.updated_at,
        unreadable: None,
    }
}

fn summary(record: InstanceRecord<String>) -> InstanceSummary {
    let mut summary = InstanceSummary {
        instance_id: record.instance_id.clone(),
        definition: record.definition_name,
        version: record.definition_version,
        status: record.status,
        sub_status: record.sub_status,
        at: Vec::new(),
        waiting_for: Vec::new(),
        correlation_id: record.correlation_id,
        open_incidents: 0,
        control_request: record.control_request.map(|r| r.kind),
        created_at: record.created_at,
        updated_at: record.updated_at,
        unreadable: None,
    };
    match decode_document(&record.instance_id, &record.state) {
        Ok(state) => {
            let listing = listing_of(&state);
            summary.at = listing.at;
            summary.waiting_for = listing.waiting_for;
            summary.open_incidents = listing.open_incidents;
        }
        Err(error) => summary.unreadable = Some(error.to_string()),
    }
    summary
}
