//! The commits of one leased run under version and fencing token (ENG-28 to ENG-32, ST-16,
//! ST-19, ST-20): the document, status columns, bookmark and incident diffs and the journal.

use std::sync::Mutex;

use serde_json::Value;

use crate::base::{BoxFuture, lock, now_micros};
use crate::engine::executor::{Checkpoint, RunError};
use crate::engine::state::{Bookmark, WorkflowState, WorkflowStatus};
use crate::runtime::document::{
    encode_document_into, encode_document_sized, journal_record, run_store_error,
};
use crate::runtime::listing::listing_text;
use crate::store::policy::SerializedState;
use crate::store::{Commit, Micros, NewBookmark, NewIncident, NewInstance, Storage};

/// The buffer a commit encodes its document into: the last document's length with room for
/// a transition's growth (a few ids and counters); a larger change grows it once.
fn document_capacity(last_len: usize) -> usize {
    last_len + last_len / 8 + 64
}

/// The earliest `sent_at` a queued stimulus may have to be taken by a bookmark (RT-30,
/// RT-31), from the look-back its Event put in the bookmark payload: `None` for
/// `SinceOrigin` (the default), which the queue worker checks against the instance's origin.
fn look_back_instant(payload: &Value, created_at: Micros) -> Option<Micros> {
    let look_back: workflow_model::LookBack =
        serde_json::from_value(payload.get("look_back")?.clone()).ok()?;
    match look_back {
        workflow_model::LookBack::None => Some(created_at),
        workflow_model::LookBack::SinceOrigin => None,
        // The instant the event put beside it: when its state machine's current state was
        // entered; absent (the initial state), the instance's origin.
        workflow_model::LookBack::SinceEntered => payload.get("since").and_then(Value::as_i64),
        // A user-written duration in ms, converted at the boundary.
        workflow_model::LookBack::Window { ms } => {
            Some(created_at.saturating_sub(crate::base::ms_to_micros(ms)))
        }
        workflow_model::LookBack::Any => Some(i64::MIN),
    }
}

/// The tracker's view of committed bookmarks: each id, and whether it has a timer row.
pub(crate) fn committed_bookmarks(bookmarks: &[Bookmark]) -> Vec<(String, bool)> {
    bookmarks
        .iter()
        .map(|b| (b.id.clone(), b.timer().is_some()))
        .collect()
}

/// The key digests of the event waits among `bookmarks` (RT-36): a bookmark's payload keeps
/// the key its hash was made of. A key that cannot be digested is left out (its wait could
/// not have been made).
pub(crate) fn bookmark_keys<'b>(bookmarks: impl IntoIterator<Item = &'b Bookmark>) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for bookmark in bookmarks {
        let Some(key) = bookmark.payload.get("key").filter(|k| !k.is_null()) else {
            continue;
        };
        if let Ok(digest) = crate::identity::key_digest(key)
            && !keys.contains(&digest)
        {
            keys.push(digest);
        }
    }
    keys
}

/// What the store holds of a run's instance, kept in step with each commit.
pub(crate) struct Tracker {
    pub(crate) instance_id: String,
    pub(crate) token: u64,
    pub(crate) version: u64,
    /// The bookmarks as last committed, for the diff (ENG-23, ST-6): each id, and whether it
    /// has a timer row (TM-3).
    pub(crate) bookmarks: Vec<(String, bool)>,
    /// The key digests the store indexes for the instance, as far as this run knows: those
    /// of the bookmarks it loaded and of those it committed (RT-36).
    pub(crate) keys: Vec<String>,
    /// The incidents as last committed (id, resolution), for the incident table's diff
    /// (FLT-6, ST-12).
    pub(crate) incidents: Vec<(String, Option<String>)>,
    /// Stimulus ids consumed by this run, written as receipts with its first commit (RT-19).
    pub(crate) receipts: Vec<String>,
    /// Queue items this run consumes, deleted with its first commit (RT-19).
    pub(crate) consumed: Vec<String>,
    /// The idempotency record of the direct send this run delivers, written with its first
    /// commit (RT-19).
    pub(crate) idempotency: Option<crate::store::IdempotencyRecord>,
    /// The next commit unparks the instance's timers (an operator's retry or resume, TM-10).
    pub(crate) unpark: bool,
    /// The next commit clears the instance's control request: it honours it (C-29).
    pub(crate) clear_control: bool,
    /// The document of the last commit, when it released the lease of a live instance: the
    /// run may keep its state (ENG-53).
    pub(crate) last_document: Option<String>,
    /// The length of the document last loaded or committed, to size the next one's buffer.
    pub(crate) document_len: usize,
    /// The text the run loaded, when it owns it: the next commit encodes its document into
    /// this allocation when it is large enough (the text of a kept state is, ENG-53: it is
    /// the buffer its commit encoded into, with that commit's room for growth).
    pub(crate) spare: String,
    /// The next commit re-pins the instance to this version (a migration, ENG-54).
    pub(crate) repin: Option<String>,
}

/// The commits of one leased run: inside it (ENG-32) and at its end (ENG-31).
pub(crate) struct RunCommits<'r> {
    pub(crate) store: &'r Storage,
    pub(crate) tracker: Mutex<Tracker>,
    /// The control request pending when the run loaded the instance (C-29).
    pub(crate) control: Option<crate::store::ControlRequest>,
}

impl RunCommits<'_> {
    /// The kind of the control request pending when the run loaded the instance.
    pub(crate) fn control_kind(&self) -> Option<crate::store::ControlKind> {
        self.control.as_ref().map(|r| r.kind)
    }

    /// One commit of `state` under the tracked version and token (ENG-28): the document,
    /// status columns, bookmark diff and the journal entries recorded since the last commit.
    pub(crate) async fn commit(
        &self,
        state: &mut WorkflowState,
        release: bool,
        children: Vec<NewInstance<SerializedState>>,
        queue_items: Vec<crate::store::QueueItem>,
    ) -> Result<(), RunError> {
        let commit = {
            let mut tracker = lock(&self.tracker);
            let capacity = document_capacity(tracker.document_len);
            let spare = std::mem::take(&mut tracker.spare);
            let document = if spare.capacity() >= capacity {
                encode_document_into(state, spare.into_bytes())?
            } else {
                encode_document_sized(state, capacity)?
            };
            tracker.document_len = document.0.len();
            // ENG-53: a live instance's state is kept with its text. The store is given a
            // copy of exactly its length and the kept text is the buffer, so the next run's
            // commit, which takes that text back with the state, encodes into it.
            let (document, kept) = if release && !state.status.is_final() {
                (SerializedState(document.0.clone()), Some(document.0))
            } else {
                (document, None)
            };
            tracker.last_document = kept;
            let mut commit = Commit::new(
                tracker.instance_id.clone(),
                tracker.version,
                tracker.token,
                now_micros(),
                document,
                state.status,
                state.sub_status,
            );
            commit.correlation_id = state.correlation_id.clone();
            commit.listing = listing_text(state);
            commit.definition_version = tracker.repin.take();
            commit.release_lease = release;
            let committed = |b: &Bookmark| tracker.bookmarks.iter().any(|(id, _)| *id == b.id);
            commit.bookmarks_added = state
                .bookmarks
                .iter()
                .filter(|b| !committed(b))
                .map(|b| NewBookmark {
                    bookmark_id: b.id.clone(),
                    hash: b.hash.clone(),
                    name: b.name.clone(),
                    node_id: b.node_id.clone(),
                    context_id: b.context_id,
                    look_back: look_back_instant(&b.payload, b.created_at),
                    created_at: b.created_at,
                })
                .collect();
            // RT-36: the keys of new waits, indexed with the first commit that carries them.
            commit.keys_added = bookmark_keys(state.bookmarks.iter().filter(|b| !committed(b)))
                .into_iter()
                .filter(|k| !tracker.keys.contains(k))
                .collect();
            // TM-3: a timer bookmark's row is written with it and deleted with it.
            commit.timers_added = state
                .bookmarks
                .iter()
                .filter(|b| !committed(b))
                .filter_map(Bookmark::timer)
                .collect();
            // The tracker follows the commit as it is built: the ids of removed bookmarks
            // move into it and those of added ones are recorded. A commit that fails
            // discards the run and its tracker (ENG-29; one faulted for its size loads a
            // new one), so it is never left half-updated for a next commit.
            let mut removed = Vec::new();
            let mut timers_removed = Vec::new();
            tracker.bookmarks.retain_mut(|(id, timer)| {
                if state.bookmarks.iter().any(|b| b.id == *id) {
                    return true;
                }
                if *timer {
                    timers_removed.push(id.clone());
                }
                removed.push(std::mem::take(id));
                false
            });
            commit.timers_removed = timers_removed;
            commit.bookmarks_removed = removed;
            tracker
                .bookmarks
                .extend(commit.bookmarks_added.iter().map(|b| {
                    let timer = commit
                        .timers_added
                        .iter()
                        .any(|t| t.timer_id == b.bookmark_id);
                    (b.bookmark_id.clone(), timer)
                }));
            // TM-10: the commit that faults or pauses the instance parks its timers.
            if state.status == WorkflowStatus::Faulted
                || state.sub_status == Some(crate::engine::state::SubStatus::Paused)
            {
                commit.timers_parked = Some(true);
            } else if tracker.unpark {
                commit.timers_parked = Some(false);
            }
            // FLT-6, ST-12: the incident table follows the document, so incidents of all
            // instances can be listed.
            for incident in &state.incidents {
                match tracker.incidents.iter().find(|(id, _)| *id == incident.id) {
                    None => commit.incidents_opened.push(NewIncident {
                        incident_id: incident.id.clone(),
                        kind: incident.kind.as_str().to_owned(),
                        created_at: incident.at,
                        record: serde_json::to_value(incident).unwrap_or(Value::Null),
                    }),
                    Some((_, None)) => {
                        if let Some(resolution) = &incident.resolution {
                            commit
                                .incidents_resolved
                                .push((incident.id.clone(), resolution.clone()));
                        }
                    }
                    Some(_) => {}
                }
            }
            commit.instances_created = children;
            commit.queue_items = queue_items;
            // Moved, as the bookmark ids above: written once, with this commit.
            commit.receipts = std::mem::take(&mut tracker.receipts);
            commit.consumed_queue_items = std::mem::take(&mut tracker.consumed);
            commit.idempotency = tracker.idempotency.take();
            // A request left on a final instance could never be honoured: its final commit
            // clears it.
            commit.clear_control_request = tracker.clear_control || state.status.is_final();
            // Moved, not cloned: a commit that fails discards the run (ENG-29), and with it
            // the entries it recorded.
            commit.journal = std::mem::take(&mut state.journal.entries)
                .into_iter()
                .map(journal_record)
                .collect();
            commit
        };
        let keys_added = commit.keys_added.clone();
        // ENG-29: a `Conflict` or `Fenced` answer discards the run; the caller gets it typed.
        let version = self
            .store
            .commit_text_details(commit)
            .await
            .map_err(|error| run_store_error(&state.instance_id, error))?;
        let mut tracker = lock(&self.tracker);
        tracker.version = version;
        tracker.keys.extend(keys_added);
        tracker.incidents = state
            .incidents
            .iter()
            .map(|i| (i.id.clone(), i.resolution.clone()))
            .collect();
        tracker.unpark = false;
        tracker.clear_control = false;
        Ok(())
    }

    /// Makes the next commit unpark the instance's timers (TM-10).
    pub(crate) fn unpark_next(&self) {
        lock(&self.tracker).unpark = true;
    }

    /// Makes the next commit clear the instance's control request (C-29).
    pub(crate) fn clear_control_next(&self) {
        lock(&self.tracker).clear_control = true;
    }
}

impl Checkpoint for RunCommits<'_> {
    fn checkpoint<'b>(
        &'b self,
        state: &'b mut WorkflowState,
    ) -> BoxFuture<'b, Result<(), RunError>> {
        Box::pin(self.commit(state, false, Vec::new(), Vec::new()))
    }
}
