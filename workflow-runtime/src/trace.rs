//! W3C trace context (ENG-61): the `traceparent` a send or a start carries into the store, so
//! the run that delivers or runs it, in this process or another, continues the same trace.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

tokio::task_local! {
    /// The trace context of the work in progress on this task (ENG-61).
    static CURRENT: Option<TraceParent>;
}

/// A W3C trace context (`traceparent`, version `00`): the trace, the span that is the parent
/// of what continues it, and the sampled flag.
///
/// A send or a start captures one (given explicitly, else [`TraceParent::current`]), the store
/// keeps it with the queued stimulus or the started instance, and the run that delivers or
/// runs it opens its `workflow.execution` span as a child of it: the span records `trace_id`,
/// `span_id` and `parent_id`, and the run's own sends and starts carry it on (ENG-61).
///
/// # Examples
///
/// ```
/// use workflow_runtime::TraceParent;
///
/// let parent: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse()?;
/// assert_eq!(parent.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// let child = parent.child();
/// assert_eq!(child.trace_id(), parent.trace_id());
/// assert_ne!(child.span_id(), parent.span_id());
/// assert!("00-00000000000000000000000000000000-00f067aa0ba902b7-01"
///     .parse::<TraceParent>()
///     .is_err());
/// # Ok::<(), workflow_runtime::TraceParentError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: u128,
    span_id: u64,
    flags: u8,
}

/// Why a `traceparent` text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `traceparent` `{text}`: {reason}")]
pub struct TraceParentError {
    /// The text, cut to 64 characters.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl TraceParent {
    /// A new trace, sampled, with a new span id.
    pub fn new_root() -> Self {
        let high = random_u64();
        let low = random_u64();
        Self {
            trace_id: (u128::from(high) << 64 | u128::from(low)).max(1),
            span_id: random_u64().max(1),
            flags: 1,
        }
    }

    /// The same trace and flags under a new span id: the context of a span whose parent is
    /// `self`.
    #[must_use]
    pub fn child(&self) -> Self {
        Self {
            span_id: random_u64().max(1),
            ..*self
        }
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The parent span's id, 16 lowercase hex digits.
    pub fn span_id(&self) -> String {
        format!("{:016x}", self.span_id)
    }

    /// Whether the trace is sampled (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace context of the work in progress on this task: the one a run of this
    /// runtime continues while it runs (so its sends and starts carry it), or one an
    /// application gave with [`TraceParent::scope`]; `None` elsewhere.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|current| *current).ok().flatten()
    }

    /// Runs `future` with `self` as [`TraceParent::current`]: the sends and starts it makes
    /// carry it (for example the context of an incoming request's `traceparent` header, or of
    /// the current OpenTelemetry span).
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(Some(self), future).await
    }

    /// `future` run with `context` as the current trace context (none for `None`), and its
    /// span recording the context's ids: `trace_id`, `span_id` and `parent_id`, of `parent`.
    pub(crate) fn continuing<F: Future>(
        parent: Option<TraceParent>,
        span: &tracing::Span,
        future: F,
    ) -> impl Future<Output = F::Output> {
        let context = parent.map(|parent| parent.child());
        if let (Some(parent), Some(context)) = (parent, context) {
            span.record("trace_id", context.trace_id());
            span.record("span_id", context.span_id());
            span.record("parent_id", parent.span_id());
        }
        CURRENT.scope(context, future)
    }

    /// Parses a stored value, `None` (with a warning) for one that does not parse: a bad
    /// trace context loses the trace, never the work.
    pub(crate) fn from_stored(text: Option<&str>) -> Option<Self> {
        let text = text?;
        match text.parse() {
            Ok(parent) => Some(parent),
            Err(error) => {
                tracing::warn!(%error, "a stored trace context is ignored");
                None
            }
        }
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        )
    }
}

impl std::str::FromStr for TraceParent {
    type Err = TraceParentError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = |reason| TraceParentError {
            text: text.chars().take(64).collect(),
            reason,
        };
        let parts: Vec<&str> = text.trim().split('-').collect();
        let [version, trace, span, flags] = parts.as_slice() else {
            return Err(refuse(
                "expected `version-trace_id-parent_id-flags`, four fields separated by `-`",
            ));
        };
        let hex = |field: &str, len: usize| {
            field.len() == len
                && field
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2) || *version == "ff" {
            return Err(refuse(
                "the version is not two lowercase hex digits below `ff`",
            ));
        }
        if !hex(trace, 32) {
            return Err(refuse("the trace id is not 32 lowercase hex digits"));
        }
        if !hex(span, 16) {
            return Err(refuse("the parent id is not 16 lowercase hex digits"));
        }
        if !hex(flags, 2) {
            return Err(refuse("the flags are not two lowercase hex digits"));
        }
        let trace_id = u128::from_str_radix(trace, 16).map_err(|_| refuse("bad trace id"))?;
        let span_id = u64::from_str_radix(span, 16).map_err(|_| refuse("bad parent id"))?;
        let flags = u8::from_str_radix(flags, 16).map_err(|_| refuse("bad flags"))?;
        if trace_id == 0 {
            return Err(refuse("the trace id is all zeros"));
        }
        if span_id == 0 {
            return Err(refuse("the parent id is all zeros"));
        }
        Ok(Self {
            trace_id,
            span_id,
            flags,
        })
    }
}

/// Where a runtime's sends and starts take a trace context when none is given, and what it
/// does with each `workflow.execution` span that continues one: the bridge to a tracing
/// system of the application's (ENG-61).
#[derive(Clone, Default)]
pub(crate) struct TraceBridge {
    /// Consulted when the task has no [`TraceParent::current`].
    pub(crate) source: Option<Arc<TraceSource>>,
    /// Called with each run's span and the context it continues, before the run enters it.
    pub(crate) on_span: Option<Arc<SpanHook>>,
}

/// The application's source of trace contexts.
pub(crate) type TraceSource = dyn Fn() -> Option<TraceParent> + Send + Sync;

/// The application's hook on each run's span.
pub(crate) type SpanHook = dyn Fn(&tracing::Span, &TraceParent) + Send + Sync;

impl fmt::Debug for TraceBridge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceBridge")
            .field("source", &self.source.is_some())
            .field("on_span", &self.on_span.is_some())
            .finish()
    }
}

impl TraceBridge {
    /// The trace context a send or a start made now carries, unless it names one: the
    /// task's, else the application's source's.
    pub(crate) fn current(&self) -> Option<TraceParent> {
        TraceParent::current().or_else(|| self.source.as_ref().and_then(|source| source()))
    }

    /// `future` continuing `parent` (see [`TraceParent::continuing`]), the application's hook
    /// told of the span first.
    pub(crate) fn continuing<F: Future>(
        &self,
        parent: Option<TraceParent>,
        span: &tracing::Span,
        future: F,
    ) -> impl Future<Output = F::Output> {
        if let (Some(parent), Some(on_span)) = (parent, &self.on_span) {
            on_span(span, &parent);
        }
        TraceParent::continuing(parent, span, future)
    }
}

/// 64 bits that differ between calls and processes (not for secrets).
fn random_u64() -> u64 {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = STATE.get_or_init(RandomState::new).build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_bad_ones_say_why() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent: TraceParent = text.parse().unwrap();
        assert_eq!(parent.to_string(), text);
        assert!(parent.sampled());
        for (bad, reason) in [
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "four fields",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "all zeros",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version",
            ),
        ] {
            let error = bad.parse::<TraceParent>().unwrap_err();
            assert!(error.to_string().contains(reason), "{error}");
        }
        let root = TraceParent::new_root();
        assert_ne!(root.trace_id(), TraceParent::new_root().trace_id());
        assert_eq!(root.child().trace_id(), root.trace_id());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_current_context_is_the_scopes() {
        assert_eq!(TraceParent::current(), None);
        let root = TraceParent::new_root();
        let inside = root.scope(async { TraceParent::current() }).await;
        assert_eq!(inside, Some(root));
    }
}
