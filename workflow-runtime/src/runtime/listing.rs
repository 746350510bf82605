//! What an instance listing shows of a state (ENG-51): its position, what it waits for and
//! its open incidents, stored in the instance row with each commit and creation so a listing
//! reads no document.

use crate::engine::state::{ActivityStatus, Bookmark, WorkflowState};
use crate::store::InstanceListing;

/// What a listing shows of `state`, stored in the instance row with each commit and
/// creation ([`crate::store::Commit::listing`]), so a listing reads no document.
pub(crate) fn listing_of(state: &WorkflowState) -> InstanceListing {
    InstanceListing {
        at: position(state).into_iter().map(str::to_owned).collect(),
        waiting_for: state
            .bookmarks
            .iter()
            .map(|b| waiting_name(b).into_owned())
            .collect(),
        open_incidents: open_incidents(state),
    }
}

/// What a listing says a bookmark waits for: its name, and for an attempt waiting for a
/// flow-control slot (QU-11, QU-13) the queue's too, `wf.slot:payments`.
fn waiting_name(bookmark: &Bookmark) -> std::borrow::Cow<'_, str> {
    let queue = (bookmark.name == crate::engine::names::Reserved::Slot.name())
        .then(|| {
            bookmark
                .payload
                .get("queue")
                .and_then(serde_json::Value::as_str)
        })
        .flatten();
    match queue {
        Some(queue) => format!("{}:{queue}", bookmark.name).into(),
        None => bookmark.name.as_str().into(),
    }
}

fn open_incidents(state: &WorkflowState) -> usize {
    state
        .incidents
        .iter()
        .filter(|i| i.resolution.is_none())
        .count()
}

/// The listing text of `state`: the text [`InstanceListing::encode`] gives for
/// [`listing_of`], serialized from the state's own strings (no owned listing built to be
/// encoded).
pub(crate) fn listing_text(state: &WorkflowState) -> Option<String> {
    /// [`InstanceListing`] borrowing its strings: the same fields in the same order, so the
    /// same text.
    #[derive(serde::Serialize)]
    struct Borrowed<'a> {
        at: Vec<&'a str>,
        #[serde(serialize_with = "names")]
        waiting_for: &'a [Bookmark],
        open_incidents: usize,
    }
    fn names<S: serde::Serializer>(
        bookmarks: &&[Bookmark],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(bookmarks.iter().map(waiting_name))
    }
    let text = serde_json::to_string(&Borrowed {
        at: position(state),
        waiting_for: &state.bookmarks,
        open_incidents: open_incidents(state),
    })
    .ok();
    // Tests run in debug builds: there every listing is checked against the encoding of the
    // listing it stands for.
    debug_assert_eq!(text, Some(listing_of(state).encode()));
    text
}

/// The current state of a root state machine (the state it ended in, once final), else the
/// innermost nodes not completed (none, once final).
fn position(state: &WorkflowState) -> Vec<&str> {
    let Some(root) = state.root else {
        return Vec::new();
    };
    if let Some(current) = state
        .context(root)
        .and_then(|c| c.properties.get(crate::engine::names::CURRENT_STATE))
        .and_then(serde_json::Value::as_str)
    {
        return vec![current];
    }
    if state.status.is_final() {
        return Vec::new();
    }
    let open: Vec<&str> = state
        .contexts
        .values()
        .filter(|c| c.id != root)
        .filter(|c| {
            matches!(
                c.status,
                ActivityStatus::Pending | ActivityStatus::Running | ActivityStatus::Faulted
            )
        })
        .map(|c| c.node_id.as_str())
        .collect();
    // The innermost: no other open node is under it (`<it>:...`).
    let under = |m: &str, n: &str| m.strip_prefix(n).is_some_and(|rest| rest.starts_with(':'));
    open.iter()
        .filter(|n| !open.iter().any(|m| under(m, n)))
        .map(|n| n.rsplit(':').next().unwrap_or(n))
        .collect()
}
