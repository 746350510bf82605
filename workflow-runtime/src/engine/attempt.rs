//! One task attempt (ACT-11, FLT-2 to FLT-4, FLT-16, FLT-17): the task runs with mutable
//! access to the data, under its attempt timeout and the instance's cancellation token, behind
//! the panic guard; a failed attempt's changes are dropped and a retry policy decides whether
//! another attempt waits on a `wf.retry` timer.

use crate::engine::executor::{CommitStrategy, Executor, RunError, StepError, engine_fault};
use crate::engine::guard::CatchUnwind;
use crate::engine::names::{ON_SLOT, Reserved};
use crate::engine::observer::AttemptEnded;
use crate::engine::state::{ContextId, EntryPoint, FaultKind, FaultRecord};
use serde_json::json;

/// How an attempt ended.
enum AttemptEnd<T> {
    Returned(T),
    TimedOut(u64),
    Cancelled,
}

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// Runs the registered task `function` for context `id` (ACT-11): mutable access to the
    /// data for the whole attempt; on error or panic the data is rolled back (FLT-4) and the
    /// context faults.
    pub(crate) async fn run_task(
        &mut self,
        id: ContextId,
        function: &str,
        retry: Option<&workflow_model::RetryPolicy>,
        attempt_timeout_ms: Option<u64>,
        queue: Option<&crate::engine::graph::TaskQueue>,
    ) -> Result<(), StepError> {
        let registry = self.registry;
        let Some(task) = registry.tasks.get(function) else {
            return Err(engine_fault(
                id,
                format!("no task is registered under `{function}`"),
            ));
        };
        // QU-10, QU-11: a task of a queue runs only with a slot of it.
        let slot = match queue {
            Some(queue) => match self.take_slot(id, queue).await? {
                Some(lease) => Some(lease),
                // QU-11: waiting for the slot out of the run, on a `wf.slot` bookmark; the
                // context stays running and the attempt runs when it is resumed.
                None => return Ok(()),
            },
            None => None,
        };
        self.data_mut()?;
        let Some(data) = self.data.take() else {
            return Err(engine_fault(id, "data unavailable"));
        };
        let (payload, input, node_id) = match self.state.context_mut(id) {
            Some(c) => {
                c.is_executing = true;
                c.executing_entry = Some(EntryPoint::Execute);
                (c.payload.clone(), c.input.clone(), c.node_id.clone())
            }
            None => return Err(RunError::ContextNotFound { context: id }.into()),
        };
        let variables = self.variables_in_scope(id);
        let attempt = crate::engine::faults::attempt_of(self.state.context(id));
        // ENG-5, ENG-32: committed with `is_executing` set, a crash re-runs exactly this task.
        self.checkpoint_at(id, CommitStrategy::BeforeEachActivity)
            .await?;
        let mut cx = crate::engine::task::TaskContext {
            data,
            payload,
            input,
            instance_id: self.state.instance_id.clone(),
            node_id,
            context_id: id,
            attempt,
            variables,
            cancellation: crate::cancel::CancellationToken::new(),
            key_suffix: None,
        };
        let started_at = self.now;
        let wall = std::time::Instant::now();
        let token = cx.cancellation.clone();
        let settings = self.attempts.clone();
        settings.set_executing(Some(&cx.node_id));
        let attempt_run = async {
            let mut future = CatchUnwind(task(&mut cx));
            let timeout = async {
                match attempt_timeout_ms {
                    Some(ms) => {
                        let start = settings.clock.now();
                        // Saturating: a timeout near `u64::MAX` ms waits forever instead of overflowing.
                        let at = start.saturating_add(crate::base::ms_to_micros(ms));
                        settings.clock.sleep_until(at).await;
                    }
                    None => std::future::pending().await,
                }
            };
            let cancelled = async {
                match &settings.instance_cancel {
                    Some(t) => t.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let ended = tokio::select! {
                outcome = &mut future => AttemptEnd::Returned(outcome),
                () = timeout => AttemptEnd::TimedOut(attempt_timeout_ms.unwrap_or_default()),
                () = cancelled => AttemptEnd::Cancelled,
            };
            if !matches!(ended, AttemptEnd::Returned(_)) {
                // FLT-16: fire the token, give the task its grace, then drop it (ENG-52);
                // whatever it returns is discarded.
                token.cancel();
                let _ = tokio::time::timeout(settings.cancel_grace, &mut future).await;
            }
            ended
        };
        // QU-11: the slot is renewed while the attempt runs and released when it ends.
        let ended = match (slot, &settings.flow) {
            (Some(lease), Some(gate)) => gate.hold(lease, attempt_run).await,
            _ => attempt_run.await,
        };
        settings.set_executing(None);
        let took = wall.elapsed();
        let observe = |ended: AttemptEnded| {
            if let Some(observer) = &settings.observer {
                observer.attempted(took, ended);
            }
        };
        let outcome = match ended {
            AttemptEnd::Returned(outcome) => outcome,
            // FLT-17: a timed-out attempt is a retryable failure that counts.
            AttemptEnd::TimedOut(ms) => Ok(Err(crate::engine::task::TaskError::new(format!(
                "attempt timed out after `{}`",
                crate::cancel::human_ms(ms)
            )))),
            AttemptEnd::Cancelled => {
                observe(AttemptEnded::Cancelled);
                if let Some(c) = self.state.context_mut(id) {
                    c.is_executing = false;
                    c.executing_entry = None;
                }
                // FLT-4, FLT-16: the attempt's changes are dropped and the run abandoned; the
                // cancel that fired the token follows from the last commit.
                self.data = None;
                return Err(StepError::Abort(RunError::Interrupted {
                    instance: self.state.instance_id.clone(),
                }));
            }
        };
        if let Some(c) = self.state.context_mut(id) {
            c.is_executing = false;
            c.executing_entry = None;
        }
        // FC-4: an outcome the node did not declare fails it for good, data untouched.
        let undeclared = match &outcome {
            Ok(Ok(outcome)) => self.undeclared_outcome(id, outcome),
            _ => None,
        };
        let failure = match outcome {
            Ok(Ok(_)) if undeclared.is_some() => FaultRecord {
                kind: FaultKind::Error,
                message: undeclared.unwrap_or_default(),
                attempt,
            },
            Ok(Ok(outcome)) => match serde_json::to_value(&cx.data) {
                Ok(json) => {
                    self.state.data = json;
                    self.data = Some(cx.data);
                    let names = outcome.names().to_vec();
                    self.record_compensable(id);
                    self.complete(id, None, names)?;
                    observe(AttemptEnded::Completed);
                    self.checkpoint_at(id, CommitStrategy::AfterEachActivity)
                        .await?;
                    return Ok(());
                }
                Err(e) => FaultRecord {
                    kind: FaultKind::Engine,
                    message: format!("data does not serialize after task `{function}`: {e}"),
                    attempt,
                },
            },
            Ok(Err(error)) => {
                // FLT-4: the failed attempt's changes are dropped.
                self.data = None;
                // RT-22: the stimulus's payload is not what the task reads: reject the run.
                if let Some(rejection) = self.task_payload_rejection(id, &error) {
                    observe(AttemptEnded::Failed);
                    return Err(rejection);
                }
                if crate::engine::faults::retry_after_failure(
                    self, id, retry, attempt, started_at, &error,
                )? {
                    observe(AttemptEnded::Retrying);
                    return Ok(());
                }
                FaultRecord {
                    kind: FaultKind::Error,
                    message: error.message().to_owned(),
                    attempt,
                }
            }
            Err(message) => FaultRecord {
                kind: FaultKind::Panicked,
                message,
                attempt,
            },
        };
        observe(AttemptEnded::Failed);
        // FLT-4: the failed attempt's changes are dropped; `state.data` is the last good value.
        self.data = None;
        Err(StepError::Fault {
            context: id,
            record: failure,
        })
    }
}

impl<D> Executor<'_, D>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    /// Takes a slot of `queue` for this attempt of context `id` (QU-11). `None`: the queue
    /// has no room for longer than the gate's grace, and the context now waits on a `wf.slot`
    /// bookmark whose timer asks again (a release naming the holder resumes it sooner). A
    /// cancel while waiting in the run abandons the run like a cancel during the attempt; a
    /// queue the runtime does not declare faults the task.
    async fn take_slot(
        &mut self,
        id: ContextId,
        task_queue: &crate::engine::graph::TaskQueue,
    ) -> Result<Option<crate::store::SlotLease>, StepError> {
        let queue = task_queue.name.as_str();
        let Some(gate) = self.attempts.flow.clone() else {
            return Err(engine_fault(
                id,
                format!("task runs in queue `{queue}`, which this runtime does not declare"),
            ));
        };
        let attempt = crate::engine::faults::attempt_of(self.state.context(id));
        let holder = format!("{}/{id}/{attempt}", self.state.instance_id);
        let cancel = self.attempts.instance_cancel.clone();
        // QU-10: the partition key is the value at the key path in the data as it is now.
        let key = task_queue
            .key
            .as_deref()
            .and_then(|path| partition_key(&self.state.data, path));
        match gate
            .acquire(
                queue,
                &holder,
                key.as_deref(),
                task_queue.priority,
                cancel.as_ref(),
                true,
            )
            .await
        {
            Ok(crate::engine::slots::Taken::Granted(lease)) => Ok(Some(lease)),
            Ok(crate::engine::slots::Taken::Suspend { wait, after }) => {
                let after = i64::try_from(after.as_micros()).unwrap_or(i64::MAX);
                let due_at = self.attempts.clock.now().saturating_add(after);
                let mark = crate::engine::slots::SlotWaitMark {
                    queue,
                    holder: &holder,
                    key: key.as_deref(),
                    priority: task_queue.priority,
                };
                let (hash, mut payload) = mark
                    .bookmark(&self.state.instance_id, &id.to_string(), &wait, due_at)
                    .map_err(|e| engine_fault(id, e.to_string()))?;
                payload.insert("attempt".into(), json!(attempt));
                let payload = serde_json::Value::Object(payload);
                self.create_bookmark(id, Reserved::Slot.name(), hash, payload, Some(ON_SLOT))?;
                Ok(None)
            }
            Err(crate::engine::slots::GateError::Cancelled) => {
                Err(StepError::Abort(RunError::Interrupted {
                    instance: self.state.instance_id.clone(),
                }))
            }
            Err(crate::engine::slots::GateError::Unknown(queue)) => Err(engine_fault(
                id,
                format!("task runs in queue `{queue}`, which this runtime does not declare"),
            )),
            Err(crate::engine::slots::GateError::Store(error)) => {
                Err(StepError::Abort(RunError::Store {
                    instance: self.state.instance_id.clone(),
                    error,
                }))
            }
        }
    }
}

/// The partition key at the dotted `path` of `data` (QU-10): a string as it is, any other
/// value as its JSON text; a missing or `null` field gives no key.
pub(crate) fn partition_key(data: &serde_json::Value, path: &str) -> Option<String> {
    match crate::identity::value_at_path(data, path)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(text) => Some(text.clone()),
        other => Some(other.to_string()),
    }
}
