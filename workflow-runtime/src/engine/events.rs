//! Lifecycle notifications (ENG-39, ENG-40): what a subscriber receives.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::engine::state::{ContextId, Incident, SubStatus};

/// One lifecycle event of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    /// The instance.
    pub instance_id: String,
    /// Its definition name.
    pub definition: String,
    /// Its correlation id.
    pub correlation_id: Option<String>,
    /// When, in µs since the epoch (ST-23).
    pub at_micros: crate::base::Micros,
    /// Per-instance sequence number: one instance's events arrive in this order.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What a [`LifecycleEvent`] announces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EventKind {
    /// The instance's first run committed (ENG-27).
    WorkflowStarted,
    /// The instance suspended with this sub-status.
    WorkflowSuspended {
        /// `Waiting`, `Stalled` or `Paused`.
        sub_status: SubStatus,
    },
    /// A suspended instance started a run.
    WorkflowResumed,
    /// The root completed.
    WorkflowFinished,
    /// An activity failed for good.
    WorkflowFaulted {
        /// The incident recorded.
        incident: Incident,
    },
    /// The instance was cancelled.
    WorkflowCancelled {
        /// The reason given.
        reason: Option<String>,
    },
    /// An activity entry point is about to run.
    ActivityExecuting(ActivityRef),
    /// An activity entry point returned.
    ActivityExecuted(ActivityRef),
    /// An activity completed.
    ActivityCompleted(ActivityRef),
    /// An activity failed for good.
    ActivityFaulted(ActivityRef),
    /// An activity was cancelled.
    ActivityCanceled(ActivityRef),
}

impl LifecycleEvent {
    /// Writes this event to `tracing`, with the definition, the instance and the node as
    /// fields, at a level that keeps `info` readable in production: an instance's start,
    /// suspension (with what it waits for), resumption, end and cancellation at `info`; a
    /// fault at `warn`; activities at `debug` (their entry points at `trace`).
    pub(crate) fn trace(&self, waiting_for: &[&str]) {
        let definition = self.definition.as_str();
        let instance = self.instance_id.as_str();
        let correlation = self.correlation_id.as_deref().unwrap_or("");
        match &self.kind {
            EventKind::WorkflowStarted => {
                tracing::info!(definition, instance, correlation, "workflow started");
            }
            EventKind::WorkflowSuspended { sub_status } => {
                let waiting_for = waiting_for.join(", ");
                tracing::info!(
                    definition,
                    instance,
                    sub_status = ?sub_status,
                    waiting_for = waiting_for.as_str(),
                    "workflow suspended"
                );
            }
            EventKind::WorkflowResumed => {
                tracing::info!(definition, instance, "workflow resumed");
            }
            EventKind::WorkflowFinished => {
                tracing::info!(definition, instance, "workflow finished");
            }
            EventKind::WorkflowFaulted { incident } => {
                tracing::warn!(
                    definition,
                    instance,
                    node = incident.node_id.as_str(),
                    incident = incident.id.as_str(),
                    kind = ?incident.fault.kind,
                    attempt = incident.fault.attempt,
                    error = incident.fault.message.as_str(),
                    "workflow faulted"
                );
            }
            EventKind::WorkflowCancelled { reason } => {
                let reason = reason.as_deref().unwrap_or("");
                tracing::info!(definition, instance, reason, "workflow cancelled");
            }
            EventKind::ActivityExecuting(activity) => {
                tracing::trace!(
                    definition,
                    instance,
                    node = activity.node_id.as_str(),
                    "activity executing"
                );
            }
            EventKind::ActivityExecuted(activity) => {
                tracing::trace!(
                    definition,
                    instance,
                    node = activity.node_id.as_str(),
                    "activity executed"
                );
            }
            EventKind::ActivityCompleted(activity) => {
                tracing::debug!(
                    definition,
                    instance,
                    node = activity.node_id.as_str(),
                    executions = activity.execution_count,
                    "activity completed"
                );
            }
            EventKind::ActivityFaulted(activity) => {
                tracing::warn!(
                    definition,
                    instance,
                    node = activity.node_id.as_str(),
                    "activity faulted"
                );
            }
            EventKind::ActivityCanceled(activity) => {
                tracing::debug!(
                    definition,
                    instance,
                    node = activity.node_id.as_str(),
                    "activity cancelled"
                );
            }
        }
    }
}

/// The activity an activity event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityRef {
    /// The node id.
    pub node_id: String,
    /// The context id.
    pub context_id: ContextId,
    /// How many times it ran.
    pub execution_count: u32,
}

/// Why [`EventStream::recv`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The subscriber fell behind its bounded buffer and `missed` events were dropped for it
    /// (never a slower engine, ENG-40). The next call continues with the oldest kept event.
    #[error("subscriber lagged and missed {missed} events")]
    Lagged {
        /// How many events were dropped.
        missed: u64,
    },
    /// The runtime was dropped.
    #[error("the runtime is gone")]
    Closed,
}

/// The receiver with its pending `recv`, boxed so the stream can be polled without `unsafe`.
type PendingRecv = Pin<
    Box<
        dyn Future<
                Output = (
                    Result<LifecycleEvent, broadcast::error::RecvError>,
                    broadcast::Receiver<LifecycleEvent>,
                ),
            > + Send,
    >,
>;

/// A process-local stream of lifecycle events (ENG-40), from [`crate::Runtime::subscribe`].
///
/// Read it with [`recv`](Self::recv), or as a [`futures_core::Stream`] of
/// `Result<LifecycleEvent, RecvError>` (with `StreamExt` from the `futures` crate, say). The
/// stream ends when the runtime is dropped; a subscriber that fell behind gets one
/// `Err(RecvError::Lagged { .. })` item and goes on with the oldest event kept.
///
/// # Examples
///
/// ```
/// use workflow_runtime::{EventKind, Runtime};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::builder().build()?;
/// let mut events = runtime.subscribe();
/// // ... start instances; then, for each event:
/// if let Ok(Some(event)) = events.try_recv() {
///     if let EventKind::WorkflowFaulted { incident } = &event.kind {
///         eprintln!("{} faulted at {}", event.instance_id, incident.node_id);
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct EventStream {
    state: StreamState,
}

enum StreamState {
    /// Not waiting: the receiver itself.
    Idle(broadcast::Receiver<LifecycleEvent>),
    /// Waiting for the next event: the receiver is inside the pending `recv`, and comes back
    /// with the event.
    Waiting(PendingRecv),
    /// Only while moving between the two, within one call.
    Moving,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

fn recv_error(error: &broadcast::error::RecvError) -> RecvError {
    match error {
        broadcast::error::RecvError::Lagged(missed) => RecvError::Lagged { missed: *missed },
        broadcast::error::RecvError::Closed => RecvError::Closed,
    }
}

impl EventStream {
    pub(crate) fn new(receiver: broadcast::Receiver<LifecycleEvent>) -> Self {
        Self {
            state: StreamState::Idle(receiver),
        }
    }

    /// Polls for the next event. The pending wait is kept in `self`, so dropping a `recv`
    /// future or mixing `recv`, `try_recv` and the stream loses no event.
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<LifecycleEvent, RecvError>> {
        let mut pending = match std::mem::replace(&mut self.state, StreamState::Moving) {
            StreamState::Waiting(pending) => pending,
            StreamState::Idle(mut receiver) => Box::pin(async move {
                let result = receiver.recv().await;
                (result, receiver)
            }),
            StreamState::Moving => return Poll::Ready(Err(RecvError::Closed)),
        };
        match pending.as_mut().poll(cx) {
            Poll::Pending => {
                self.state = StreamState::Waiting(pending);
                Poll::Pending
            }
            Poll::Ready((result, receiver)) => {
                self.state = StreamState::Idle(receiver);
                Poll::Ready(result.map_err(|e| recv_error(&e)))
            }
        }
    }

    /// The next event, waiting for it. Cancel-safe: dropping the future loses no event.
    ///
    /// # Errors
    ///
    /// [`RecvError::Lagged`] when this subscriber fell behind (the next call goes on with the
    /// oldest event kept), [`RecvError::Closed`] once the runtime is gone.
    pub async fn recv(&mut self) -> Result<LifecycleEvent, RecvError> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next event if one is buffered, without waiting.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv).
    pub fn try_recv(&mut self) -> Result<Option<LifecycleEvent>, RecvError> {
        if let StreamState::Idle(receiver) = &mut self.state {
            return match receiver.try_recv() {
                Ok(event) => Ok(Some(event)),
                Err(broadcast::error::TryRecvError::Empty) => Ok(None),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    Err(RecvError::Lagged { missed })
                }
                Err(broadcast::error::TryRecvError::Closed) => Err(RecvError::Closed),
            };
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.poll_event(&mut cx) {
            Poll::Ready(result) => result.map(Some),
            Poll::Pending => Ok(None),
        }
    }
}

impl futures_core::Stream for EventStream {
    type Item = Result<LifecycleEvent, RecvError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.poll_event(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(RecvError::Closed)) => Poll::Ready(None),
            Poll::Ready(result) => Poll::Ready(Some(result)),
        }
    }
}
