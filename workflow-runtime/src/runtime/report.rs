//! Readable results: a send's report in one line, and a typed wait for a workflow's data.

use std::fmt;
use std::time::Duration;

use super::{AwaitError, Completion, Runtime, SendReport};
use crate::workflow::Workflow;

impl fmt::Display for SendReport {
    /// One line saying what the send did, e.g. `payment: resumed 1 (o-1)` or
    /// `payment: queued as 01J.. until an instance waits for it`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        if let Some(item) = &self.queued {
            parts.push(format!("queued as {item} until an instance waits for it"));
        }
        if self.unmatched {
            parts.push("matched nothing (queueing was off)".to_owned());
        }
        if parts.is_empty() {
            parts.push("did nothing".to_owned());
        }
        write!(f, "stimulus {}: {}", self.stimulus_id, parts.join("; "))
    }
}

impl Runtime {
    /// Waits until the instance finishes, at most `timeout`, and returns its output decoded
    /// as the workflow's data type (the final data, unless an activity set another output).
    ///
    /// # Errors
    ///
    /// As [`Runtime::await_completion`], and [`AwaitError::Cancelled`] for a cancelled
    /// instance, [`AwaitError::Output`] when the output does not decode as `W::Data`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_runtime::prelude::*;
    ///
    /// #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    /// pub struct Count {
    ///     n: u32,
    /// }
    ///
    /// async fn bump(ctx: &mut TaskContext<Count>) {
    ///     ctx.data_mut().n += 1;
    /// }
    ///
    /// workflow! {
    ///     pub workflow Twice(Count) = sequence [task(bump), again = task(bump)];
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let runtime = Runtime::builder().register::<Twice>().build()?;
    /// let id = runtime.start::<Twice>(Count::default()).await?.instance_id;
    /// let done: Count = runtime.await_data::<Twice>(&id, Duration::from_secs(5)).await?;
    /// assert_eq!(done, Count { n: 2 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn await_data<W: Workflow>(
        &self,
        instance_id: &str,
        timeout: Duration,
    ) -> Result<W::Data, AwaitError> {
        match self.await_completion(instance_id, timeout).await? {
            Completion::Finished(output) => {
                serde_json::from_value(output).map_err(|error| AwaitError::Output {
                    instance: instance_id.to_owned(),
                    message: error.to_string(),
                })
            }
            Completion::Cancelled(reason) => Err(AwaitError::Cancelled {
                instance: instance_id.to_owned(),
                reason,
            }),
        }
    }
}
