//! What the engine tells an observer of its task attempts (the runtime's metrics, ENG-60):
//! a leaf the executor's settings and the attempt both name, so neither imports the other
//! for it.

/// How a task attempt ended, as its observer is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptEnded {
    /// The task returned an outcome the node declares.
    Completed,
    /// It failed and another attempt waits on a `wf.retry` timer (FLT-2).
    Retrying,
    /// It failed for good (an error without a retry left, a panic, an undeclared outcome).
    Failed,
    /// The instance was cancelled while it ran (FLT-16).
    Cancelled,
}

/// Told of every task attempt (the runtime's metrics, ENG-60): how long it took and how it
/// ended. Called on the run's task, so it must be cheap.
pub(crate) trait AttemptObserver: Send + Sync + std::fmt::Debug {
    fn attempted(&self, took: std::time::Duration, ended: AttemptEnded);
}
