//! The runtime's lifecycle: its background work started at build and stopped at shutdown.

use super::Runtime;

impl Runtime {
    /// Shuts this runtime down (RT-26, ENG-36, ENG-52): the timer driver and the queue worker
    /// stop (a queue pass in progress completes first), and the tasks this process is running
    /// get their cancellation token fired. Their runs are *interrupted*: abandoned without a
    /// commit and without counting an attempt, so the instances continue from their last
    /// commit in the next process ([`Runtime::recover`]). A task that ignores its token is
    /// dropped after the grace. Build a new runtime to run again.
    pub async fn shutdown(&self) {
        self.stop_timers_and_tasks();
        self.stop_queue_worker().await;
    }
}
