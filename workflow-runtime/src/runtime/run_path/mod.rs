//! The run path: every run of an instance goes through [`RunPath::run`]. It takes this
//! process's turn (`turns.rs`), claims the instance lease (`lease.rs`, ST-14), loads the
//! instance (version and state document, or the state kept of it, ENG-53), runs it while the
//! lease is renewed, and commits the document, status columns, bookmark diff and journal
//! under the loaded version and the lease's fencing token (ENG-28, `commit.rs`), releasing the
//! lease with the last commit; then it publishes: the links between instances (`outbox.rs`),
//! the lifecycle events and the awaiters' wake-ups. A `Conflict` or `Fenced` answer discards
//! the run and is returned typed (ENG-29); a lost lease cancels the run (ENG-36).
//!
//! The run path also owns what an operator's cancel needs (`cancel.rs`): a cancel requested
//! while a run goes on is applied by the run path once the run stops (FLT-15).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::broadcast;
use tracing::Instrument;

use super::cache::StateCache;
use super::definitions::Definitions;
use super::document::{decode_loaded, run_store_error};
use super::lease::{LeaseGuard, LeaseSettings};
use super::metrics::{Metrics, StoreCall};
use super::outcomes::StartOptions;
use super::registered::{RunOutput, RunSettings};
use super::signals::{ActiveRuns, RunSignals};
use super::watches::Watches;
use crate::base::lock;
use crate::cancel::CancellationToken;
use crate::clock::Clock;
use crate::engine::events::{EventStream, LifecycleEvent};
use crate::engine::executor::{
    AttemptSettings, Checkpoint, CommitStrategy, DeclinedTransition, Link, Middleware, RunEnd,
    RunError, RunTarget,
};
use crate::engine::observer::AttemptObserver;
use crate::engine::state::{SubStatus, WorkflowState, WorkflowStatus};
use crate::status::Started;
use crate::store::{ControlKind, IdempotencyRecord, Micros, QueueItem, Storage, StoreError};
use crate::trace::TraceParent;

mod cancel;
mod commit;
mod damaged_timer;
mod migrate;
mod outbox;
mod run_slot;
mod too_large;
mod turns;

pub(crate) use commit::RunCommits;
use commit::Tracker;
pub(crate) use migrate::{Move, StateMap};
pub(crate) use outbox::Outbox;
pub(crate) use turns::Turn;
use turns::Turns;

/// The stimulus a run delivers (RT-19): its id, whether the run's first commit writes its
/// receipt, and what else that commit writes for it. Every delivery of an id that can reach
/// the instance again keeps a receipt (a queue item, which a crash before its acknowledgement
/// or an expired claim presents again; a send with an idempotency key, which a retry presents
/// again; a child's result). A send without an idempotency key made its id itself, and its
/// routing runs each instance at most once, so its receipts would never be looked up: it
/// writes none.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The stimulus id.
    stimulus_id: String,
    /// The first commit writes the receipt (instance, stimulus id).
    receipt: bool,
    /// The pending idempotency record of the direct send delivering it, written by the first
    /// commit (RT-19). Boxed: a delivery travels through a run's futures, which move it.
    idempotency: Option<Box<IdempotencyRecord>>,
    /// The queue item carrying it, deleted by the first commit (RT-19): a worker stopped
    /// before its acknowledgement leaves nothing to redeliver.
    queue_item: Option<String>,
    /// When the stimulus was sent: the cause of what the run does, from which a state
    /// machine's `since_entered` waits admit queued stimuli (RT-30).
    sent_at: Option<Micros>,
    /// The send's trace context, which the run continues (ENG-61).
    traceparent: Option<TraceParent>,
}

impl Delivery {
    /// A delivery whose id can be presented to the instance again: its receipt is written.
    pub(crate) fn kept(stimulus_id: String) -> Self {
        Self {
            stimulus_id,
            receipt: true,
            idempotency: None,
            queue_item: None,
            sent_at: None,
            traceparent: None,
        }
    }

    /// A delivery of an id no other delivery can present to the instance: no receipt.
    pub(crate) fn once(stimulus_id: String) -> Self {
        Self {
            receipt: false,
            ..Self::kept(stimulus_id)
        }
    }

    /// With the direct send's pending record, written by the first commit.
    pub(crate) fn with_record(mut self, record: Option<IdempotencyRecord>) -> Self {
        self.idempotency = record.map(Box::new);
        self
    }

    /// Of a stimulus sent at `sent_at`.
    pub(crate) fn sent_at(mut self, sent_at: Micros) -> Self {
        self.sent_at = Some(sent_at);
        self
    }

    /// Continuing the send's trace context (ENG-61).
    pub(crate) fn traced(mut self, parent: Option<TraceParent>) -> Self {
        self.traceparent = parent;
        self
    }

    /// With the queue item the first commit deletes.
    pub(crate) fn consuming(mut self, item_id: Option<String>) -> Self {
        self.queue_item = item_id;
        self
    }

    /// The stimulus alone, without what the first commit writes for it.
    fn stimulus(&self) -> Self {
        Self {
            stimulus_id: self.stimulus_id.clone(),
            receipt: self.receipt,
            idempotency: None,
            queue_item: None,
            sent_at: self.sent_at,
            traceparent: self.traceparent,
        }
    }
}

/// What [`RunPath::run_reporting`] reports of a run.
#[derive(Debug)]
pub(crate) struct Ran {
    /// The instance's status after the run.
    pub(crate) started: Started,
    /// The transitions whose condition declined their trigger in the run (SM-4).
    pub(crate) declined: Vec<DeclinedTransition>,
}

/// How [`RunPath::run`] runs an instance.
pub(crate) struct RunOptions<'a> {
    /// What the run resumes: bookmarks with a payload, or nothing (its queued work).
    target: RunTarget,
    /// The stimulus it delivers, consumed by its first commit (RT-19).
    delivery: Option<Delivery>,
    /// The first run of an instance just created (by a start, a trigger, a parent's commit or
    /// a schedule): its lease may only be held, briefly, by a recovery sweep, which is waited
    /// for; one that finds it run already by a sweep of another process reports its status.
    first: bool,
    /// A caller's start: a first run over the state size limit returns its error instead of
    /// faulting the instance (ST-24).
    refuse_too_large: bool,
    /// The run resumes a paused instance (ENG-50).
    resume: bool,
    /// This process's turn, when the caller holds it already (else the run waits for it).
    turn: Option<&'a Turn<'a>>,
    /// The instance's lease, when the caller holds it already (with the turn).
    lease: Option<LeaseGuard<'a>>,
}

impl<'a> RunOptions<'a> {
    /// A run toward `target`, taking the turn and the lease itself.
    pub(crate) fn to(target: RunTarget) -> Self {
        Self {
            target,
            delivery: None,
            first: false,
            refuse_too_large: false,
            resume: false,
            turn: None,
            lease: None,
        }
    }

    /// The first run of an instance just created.
    pub(crate) fn first() -> Self {
        Self {
            first: true,
            ..Self::to(RunTarget::None)
        }
    }

    /// Delivering `delivery`.
    pub(crate) fn delivering(mut self, delivery: Delivery) -> Self {
        self.delivery = Some(delivery);
        self
    }

    /// A caller's start: over the state size limit, the first run's error is returned.
    pub(crate) fn refusing_too_large(mut self) -> Self {
        self.refuse_too_large = true;
        self
    }

    /// Resuming a paused instance.
    pub(crate) fn resuming(mut self) -> Self {
        self.resume = true;
        self
    }

    /// In the turn the caller holds.
    pub(crate) fn in_turn(mut self, turn: &'a Turn<'a>) -> Self {
        self.turn = Some(turn);
        self
    }

    /// Under the lease the caller holds (in its turn).
    pub(crate) fn under(mut self, lease: LeaseGuard<'a>, turn: &'a Turn<'a>) -> Self {
        self.lease = Some(lease);
        self.turn = Some(turn);
        self
    }
}

/// What the run path is built with.
pub(crate) struct RunPathSettings {
    pub(crate) store: Storage,
    pub(crate) owner: String,
    pub(crate) lease: LeaseSettings,
    pub(crate) definitions: Arc<Definitions>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) middleware: Middleware,
    pub(crate) commit_strategy: CommitStrategy,
    pub(crate) max_steps_per_run: usize,
    pub(crate) cancel_grace: Duration,
    pub(crate) queue_ttl: Micros,
    pub(crate) event_buffer: usize,
    pub(crate) metrics: Arc<Metrics>,
    /// The flow-control gate of the declared queues (QU-10).
    pub(crate) flow: Option<crate::engine::slots::Gate>,
}

/// The run path (see the module docs).
pub(crate) struct RunPath {
    store: Storage,
    /// This runtime's lease owner name (ST-14).
    owner: String,
    /// The instance leases' TTL and renewal (ST-14).
    lease: LeaseSettings,
    definitions: Arc<Definitions>,
    /// Workflow time (TM-1).
    clock: Arc<dyn Clock>,
    middleware: Middleware,
    commit_strategy: CommitStrategy,
    max_steps_per_run: usize,
    /// ENG-52's grace for cancelled tasks.
    cancel_grace: Duration,
    /// The flow-control gate of the declared queues (QU-10).
    flow: Option<crate::engine::slots::Gate>,
    /// The default queue TTL, µs (RT-28), of a child's result queued for its parent.
    queue_ttl: Micros,
    turns: Turns,
    /// The decoded states of instances whose run this runtime ended last (ENG-53).
    states: StateCache,
    /// The runs in progress here, with their tokens and signals (FLT-15, ENG-50).
    active: ActiveRuns,
    events: broadcast::Sender<LifecycleEvent>,
    /// Wakes awaiters after each commit of this process (ENG-48).
    watches: Watches,
    /// Work between instances queued by commits (ACT-24).
    outbox: Outbox,
    /// The runtime's metrics (ENG-60).
    metrics: Arc<Metrics>,
}

/// Returns `Pending` once, so a long-running instance lets other tasks run between budgets.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl RunPath {
    pub(crate) fn new(settings: RunPathSettings) -> Self {
        let (events, _) = broadcast::channel(settings.event_buffer);
        Self {
            store: settings.store,
            owner: settings.owner,
            lease: settings.lease,
            definitions: settings.definitions,
            clock: settings.clock,
            middleware: settings.middleware,
            commit_strategy: settings.commit_strategy,
            max_steps_per_run: settings.max_steps_per_run,
            cancel_grace: settings.cancel_grace,
            flow: settings.flow,
            queue_ttl: settings.queue_ttl,
            turns: Turns::default(),
            states: StateCache::default(),
            active: ActiveRuns::default(),
            events,
            watches: Watches::default(),
            outbox: Outbox::default(),
            metrics: settings.metrics,
        }
    }

    /// The runtime's metrics (ENG-60).
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The store.
    pub(crate) fn store(&self) -> &Storage {
        &self.store
    }

    /// This runtime's lease owner name.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The lease settings.
    pub(crate) fn lease_settings(&self) -> LeaseSettings {
        self.lease
    }

    /// The registered definitions.
    pub(crate) fn definitions(&self) -> &Definitions {
        &self.definitions
    }

    /// The middleware chains.
    pub(crate) fn middleware(&self) -> &Middleware {
        &self.middleware
    }

    /// Workflow time, now.
    pub(crate) fn now(&self) -> Micros {
        self.clock.now()
    }

    /// The clock of workflow time (TM-1).
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The runtime-wide commit strategy (ENG-32).
    pub(crate) fn commit_strategy(&self) -> CommitStrategy {
        self.commit_strategy
    }

    /// The runs in progress in this process.
    pub(crate) fn active(&self) -> &ActiveRuns {
        &self.active
    }

    /// The awaiters' wake-ups.
    pub(crate) fn watches(&self) -> &Watches {
        &self.watches
    }

    /// The links queued by commits.
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// A subscription to the lifecycle events (ENG-39, ENG-40).
    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream::new(self.events.subscribe())
    }

    /// Waits for this process's other runs of the instance.
    pub(crate) async fn turn(&self, instance_id: &str) -> Turn<'_> {
        self.turns.take(instance_id).await
    }

    /// This process's turn if nobody here holds the instance now.
    pub(crate) fn try_turn(&self, instance_id: &str) -> Option<Turn<'_>> {
        self.turns.try_take(instance_id)
    }

    /// Acquires the instance's lease for a change by this runtime (ST-14).
    pub(crate) async fn lease(&self, instance_id: &str) -> Result<LeaseGuard<'_>, StoreError> {
        LeaseGuard::acquire(&self.store, &self.owner, instance_id, self.lease).await
    }

    /// Runs an instance (see [`RunOptions`]); `Ok(None)` for an unknown id. The one way a
    /// run of this process begins.
    /// The flow-control gate of the declared queues (QU-10).
    pub(crate) fn flow(&self) -> Option<&crate::engine::slots::Gate> {
        self.flow.as_ref()
    }

    /// Resumes the attempts of `instance_id` suspended waiting for a slot (QU-11), or its
    /// run waiting for the slot of its definition's queue (QU-14), when a release named one
    /// of them: each asks again as the same holder. Nothing when the instance has no such
    /// wait (it was resumed already, or it waits in a run).
    ///
    /// The process that suspended the waiter may keep its lease (ST-38): the resume is
    /// handed the instance as soon as that process gives the lease back
    /// ([`RunPath::run_when_free`]), within one lease.
    pub(crate) async fn resume_slot_waits(&self, instance_id: &str) {
        let timers = match self.store.list_timers(instance_id).await {
            Ok(timers) => timers,
            Err(error) => {
                tracing::debug!(
                    target: "workflow_runtime::flow",
                    instance = instance_id, %error, "reading a slot waiter's timers failed"
                );
                return;
            }
        };
        let ids: Vec<String> = timers
            .into_iter()
            .filter(|t| t.kind == crate::engine::names::SLOT_TIMER)
            .map(|t| t.timer_id)
            .collect();
        if ids.is_empty() {
            return;
        }
        let target = || RunTarget::Bookmarks {
            ids: ids.clone(),
            payload: serde_json::json!({ "fired_at": self.clock.now() }),
        };
        if let Err(error) = self
            .run_when_free(instance_id, target, self.lease.ttl)
            .await
        {
            // Resumed by its timer meanwhile, cancelled, or run elsewhere: its timer stays
            // the fallback.
            tracing::debug!(
                target: "workflow_runtime::flow",
                instance = instance_id, %error, "resuming a slot waiter did not run"
            );
        }
    }

    /// [`RunPath::run`] to `target`, tried again while the claim meets another process's
    /// lease, for at most `bound` (ST-38). The claim that meets a live lease marks it wanted,
    /// and its holder gives back a lease it keeps between runs at once (or within
    /// [`KEPT_IDLE`] when it does not hear of it) and one a run holds at that run's commit;
    /// the next try follows the hint that the instance is free (`InstanceRunnable`) or a
    /// pause of 5 ms doubling up to 200 ms. A bookmark the first try would have resumed and
    /// that is gone by a later one (another process resumed it meanwhile) fails that try as
    /// [`RunPath::run`] does.
    pub(crate) async fn run_when_free(
        &self,
        instance_id: &str,
        target: impl Fn() -> RunTarget,
        bound: Duration,
    ) -> Result<Option<Started>, RunError> {
        let mut hints = self
            .store
            .hears_other_processes()
            .then(|| self.store.subscribe());
        let give_up = tokio::time::Instant::now() + bound;
        let mut pause = Duration::from_millis(5);
        loop {
            match self.run(instance_id, RunOptions::to(target())).await {
                Err(RunError::Store {
                    error: StoreError::LeaseHeld { .. },
                    ..
                }) if tokio::time::Instant::now() + pause < give_up => {
                    freed(hints.as_mut(), instance_id, pause).await;
                    pause = (pause * 2).min(MAX_FREED_PAUSE);
                }
                ran => return ran,
            }
        }
    }

    pub(crate) async fn run(
        &self,
        instance_id: &str,
        options: RunOptions<'_>,
    ) -> Result<Option<Started>, RunError> {
        Ok(self
            .run_reporting(instance_id, options)
            .await?
            .map(|ran| ran.started))
    }

    /// [`RunPath::run`], with what the run did that its caller reports: the transitions whose
    /// condition declined the delivered stimulus (SM-4).
    pub(crate) async fn run_reporting(
        &self,
        instance_id: &str,
        options: RunOptions<'_>,
    ) -> Result<Option<Ran>, RunError> {
        let RunOptions {
            target,
            delivery,
            first,
            refuse_too_large,
            resume,
            turn,
            lease,
        } = options;
        // This process's turn, held through the run (a caller holding the lease holds it).
        let (guard, _turn) = match lease {
            Some(guard) => (guard, None),
            None => {
                let turn = match turn {
                    Some(_) => None,
                    None => Some(self.turn(instance_id).await),
                };
                match self.claim(instance_id, first).await? {
                    Some(guard) => (guard, turn),
                    None => return Ok(None),
                }
            }
        };
        let mut declined = Vec::new();
        match self
            .run_held(
                guard,
                target,
                delivery,
                resume,
                !refuse_too_large,
                &mut declined,
            )
            .await
        {
            Ok(started) => Ok(Some(Ran { started, declined })),
            // A recovery sweep of another process took the instance before this first run
            // and ran it to its end: that was its first run.
            Err(RunError::NotRunnable { instance, status }) if first => Ok(Some(Ran {
                started: Started {
                    instance_id: instance,
                    status,
                    sub_status: None,
                },
                declined,
            })),
            Err(error) => Err(error),
        }
    }

    /// The lease of a run of `instance_id`, `None` when the instance is gone. ENG-53: the
    /// state this runtime kept of it goes with the claim, which compares the stored record
    /// with it where the store holds it. A `first` run (of an instance just created) waits
    /// briefly for a lease held by anyone ([`LeaseGuard::acquire_first`]).
    async fn claim(
        &self,
        instance_id: &str,
        first: bool,
    ) -> Result<Option<LeaseGuard<'_>>, RunError> {
        let kept = self.states.take_entry(instance_id);
        let (store, owner, lease) = (&self.store, &self.owner, self.lease);
        let began = self.metrics.begin();
        let claimed = if first {
            LeaseGuard::acquire_first(store, owner, instance_id, lease, kept).await
        } else {
            LeaseGuard::acquire_kept(store, owner, instance_id, lease, kept).await
        };
        self.metrics.store_call_since(StoreCall::Claim, began);
        match claimed {
            Ok(guard) => Ok(Some(guard)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(run_store_error(instance_id, error)),
        }
    }

    /// Runs under `guard` and settles the lease: released by the run's last commit, or here
    /// when the run is abandoned (the instance continues from its last commit, ENG-29). With
    /// `resume`, the run resumes a paused instance (ENG-50); a cancel requested while it ran
    /// (FLT-15) is applied once it stops. With `fault_too_large`, a run whose state grows over
    /// the store's limit faults the instance (ST-24); without it (a caller's start, refused
    /// instead), the run's error is returned as is.
    async fn run_held(
        &self,
        guard: LeaseGuard<'_>,
        target: RunTarget,
        delivery: Option<Delivery>,
        resume: bool,
        fault_too_large: bool,
        declined: &mut Vec<DeclinedTransition>,
    ) -> Result<Started, RunError> {
        let instance_id = guard.instance_id().to_owned();
        let delivering = delivery.as_ref().map(Delivery::stimulus);
        let signals = Arc::new(RunSignals::default());
        signals
            .resume
            .store(resume, std::sync::atomic::Ordering::SeqCst);
        let result = self
            .run_slices(&guard, target, delivery, &signals, declined)
            .await;
        let requested_cancel = signals.take_cancel();
        let lost = guard.lost();
        if lost.is_some() {
            self.metrics.lease_lost();
        }
        match (result, lost) {
            (Ok(started), _) => {
                guard.released_by_commit();
                match requested_cancel {
                    Some(reason) if !started.status.is_final() => Ok(self
                        .cancel_requested(&instance_id, reason)
                        .await
                        .unwrap_or(started)),
                    _ => Ok(started),
                }
            }
            // ENG-36: the lease was lost, so the run was cancelled; another owner has the
            // instance. (A commit after the loss was refused as `Fenced`: returned as is.)
            (Err(RunError::Interrupted { .. }), Some(lost)) => {
                Err(run_store_error(&instance_id, lost))
            }
            (Err(error), Some(_)) => Err(error),
            (Err(RunError::Interrupted { .. }), None) => {
                if let Some(reason) = requested_cancel {
                    // FLT-15: an operator's cancel fired the token; it applies now, under
                    // this lease, from the last commit.
                    match self.cancel_held(&guard, reason).await {
                        Ok(started) => {
                            guard.released_by_commit();
                            return Ok(started);
                        }
                        Err(error) => {
                            tracing::warn!(instance = %instance_id, %error, "a requested cancel could not be applied; it stays recorded");
                        }
                    }
                }
                // FLT-16: abandoned for the cancel waiting to run (or the shutdown); the
                // cancel reports the outcome.
                guard.release().await;
                let status = super::document::load_state(&self.store, &instance_id)
                    .await
                    .ok()
                    .flatten()
                    .map(|s| (s.status, s.sub_status));
                let (status, sub_status) =
                    status.unwrap_or((WorkflowStatus::Running, Some(SubStatus::Pending)));
                Ok(Started {
                    instance_id,
                    status,
                    sub_status,
                })
            }
            // ST-24: refused as too large, nothing of it written: the instance is faulted
            // from its last commit, so it does not loop. A caller's start is refused instead,
            // unless its first run has committed already: others may see what those commits
            // did (children started, stimuli sent), so the instance stays to own it.
            (
                Err(
                    error @ RunError::Store {
                        error: StoreError::TooLarge { size, limit, .. },
                        ..
                    },
                ),
                None,
            ) => {
                if !fault_too_large && !self.committed_since_creation(&instance_id).await {
                    guard.release().await;
                    return Err(error);
                }
                match self
                    .fault_too_large(&guard, size, limit, delivering, &signals)
                    .await
                {
                    Ok(faulted) => {
                        guard.released_by_commit();
                        Err(faulted)
                    }
                    Err(fault_error) => {
                        tracing::error!(instance = %instance_id, %error, %fault_error, "a run's state is over the size limit and faulting the instance failed; it stays at its last commit");
                        guard.release().await;
                        Err(error)
                    }
                }
            }
            (Err(error), None) => {
                guard.release().await;
                Err(error)
            }
        }
    }

    /// Whether the instance has a commit after its creation (version 1); when that cannot be
    /// read, it is taken to have one, so nothing is removed on a guess.
    async fn committed_since_creation(&self, instance_id: &str) -> bool {
        self.store
            .load_instance_text(instance_id)
            .await
            .map_or(true, |record| record.version > 1)
    }

    /// Loads the instance for a run holding `guard`'s lease, with the commits of that run.
    pub(crate) async fn load<'s>(
        &'s self,
        guard: &LeaseGuard<'_>,
    ) -> Result<(WorkflowState, RunCommits<'s>), RunError> {
        let instance_id = guard.instance_id();
        let record = match guard.take_loaded() {
            Some(loaded) => loaded,
            None => {
                let began = self.metrics.begin();
                let loaded = self.store.load_instance_raw(instance_id).await;
                self.metrics.store_call_since(StoreCall::Load, began);
                loaded
            }
        }
        .map_err(|error| run_store_error(instance_id, error))?;
        guard.set_definition(&record.definition_name);
        // ENG-53: the state this runtime committed last, if the record is still that commit
        // (found so by the claim, or here).
        let kept = guard
            .take_kept()
            .or_else(|| self.states.take(instance_id, record.version, &record.state));
        let state = match kept {
            Some(state) => state,
            None => decode_loaded(instance_id, &record.state)?,
        };
        let document_len = record.state.len();
        let commits = RunCommits {
            store: &self.store,
            tracker: Mutex::new(Tracker {
                instance_id: instance_id.to_owned(),
                token: guard.token(),
                version: record.version,
                bookmarks: commit::committed_bookmarks(&state.bookmarks),
                keys: commit::bookmark_keys(&state.bookmarks),
                incidents: state
                    .incidents
                    .iter()
                    .map(|i| (i.id.clone(), i.resolution.clone()))
                    .collect(),
                receipts: Vec::new(),
                consumed: Vec::new(),
                idempotency: None,
                unpark: false,
                clear_control: false,
                last_document: None,
                document_len,
                spare: record.state,
                repin: None,
            }),
            control: record.control_request,
        };
        Ok((state, commits))
    }

    /// The engine's settings for a run now.
    pub(crate) fn engine_settings(&self, cancel: Option<&CancellationToken>) -> RunSettings {
        RunSettings {
            attempts: AttemptSettings {
                clock: self.clock.clone(),
                cancel_grace: self.cancel_grace,
                instance_cancel: cancel.cloned(),
                pause: None,
                executing: None,
                observer: None,
                flow: self.flow.clone(),
            },
            max_steps: self.max_steps_per_run,
            run_slot_held: false,
            // Events are built for subscribers and for the log (`LifecycleEvent::trace`
            // writes none below `warn`).
            emit_events: self.events.receiver_count() > 0
                || tracing::enabled!(target: "workflow_runtime::events", tracing::Level::WARN),
            now: self.clock.now(),
            caused_at: None,
        }
    }

    /// Runs under the lease until the run ends other than at its step budget: each budget
    /// slice is committed (ENG-10) and the task yields before the next. The last commit
    /// releases the lease; the lease is renewed meanwhile (ST-14).
    async fn run_slices(
        &self,
        guard: &LeaseGuard<'_>,
        target: RunTarget,
        delivery: Option<Delivery>,
        signals: &Arc<RunSignals>,
        declined: &mut Vec<DeclinedTransition>,
    ) -> Result<Started, RunError> {
        let instance_id = guard.instance_id();
        let (state, commits) = self.load(guard).await?;
        signals.loaded(lock(&commits.tracker).version);
        if state.status.is_final() || state.status == WorkflowStatus::Faulted {
            return Err(RunError::NotRunnable {
                instance: instance_id.to_owned(),
                status: state.status,
            });
        }
        let resume = signals.resume.load(std::sync::atomic::Ordering::SeqCst);
        let paused = state.sub_status == Some(SubStatus::Paused);
        if paused && !resume {
            return Err(RunError::Paused {
                instance: instance_id.to_owned(),
            });
        }
        let workflow = self.definitions.workflow_for(&state)?;
        let observer = self
            .metrics
            .definition(&state.definition.name)
            .map(|counters| Arc::clone(counters) as Arc<dyn AttemptObserver>);
        // ENG-50: a cancel or suspend requested before this run is honoured instead of it
        // (a stimulus it was to deliver is then not consumed).
        let targeted = matches!(target, RunTarget::Bookmarks { .. });
        match commits.control.clone() {
            Some(request) if request.kind == ControlKind::Cancel => {
                let started = self
                    .cancel_loaded(&*workflow, state, &commits, request.reason)
                    .await?;
                return if targeted {
                    Err(RunError::NotRunnable {
                        instance: instance_id.to_owned(),
                        status: started.status,
                    })
                } else {
                    Ok(started)
                };
            }
            Some(request) if request.kind == ControlKind::Suspend && !resume => {
                commits.clear_control_next();
                let output = workflow.pause(state, &self.middleware, self.clock.now());
                let (_, started) = self.commit_and_publish(&commits, output, true).await?;
                return if targeted {
                    Err(RunError::Paused {
                        instance: instance_id.to_owned(),
                    })
                } else {
                    Ok(started)
                };
            }
            Some(request)
                if resume && matches!(request.kind, ControlKind::Resume | ControlKind::Suspend) =>
            {
                commits.clear_control_next();
            }
            _ => {}
        }
        if resume && paused {
            // TM-10: the resume's first commit unparks the timers.
            commits.unpark_next();
        }
        let caused_at = delivery.as_ref().and_then(|d| d.sent_at);
        // ENG-61: the run continues the trace of the stimulus it delivers, else its
        // instance's; its span records the ids.
        let parent = delivery
            .as_ref()
            .and_then(|d| d.traceparent)
            .or_else(|| TraceParent::from_stored(state.traceparent.as_deref()));
        let span = tracing::info_span!(
            "workflow.execution",
            instance = %instance_id,
            definition = %state.definition.name,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
            parent_id = tracing::field::Empty,
        );
        if let Some(delivery) = delivery {
            let mut tracker = lock(&commits.tracker);
            // RT-19: the commit delivering a direct send's stimulus writes its record, and
            // deletes the queue item that carried it.
            tracker.idempotency = delivery.idempotency.map(|record| *record);
            tracker.consumed.extend(delivery.queue_item);
            // RT-19: the receipt, unless the stimulus id cannot reach this instance again.
            if delivery.receipt {
                tracker.receipts.push(delivery.stimulus_id);
            }
        }
        // ENG-32: the run decides per task whether to commit (the node's setting, the
        // definition's strategy, then this runtime-wide one).
        let checkpoint: Option<(&dyn Checkpoint, CommitStrategy)> =
            Some((&commits, self.commit_strategy));
        let token = CancellationToken::new();
        let _active = self.active.register(instance_id, &token, signals);
        // Pinned where it is built: the lease's hold polls it in place instead of taking it
        // by value into a future of its own (a second copy of it, moved there).
        let run = std::pin::pin!(async {
            // QU-14: a run of a definition with a queue runs under a slot of it, held to the
            // run's end; without one within the grace, the instance waits for it, suspended.
            let (mut state, target, slot) = match self
                .take_run_slot(&*workflow, state, target, &token)
                .await?
            {
                run_slot::RunSlot::Go {
                    state,
                    target,
                    slot,
                } => (state, target, slot),
                run_slot::RunSlot::Wait(output) => {
                    let (next, started) = self.commit_and_publish(&commits, output, true).await?;
                    self.keep_last(&commits, next);
                    return Ok(started);
                }
            };
            let slot_held = slot.is_some();
            let slices = async {
                let mut target = Some(target);
                let mut caused_at = caused_at;
                loop {
                    let target = target.take().unwrap_or(RunTarget::None);
                    let mut settings = self.engine_settings(Some(&token));
                    settings.run_slot_held = slot_held;
                    settings.caused_at = caused_at.take();
                    settings.attempts.pause = Some(Arc::clone(&signals.pause));
                    settings.attempts.executing = Some(guard.executing());
                    settings.attempts.observer.clone_from(&observer);
                    let mut output = workflow
                        .run(state, target, settings, &self.middleware, checkpoint)
                        .await?;
                    if signals.paused() {
                        // ENG-50: an operator's suspend reached the run; it stopped at an item
                        // boundary (or went idle) and is paused with its queue kept.
                        if pauses(output.end) {
                            let paused =
                                workflow.pause(output.state, &self.middleware, self.clock.now());
                            output.state = paused.state;
                            output.events.extend(paused.events);
                            output.end = paused.end;
                        }
                        if commits.control_kind() == Some(ControlKind::Suspend)
                            || output.end != RunEnd::Budget
                        {
                            commits.clear_control_next();
                        }
                    }
                    let end = output.end;
                    let slice_declined = std::mem::take(&mut output.declined);
                    let (next, started) = self
                        .commit_and_publish(&commits, output, end != RunEnd::Budget)
                        .await?;
                    // Reported only once committed: a run abandoned after it did not decline.
                    declined.extend(slice_declined);
                    if end != RunEnd::Budget {
                        // ENG-53: the next run of a live instance starts from this state.
                        self.keep_last(&commits, next);
                        return Ok(started);
                    }
                    state = next;
                    YieldNow(false).await;
                }
            };
            match slot {
                Some((gate, lease)) => gate.hold(lease, slices).await,
                None => slices.await,
            }
        });
        // ENG-61: in the trace context it continues, inside its span.
        let run = std::pin::pin!(self.definitions.trace().continuing(
            parent,
            &span,
            run.instrument(span.clone())
        ));
        guard.hold(&token, Some(signals), run).await
    }

    /// Keeps the state a run's last commit left (ENG-53): the next run of the live instance
    /// starts from it.
    fn keep_last(&self, commits: &RunCommits<'_>, state: WorkflowState) {
        let kept = {
            let mut tracker = lock(&commits.tracker);
            tracker.last_document.take().map(|d| (tracker.version, d))
        };
        if let Some((version, document)) = kept {
            self.states.keep(version, document, state);
        }
    }

    /// Keeps the state of an instance just created, committed as `document` at `version`: its
    /// first run starts from it (ENG-53).
    pub(crate) fn keep_state(&self, version: u64, document: String, state: WorkflowState) {
        self.states.keep(version, document, state);
    }

    /// The queue item carrying a final child's result to its parent's `wf.sub_workflow`
    /// bookmark (ACT-24), with the `(parent, bookmark)` it is for.
    fn child_result_item(&self, state: &WorkflowState) -> Option<(QueueItem, (String, String))> {
        if !state.status.is_final() {
            return None;
        }
        let parent = state.parent.as_ref()?;
        let bookmark = parent.bookmark_id.as_ref()?;
        let payload = serde_json::json!({
            "child_instance_id": state.instance_id,
            "status": state.status.to_string(),
            "output": state.output,
        });
        let item = crate::routing::child_result_item(
            &parent.instance_id,
            bookmark,
            &state.instance_id,
            payload,
            self.queue_ttl,
        )?;
        Some((item, (parent.instance_id.clone(), bookmark.clone())))
    }

    /// The mandatory commit of a run (ENG-31), then what follows commits: the links between
    /// instances, the events (ENG-33) and the awaiters.
    pub(crate) async fn commit_and_publish(
        &self,
        commits: &RunCommits<'_>,
        output: RunOutput,
        release: bool,
    ) -> Result<(WorkflowState, Started), RunError> {
        let mut state = output.state;
        // ACT-24, ST-16: children start in the parent's commit, so a crash cannot lose them
        // (a child never run is recovered as `Running/Pending`).
        let mut children = Vec::new();
        for link in &output.links {
            if let Link::Start {
                workflow,
                instance_id,
                input,
                parent,
            } = link
            {
                let options = StartOptions {
                    instance_id: Some(instance_id.clone()),
                    ..StartOptions::default()
                };
                // One that cannot be created is started (and fails) after the commit.
                if let Ok(child) = self.definitions.new_instance(
                    workflow,
                    input.clone(),
                    options,
                    Some(parent.clone()),
                    None,
                ) {
                    children.push(child);
                }
            }
        }
        let ids: Vec<String> = children.iter().map(|c| c.instance_id.clone()).collect();
        // ACT-24, ST-16: a final child's result for its parent is queued in its final commit,
        // so a crash between this commit and the parent's resume loses nothing (the queue
        // worker delivers it); the in-process resume below delivers and acks it at once.
        let result_item = self.child_result_item(&state);
        let queued: Vec<_> = result_item.iter().map(|(item, _)| item.clone()).collect();
        let began = self.metrics.begin();
        let committed = commits.commit(&mut state, release, children, queued).await;
        self.metrics.store_call_since(StoreCall::Commit, began);
        committed?;
        if let Some((item, key)) = result_item {
            self.outbox
                .child_result(key, (item.item_id, item.stimulus_id));
        }
        self.outbox.created(ids);
        if release && let Some(counters) = self.metrics.definition(&state.definition.name) {
            counters.transition(state.status);
        }
        // ACT-24: the links of this run, and a final child's result for its parent.
        let resume_parent = if state.status.is_final()
            && let Some(parent) = &state.parent
            && let Some(bookmark) = &parent.bookmark_id
        {
            Some(Link::Resume {
                instance_id: parent.instance_id.clone(),
                bookmark_id: bookmark.clone(),
                payload: serde_json::json!({
                    "child_instance_id": state.instance_id,
                    "status": state.status.to_string(),
                    "output": state.output,
                }),
            })
        } else {
            None
        };
        self.outbox.extend(output.links, resume_parent);
        let waiting_for: Vec<&str> = state.bookmarks.iter().map(|b| b.name.as_str()).collect();
        for event in output.events {
            event.trace(&waiting_for);
            // No subscriber is not an error.
            let _ = self.events.send(event);
        }
        self.watches.notify(&state.instance_id);
        let started = Started {
            instance_id: state.instance_id.clone(),
            status: state.status,
            sub_status: state.sub_status,
        };
        Ok((state, started))
    }
}

/// Whether a run's output is paused instead of committed as it ended (ENG-50): the pause
/// applies to a run that stopped at a boundary or went idle.
fn pauses(end: RunEnd) -> bool {
    matches!(end, RunEnd::Budget | RunEnd::Suspended(_))
}

/// How long a process keeps an idle lease another process wants when it does not hear that
/// it is wanted (the PostgreSQL store gives back every lease it keeps idle for longer than a
/// second, ST-38), with a margin: what a run that met such a lease waits for at most, where
/// it has no reason to wait longer.
pub(crate) const KEPT_IDLE: Duration = Duration::from_secs(2);

/// The longest pause of [`RunPath::run_when_free`] between two claims that met another
/// process's lease.
const MAX_FREED_PAUSE: Duration = Duration::from_millis(200);

/// Waits until `hints` say `instance_id` may be free (its lease was given back), hints were
/// lost, or `pause` passed.
async fn freed(
    hints: Option<&mut broadcast::Receiver<crate::store::WakeUp>>,
    instance_id: &str,
    pause: Duration,
) {
    let heard = crate::store::hint_heard(
        hints,
        |hint| matches!(hint, crate::store::WakeUp::InstanceRunnable { id } if id == instance_id),
    );
    tokio::select! {
        () = tokio::time::sleep(pause) => {}
        () = heard => {}
    }
}
