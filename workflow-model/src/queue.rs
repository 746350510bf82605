//! Flow-control queues (QU-1 to QU-4): named limits shared by the tasks and runs that use them.
//!
//! A [`Queue`] is declared once, usually as a Rust item, and referenced by path, so a
//! misspelled queue is a compile error:
//!
//! ```
//! use std::time::Duration;
//! use workflow_model::Queue;
//!
//! /// The payment provider allows 25 calls a second; at most 10 at once, 2 per customer.
//! const PAYMENTS: Queue = Queue::new("payments")
//!     .concurrency(10)
//!     .per_key(2)
//!     .rate(25, Duration::from_secs(1));
//!
//! assert_eq!(PAYMENTS.name(), "payments");
//! assert_eq!(PAYMENTS.rate_limit().map(|r| r.starts), Some(25));
//! assert!(PAYMENTS.validate().is_ok());
//! ```
//!
//! Every limit is optional; a queue without any only orders its work by priority. The
//! constructors take any number, so a declaration is a `const`; [`Queue::validate`] (called
//! when a runtime is built) refuses a limit of 0, a period outside
//! [`MIN_RATE_PERIOD`]..=[`MAX_RATE_PERIOD`] and a bad name, with a [`QueueError`] naming the
//! field.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// The shortest rate period a queue accepts (1 ms).
pub const MIN_RATE_PERIOD: Duration = Duration::from_millis(1);

/// The longest rate period a queue accepts (1 day).
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

/// The most starts a rate limit may allow per period (each start in the window is one stored
/// row, QU-3).
pub const MAX_RATE_STARTS: u32 = 100_000;

/// The largest concurrency limit a queue accepts.
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// A rate limit: at most `starts` starts in any window of `period` (a sliding window, QU-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// The most starts per window.
    pub starts: u32,
    /// The window.
    pub period: Duration,
}

/// A named flow-control queue and its limits (QU-1). See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Queue {
    name: Cow<'static, str>,
    concurrency: Option<u32>,
    per_process: Option<u32>,
    per_key: Option<u32>,
    rate: Option<Rate>,
}

impl Queue {
    /// A queue named `name` without limits (a `const` declaration).
    #[must_use]
    pub const fn new(name: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            concurrency: None,
            per_process: None,
            per_key: None,
            rate: None,
        }
    }

    /// A queue whose name is known at run time only (a queue for JSON definitions).
    #[must_use]
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: Cow::Owned(name.into()),
            ..Self::new("")
        }
    }

    /// At most `limit` tasks (or runs) of the queue at once, across every process sharing the
    /// store.
    #[must_use]
    pub const fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// At most `limit` at once in one process.
    #[must_use]
    pub const fn per_process(mut self, limit: u32) -> Self {
        self.per_process = Some(limit);
        self
    }

    /// At most `limit` at once per partition key; keys are served round robin (QU-4).
    #[must_use]
    pub const fn per_key(mut self, limit: u32) -> Self {
        self.per_key = Some(limit);
        self
    }

    /// At most `starts` starts in any window of `period` (a sliding window, QU-3).
    #[must_use]
    pub const fn rate(mut self, starts: u32, period: Duration) -> Self {
        self.rate = Some(Rate { starts, period });
        self
    }

    /// The queue's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The concurrency limit across processes, if any.
    #[must_use]
    pub const fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The per-process limit, if any.
    #[must_use]
    pub const fn per_process_limit(&self) -> Option<u32> {
        self.per_process
    }

    /// The per-key limit, if any.
    #[must_use]
    pub const fn per_key_limit(&self) -> Option<u32> {
        self.per_key
    }

    /// The rate limit, if any.
    #[must_use]
    pub const fn rate_limit(&self) -> Option<Rate> {
        self.rate
    }

    /// Checks the declaration (QU-2).
    ///
    /// # Errors
    ///
    /// The first problem found, naming its field: a name that is empty, too long or not made
    /// of `[A-Za-z0-9_.-]`; a limit of 0 or above [`MAX_CONCURRENCY`]; a rate of 0 or more
    /// than [`MAX_RATE_STARTS`] starts; a period outside
    /// [`MIN_RATE_PERIOD`]..=[`MAX_RATE_PERIOD`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use workflow_model::{Queue, QueueError};
    ///
    /// let err = Queue::new("imports").concurrency(0).validate().unwrap_err();
    /// assert_eq!(err.field(), "concurrency");
    /// assert_eq!(err.to_string(), "queue `imports`: `concurrency` must be at least 1");
    /// let err = Queue::new("imports").rate(5, Duration::from_secs(7 * 86_400)).validate();
    /// assert!(matches!(err, Err(QueueError::PeriodOutOfRange { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), QueueError> {
        check_queue_name(&self.name)?;
        let queue = || self.name.to_string();
        for (field, limit) in [
            ("concurrency", self.concurrency),
            ("per_process", self.per_process),
            ("per_key", self.per_key),
        ] {
            match limit {
                Some(0) => {
                    return Err(QueueError::ZeroLimit {
                        queue: queue(),
                        field,
                    });
                }
                Some(n) if n > MAX_CONCURRENCY => {
                    return Err(QueueError::LimitTooLarge {
                        queue: queue(),
                        field,
                        limit: n,
                        max: MAX_CONCURRENCY,
                    });
                }
                _ => {}
            }
        }
        if let Some(rate) = self.rate {
            if rate.starts == 0 {
                return Err(QueueError::ZeroLimit {
                    queue: queue(),
                    field: "rate.starts",
                });
            }
            if rate.starts > MAX_RATE_STARTS {
                return Err(QueueError::LimitTooLarge {
                    queue: queue(),
                    field: "rate.starts",
                    limit: rate.starts,
                    max: MAX_RATE_STARTS,
                });
            }
            if rate.period < MIN_RATE_PERIOD || rate.period > MAX_RATE_PERIOD {
                return Err(QueueError::PeriodOutOfRange {
                    queue: queue(),
                    period: rate.period,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.name)?;
        let mut parts = Vec::new();
        if let Some(n) = self.concurrency {
            parts.push(format!("concurrency {n}"));
        }
        if let Some(n) = self.per_process {
            parts.push(format!("{n} per process"));
        }
        if let Some(n) = self.per_key {
            parts.push(format!("{n} per key"));
        }
        if let Some(rate) = self.rate {
            parts.push(format!("{} per {:?}", rate.starts, rate.period));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// A task's or a start's priority in its queue (QU-4): [`Priority::MIN`] (0, the default) to
/// [`Priority::MAX`] (9); higher runs first, FIFO within a priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Priority(u8);

impl Priority {
    /// The lowest priority, the default.
    pub const MIN: Self = Self(0);
    /// The highest priority.
    pub const MAX: Self = Self(9);

    /// The priority `value`.
    ///
    /// # Errors
    ///
    /// [`QueueError::PriorityOutOfRange`] outside `0..=9`.
    ///
    /// ```
    /// use workflow_model::Priority;
    ///
    /// assert_eq!(Priority::new(7).unwrap().get(), 7);
    /// assert_eq!(
    ///     Priority::new(-1).unwrap_err().to_string(),
    ///     "`priority` must be between 0 and 9, got -1"
    /// );
    /// ```
    pub fn new(value: i64) -> Result<Self, QueueError> {
        match u8::try_from(value) {
            Ok(v) if v <= Self::MAX.0 => Ok(Self(v)),
            _ => Err(QueueError::PriorityOutOfRange { priority: value }),
        }
    }

    /// The number, 0 to 9.
    #[must_use]
    pub const fn get(self) -> u8 {
        self.0
    }
}

/// A queue declaration or priority that cannot be used (QU-2). Each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The name is empty, too long or has a character outside `[A-Za-z0-9_.-]`.
    #[error("queue name {name:?} {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A limit is 0: nothing could ever run.
    #[error("queue `{queue}`: `{field}` must be at least 1")]
    ZeroLimit {
        /// The queue.
        queue: String,
        /// The field (`concurrency`, `per_process`, `per_key`, `rate.starts`).
        field: &'static str,
    },
    /// A limit is larger than the store keeps track of.
    #[error("queue `{queue}`: `{field}` is {limit}, more than the maximum {max}")]
    LimitTooLarge {
        /// The queue.
        queue: String,
        /// The field.
        field: &'static str,
        /// The limit given.
        limit: u32,
        /// The largest accepted.
        max: u32,
    },
    /// The rate period is shorter than 1 ms or longer than 1 day.
    #[error("queue `{queue}`: `rate.period` must be between 1ms and 1 day, got {period:?}")]
    PeriodOutOfRange {
        /// The queue.
        queue: String,
        /// The period given.
        period: Duration,
    },
    /// A priority outside `0..=9`.
    #[error("`priority` must be between 0 and 9, got {priority}")]
    PriorityOutOfRange {
        /// The priority given.
        priority: i64,
    },
    /// No queue of this name is declared.
    #[error("unknown queue `{name}`{}", did_you_mean_suffix(suggestion.as_deref()))]
    Unknown {
        /// The name used.
        name: String,
        /// The closest declared name, if one is close.
        suggestion: Option<String>,
    },
}

fn did_you_mean_suffix(suggestion: Option<&str>) -> String {
    suggestion.map_or_else(String::new, |s| format!("; did you mean `{s}`?"))
}

impl QueueError {
    /// The field the error is about: `name`, `concurrency`, `per_process`, `per_key`,
    /// `rate.starts`, `rate.period`, `priority` or `queue`.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::BadName { .. } => "name",
            Self::ZeroLimit { field, .. } | Self::LimitTooLarge { field, .. } => field,
            Self::PeriodOutOfRange { .. } => "rate.period",
            Self::PriorityOutOfRange { .. } => "priority",
            Self::Unknown { .. } => "queue",
        }
    }
}

/// Checks a queue name: 1 to [`MAX_QUEUE_NAME_BYTES`] bytes of `[A-Za-z0-9_.-]`.
///
/// # Errors
///
/// [`QueueError::BadName`] saying what is wrong.
pub fn check_queue_name(name: &str) -> Result<(), QueueError> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name.len() > MAX_QUEUE_NAME_BYTES {
        "is longer than 128 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        "may only contain letters, digits, `_`, `.` and `-`"
    } else {
        return Ok(());
    };
    Err(QueueError::BadName {
        name: name.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_field_is_named() {
        let day = Duration::from_secs(86_400);
        let cases = [
            (Queue::new(""), "name"),
            (Queue::new("a b"), "name"),
            (Queue::new("q").concurrency(0), "concurrency"),
            (Queue::new("q").per_process(0), "per_process"),
            (Queue::new("q").per_key(0), "per_key"),
            (
                Queue::new("q").concurrency(MAX_CONCURRENCY + 1),
                "concurrency",
            ),
            (Queue::new("q").rate(0, day), "rate.starts"),
            (
                Queue::new("q").rate(MAX_RATE_STARTS + 1, day),
                "rate.starts",
            ),
            (Queue::new("q").rate(1, Duration::ZERO), "rate.period"),
            (
                Queue::new("q").rate(1, Duration::from_micros(999)),
                "rate.period",
            ),
            (
                Queue::new("q").rate(1, day + Duration::from_millis(1)),
                "rate.period",
            ),
        ];
        for (queue, field) in cases {
            let err = queue.validate().unwrap_err();
            assert_eq!(err.field(), field, "{queue}: {err}");
        }
    }

    #[test]
    fn the_limits_at_their_bounds_are_accepted() {
        let queue = Queue::named("reports.v2-eu")
            .concurrency(MAX_CONCURRENCY)
            .per_process(1)
            .per_key(1)
            .rate(MAX_RATE_STARTS, MAX_RATE_PERIOD);
        assert_eq!(queue.validate(), Ok(()));
        assert!(Queue::new("q").rate(1, MIN_RATE_PERIOD).validate().is_ok());
        assert_eq!(
            queue.to_string(),
            "`reports.v2-eu` (concurrency 1000000, 1 per process, 1 per key, 100000 per 86400s)"
        );
    }

    #[test]
    fn priorities_outside_zero_to_nine_are_refused() {
        for bad in [-1, 10, 255, 256, i64::MIN] {
            assert_eq!(
                Priority::new(bad),
                Err(QueueError::PriorityOutOfRange { priority: bad })
            );
        }
        assert_eq!(Priority::new(0), Ok(Priority::MIN));
        assert_eq!(Priority::new(9), Ok(Priority::MAX));
        assert_eq!(Priority::default(), Priority::MIN);
    }

    #[test]
    fn an_unknown_queue_suggests_the_closest() {
        let err = QueueError::Unknown {
            name: "payment".into(),
            suggestion: Some("payments".into()),
        };
        assert_eq!(
            err.to_string(),
            "unknown queue `payment`; did you mean `payments`?"
        );
    }
}
