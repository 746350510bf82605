//! Retention (ST-30, ST-31): what the background purge removes, and when. Nothing grows
//! without bound: receipts, idempotency records and dead letters are removed after their
//! ages; finished instances only when asked for ([`Retention::finished_after`]), since their
//! data belongs to the user. One process of a store purges at a time, under a named lease.

use std::time::Duration;

/// What the background retention removes, and how often it runs (ST-30).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workflow_runtime::{Retention, Runtime};
///
/// let builder = Runtime::builder().retention(
///     Retention::default().finished_after(Duration::from_secs(30 * 24 * 3600)),
/// );
/// # drop(builder);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// `Finished` and `Cancelled` instances older than this are purged with their rows
    /// (default: never).
    pub finished: Option<Duration>,
    /// Receipts older than this are removed (default 8 days). It must outlast the dead
    /// letters plus the longest queue TTL, so no copy of a consumed stimulus can be
    /// delivered again ([`BuildError::ReceiptRetentionTooShort`](crate::BuildError)).
    pub receipts: Duration,
    /// Idempotency records older than this are removed (default 8 days).
    pub idempotency_records: Duration,
    /// Dead letters older than this are removed (default 7 days).
    pub dead_letters: Duration,
    /// How often the purge runs (default hourly); `None` turns it off.
    pub every: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            finished: None,
            receipts: Duration::from_secs(8 * DAY),
            idempotency_records: Duration::from_secs(8 * DAY),
            dead_letters: Duration::from_secs(7 * DAY),
            every: Some(Duration::from_secs(3600)),
        }
    }
}

impl Retention {
    /// No background purge.
    pub fn off() -> Self {
        Self {
            every: None,
            ..Self::default()
        }
    }

    /// Also purges finished and cancelled instances older than `age`.
    #[must_use]
    pub fn finished_after(mut self, age: Duration) -> Self {
        self.finished = Some(age);
        self
    }
}

/// What one retention pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Finished and cancelled instances.
    pub instances: u64,
    /// Receipts.
    pub receipts: u64,
    /// Idempotency records.
    pub idempotency_records: u64,
    /// Dead letters.
    pub dead_letters: u64,
}
