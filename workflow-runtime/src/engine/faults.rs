//! Retries (FLT-1 to FLT-9): the attempt count kept on the task's context, the
//! backoff of FLT-2, and the durable wait between attempts (FLT-3): a `wf.retry` bookmark
//! whose timer row is written in the same commit, so restarts neither reset nor skip the count.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};
use workflow_model::RetryPolicy;

use crate::engine::executor::{Executor, StepError, engine_fault};
use crate::engine::names::{ON_RETRY, Reserved};
use crate::engine::state::{ActivityContext, ContextId};
use crate::engine::task::TaskError;
use crate::identity::stimulus_hash;

/// The context property holding the number of the next attempt.
const ATTEMPT: &str = "attempt";
/// The context property listing the last attempts' failures (FLT-6).
pub(crate) const ATTEMPTS: &str = "attempts";
/// How many failed attempts are kept (FLT-6).
const KEPT_ATTEMPTS: usize = 10;

/// The number of the attempt about to run (from 1).
pub(crate) fn attempt_of(context: Option<&ActivityContext>) -> u32 {
    context
        .and_then(|c| c.properties.get(ATTEMPT))
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1)
}

/// Forgets the attempt count, for a fresh budget (FLT-8).
pub(crate) fn reset_attempts(context: &mut ActivityContext) {
    context.properties.remove(ATTEMPT);
}

/// FLT-2: the wait after failed attempt `attempt` (from 1), in ms:
/// `min(max_delay, initial_delay × multiplier^(attempt−1)) × (1 − jitter × r)`, `r` in [0, 1).
pub(crate) fn backoff_ms(policy: &RetryPolicy, attempt: u32, r: f64) -> u64 {
    let initial = policy
        .initial_delay_ms
        .unwrap_or(RetryPolicy::DEFAULT_INITIAL_DELAY_MS) as f64;
    let cap = policy
        .max_delay_ms
        .unwrap_or(RetryPolicy::DEFAULT_MAX_DELAY_MS) as f64;
    let multiplier = policy
        .multiplier
        .unwrap_or(RetryPolicy::DEFAULT_MULTIPLIER)
        .to_f64()
        .max(1.0);
    let jitter = policy
        .jitter
        .unwrap_or(RetryPolicy::DEFAULT_JITTER)
        .to_f64()
        .clamp(0.0, 1.0);
    let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    let raw = (initial * multiplier.powi(exponent)).min(cap);
    let wait = raw * (1.0 - jitter * r.clamp(0.0, 0.999_999));
    if wait.is_finite() && wait > 0.0 {
        // Bounded by the cap (a u64 of ms) above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ms = wait as u64;
        ms
    } else {
        0
    }
}

/// The jitter's random number in [0, 1), derived from the instance, context and attempt so a
/// re-run computes the same wait.
fn jitter_random(instance_id: &str, context: ContextId, attempt: u32) -> f64 {
    let mut hasher = DefaultHasher::new();
    (instance_id, context, attempt).hash(&mut hasher);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether the error is retried by the policy (FLT-1, FLT-2): not permanent and, with a
/// `retry_on` list, its code is on it.
fn retried_by(policy: &RetryPolicy, error: &TaskError) -> bool {
    if error.is_permanent() {
        return false;
    }
    match &policy.retry_on {
        None => true,
        Some(codes) => error.code().is_some_and(|c| codes.iter().any(|x| x == c)),
    }
}

/// After a failed attempt: records it on the context (FLT-6) and, when the policy retries
/// the error and attempts are left, arms the durable retry wait (FLT-3) and returns `true`;
/// the context stays `Running`. Returns `false` when the task fails for good (FLT-5).
pub(crate) fn retry_after_failure<D>(
    executor: &mut Executor<'_, D>,
    id: ContextId,
    policy: Option<&RetryPolicy>,
    attempt: u32,
    started_at: crate::base::Micros,
    error: &TaskError,
) -> Result<bool, StepError>
where
    D: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let now = executor.now;
    if let Some(c) = executor.state.context_mut(id) {
        let entry = json!({
            "attempt": attempt,
            "started_at": started_at,
            "ended_at": now,
            "error": error.message(),
            "code": error.code(),
        });
        let list = c
            .properties
            .entry(ATTEMPTS.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.push(entry);
            let excess = list.len().saturating_sub(KEPT_ATTEMPTS);
            list.drain(..excess);
        }
    }
    let Some(policy) = policy else {
        return Ok(false);
    };
    let max_attempts = policy
        .max_attempts
        .unwrap_or(RetryPolicy::DEFAULT_MAX_ATTEMPTS);
    if attempt >= max_attempts || !retried_by(policy, error) {
        return Ok(false);
    }
    let r = jitter_random(&executor.state.instance_id, id, attempt);
    // The policy's delays are the user's milliseconds, converted here.
    let delay_ms = backoff_ms(policy, attempt, r);
    let due_at = now.saturating_add(crate::base::ms_to_micros(delay_ms));
    if let Some(c) = executor.state.context_mut(id) {
        c.properties.insert(ATTEMPT.to_owned(), json!(attempt + 1));
    }
    let scope_context = id.to_string();
    let hash = stimulus_hash(
        Reserved::Retry.name(),
        None,
        Some((executor.state.instance_id.as_str(), scope_context.as_str())),
    )
    .map_err(|e| engine_fault(id, e.to_string()))?;
    let node = executor
        .state
        .context(id)
        .map(|c| c.node_id.clone())
        .unwrap_or_default();
    tracing::warn!(
        definition = executor.state.definition.name.as_str(),
        instance = executor.state.instance_id.as_str(),
        node = node.as_str(),
        attempt,
        next_attempt = attempt + 1,
        delay_ms,
        error = %error.message(),
        "attempt failed; retry scheduled"
    );
    executor.create_bookmark(
        id,
        Reserved::Retry.name(),
        hash,
        json!({ "attempt": attempt + 1, "due_at": due_at }),
        Some(ON_RETRY),
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use workflow_model::Decimal;

    use super::*;

    // FLT-2: the waits grow by the multiplier, stay under the cap, and jitter only shortens.
    #[test]
    fn backoff_grows_is_capped_and_jitter_shortens() {
        let policy = RetryPolicy {
            initial_delay_ms: Some(1_000),
            max_delay_ms: Some(5_000),
            multiplier: Some(Decimal::from_millis(2_000)),
            jitter: Some(Decimal::from_millis(200)),
            ..RetryPolicy::default()
        };
        assert_eq!(backoff_ms(&policy, 1, 0.0), 1_000);
        assert_eq!(backoff_ms(&policy, 2, 0.0), 2_000);
        assert_eq!(backoff_ms(&policy, 3, 0.0), 4_000);
        assert_eq!(backoff_ms(&policy, 4, 0.0), 5_000);
        assert_eq!(backoff_ms(&policy, 40, 0.0), 5_000);
        let jittered = backoff_ms(&policy, 2, 0.5);
        assert_eq!(jittered, 1_800);
        for attempt in 1..6 {
            let r = jitter_random("i", 3, attempt);
            assert!((0.0..1.0).contains(&r));
            let wait = backoff_ms(&policy, attempt, r);
            assert!((800..=5_000).contains(&wait), "{wait}");
        }
    }
}
