//! Lifecycle notifications (ENG-39, ENG-40): what a subscriber receives.

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::instance::{ContextId, Incident, SubStatus};

/// One lifecycle event of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    /// The instance.
    pub instance_id: String,
    /// Its definition name.
    pub definition: String,
    /// Its correlation id.
    pub correlation_id: Option<String>,
    /// When (ms since the epoch).
    pub at: u64,
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

/// A process-local stream of lifecycle events (ENG-40), from [`crate::Runtime::subscribe`].
#[derive(Debug)]
pub struct EventStream {
    pub(crate) receiver: broadcast::Receiver<LifecycleEvent>,
}

impl EventStream {
    /// The next event, waiting for it.
    ///
    /// # Errors
    ///
    /// [`RecvError::Lagged`] when this subscriber fell behind and missed events (the next call
    /// goes on with the oldest kept one), [`RecvError::Closed`] when the runtime is gone.
    pub async fn recv(&mut self) -> Result<LifecycleEvent, RecvError> {
        self.receiver.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(missed) => RecvError::Lagged { missed },
            broadcast::error::RecvError::Closed => RecvError::Closed,
        })
    }

    /// The next event if one is buffered, without waiting.
    ///
    /// # Errors
    ///
    /// [`RecvError::Lagged`] when this subscriber fell behind and missed events (the next call
    /// goes on with the oldest kept one), [`RecvError::Closed`] when the runtime is gone.
    pub fn try_recv(&mut self) -> Result<Option<LifecycleEvent>, RecvError> {
        match self.receiver.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(broadcast::error::TryRecvError::Empty) => Ok(None),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Err(RecvError::Lagged { missed })
            }
            Err(broadcast::error::TryRecvError::Closed) => Err(RecvError::Closed),
        }
    }
}
