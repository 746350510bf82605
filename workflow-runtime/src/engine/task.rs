//! What user code receives and returns: the task context, outcomes and task errors.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The result of one task attempt.
pub type TaskResult = Result<Outcome, TaskError>;

/// What a running task, entry, exit or action sees (ACT-11): mutable access to the data, the
/// payload of the stimulus that led here, its input, and stable identifiers.
///
/// # Examples
///
/// A step that reads the payload of the event that woke it, changes the data, and gives an
/// outside service a key that stays the same across retries:
///
/// ```
/// use workflow_runtime::{TaskContext, TaskError};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Order {
///     paid: u64,
///     receipt_key: Option<String>,
/// }
///
/// #[derive(serde::Deserialize)]
/// struct Payment {
///     amount: u64,
/// }
///
/// async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
///     let payment: Payment = ctx.payload()?;
///     if ctx.is_cancelled() {
///         return Err(TaskError::new("cancelled before the payment was recorded"));
///     }
///     let key = ctx.idempotency_key();
///     let order = ctx.data_mut();
///     order.paid += payment.amount;
///     order.receipt_key = Some(key);
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct TaskContext<D> {
    pub(crate) data: D,
    pub(crate) payload: Option<Value>,
    pub(crate) input: Option<Value>,
    pub(crate) instance_id: String,
    pub(crate) node_id: String,
    pub(crate) context_id: u64,
    pub(crate) attempt: u32,
    /// The variables in scope, nearest declaration first resolved (ACT-8).
    pub(crate) variables: serde_json::Map<String, Value>,
    /// Fired when the attempt should stop (ENG-36).
    pub(crate) cancellation: crate::cancel::CancellationToken,
    /// Appended to the idempotency key: `compensate` for a compensation (FLT-11).
    pub(crate) key_suffix: Option<&'static str>,
}

impl<D> TaskContext<D> {
    /// The workflow data.
    pub fn data(&self) -> &D {
        &self.data
    }

    /// The workflow data, mutably; changes are kept when the task succeeds.
    pub fn data_mut(&mut self) -> &mut D {
        &mut self.data
    }

    /// The payload of the stimulus that fired the transition this code runs for (an action's
    /// event payload), decoded as `P`. Without a payload, decodes JSON `null` (so `Option<P>`
    /// reads `None`).
    ///
    /// # Errors
    ///
    /// A permanent [`TaskError`] naming the node when the payload does not decode as `P`.
    /// When the payload is that of the event this run resumed, returning that error with `?`
    /// rejects the event for the instance instead of faulting it (RT-22): nothing of the
    /// run is stored, the instance keeps waiting on the same bookmark, the event is
    /// dead-lettered `Rejected` and [`SendReport::rejected`](crate::SendReport) lists it.
    pub fn payload<P: DeserializeOwned>(&self) -> Result<P, TaskError> {
        decode(self.payload.as_ref(), "payload", &self.node_id).map_err(|error| {
            TaskError::payload_decode(
                &crate::base::neutral_type_name::<P>(),
                error.message().to_owned(),
            )
        })
    }

    /// The input this activity was scheduled with (ACT-5), decoded as `I`.
    ///
    /// # Errors
    ///
    /// A permanent [`TaskError`] naming the node when the input does not decode as `I`.
    /// When the input is the payload of the event this run resumed (the event just before
    /// this task), returning that error with `?` rejects the event for the instance instead
    /// of faulting it, as [`TaskContext::payload`] does (RT-22).
    pub fn input<I: DeserializeOwned>(&self) -> Result<I, TaskError> {
        decode(self.input.as_ref(), "input", &self.node_id).map_err(|error| {
            TaskError::payload_decode(
                &crate::base::neutral_type_name::<I>(),
                error.message().to_owned(),
            )
        })
    }

    /// The variable `name` in scope (ACT-8), decoded as `T`: the nearest enclosing context
    /// that holds it wins (a loop's `item` and `index`, ACT-16, or a `set_variable`, ACT-28).
    /// A missing variable decodes JSON `null` (so `Option<T>` reads `None`).
    ///
    /// # Errors
    ///
    /// A permanent [`TaskError`] naming the node when the variable does not decode as `T`.
    pub fn variable<T: DeserializeOwned>(&self, name: &str) -> Result<T, TaskError> {
        decode(self.variables.get(name), "variable", &self.node_id)
    }

    /// The instance's id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The node's id: its ancestor path (`root:review`).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Completes when this attempt is cancelled (ENG-36, FLT-16): the instance was cancelled
    /// while the task ran, or the attempt timed out (FLT-17). The task should return promptly;
    /// whatever it returns is discarded and its data changes rolled back.
    pub async fn cancelled(&self) {
        self.cancellation.cancelled().await;
    }

    /// Whether this attempt was cancelled (see [`TaskContext::cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }

    /// This attempt's cancellation token, to hand to other code.
    pub fn cancellation_token(&self) -> crate::cancel::CancellationToken {
        self.cancellation.clone()
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A key that is the same for every attempt and every re-run of this activity execution
    /// (`{instance_id}:{context_id}`, ACT-11): pass it to external systems to make effects
    /// idempotent.
    /// A compensation's key is its task's key followed by `:compensate` (FLT-11).
    pub fn idempotency_key(&self) -> String {
        match self.key_suffix {
            Some(suffix) => format!("{}:{}:{suffix}", self.instance_id, self.context_id),
            None => format!("{}:{}", self.instance_id, self.context_id),
        }
    }
}

fn decode<T: DeserializeOwned>(
    value: Option<&Value>,
    what: &str,
    node: &str,
) -> Result<T, TaskError> {
    let value = value.cloned().unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|e| {
        // ST-20: no Rust type path in what may be stored (an incident's message).
        TaskError::permanent(format!(
            "node `{node}` cannot read its {what} as `{}`: {e}",
            crate::base::neutral_type_name::<T>()
        ))
    })
}

/// The outcome set an activity completes with (FC-4); `done` by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome(Vec<String>);

impl Outcome {
    /// The default outcome, `done`.
    pub fn done() -> Self {
        Self(vec![workflow_model::DONE.to_owned()])
    }

    /// One named outcome, e.g. `approved`.
    pub fn named(name: impl Into<String>) -> Self {
        Self(vec![name.into()])
    }

    /// Several outcomes at once (all their connections are followed).
    pub fn many<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(names.into_iter().map(Into::into).collect())
    }

    /// The outcome names.
    pub fn names(&self) -> &[String] {
        &self.0
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Self::done()
    }
}

/// Why a task attempt failed.
///
/// Any `std::error::Error` converts into it with `?`; such errors are retryable under the
/// activity's retry policy. [`TaskError::permanent`] fails for good at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    message: String,
    permanent: bool,
    code: Option<String>,
    /// Set when a stimulus payload did not decode into this type (RT-22): during the resume
    /// of a bookmark, the run is rejected instead of faulted.
    decode: Option<String>,
}

impl TaskError {
    /// A retryable failure.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
            code: None,
            decode: None,
        }
    }

    /// A failure no retry can fix (a payload of the wrong type, a broken invariant).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: true,
            code: None,
            decode: None,
        }
    }

    /// A permanent failure: the stimulus payload does not decode into `payload_type` (RT-22).
    pub(crate) fn payload_decode(payload_type: &str, message: impl Into<String>) -> Self {
        Self {
            decode: Some(payload_type.to_owned()),
            ..Self::permanent(message)
        }
    }

    /// The payload type that did not decode, for a [`TaskError::payload_decode`].
    pub(crate) fn decode_type(&self) -> Option<&str> {
        self.decode.as_deref()
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying cannot help.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The same error with a code (FLT-1), which a retry policy's `retry_on` list matches.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The error's code, if any.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for TaskError {
    fn from(error: E) -> Self {
        Self::new(error.to_string())
    }
}

/// What a user fn may return: `()`, an [`Outcome`], or a `Result` of either. The macros call
/// [`IntoTaskResult::into_task_result`] on whatever the user's fn returned.
pub trait IntoTaskResult {
    /// The value as a task result.
    ///
    /// # Errors
    ///
    /// The task's error, when the value is one.
    fn into_task_result(self) -> TaskResult;
}

impl IntoTaskResult for () {
    fn into_task_result(self) -> TaskResult {
        Ok(Outcome::done())
    }
}

impl IntoTaskResult for Outcome {
    fn into_task_result(self) -> TaskResult {
        Ok(self)
    }
}

impl<T: IntoTaskResult, E: Into<TaskError>> IntoTaskResult for Result<T, E> {
    fn into_task_result(self) -> TaskResult {
        self.map_err(Into::into)
            .and_then(IntoTaskResult::into_task_result)
    }
}

/// What the macros dispatch on with a task fn's return type, so that one that is not a task
/// result is reported at the user's fn with the expected signature (not as a failed bound deep
/// in [`IntoTaskResult`]). Not a public API.
#[doc(hidden)]
#[derive(Debug)]
pub struct TaskReturn<T>(pub std::marker::PhantomData<T>);

impl<T> TaskReturn<T> {
    /// The dispatcher for the type of `value`.
    pub fn of(_value: &T) -> Self {
        Self(std::marker::PhantomData)
    }
}

/// The path of a return type that is a task result. Not a public API.
#[doc(hidden)]
pub trait ViaTaskResult<T> {
    /// Converts the value.
    fn converter(&self) -> fn(T) -> TaskResult;
}

impl<T: IntoTaskResult> ViaTaskResult<T> for TaskReturn<T> {
    fn converter(&self) -> fn(T) -> TaskResult {
        T::into_task_result
    }
}

/// The path of any other return type: its bound fails at compile time with the message of
/// [`NotATaskResult`]. Not a public API.
#[doc(hidden)]
pub trait ViaMismatch<T> {
    /// Never callable: `T` is not a task result.
    fn converter(&self) -> fn(T) -> TaskResult
    where
        T: NotATaskResult;
}

impl<T> ViaMismatch<T> for &TaskReturn<T> {
    fn converter(&self) -> fn(T) -> TaskResult
    where
        T: NotATaskResult,
    {
        |_| Err(TaskError::permanent("not a task result"))
    }
}

/// Implemented by no type: the bound that names the expected signature of a task fn when its
/// return type is not a task result. Not a public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "this task fn returns `{Self}`, which is not a task result",
    label = "expected `async fn(ctx: &mut TaskContext<Data>)` returning `()`, `Outcome`, `Result<(), E>` or `Result<Outcome, E>`",
    note = "the error type `E` is `TaskError` or any type implementing `std::error::Error` (it converts into `TaskError`); for a message alone, return `Err(TaskError::new(message))`"
)]
pub trait NotATaskResult {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    // ST-20: a payload that does not decode names the type without its Rust path (the
    // message may end up in an incident, which is stored).
    #[test]
    fn a_decode_error_names_no_type_path() {
        let error = super::decode::<Vec<crate::engine::state::Bookmark>>(
            Some(&json!("not a list")),
            "payload",
            "root:a",
        )
        .err()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
        assert!(
            error.starts_with("node `root:a` cannot read its payload as `Vec<Bookmark>`"),
            "{error}"
        );
        assert!(!error.contains("::"), "{error}");
    }
}
