//! Testing workflows (TM-2): a [`TestRuntime`] on a [`ManualClock`], so that a 48-hour delay
//! is tested in milliseconds, on any store.
//!
//! ```
//! # use std::time::Duration;
//! # use workflow_runtime::Runtime;
//! # use workflow_runtime::testing::TestRuntime;
//! # async fn demo(builder: workflow_runtime::RuntimeBuilder) -> Result<(), Box<dyn std::error::Error>> {
//! // Register your workflows as usual, then build on a manual clock.
//! let test = TestRuntime::build(builder)?;
//! // start instances with `test.runtime()`, then move time: every timer due meanwhile
//! // fires, in due order, and the resulting work runs before `advance` returns.
//! test.advance(Duration::from_secs(48 * 3600)).await?;
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, ClockError, ManualClock};
use crate::runtime::{BuildError, Runtime, RuntimeBuilder, TimerFiring};
use crate::store::{Micros, StoreError};

/// A runtime on a [`ManualClock`], without background work: time moves only through
/// [`TestRuntime::advance`] and [`TestRuntime::set`], which fire the due timers
/// and deliver the due debounced sends (RT-35) deterministically (TM-2); the stimuli kept in
/// the inbox are delivered by
/// [`Runtime::deliver_inbox`] (or [`Runtime::start_workers`]) and interrupted instances run
/// by [`Runtime::recover`]. Derefs to the [`Runtime`].
///
/// # Examples
///
/// A 48-hour delay, tested in milliseconds:
///
/// ```
/// use std::time::Duration;
///
/// use workflow_runtime::testing::TestRuntime;
/// use workflow_runtime::{Runtime, TaskContext, WorkflowStatus, workflow};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Follow {
///     done: bool,
/// }
///
/// async fn follow_up(ctx: &mut TaskContext<Follow>) {
///     ctx.data_mut().done = true;
/// }
///
/// workflow! {
///     workflow FollowUp(Follow) = sequence [
///         after(Duration::from_secs(48 * 3600)),
///         task(follow_up),
///     ];
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let test = TestRuntime::build(Runtime::builder().register::<FollowUp>())?;
/// let id = test.start::<FollowUp>(Follow::default()).await?.instance_id;
///
/// test.advance(Duration::from_secs(47 * 3600)).await?;
/// let state = test.get_state(&id).await?.ok_or("no instance")?;
/// assert_eq!(state.status(), WorkflowStatus::Suspended);
///
/// test.advance(Duration::from_secs(3600)).await?; // the delay fires
/// let state = test.get_state(&id).await?.ok_or("no instance")?;
/// assert_eq!(state.status(), WorkflowStatus::Finished);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TestRuntime {
    runtime: Runtime,
    clock: ManualClock,
}

/// Why [`TestRuntime::advance`] or [`TestRuntime::set`] failed.
#[derive(Debug, thiserror::Error)]
pub enum AdvanceError {
    /// The target is before the clock's time.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// The store failed while claiming or reading timers.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TestRuntime {
    /// Builds `builder` on a manual clock at [`ManualClock::DEFAULT_START`].
    ///
    /// # Errors
    ///
    /// The [`BuildError`] of [`RuntimeBuilder::build`].
    pub fn build(builder: RuntimeBuilder) -> Result<Self, BuildError> {
        Self::build_at(builder, ManualClock::new(ManualClock::DEFAULT_START))
    }

    /// Builds `builder` on the given manual clock (which it replaces any clock of).
    ///
    /// # Errors
    ///
    /// The [`BuildError`] of [`RuntimeBuilder::build`].
    pub fn build_at(builder: RuntimeBuilder, clock: ManualClock) -> Result<Self, BuildError> {
        let runtime = builder
            .clock(Arc::new(clock.clone()))
            .without_background()
            .build()?;
        Ok(Self { runtime, clock })
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The manual clock.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Now, on the manual clock (µs since the epoch).
    pub fn now(&self) -> Micros {
        self.clock.now()
    }

    /// Moves the clock forward by `by`, stepping through the due timers (TM-2).
    ///
    /// # Errors
    ///
    /// [`AdvanceError::Store`] when the store fails while claiming or reading timers.
    pub async fn advance(&self, by: Duration) -> Result<TimerFiring, AdvanceError> {
        let by = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        self.set(self.clock.now().saturating_add(by)).await
    }

    /// Moves the clock to `target` (TM-2): the clock steps to each timer due by then, in due
    /// order (timers created meanwhile included), fires it and runs the resulting work before
    /// the next; it ends at `target` with nothing due. An earlier target is refused.
    ///
    /// # Errors
    ///
    /// [`AdvanceError::Clock`] for a target before the clock's time, [`AdvanceError::Store`] when
    /// the store fails while claiming or reading timers.
    pub async fn set(&self, target: Micros) -> Result<TimerFiring, AdvanceError> {
        let now = self.clock.now();
        if target < now {
            return Err(ClockError {
                now,
                requested: target,
            }
            .into());
        }
        self.runtime.schedule_triggers().await?;
        let mut report = TimerFiring::default();
        loop {
            let now = self.clock.now();
            let store = self.runtime.store();
            // RT-35: a debounced send falls due like a timer.
            let next = match (
                store.earliest_timer(now).await?,
                store.earliest_debounce(now).await?,
            ) {
                (Some(timer), Some(debounce)) => Some(timer.min(debounce)),
                (timer, debounce) => timer.or(debounce),
            };
            let Some(due) = next.filter(|due| *due <= target) else {
                break;
            };
            self.clock.set(due.max(self.clock.now()))?;
            let fired = self.runtime.fire_due_timers().await?;
            let progressed =
                !fired.fired.is_empty() || !fired.skipped.is_empty() || !fired.debounced.is_empty();
            report.fired.extend(fired.fired);
            report.failed.extend(fired.failed);
            report.skipped.extend(fired.skipped);
            report.debounced.extend(fired.debounced);
            if !progressed {
                // Only failures (claimed, so not offered again until the claim expires).
                break;
            }
        }
        self.clock.set(target)?;
        Ok(report)
    }
}

impl std::ops::Deref for TestRuntime {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}
