//! The vocabulary of delivery (RT-14 to RT-24): the [`Stimulus`] a caller sends, the
//! [`SendReport`] it gets back, the errors and per-instance outcomes, and the inbox item's
//! targets. The delivery itself, [`Runtime::send`](crate::Runtime::send), is the runtime's router.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::base::{new_ulid, now_micros};
use crate::engine::executor::RunError;
use crate::identity::{RoutingError, sha_hex};
use crate::status::Started;
use crate::store::{InstanceStatus, Micros, QueueItem, StoreError};
use crate::trace::TraceParent;
use workflow_model::Activation;

/// The default inbox TTL (RT-28): 10 minutes.
pub(crate) const DEFAULT_QUEUE_TTL: Duration = Duration::from_secs(600);
/// The largest payload a send accepts (RT-8): 1 MiB.
pub(crate) const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// The longest debounce window a send accepts (RT-35): one day.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(24 * 3600);
/// Bookmarks read per page.
pub(crate) const BOOKMARK_PAGE: usize = 500;

/// A stimulus (RT-1): a name, an optional key, a JSON payload, and the send
/// options (target instance, correlation id, bookmark id, idempotency key, inbox TTL,
/// whether to keep it in the inbox, debounce).
///
/// # Examples
///
/// A payment for order `o-42`, sent once even if the caller retries:
///
/// ```
/// use workflow_runtime::{Runtime, Stimulus};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder().build()?;
/// let payment = Stimulus::new("payment")
///     .key("o-42")
///     .payload(serde_json::json!({ "amount": 100 }))
///     .idempotency_key("payment-o-42");
///
/// let report = runtime.send(payment.clone()).await?;
/// // Nothing waits for it yet: it is kept until a matching wait appears.
/// assert!(report.inbox_item.is_some());
///
/// // The retry returns the first report instead of keeping it twice.
/// assert!(runtime.send(payment).await?.duplicate);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Stimulus {
    /// The event name.
    pub name: String,
    /// The key (RT-3); `None` is the unit key.
    pub key: Option<Value>,
    /// Restrict delivery to this instance (RT-34); no trigger runs.
    pub instance_id: Option<String>,
    /// The payload, decoded by the waiting activity (RT-8).
    pub payload: Value,
    /// Only bookmarks of instances with this correlation id; given to started instances
    /// (RT-33).
    pub correlation_id: Option<String>,
    /// Exactly this bookmark (RT-34); no trigger runs.
    pub bookmark_id: Option<String>,
    /// Makes a retried send a no-op returning the first report (RT-19).
    pub idempotency_key: Option<String>,
    /// How long an unmatched stimulus waits in the inbox (RT-28); the runtime's default
    /// otherwise.
    pub ttl: Option<Duration>,
    /// Whether an unmatched stimulus is kept in the inbox (default) or reported `unmatched`
    /// (RT-21).
    pub inbox: bool,
    /// Through the inbox (RT-23): only write the stimulus to the inbox and return; the inbox
    /// worker routes it as an inline send would (for large fan-outs).
    pub via_inbox: bool,
    /// The W3C trace context the delivery continues (ENG-61); without it, the one of the
    /// sender's task ([`TraceParent::current`]) when the send is made.
    pub traceparent: Option<TraceParent>,
    /// Debounce (RT-35): sends with the same name, key and target within this window collapse
    /// into one delivery, made once the window is quiet; the last payload wins.
    pub debounce: Option<Duration>,
    /// Why the key or payload given to the builder methods did not serialize.
    pub(crate) invalid: Option<String>,
}

impl Stimulus {
    /// A stimulus named `name` with a `null` payload.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            key: None,
            instance_id: None,
            payload: Value::Null,
            correlation_id: None,
            bookmark_id: None,
            idempotency_key: None,
            ttl: None,
            inbox: true,
            via_inbox: false,
            traceparent: None,
            debounce: None,
            invalid: None,
        }
    }

    /// Continuing the trace `parent` (ENG-61): the run that delivers it, in this process or
    /// another, opens its span as a child of it.
    #[must_use]
    pub fn traceparent(mut self, parent: TraceParent) -> Self {
        self.traceparent = Some(parent);
        self
    }

    /// With a key (any `Serialize` value; RT-3).
    #[must_use]
    pub fn key(mut self, key: impl Serialize) -> Self {
        match serde_json::to_value(key) {
            Ok(key) => self.key = Some(key),
            Err(e) => self.invalid = Some(format!("key does not serialize: {e}")),
        }
        self
    }

    /// Addressed to one instance (RT-34).
    #[must_use]
    pub fn instance(mut self, instance_id: impl Into<String>) -> Self {
        self.instance_id = Some(instance_id.into());
        self
    }

    /// With a correlation id (RT-33).
    #[must_use]
    pub fn correlation(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Addressed to one bookmark (RT-34).
    #[must_use]
    pub fn bookmark(mut self, bookmark_id: impl Into<String>) -> Self {
        self.bookmark_id = Some(bookmark_id.into());
        self
    }

    /// With an idempotency key (RT-19).
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// With an inbox TTL for this send (RT-28).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether an unmatched stimulus is kept in the inbox until an instance waits for it
    /// (RT-21; default `true`). Off, it is reported `unmatched`.
    #[must_use]
    pub fn inbox(mut self, keep: bool) -> Self {
        self.inbox = keep;
        self
    }

    /// Through the inbox (RT-23): see [`Stimulus::via_inbox`](Self#structfield.via_inbox).
    #[must_use]
    pub fn via_inbox(mut self) -> Self {
        self.via_inbox = true;
        self
    }

    /// Debounced (RT-35): this send and the others with the same name, key and target made
    /// within `window` of each other collapse into one delivery, made `window` after the last
    /// of them. The last send's payload and options win; the earlier ones are dropped (a
    /// debounced send's own idempotency key is not kept: a retry is one more send of the
    /// burst, and the delivery gets a key of its own, so it is made once). The
    /// pending send is stored, so it is delivered after a restart too, by the timer driver
    /// of any process sharing the store. The window is between 1 ms and [`MAX_DEBOUNCE`]
    /// (else [`SendError::InvalidDebounce`]).
    ///
    /// # Examples
    ///
    /// A search index refreshed once a burst of edits is over:
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::{Runtime, Stimulus};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder().build()?;
    /// for revision in 1..=3 {
    ///     let edit = Stimulus::new("document.edited")
    ///         .key("doc-7")
    ///         .payload(serde_json::json!({ "revision": revision }))
    ///         .debounce(Duration::from_millis(200));
    ///     let report = runtime.send(edit).await?;
    ///     // Nothing is delivered yet: each send pushes the delivery back.
    ///     assert!(report.debounced.is_some());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn debounce(mut self, window: Duration) -> Self {
        self.debounce = Some(window);
        self
    }

    /// With a typed payload. One that does not serialize makes
    /// [`Runtime::send`](crate::Runtime::send) fail with [`SendError::Payload`].
    #[must_use]
    pub fn payload(mut self, payload: impl Serialize) -> Self {
        match serde_json::to_value(payload) {
            Ok(payload) => self.payload = payload,
            Err(e) => self.invalid = Some(format!("payload does not serialize: {e}")),
        }
        self
    }
}

/// Why a send failed; nothing was written (RT-14), unless said otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The name, key or correlation id cannot be routed (RT-2, RT-3, RT-33).
    #[error(transparent)]
    Routing(#[from] RoutingError),
    /// The key or payload given to [`Stimulus`] did not serialize.
    #[error("{message}")]
    Payload {
        /// Why.
        message: String,
    },
    /// The payload is larger than the limit (RT-8).
    #[error("payload of {size} bytes exceeds the limit of {limit}")]
    PayloadTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The idempotency key was used by a send with another hash or payload (RT-19).
    #[error("idempotency key `{key}` was used by a different send")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// The targeted instance does not exist (RT-34).
    #[error("instance `{instance}` not found")]
    InstanceNotFound {
        /// The id.
        instance: String,
    },
    /// The targeted instance is final (RT-34).
    #[error("instance `{instance}` is {status}")]
    InstanceTerminal {
        /// The id.
        instance: String,
        /// Its final status.
        status: InstanceStatus,
    },
    /// The targeted bookmark waits for another stimulus (RT-34); detected when the send also
    /// names the bookmark's instance.
    #[error("bookmark `{bookmark}` waits for hash {expected}, not {got}")]
    BookmarkStimulusMismatch {
        /// The bookmark.
        bookmark: String,
        /// Its hash.
        expected: String,
        /// The stimulus hash.
        got: String,
    },
    /// The debounce window is zero or longer than [`MAX_DEBOUNCE`] (RT-35).
    #[error("debounce window of {window:?} is {problem}: it must be between 1 ms and {max:?}")]
    InvalidDebounce {
        /// The window given.
        window: Duration,
        /// What is wrong with it (`"zero"`, `"too short"`, `"too long"`).
        problem: &'static str,
        /// The longest window accepted.
        max: Duration,
    },
    /// The targeted bookmark does not exist any more (RT-34).
    #[error("bookmark `{bookmark}` not found")]
    BookmarkNotFound {
        /// The id.
        bookmark: String,
    },
    /// The store failed; whatever was committed stays, a retry with the same idempotency key
    /// is safe.
    #[error("store: {0}")]
    Store(StoreError),
    /// A run failed; that instance is unchanged.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Why a trigger started nothing (RT-12, RT-16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The activation strategy forbids a second instance; `existing` holds the scope.
    ActivationRefused {
        /// The strategy.
        strategy: Activation,
        /// The non-final instance holding the activation scope.
        existing: String,
    },
    /// `Correlation` and `CorrelatedSingleton` need a correlation id.
    MissingCorrelationId {
        /// The definition.
        definition: String,
    },
    /// The trigger row belongs to a version this process has not registered.
    VersionNotRegistered {
        /// The definition.
        definition: String,
        /// The row's version.
        version: String,
    },
    /// The payload does not decode into the definition's data (RT-13).
    Rejected {
        /// The definition.
        definition: String,
        /// Why.
        message: String,
    },
}

/// A stimulus a state machine's transition declined (SM-4): the transition's trigger took it,
/// its condition returned `false`, so the machine stayed in `state` and waits again. The
/// stimulus was consumed: the instance ran, and is also listed in [`SendReport::resumed`].
///
/// # Examples
///
/// ```
/// use workflow_runtime::routing::Declined;
///
/// let declined = Declined {
///     instance_id: "ticket-T-2".into(),
///     state: "Open".into(),
///     transition: "assign".into(),
///     condition: Some("has_agent".into()),
/// };
/// assert_eq!(
///     declined.to_string(),
///     "ticket-T-2 stayed in `Open`: transition `assign` declined by its condition `has_agent`"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declined {
    /// The instance.
    pub instance_id: String,
    /// The state it stayed in.
    pub state: String,
    /// The transition's name, as written in the machine.
    pub transition: String,
    /// The registry name of the condition that returned `false`.
    pub condition: Option<String>,
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} stayed in `{}`: transition `{}` declined",
            self.instance_id, self.state, self.transition
        )?;
        match &self.condition {
            Some(condition) => write!(f, " by its condition `{condition}`"),
            None => Ok(()),
        }
    }
}

/// Why a send kept its stimulus in the inbox (RT-21): when it was sent, no instance waited for it. It is
/// delivered to one that comes to wait for it (whose look-back admits it, RT-30) before
/// `expires_at`, else dead-lettered as expired (RT-28).
///
/// A state machine waits only for the events of its current state's transitions, and takes
/// from the inbox only those sent since it entered that state (SM-9): an event sent while it
/// is in a state that does not wait for it is reported here and is not taken later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotAwaited {
    /// When the stimulus kept in the inbox expires, µs since the epoch.
    pub expires_at: Micros,
    /// The instances the send was addressed to (at most 20), as they are now: where each is
    /// and what it waits for. With [`Stimulus::instance`] or [`Stimulus::correlation`], the
    /// live ones it names. For a send by name and key alone ([`NotAwaited::by_key`]), those
    /// whose waits carried its key, live or finished (RT-36); none from a store without the
    /// key index.
    #[serde(default)]
    pub addressed: Vec<AddressedInstance>,
    /// The send named no instance and no correlation id: `addressed` lists the instances
    /// with its key.
    #[serde(default)]
    pub by_key: bool,
}

/// An instance a stimulus kept in the inbox was addressed to, as it was when it was kept:
/// one it named, or one with its key (RT-36).
///
/// Its `Display` reads, for a live instance and for a finished one:
///
/// ```text
/// wf-1 is Suspended at `Assigned`, waiting for `ticket.close`
/// wf-2 is Finished at `Closed`
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressedInstance {
    /// The instance id.
    pub instance_id: String,
    /// Its status.
    pub status: crate::status::WorkflowStatus,
    /// Where it is: a root state machine's current state, else the innermost nodes running.
    pub at: Vec<String>,
    /// The names of the events and timers it waits for.
    pub waiting_for: Vec<String>,
}

impl std::fmt::Display for AddressedInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}", self.instance_id, self.status)?;
        if !self.at.is_empty() {
            write!(f, " at `{}`", self.at.join("`, `"))?;
        }
        if self.status.is_final() {
            // Finished or cancelled: it waits for nothing, and the status says so.
            Ok(())
        } else if self.waiting_for.is_empty() {
            write!(f, ", waiting for nothing")
        } else {
            write!(f, ", waiting for `{}`", self.waiting_for.join("`, `"))
        }
    }
}

/// What a debounced send did (RT-35): it stored or replaced the pending send, to be delivered
/// at `due_at` unless another send comes first. The report's stimulus id names this send
/// only; the delivery gets an id of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Debounced {
    /// The debounce id: the sends with the same name, key and target share it.
    pub debounce_id: String,
    /// When the delivery is due, µs since the epoch (workflow time).
    pub due_at: Micros,
    /// How many sends the pending delivery collapses so far, this one included.
    pub sends: u64,
}

/// Why a stimulus was rejected for one instance (RT-22): the stimulus was not consumed and was
/// written to the dead letters with reason `Rejected`. The instance and its bookmark are
/// unchanged, but for [`Rejection::StateTooLarge`], which faulted it at its last commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// The payload does not decode into the type the waiting activity reads.
    PayloadDecode {
        /// The instance.
        instance: String,
        /// The bookmark the stimulus reached.
        bookmark: String,
        /// The waiting node.
        node: String,
        /// The type the payload should decode into.
        payload_type: String,
        /// The decoder's message.
        message: String,
    },
    /// The run the stimulus started grew the instance's state over the store's size limit
    /// (ST-24): the instance was faulted from its last committed state (incident
    /// `state_too_large`) and the stimulus, not consumed, was dead-lettered. Replay it after
    /// the instance is retried.
    StateTooLarge {
        /// The instance.
        instance: String,
        /// The bookmark the stimulus reached.
        bookmark: String,
        /// The size of the refused document, in bytes.
        size: usize,
        /// The store's limit, in bytes.
        limit: usize,
        /// The incident that faulted the instance.
        incident: String,
    },
}

impl Rejection {
    /// The instance and the bookmark the stimulus was rejected for.
    pub(crate) fn target(&self) -> (&str, &str) {
        match self {
            Self::PayloadDecode {
                instance, bookmark, ..
            }
            | Self::StateTooLarge {
                instance, bookmark, ..
            } => (instance, bookmark),
        }
    }

    /// The rejection of a stimulus whose run faulted the instance as too large (ST-24), from
    /// the run's error; `None` for another error or when the stimulus was consumed.
    pub(crate) fn too_large(error: &RunError, bookmark: &str) -> Option<Self> {
        match error {
            RunError::StateTooLarge {
                instance,
                size,
                limit,
                incident,
                stimulus_id: Some(_),
            } => Some(Self::StateTooLarge {
                instance: instance.clone(),
                bookmark: bookmark.to_owned(),
                size: *size,
                limit: *limit,
                incident: incident.clone(),
            }),
            _ => None,
        }
    }
}

/// What [`Runtime::send`](crate::Runtime::send) did (RT-23).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendReport {
    /// The stimulus id (derived from the idempotency key when one was given).
    pub stimulus_id: String,
    /// The stimulus hash (RT-5).
    pub hash: String,
    /// Instances started by triggers, with their status after their first run.
    pub started: Vec<Started>,
    /// Instances resumed, in delivery order, with their status after the run. An instance
    /// whose transition declined the stimulus ran, so it is listed here too, and in
    /// [`SendReport::declined`].
    pub resumed: Vec<Started>,
    /// The transitions of resumed instances whose condition declined the stimulus (SM-4):
    /// each of those instances stayed in its state.
    #[serde(default)]
    pub declined: Vec<Declined>,
    /// Triggers that started nothing, and why.
    pub refused: Vec<Refusal>,
    /// Instances busy in another process (their lease is held), faulted, paused, or pinned to
    /// a version this process does not run: the stimulus was kept in the inbox targeted at each (held,
    /// not expiring, for a faulted or paused one), for the worker to deliver once the lease is
    /// released or the instance runs again (RT-18, ENG-50), or for a process that runs its
    /// version (RT-24).
    pub deferred: Vec<String>,
    /// Instances the stimulus was rejected for (RT-22): each is unchanged and the stimulus
    /// was dead-lettered as `Rejected` for it.
    #[serde(default)]
    pub rejected: Vec<Rejection>,
    /// Instances the stimulus was for that are finished or cancelled: one that ended while
    /// the send reached it, or, for a send with a correlation id that matched nothing, the
    /// final instances of that correlation id when none is live. Nothing was delivered to them,
    /// and the stimulus was not kept for them: a stimulus sent too late says so.
    #[serde(default)]
    pub finished: Vec<Started>,
    /// The inbox item id when the stimulus matched nothing and was kept in the inbox (RT-21),
    /// or was sent [`Stimulus::via_inbox`].
    #[serde(alias = "queued")]
    pub inbox_item: Option<String>,
    /// Why it was kept in the inbox, when a send that could deliver it found no instance
    /// waiting for it (not for [`Stimulus::via_inbox`], which does not look).
    #[serde(default, alias = "queued_because")]
    pub inbox_because: Option<NotAwaited>,
    /// A debounced send (RT-35): when its delivery is due, unless another send pushes it
    /// back. Nothing else was done yet.
    #[serde(default)]
    pub debounced: Option<Debounced>,
    /// Nothing matched and the inbox was off ([`Stimulus::inbox`]).
    pub unmatched: bool,
    /// This is the stored report of an earlier send with the same idempotency key.
    pub duplicate: bool,
    /// Matching instances that could not run (not runnable, the store failing for them): the
    /// stimulus was not delivered to them. Not stored with the idempotency record.
    #[serde(skip)]
    pub not_delivered: Vec<RunError>,
}

impl SendReport {
    pub(crate) fn empty(stimulus_id: String, hash: String) -> Self {
        Self {
            stimulus_id,
            hash,
            started: Vec::new(),
            resumed: Vec::new(),
            declined: Vec::new(),
            refused: Vec::new(),
            deferred: Vec::new(),
            rejected: Vec::new(),
            finished: Vec::new(),
            inbox_item: None,
            debounced: None,
            inbox_because: None,
            unmatched: false,
            duplicate: false,
            not_delivered: Vec::new(),
        }
    }
}

/// An inbox item's targets (RT-25), as stored in its `targets` column.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Targets {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bookmark_id: Option<String>,
    /// Written by a send through the inbox (RT-23): the worker routes it as a send would.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) route: bool,
    /// The key itself, for `route` items (the item's key column is for display).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<Value>,
    /// A child's result for its parent (ACT-24): delivered to the bookmark named by id,
    /// whatever its hash; one whose bookmark is gone is done with.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) child_result: bool,
    /// The send's W3C trace context (ENG-61).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
}

/// The inbox item of a final child's result for its parent's `wf.sub_workflow` bookmark
/// (ACT-24), written by the child's final commit. Its stimulus id is derived from the child,
/// so the parent's receipt makes a second delivery a no-op.
pub(crate) fn child_result_item(
    parent: &str,
    bookmark: &str,
    child: &str,
    payload: Value,
    ttl: Micros,
) -> Option<QueueItem> {
    let targets = Targets {
        instance_id: Some(parent.to_owned()),
        bookmark_id: Some(bookmark.to_owned()),
        child_result: true,
        ..Targets::default()
    };
    let now = now_micros();
    Some(QueueItem {
        item_id: new_ulid(),
        stimulus_id: format!(
            "child-{}",
            sha_hex(&["wf-child-result/1", child]).get(..40)?
        ),
        name: crate::engine::names::Reserved::SubWorkflow
            .name()
            .to_owned(),
        hash: sha_hex(&["wf-child-result/1", parent, bookmark]),
        key_display: None,
        payload,
        correlation_id: None,
        targets: serde_json::to_value(&targets).ok()?,
        sent_at: now,
        enqueued_at: now,
        expires_at: now.saturating_add(ttl),
        attempts: 0,
        last_error: None,
        last_attempt_at: None,
        held: false,
        idempotency_key: None,
    })
}

pub(crate) fn to_micros(d: Duration) -> Micros {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl std::fmt::Display for SendReport {
    /// One line saying what the send did, e.g. `stimulus 01J..: resumed 1 (o-1)` or
    /// `stimulus 01J..: kept in the inbox as 01J..: no instance waits for it now; delivered if one comes
    /// to wait for it before it expires, else dead-lettered`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn ids(list: impl Iterator<Item = String>) -> String {
            list.collect::<Vec<_>>().join(", ")
        }
        let mut parts = Vec::new();
        if self.duplicate {
            parts.push("a repeat of an earlier send with this idempotency key".to_owned());
        }
        if !self.started.is_empty() {
            let list = ids(self.started.iter().map(|s| s.instance_id.clone()));
            parts.push(format!("started {} ({list})", self.started.len()));
        }
        if !self.resumed.is_empty() {
            let list = ids(self.resumed.iter().map(|s| s.instance_id.clone()));
            parts.push(format!("resumed {} ({list})", self.resumed.len()));
        }
        for declined in &self.declined {
            parts.push(format!("declined: {declined}"));
        }
        if !self.deferred.is_empty() {
            parts.push(format!(
                "deferred for {} busy, faulted or paused ({})",
                self.deferred.len(),
                self.deferred.join(", ")
            ));
        }
        if !self.rejected.is_empty() {
            parts.push(format!("rejected for {}", self.rejected.len()));
        }
        if !self.refused.is_empty() {
            parts.push(format!("{} trigger(s) refused", self.refused.len()));
        }
        if !self.not_delivered.is_empty() {
            parts.push(format!("not delivered to {}", self.not_delivered.len()));
        }
        if !self.finished.is_empty() {
            let list = ids(self
                .finished
                .iter()
                .map(|s| format!("{} is {}", s.instance_id, s.status)));
            parts.push(format!("too late: {list}"));
        }
        match (&self.inbox_item, &self.inbox_because) {
            (Some(item), Some(because)) => {
                let mut part = format!("kept in the inbox as {item}: no instance waits for it now");
                if !because.addressed.is_empty() {
                    let list = ids(because.addressed.iter().map(ToString::to_string));
                    if because.by_key {
                        part.push_str(&format!(" (with its key: {list})"));
                    } else {
                        part.push_str(&format!(" ({list})"));
                    }
                }
                part.push_str(
                    "; delivered if one comes to wait for it before it expires, else dead-lettered",
                );
                parts.push(part);
            }
            (Some(item), None) => {
                parts.push(format!(
                    "kept in the inbox as {item} until an instance waits for it"
                ));
            }
            (None, _) => {}
        }
        if let Some(debounced) = &self.debounced {
            parts.push(format!(
                "debounced ({} send(s) so far): delivered at {} µs unless another send comes first",
                debounced.sends, debounced.due_at
            ));
        }
        if self.unmatched {
            parts.push("matched nothing (the inbox was off)".to_owned());
        }
        if parts.is_empty() {
            parts.push("did nothing".to_owned());
        }
        write!(f, "stimulus {}: {}", self.stimulus_id, parts.join("; "))
    }
}
