//! Workflow time (TM-1, TM-2): the [`Clock`] every timestamp, due time and timer wait comes
//! from, the [`SystemClock`] default and the [`ManualClock`] for tests.
//!
//! Leases are not workflow time: they keep running on the wall clock whatever the clock is
//! (TM-1), so advancing a manual clock never expires one.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::base::{BoxFuture, Micros};

/// One source of workflow time (TM-1): "now" as UTC microseconds since the Unix epoch, and
/// "wait until an instant".
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now, in UTC microseconds since the Unix epoch (ST-23).
    fn now(&self) -> Micros;

    /// Completes once [`Clock::now`] is at or after `at`.
    fn sleep_until(&self, at: Micros) -> BoxFuture<'static, ()>;
}

/// The wall clock, the default (TM-1). Waits are tokio timers (millisecond precision).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Micros {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    fn sleep_until(&self, at: Micros) -> BoxFuture<'static, ()> {
        let now = self.now();
        let wait = Duration::from_micros(u64::try_from(at.saturating_sub(now)).unwrap_or(0));
        Box::pin(tokio::time::sleep(wait))
    }
}

/// [`ManualClock::set`] was asked to move the clock backwards (TM-2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the manual clock cannot move backwards from {now} µs to {requested} µs")]
pub struct ClockError {
    /// The clock's time.
    pub now: Micros,
    /// The earlier instant asked for.
    pub requested: Micros,
}

/// A clock for tests (TM-2): it starts at a given instant and moves only through
/// [`ManualClock::advance`] or [`ManualClock::set`], never backwards. Cheap to clone; clones
/// share the time. Waiters ([`Clock::sleep_until`]) wake when it reaches their instant.
///
/// Moving the clock alone lets a runtime's timer driver fire what fell due, concurrently; for
/// deterministic steps through every due timer use [`crate::testing::TestRuntime::advance`].
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<Micros>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &*self.now.borrow())
            .finish()
    }
}

impl ManualClock {
    /// 2026-01-01T00:00:00Z, the default start of [`crate::testing::TestRuntime`].
    pub const DEFAULT_START: Micros = 1_767_225_600_000_000;

    /// A clock at `start` (UTC µs since the epoch).
    pub fn new(start: Micros) -> Self {
        let (now, _) = watch::channel(start);
        Self { now: Arc::new(now) }
    }

    /// A clock at `start`, given as a [`SystemTime`].
    pub fn at(start: SystemTime) -> Self {
        Self::new(
            start
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        )
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.now.send_modify(|now| *now = now.saturating_add(by));
    }

    /// Moves the clock to `at`; an earlier instant is refused (TM-2).
    ///
    /// # Errors
    ///
    /// A [`ClockError`] when `at` is before the clock's time; the clock does not move.
    pub fn set(&self, at: Micros) -> Result<(), ClockError> {
        let mut result = Ok(());
        self.now.send_if_modified(|now| {
            if at < *now {
                result = Err(ClockError {
                    now: *now,
                    requested: at,
                });
                false
            } else {
                let changed = at != *now;
                *now = at;
                changed
            }
        });
        result
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Micros) -> BoxFuture<'static, ()> {
        let mut receiver = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any clone of the clock; once gone, never wakes.
            if receiver.wait_for(|now| *now >= at).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manual_clock_moves_forward_only() {
        let clock = ManualClock::new(1_000);
        clock.advance(Duration::from_millis(2));
        assert_eq!(clock.now(), 3_000);
        assert!(clock.set(5_000).is_ok());
        assert_eq!(
            clock.set(4_000),
            Err(ClockError {
                now: 5_000,
                requested: 4_000
            })
        );
    }

    #[tokio::test]
    async fn a_manual_sleep_wakes_when_the_clock_reaches_it() {
        let clock = ManualClock::new(0);
        let sleep = clock.sleep_until(10);
        let handle = tokio::spawn(sleep);
        tokio::task::yield_now().await;
        assert!(!handle.is_finished());
        clock.advance(Duration::from_micros(10));
        assert!(handle.await.is_ok());
    }
}
