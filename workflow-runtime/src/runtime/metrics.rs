//! The runtime's own metrics (ENG-60): counters and fixed-bucket histograms kept in atomics,
//! one set per registered definition, built once with the runtime. Recording is a relaxed
//! atomic add: no lock and no allocation on a run's way. [`RuntimeMetrics`] is what a reader
//! takes of them, and writes them in the Prometheus text format.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::observer::{AttemptEnded, AttemptObserver};
use crate::status::WorkflowStatus;
use crate::store::DeadLetterReason;

/// The upper bounds of every histogram's buckets, in µs (the last bucket, `+Inf`, is
/// implicit): from 100 µs to one minute.
const BOUNDS_MICROS: [u64; 12] = [
    100, 500, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000, 10_000_000,
    60_000_000,
];

/// The statuses a run can leave an instance in, in the order of their counters.
const STATUSES: [WorkflowStatus; 5] = [
    WorkflowStatus::Running,
    WorkflowStatus::Suspended,
    WorkflowStatus::Faulted,
    WorkflowStatus::Finished,
    WorkflowStatus::Cancelled,
];

/// The store calls of the run path whose latency is kept (ENG-60).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreCall {
    /// Taking an instance's lease (with its record, where the store returns it).
    Claim,
    /// Loading an instance's record.
    Load,
    /// A run's commit.
    Commit,
}

impl StoreCall {
    const ALL: [StoreCall; 3] = [StoreCall::Claim, StoreCall::Load, StoreCall::Commit];

    fn as_str(self) -> &'static str {
        match self {
            StoreCall::Claim => "claim",
            StoreCall::Load => "load",
            StoreCall::Commit => "commit",
        }
    }
}

/// A histogram over [`BOUNDS_MICROS`]: a count per bucket (not cumulative) and the sum.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BOUNDS_MICROS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, value: Duration) {
        let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX);
        let index = BOUNDS_MICROS
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(BOUNDS_MICROS.len());
        if let Some(bucket) = self.buckets.get(index) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(BOUNDS_MICROS.len());
        for (bound, count) in BOUNDS_MICROS.iter().zip(&self.buckets) {
            cumulative += count.load(Ordering::Relaxed);
            buckets.push((Duration::from_micros(*bound), cumulative));
        }
        let over = self
            .buckets
            .last()
            .map_or(0, |bucket| bucket.load(Ordering::Relaxed));
        let count = cumulative + over;
        HistogramSnapshot {
            buckets,
            count,
            sum: Duration::from_micros(self.sum_micros.load(Ordering::Relaxed)),
        }
    }
}

/// The counters of one definition.
#[derive(Debug, Default)]
pub(crate) struct DefinitionCounters {
    /// Committed runs by the status they left, in [`STATUSES`] order.
    transitions: [AtomicU64; STATUSES.len()],
    attempts: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    task_durations: Histogram,
    /// The same, in the application's recorder.
    #[cfg(feature = "metrics")]
    facade: facade::DefinitionHandles,
}

impl DefinitionCounters {
    fn new(#[cfg_attr(not(feature = "metrics"), allow(unused_variables))] name: &str) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            facade: facade::DefinitionHandles::new(name),
            ..Self::default()
        }
    }

    /// A run committed, leaving the instance in `status`.
    pub(crate) fn transition(&self, status: WorkflowStatus) {
        let index = STATUSES.iter().position(|s| *s == status).unwrap_or(0);
        if let Some(counter) = self.transitions.get(index) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        self.facade.transition(index);
    }
}

impl AttemptObserver for DefinitionCounters {
    fn attempted(&self, took: Duration, ended: AttemptEnded) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.task_durations.observe(took);
        match ended {
            AttemptEnded::Completed | AttemptEnded::Cancelled => {}
            AttemptEnded::Retrying => {
                self.retries.fetch_add(1, Ordering::Relaxed);
            }
            AttemptEnded::Failed => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        #[cfg(feature = "metrics")]
        self.facade.attempted(took, ended);
    }
}

/// The runtime's metrics (see the module docs): owned by the run path, which records runs,
/// task attempts, lease losses and its store calls; the timers record their lateness.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// Whether anything is counted ([`RuntimeBuilder::metrics`](crate::RuntimeBuilder::metrics)).
    enabled: bool,
    /// One set per registered definition, fixed at build: read without a lock.
    definitions: HashMap<String, Arc<DefinitionCounters>>,
    timer_lateness: Histogram,
    lease_losses: AtomicU64,
    store_calls: [Histogram; StoreCall::ALL.len()],
    stimuli_sent: AtomicU64,
    stimuli_delivered: AtomicU64,
    stimuli_to_inbox: AtomicU64,
    /// By reason, in [`DEAD_LETTER_REASONS`] order.
    stimuli_dead_lettered: [AtomicU64; DEAD_LETTER_REASONS.len()],
    /// The same, in the application's recorder.
    #[cfg(feature = "metrics")]
    facade: facade::RuntimeHandles,
}

/// Why a stimulus became a dead letter, in the order of its counters (the store's
/// [`DeadLetterReason`](crate::store::DeadLetterReason) names).
const DEAD_LETTER_REASONS: [DeadLetterReason; 3] = [
    DeadLetterReason::Expired,
    DeadLetterReason::Failed,
    DeadLetterReason::Rejected,
];

impl Metrics {
    /// The metrics of a runtime running `definitions`; with `enabled` false, nothing is
    /// counted (every value stays 0).
    pub(crate) fn new<'a>(
        definitions: impl IntoIterator<Item = &'a String>,
        enabled: bool,
    ) -> Self {
        Self {
            enabled,
            definitions: definitions
                .into_iter()
                .map(|name| (name.clone(), Arc::new(DefinitionCounters::new(name))))
                .collect(),
            timer_lateness: Histogram::default(),
            lease_losses: AtomicU64::new(0),
            store_calls: Default::default(),
            stimuli_sent: AtomicU64::new(0),
            stimuli_delivered: AtomicU64::new(0),
            stimuli_to_inbox: AtomicU64::new(0),
            stimuli_dead_lettered: Default::default(),
            #[cfg(feature = "metrics")]
            facade: facade::RuntimeHandles::new(),
        }
    }

    /// The counters of `definition`, `None` for one this runtime does not run (or when
    /// nothing is counted).
    pub(crate) fn definition(&self, definition: &str) -> Option<&Arc<DefinitionCounters>> {
        if !self.enabled {
            return None;
        }
        self.definitions.get(definition)
    }

    /// A timer fired `late` after its due time.
    pub(crate) fn timer_fired(&self, late: Duration) {
        if self.enabled {
            self.timer_lateness.observe(late);
            #[cfg(feature = "metrics")]
            self.facade.timer_lateness.record(late.as_secs_f64());
        }
    }

    /// A run lost its instance's lease.
    pub(crate) fn lease_lost(&self) {
        if self.enabled {
            self.lease_losses.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            self.facade.lease_losses.increment(1);
        }
    }

    /// When a timed store call begins: `None` when nothing is counted (the clock is not
    /// read).
    pub(crate) fn begin(&self) -> Option<Instant> {
        self.enabled.then(Instant::now)
    }

    /// A send was routed (not a duplicate of an earlier one): `delivered` instances started
    /// or resumed by it, `to_inbox` items written to the inbox for it.
    pub(crate) fn sent(&self, delivered: usize, to_inbox: usize) {
        if !self.enabled {
            return;
        }
        self.stimuli_sent.fetch_add(1, Ordering::Relaxed);
        self.delivered(delivered);
        self.stimuli_to_inbox
            .fetch_add(to_u64(to_inbox), Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        {
            self.facade.stimuli_sent.increment(1);
            self.facade.stimuli_to_inbox.increment(to_u64(to_inbox));
        }
    }

    /// The inbox worker delivered `n` items.
    pub(crate) fn delivered(&self, n: usize) {
        if !self.enabled {
            return;
        }
        self.stimuli_delivered
            .fetch_add(to_u64(n), Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.facade.stimuli_delivered.increment(to_u64(n));
    }

    /// `n` stimuli became dead letters for `reason`.
    pub(crate) fn dead_lettered(&self, reason: DeadLetterReason, n: u64) {
        if !self.enabled {
            return;
        }
        let index = DEAD_LETTER_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        if let Some(counter) = self.stimuli_dead_lettered.get(index) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        if let Some(counter) = self.facade.stimuli_dead_lettered.get(index) {
            counter.increment(n);
        }
    }

    /// A store call of the run path that [`Metrics::begin`] timed ended.
    pub(crate) fn store_call_since(&self, call: StoreCall, began: Option<Instant>) {
        if let Some(began) = began {
            self.store_call(call, began.elapsed());
        }
    }

    /// A store call of the run path took `took`.
    fn store_call(&self, call: StoreCall, took: Duration) {
        let index = StoreCall::ALL.iter().position(|c| *c == call).unwrap_or(0);
        if let Some(histogram) = self.store_calls.get(index) {
            histogram.observe(took);
        }
        #[cfg(feature = "metrics")]
        if let Some(histogram) = self.facade.store_calls.get(index) {
            histogram.record(took.as_secs_f64());
        }
    }

    /// What the counters hold now.
    pub(crate) fn snapshot(&self) -> RuntimeMetrics {
        let mut definitions: Vec<DefinitionMetrics> = self
            .definitions
            .iter()
            .map(|(name, counters)| DefinitionMetrics {
                definition: name.clone(),
                transitions: STATUSES
                    .iter()
                    .zip(&counters.transitions)
                    .map(|(status, n)| (*status, n.load(Ordering::Relaxed)))
                    .collect(),
                task_attempts: counters.attempts.load(Ordering::Relaxed),
                task_retries: counters.retries.load(Ordering::Relaxed),
                task_failures: counters.failures.load(Ordering::Relaxed),
                task_durations: counters.task_durations.snapshot(),
            })
            .collect();
        definitions.sort_by(|a, b| a.definition.cmp(&b.definition));
        RuntimeMetrics {
            definitions,
            timer_lateness: self.timer_lateness.snapshot(),
            lease_losses: self.lease_losses.load(Ordering::Relaxed),
            store_calls: StoreCall::ALL
                .iter()
                .zip(&self.store_calls)
                .map(|(call, histogram)| (call.as_str(), histogram.snapshot()))
                .collect(),
            stimuli: StimulusMetrics {
                sent: self.stimuli_sent.load(Ordering::Relaxed),
                delivered: self.stimuli_delivered.load(Ordering::Relaxed),
                to_inbox: self.stimuli_to_inbox.load(Ordering::Relaxed),
                dead_lettered: DEAD_LETTER_REASONS
                    .iter()
                    .zip(&self.stimuli_dead_lettered)
                    .map(|(reason, n)| (reason.as_str(), n.load(Ordering::Relaxed)))
                    .collect(),
            },
        }
    }
}

/// What a runtime counted since it was built (ENG-60), from
/// [`Runtime::metrics`](crate::Runtime::metrics). Labelled by definition at most: no instance
/// id, so the number of series is bounded by the registered definitions.
///
/// # Examples
///
/// ```
/// let runtime = workflow_runtime::Runtime::builder().build()?;
/// let metrics = runtime.metrics();
/// assert_eq!(metrics.lease_losses, 0);
/// assert!(metrics.to_prometheus().contains("workflow_lease_losses_total 0"));
/// # Ok::<(), workflow_runtime::BuildError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RuntimeMetrics {
    /// Each registered definition's counters, by name.
    pub definitions: Vec<DefinitionMetrics>,
    /// How late timers fired after their due time, by this runtime's timer driver or
    /// `fire_due_timers`.
    pub timer_lateness: HistogramSnapshot,
    /// Runs that lost their instance's lease (ENG-36).
    pub lease_losses: u64,
    /// The latency of the run path's store calls: `claim` (the lease), `load` (the
    /// instance's record, when the claim did not return it) and `commit`.
    pub store_calls: Vec<(&'static str, HistogramSnapshot)>,
    /// What happened to the stimuli this runtime sent and its inbox worker delivered.
    pub stimuli: StimulusMetrics,
}

/// The stimuli counters of [`RuntimeMetrics`]: runtime-wide (a stimulus's name is the
/// sender's, so it is no label).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StimulusMetrics {
    /// Sends routed by [`Runtime::send`](crate::Runtime::send) (a duplicate of an earlier
    /// send with the same idempotency key is not counted again).
    pub sent: u64,
    /// Deliveries to instances: each instance a send started or resumed, and each inbox item
    /// the inbox worker delivered.
    pub delivered: u64,
    /// Items a send wrote to the inbox: for a busy, faulted or paused instance, or for a
    /// stimulus nothing waited for yet.
    pub to_inbox: u64,
    /// Stimuli that became dead letters, by reason (`expired`, `failed`, `rejected`).
    pub dead_lettered: Vec<(&'static str, u64)>,
}

impl StimulusMetrics {
    /// The dead letters for `reason` (`expired`, `failed` or `rejected`).
    pub fn dead_lettered_for(&self, reason: &str) -> u64 {
        self.dead_lettered
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

/// One definition's counters in [`RuntimeMetrics`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DefinitionMetrics {
    /// The definition's name.
    pub definition: String,
    /// Runs committed by this runtime (each moves an instance from one committed state to the
    /// next), by the status the run left the instance in.
    pub transitions: Vec<(WorkflowStatus, u64)>,
    /// Task attempts that ran (ACT-11).
    pub task_attempts: u64,
    /// Attempts that failed and wait for another one (FLT-2).
    pub task_retries: u64,
    /// Attempts that failed for good: the task faulted.
    pub task_failures: u64,
    /// How long task attempts took (wall time).
    pub task_durations: HistogramSnapshot,
}

impl DefinitionMetrics {
    /// The runs that left an instance in `status`.
    pub fn transitions_to(&self, status: WorkflowStatus) -> u64 {
        self.transitions
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    }
}

/// A histogram's buckets at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistogramSnapshot {
    /// `(upper bound, observations at or under it)`, cumulative, in increasing bounds; the
    /// `+Inf` bucket is [`HistogramSnapshot::count`].
    pub buckets: Vec<(Duration, u64)>,
    /// Every observation.
    pub count: u64,
    /// Their sum (to the µs).
    pub sum: Duration,
}

impl RuntimeMetrics {
    /// The counters of `definition`.
    pub fn definition(&self, definition: &str) -> Option<&DefinitionMetrics> {
        self.definitions.iter().find(|d| d.definition == definition)
    }

    /// The metrics in the Prometheus text format (version 0.0.4), every name prefixed
    /// `workflow_`:
    ///
    /// * `workflow_transitions_total{definition, outcome}`: committed runs by the status
    ///   they left;
    /// * `workflow_task_attempts_total{definition}`, `workflow_task_retries_total{definition}`,
    ///   `workflow_task_failures_total{definition}`;
    /// * `workflow_task_duration_seconds{definition}` (histogram);
    /// * `workflow_timer_lateness_seconds` (histogram);
    /// * `workflow_lease_losses_total`;
    /// * `workflow_store_call_seconds{call}` (histogram);
    /// * `workflow_stimuli_sent_total`, `workflow_stimuli_delivered_total`,
    ///   `workflow_stimuli_to_inbox_total`, `workflow_stimuli_dead_lettered_total{reason}`.
    pub fn to_prometheus(&self) -> String {
        use series::{
            LEASE_LOSSES, STIMULI_DEAD_LETTERED, STIMULI_DELIVERED, STIMULI_SENT, STIMULI_TO_INBOX,
            STORE_CALLS, TASK_ATTEMPTS, TASK_DURATION, TASK_FAILURES, TASK_RETRIES, TIMER_LATENESS,
            TRANSITIONS,
        };
        let mut out = String::new();
        header(&mut out, &TRANSITIONS);
        for d in &self.definitions {
            for (status, n) in &d.transitions {
                let _ = writeln!(
                    out,
                    "{}{{definition=\"{}\",outcome=\"{}\"}} {n}",
                    TRANSITIONS.name,
                    escape(&d.definition),
                    status.as_str()
                );
            }
        }
        for (series, value) in [
            (
                &TASK_ATTEMPTS,
                (|d: &DefinitionMetrics| d.task_attempts) as fn(&DefinitionMetrics) -> u64,
            ),
            (&TASK_RETRIES, |d| d.task_retries),
            (&TASK_FAILURES, |d| d.task_failures),
        ] {
            header(&mut out, series);
            for d in &self.definitions {
                let _ = writeln!(
                    out,
                    "{}{{definition=\"{}\"}} {}",
                    series.name,
                    escape(&d.definition),
                    value(d)
                );
            }
        }
        header(&mut out, &TASK_DURATION);
        for d in &self.definitions {
            let label = format!("definition=\"{}\"", escape(&d.definition));
            histogram(&mut out, TASK_DURATION.name, &label, &d.task_durations);
        }
        header(&mut out, &TIMER_LATENESS);
        histogram(&mut out, TIMER_LATENESS.name, "", &self.timer_lateness);
        header(&mut out, &LEASE_LOSSES);
        let _ = writeln!(out, "{} {}", LEASE_LOSSES.name, self.lease_losses);
        header(&mut out, &STORE_CALLS);
        for (call, snapshot) in &self.store_calls {
            histogram(
                &mut out,
                STORE_CALLS.name,
                &format!("call=\"{call}\""),
                snapshot,
            );
        }
        for (series, value) in [
            (&STIMULI_SENT, self.stimuli.sent),
            (&STIMULI_DELIVERED, self.stimuli.delivered),
            (&STIMULI_TO_INBOX, self.stimuli.to_inbox),
        ] {
            header(&mut out, series);
            let _ = writeln!(out, "{} {value}", series.name);
        }
        header(&mut out, &STIMULI_DEAD_LETTERED);
        for (reason, n) in &self.stimuli.dead_lettered {
            let _ = writeln!(
                out,
                "{}{{reason=\"{reason}\"}} {n}",
                STIMULI_DEAD_LETTERED.name
            );
        }
        out
    }
}

/// The series the runtime writes: each name, kind and help text written once, for the text
/// format and for the `metrics` facade.
mod series {
    /// The kind of a series, as the text format's `# TYPE` line names it.
    #[derive(Debug, Clone, Copy)]
    pub(super) enum Kind {
        Counter,
        Histogram,
    }

    impl Kind {
        pub(super) fn as_str(self) -> &'static str {
            match self {
                Kind::Counter => "counter",
                Kind::Histogram => "histogram",
            }
        }
    }

    /// One series: its name, its kind and its help text.
    #[derive(Debug)]
    pub(super) struct Series {
        pub(super) name: &'static str,
        pub(super) kind: Kind,
        pub(super) help: &'static str,
    }

    pub(super) const TRANSITIONS: Series = Series {
        name: "workflow_transitions_total",
        kind: Kind::Counter,
        help: "Runs committed by this runtime, by the status they left the instance in.",
    };
    pub(super) const TASK_ATTEMPTS: Series = Series {
        name: "workflow_task_attempts_total",
        kind: Kind::Counter,
        help: "Task attempts run.",
    };
    pub(super) const TASK_RETRIES: Series = Series {
        name: "workflow_task_retries_total",
        kind: Kind::Counter,
        help: "Task attempts that failed and wait for a retry.",
    };
    pub(super) const TASK_FAILURES: Series = Series {
        name: "workflow_task_failures_total",
        kind: Kind::Counter,
        help: "Task attempts that failed for good.",
    };
    pub(super) const TASK_DURATION: Series = Series {
        name: "workflow_task_duration_seconds",
        kind: Kind::Histogram,
        help: "How long task attempts took.",
    };
    pub(super) const TIMER_LATENESS: Series = Series {
        name: "workflow_timer_lateness_seconds",
        kind: Kind::Histogram,
        help: "How late timers fired after their due time.",
    };
    pub(super) const LEASE_LOSSES: Series = Series {
        name: "workflow_lease_losses_total",
        kind: Kind::Counter,
        help: "Runs that lost their instance's lease.",
    };
    pub(super) const STORE_CALLS: Series = Series {
        name: "workflow_store_call_seconds",
        kind: Kind::Histogram,
        help: "The latency of the run path's store calls.",
    };
    pub(super) const STIMULI_SENT: Series = Series {
        name: "workflow_stimuli_sent_total",
        kind: Kind::Counter,
        help: "Sends routed by this runtime.",
    };
    pub(super) const STIMULI_DELIVERED: Series = Series {
        name: "workflow_stimuli_delivered_total",
        kind: Kind::Counter,
        help: "Stimuli delivered to instances, by sends and by the inbox worker.",
    };
    pub(super) const STIMULI_TO_INBOX: Series = Series {
        name: "workflow_stimuli_to_inbox_total",
        kind: Kind::Counter,
        help: "Stimuli a send wrote to the inbox.",
    };
    pub(super) const STIMULI_DEAD_LETTERED: Series = Series {
        name: "workflow_stimuli_dead_lettered_total",
        kind: Kind::Counter,
        help: "Stimuli that became dead letters, by reason.",
    };

    /// Every series, in the order the text format writes them.
    #[cfg(feature = "metrics")]
    pub(super) const ALL: [&Series; 12] = [
        &TRANSITIONS,
        &TASK_ATTEMPTS,
        &TASK_RETRIES,
        &TASK_FAILURES,
        &TASK_DURATION,
        &TIMER_LATENESS,
        &LEASE_LOSSES,
        &STORE_CALLS,
        &STIMULI_SENT,
        &STIMULI_DELIVERED,
        &STIMULI_TO_INBOX,
        &STIMULI_DEAD_LETTERED,
    ];
}

/// With the `metrics` feature: the same series as [`RuntimeMetrics::to_prometheus`] writes,
/// registered once (when the runtime is built) in the recorder the application installed then,
/// and updated beside the atomics.
#[cfg(feature = "metrics")]
mod facade {
    use std::time::Duration;

    use metrics::{Counter, Histogram, counter, describe_counter, describe_histogram, histogram};

    use crate::engine::observer::AttemptEnded;
    use crate::runtime::metrics::{DEAD_LETTER_REASONS, STATUSES, StoreCall, series};

    /// One definition's series.
    #[derive(Debug)]
    pub(super) struct DefinitionHandles {
        transitions: Vec<Counter>,
        attempts: Counter,
        retries: Counter,
        failures: Counter,
        durations: Histogram,
    }

    impl Default for DefinitionHandles {
        fn default() -> Self {
            Self {
                transitions: Vec::new(),
                attempts: Counter::noop(),
                retries: Counter::noop(),
                failures: Counter::noop(),
                durations: Histogram::noop(),
            }
        }
    }

    impl DefinitionHandles {
        pub(super) fn new(name: &str) -> Self {
            let definition = name.to_owned();
            Self {
                transitions: STATUSES
                    .iter()
                    .map(|status| {
                        counter!(
                            series::TRANSITIONS.name,
                            "definition" => definition.clone(),
                            "outcome" => status.as_str()
                        )
                    })
                    .collect(),
                attempts: counter!(series::TASK_ATTEMPTS.name, "definition" => definition.clone()),
                retries: counter!(series::TASK_RETRIES.name, "definition" => definition.clone()),
                failures: counter!(series::TASK_FAILURES.name, "definition" => definition.clone()),
                durations: histogram!(series::TASK_DURATION.name, "definition" => definition),
            }
        }

        pub(super) fn transition(&self, index: usize) {
            if let Some(counter) = self.transitions.get(index) {
                counter.increment(1);
            }
        }

        pub(super) fn attempted(&self, took: Duration, ended: AttemptEnded) {
            self.attempts.increment(1);
            self.durations.record(took.as_secs_f64());
            match ended {
                AttemptEnded::Completed | AttemptEnded::Cancelled => {}
                AttemptEnded::Retrying => self.retries.increment(1),
                AttemptEnded::Failed => self.failures.increment(1),
            }
        }
    }

    /// The runtime-wide series.
    #[derive(Debug)]
    pub(super) struct RuntimeHandles {
        pub(super) timer_lateness: Histogram,
        pub(super) lease_losses: Counter,
        pub(super) store_calls: Vec<Histogram>,
        pub(super) stimuli_sent: Counter,
        pub(super) stimuli_delivered: Counter,
        pub(super) stimuli_to_inbox: Counter,
        pub(super) stimuli_dead_lettered: Vec<Counter>,
    }

    impl RuntimeHandles {
        /// Describes every series to the recorder (its help text) and registers the
        /// runtime-wide ones.
        pub(super) fn new() -> Self {
            for series in series::ALL {
                match series.kind {
                    series::Kind::Counter => describe_counter!(series.name, series.help),
                    series::Kind::Histogram => describe_histogram!(series.name, series.help),
                }
            }
            Self {
                timer_lateness: histogram!(series::TIMER_LATENESS.name),
                lease_losses: counter!(series::LEASE_LOSSES.name),
                store_calls: StoreCall::ALL
                    .iter()
                    .map(|call| histogram!(series::STORE_CALLS.name, "call" => call.as_str()))
                    .collect(),
                stimuli_sent: counter!(series::STIMULI_SENT.name),
                stimuli_delivered: counter!(series::STIMULI_DELIVERED.name),
                stimuli_to_inbox: counter!(series::STIMULI_TO_INBOX.name),
                stimuli_dead_lettered: DEAD_LETTER_REASONS
                    .iter()
                    .map(|reason| {
                        counter!(series::STIMULI_DEAD_LETTERED.name, "reason" => reason.as_str())
                    })
                    .collect(),
            }
        }
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn header(out: &mut String, series: &series::Series) {
    let name = series.name;
    let _ = writeln!(out, "# HELP {name} {}", series.help);
    let _ = writeln!(out, "# TYPE {name} {}", series.kind.as_str());
}

/// A histogram's `_bucket`, `_sum` and `_count` lines, with `labels` (may be empty).
fn histogram(out: &mut String, name: &str, labels: &str, snapshot: &HistogramSnapshot) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, count) in &snapshot.buckets {
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{}\"}} {count}",
            bound.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
        snapshot.count
    );
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", snapshot.sum.as_secs_f64());
    let _ = writeln!(out, "{name}_count{braces} {}", snapshot.count);
}

/// A label value escaped for the text format (backslash, quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_the_sum_is_kept() {
        let metrics = Metrics::new(&["order".to_owned()], true);
        let order = metrics.definition("order").expect("registered");
        order.attempted(Duration::from_micros(50), AttemptEnded::Completed);
        order.attempted(Duration::from_millis(2), AttemptEnded::Retrying);
        order.attempted(Duration::from_secs(120), AttemptEnded::Failed);
        let snapshot = metrics.snapshot();
        let d = snapshot.definition("order").expect("listed");
        assert_eq!(
            (d.task_attempts, d.task_retries, d.task_failures),
            (3, 1, 1)
        );
        let h = &d.task_durations;
        assert_eq!(h.count, 3);
        assert_eq!(h.buckets[0], (Duration::from_micros(100), 1));
        assert_eq!(h.buckets[2], (Duration::from_millis(1), 1));
        assert_eq!(h.buckets[3], (Duration::from_millis(5), 2));
        assert_eq!(h.buckets[11], (Duration::from_secs(60), 2));
        assert_eq!(h.sum, Duration::from_micros(120_002_050));
        let text = snapshot.to_prometheus();
        assert!(text.contains(
            "workflow_task_duration_seconds_bucket{definition=\"order\",le=\"0.005\"} 2"
        ));
        assert!(
            text.contains(
                "workflow_task_duration_seconds_bucket{definition=\"order\",le=\"+Inf\"} 3"
            )
        );
        assert!(text.contains("workflow_task_retries_total{definition=\"order\"} 1"));
        assert!(text.contains("workflow_timer_lateness_seconds_count 0"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
