//! A faulty store: [`FaultyStore`] wraps any backend and fails or delays the calls a test
//! chooses (the n-th commit, every lease renewal, a random fraction of all calls). Over it:
//! - a failed commit leaves the previous state intact (same version, same bookmarks, same
//!   journal), and the run is tried again (the caller's retried send, the timer's next claim,
//!   the recovery sweep for a start);
//! - a commit that was applied but whose answer was lost is not applied twice;
//! - a transient error never loses a stimulus: the caller gets an error, or it is queued and
//!   delivered later, never silence. Under random failures of every kind of call, each event
//!   sent until its send succeeded is applied exactly once.
//!
//! Every scenario runs over the `MemoryStore` and over a `SqliteStore` in a temporary file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{
    BookmarkRow, BookmarkSelect, BoxFuture, Capabilities, ChildWaitIndex, ClaimedInstance,
    ClaimedRecord, Commit, ControlRequest, DeadLetter, DeadLetterFilter, DueTimers, Enqueue,
    IdempotencyRecord, IncidentQuery, IncidentRecord, InstanceFilter, InstanceRecord,
    JournalRecord, Lease, LeaseClaim, LeaseKey, ListedInstance, MemoryStore, Micros, NewIncident,
    NewInstance, PurgeTarget, QueueItem, Renewal, Schedule, ScheduleFiring, Settled, Settlement,
    SqliteStore, Store, StoreError, StoreResult, StoreStats, TimerRow, TimerScope, TriggerRow,
    TriggerSelect, TriggerWrite,
};
use workflow_runtime::{
    Completion, Runtime, SendError, StartOptions, Stimulus, TaskContext, WorkflowStatus, workflow,
};

// ---- the wrapper ---------------------------------------------------------------------------

/// A call of the backend trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    CreateInstance,
    LoadInstance,
    ClaimInstance,
    Commit,
    RequestControl,
    ListInstances,
    ClaimRunnable,
    Purge,
    AcquireLease,
    RenewLease,
    ReleaseLease,
    FindBookmarks,
    FindChildWaits,
    HasReceipt,
    FindTriggers,
    WriteTriggers,
    ClaimDueTimers,
    ListTimers,
    PutSchedule,
    FireSchedule,
    ReadJournal,
    Enqueue,
    ClaimQueuePage,
    SettleQueueItem,
    ReplayDeadLetter,
    ListDeadLetters,
    InsertIncident,
    ListIncidents,
    FindIdempotencyRecord,
    Stats,
}

/// What happens to a chosen call.
#[derive(Debug, Clone)]
enum Fault {
    /// Fails with `Unavailable` without reaching the backend: nothing is written.
    Fail,
    /// Reaches the backend, then fails with `Unavailable`: it is written, the answer is lost.
    FailAfter,
    /// Waits this long, then reaches the backend.
    Delay(Duration),
}

/// One rule: the calls of `op` after the first `skip` ones, `times` of them, get `fault`.
#[derive(Debug, Clone)]
struct Rule {
    op: Op,
    skip: usize,
    times: usize,
    fault: Fault,
}

/// Random failures: each call of any op but `spared` fails (before or after reaching the
/// backend, half and half) with probability `percent`/100, from a seeded generator.
#[derive(Debug)]
struct Chaos {
    spared: Vec<Op>,
    percent: u64,
    state: u64,
}

/// A backend wrapper that fails or delays chosen calls (see [`Rule`] and [`Chaos`]).
struct FaultyStore {
    inner: Arc<dyn Store>,
    rules: Mutex<Vec<Rule>>,
    chaos: Mutex<Option<Chaos>>,
    calls: Mutex<HashMap<Op, usize>>,
    injected: AtomicUsize,
}

impl FaultyStore {
    fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            rules: Mutex::new(Vec::new()),
            chaos: Mutex::new(None),
            calls: Mutex::new(HashMap::new()),
            injected: AtomicUsize::new(0),
        })
    }

    /// The next `times` calls of `op` get `fault` (counted from now).
    fn inject(&self, op: Op, times: usize, fault: Fault) {
        let seen = self.calls(op);
        self.rules.lock().unwrap().push(Rule {
            op,
            skip: seen,
            times,
            fault,
        });
    }

    /// The `times` calls of `op` after the next `after` ones get `fault`.
    fn inject_after(&self, op: Op, after: usize, times: usize, fault: Fault) {
        let seen = self.calls(op);
        self.rules.lock().unwrap().push(Rule {
            op,
            skip: seen + after,
            times,
            fault,
        });
    }

    /// Random failures of every op but `spared` from now on (`None` stops them).
    fn chaos(&self, chaos: Option<(Vec<Op>, u64, u64)>) {
        *self.chaos.lock().unwrap() = chaos.map(|(spared, percent, seed)| Chaos {
            spared,
            percent,
            state: seed,
        });
    }

    fn clear(&self) {
        self.rules.lock().unwrap().clear();
        self.chaos(None);
    }

    /// How many calls of `op` were made so far.
    fn calls(&self, op: Op) -> usize {
        self.calls.lock().unwrap().get(&op).copied().unwrap_or(0)
    }

    /// How many faults were injected so far.
    fn injected(&self) -> usize {
        self.injected.load(Ordering::SeqCst)
    }

    /// Counts the call and picks its fault, if any.
    fn fault_for(&self, op: Op) -> Option<Fault> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(op).or_insert(0);
            *n += 1;
            *n
        };
        let ruled = self
            .rules
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.op == op && n > r.skip && n <= r.skip + r.times)
            .map(|r| r.fault.clone());
        let fault = ruled.or_else(|| {
            let mut chaos = self.chaos.lock().unwrap();
            let chaos = chaos.as_mut()?;
            if chaos.spared.contains(&op) {
                return None;
            }
            let draw = splitmix(&mut chaos.state);
            let fault = if draw.is_multiple_of(2) {
                Fault::Fail
            } else {
                Fault::FailAfter
            };
            (draw % 100 < chaos.percent).then_some(fault)
        });
        if matches!(fault, Some(Fault::Fail | Fault::FailAfter)) {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    /// Runs `call` (lazily: it reaches the backend only if the fault lets it) under the fault
    /// chosen for `op`.
    async fn around<T>(
        &self,
        op: Op,
        call: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let injected = || StoreError::Unavailable {
            message: format!("injected failure of {op:?}"),
        };
        match self.fault_for(op) {
            None => call.await,
            Some(Fault::Delay(pause)) => {
                tokio::time::sleep(pause).await;
                call.await
            }
            Some(Fault::Fail) => Err(injected()),
            Some(Fault::FailAfter) => {
                let _ = call.await;
                Err(injected())
            }
        }
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Store for FaultyStore {
    fn create_instance(&self, instance: NewInstance<String>) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(self.around(Op::CreateInstance, async move {
            self.inner.create_instance(instance).await
        }))
    }

    fn load_instance(
        &self,
        instance_id: &str,
    ) -> BoxFuture<'_, StoreResult<InstanceRecord<String>>> {
        let instance_id = instance_id.to_owned();
        Box::pin(self.around(Op::LoadInstance, async move {
            self.inner.load_instance(&instance_id).await
        }))
    }

    fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> BoxFuture<'_, StoreResult<ClaimedRecord<String>>> {
        let instance_id = instance_id.to_owned();
        Box::pin(self.around(Op::ClaimInstance, async move {
            self.inner.claim_instance(&instance_id, claim).await
        }))
    }

    fn commit(&self, commit: Commit<String>) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(self.around(Op::Commit, async move { self.inner.commit(commit).await }))
    }

    fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> BoxFuture<'_, StoreResult<WorkflowStatus>> {
        let instance_id = instance_id.to_owned();
        Box::pin(self.around(Op::RequestControl, async move {
            self.inner.request_control(&instance_id, request).await
        }))
    }

    fn list_instances(
        &self,
        filter: InstanceFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<ListedInstance>>> {
        Box::pin(self.around(Op::ListInstances, async move {
            self.inner.list_instances(filter).await
        }))
    }

    fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<ClaimedInstance>>> {
        let owner = owner.to_owned();
        Box::pin(self.around(Op::ClaimRunnable, async move {
            self.inner.claim_runnable(&owner, now, ttl, limit).await
        }))
    }

    fn purge(&self, target: PurgeTarget) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(self.around(Op::Purge, async move { self.inner.purge(target).await }))
    }

    fn acquire_lease(
        &self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Lease>> {
        let key = key.clone();
        let owner = owner.to_owned();
        Box::pin(self.around(Op::AcquireLease, async move {
            self.inner.acquire_lease(&key, &owner, now, ttl).await
        }))
    }

    fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<Renewal>> {
        let key = key.clone();
        Box::pin(self.around(Op::RenewLease, async move {
            self.inner.renew_lease(&key, token, now, ttl).await
        }))
    }

    fn release_lease(&self, key: &LeaseKey, token: u64) -> BoxFuture<'_, StoreResult<()>> {
        let key = key.clone();
        Box::pin(self.around(Op::ReleaseLease, async move {
            self.inner.release_lease(&key, token).await
        }))
    }

    fn find_bookmarks(
        &self,
        select: BookmarkSelect,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        Box::pin(self.around(Op::FindBookmarks, async move {
            self.inner.find_bookmarks(select).await
        }))
    }

    fn has_receipt(
        &self,
        instance_id: &str,
        stimulus_id: &str,
    ) -> BoxFuture<'_, StoreResult<bool>> {
        let instance_id = instance_id.to_owned();
        let stimulus_id = stimulus_id.to_owned();
        Box::pin(self.around(Op::HasReceipt, async move {
            self.inner.has_receipt(&instance_id, &stimulus_id).await
        }))
    }

    fn find_triggers(&self, select: TriggerSelect) -> BoxFuture<'_, StoreResult<Vec<TriggerRow>>> {
        Box::pin(self.around(Op::FindTriggers, async move {
            self.inner.find_triggers(select).await
        }))
    }

    fn write_triggers(
        &self,
        definition_name: &str,
        write: TriggerWrite,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let definition_name = definition_name.to_owned();
        Box::pin(self.around(Op::WriteTriggers, async move {
            self.inner.write_triggers(&definition_name, write).await
        }))
    }

    fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<DueTimers>> {
        let owner = owner.to_owned();
        Box::pin(self.around(Op::ClaimDueTimers, async move {
            self.inner
                .claim_due_timers(&owner, now, claim_ttl, limit)
                .await
        }))
    }

    fn list_timers(&self, scope: TimerScope) -> BoxFuture<'_, StoreResult<Vec<TimerRow>>> {
        Box::pin(self.around(Op::ListTimers, async move {
            self.inner.list_timers(scope).await
        }))
    }

    fn put_schedule(&self, schedule: Schedule) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(self.around(Op::PutSchedule, async move {
            self.inner.put_schedule(schedule).await
        }))
    }

    fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<String>>,
        next_due: Option<Micros>,
    ) -> BoxFuture<'_, StoreResult<ScheduleFiring>> {
        let schedule_id = schedule_id.to_owned();
        Box::pin(self.around(Op::FireSchedule, async move {
            self.inner
                .fire_schedule(&schedule_id, expected_due_at, instance, next_due)
                .await
        }))
    }

    fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<JournalRecord<String>>>> {
        let instance_id = instance_id.to_owned();
        Box::pin(self.around(Op::ReadJournal, async move {
            self.inner.read_journal(&instance_id, from_seq, limit).await
        }))
    }

    fn enqueue(&self, send: Enqueue) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        Box::pin(self.around(Op::Enqueue, async move { self.inner.enqueue(send).await }))
    }

    fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<QueueItem>>> {
        let owner = owner.to_owned();
        Box::pin(self.around(Op::ClaimQueuePage, async move {
            self.inner
                .claim_queue_page(&owner, now, claim_ttl, limit)
                .await
        }))
    }

    fn settle_queue_item(
        &self,
        item_id: &str,
        settlement: Settlement,
    ) -> BoxFuture<'_, StoreResult<Settled>> {
        let item_id = item_id.to_owned();
        Box::pin(self.around(Op::SettleQueueItem, async move {
            self.inner.settle_queue_item(&item_id, settlement).await
        }))
    }

    fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> BoxFuture<'_, StoreResult<QueueItem>> {
        let item_id = item_id.to_owned();
        Box::pin(self.around(Op::ReplayDeadLetter, async move {
            self.inner.replay_dead_letter(&item_id, now, ttl).await
        }))
    }

    fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
    ) -> BoxFuture<'_, StoreResult<Vec<DeadLetter>>> {
        Box::pin(self.around(Op::ListDeadLetters, async move {
            self.inner.list_dead_letters(filter).await
        }))
    }

    fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> BoxFuture<'_, StoreResult<()>> {
        let instance_id = instance_id.to_owned();
        Box::pin(self.around(Op::InsertIncident, async move {
            self.inner.insert_incident(&instance_id, incident).await
        }))
    }

    fn list_incidents(
        &self,
        query: IncidentQuery,
    ) -> BoxFuture<'_, StoreResult<Vec<IncidentRecord>>> {
        Box::pin(self.around(Op::ListIncidents, async move {
            self.inner.list_incidents(query).await
        }))
    }

    fn find_idempotency_record(
        &self,
        key: &str,
    ) -> BoxFuture<'_, StoreResult<Option<IdempotencyRecord>>> {
        let key = key.to_owned();
        Box::pin(self.around(Op::FindIdempotencyRecord, async move {
            self.inner.find_idempotency_record(&key).await
        }))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        Box::pin(self.around(Op::Stats, async move { self.inner.stats().await }))
    }

    fn capabilities(&self) -> Capabilities<'_> {
        let inner = self.inner.capabilities();
        let mut capabilities = Capabilities::default();
        if let Some(definitions) = inner.definitions {
            capabilities = capabilities.with_definitions(definitions);
        }
        if inner.child_waits.is_some() {
            capabilities = capabilities.with_child_waits(self);
        }
        if let Some(receipts) = inner.receipts {
            capabilities = capabilities.with_receipts(receipts);
        }
        if let Some(remote_hints) = inner.remote_hints {
            capabilities = capabilities.with_remote_hints(remote_hints);
        }
        capabilities
    }
}

impl ChildWaitIndex for FaultyStore {
    fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, StoreResult<Vec<BookmarkRow>>> {
        Box::pin(self.around(Op::FindChildWaits, async move {
            match self.inner.capabilities().child_waits {
                Some(index) => index.find_child_waits(after, limit).await,
                None => Err(StoreError::Unavailable {
                    message: "the wrapped store lost its child-wait index".into(),
                }),
            }
        }))
    }
}

// ---- the workflows -------------------------------------------------------------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    id: String,
    /// One entry per event applied, in order.
    seen: Vec<String>,
}

async fn count_one(ctx: &mut TaskContext<Tally>) {
    ctx.data_mut().seen.push("one".to_owned());
}

async fn count_two(ctx: &mut TaskContext<Tally>) {
    ctx.data_mut().seen.push("two".to_owned());
}

async fn after_nap(ctx: &mut TaskContext<Tally>) {
    ctx.data_mut().seen.push("nap".to_owned());
}

workflow! {
    /// Two events in turn, each counted by a task.
    pub workflow Twice(Tally) = sequence [
        event("one").key(id), task(count_one),
        event("two").key(id), task(count_two),
    ];
}

workflow! {
    /// Started by an `opened` event (its trigger), counts it, then waits for `two`.
    pub workflow Opened(Tally) {
        opened = event::<Tally>("opened").trigger();
        one = task(count_one);
        two = event("two").key(id);
        counted = task(count_two);

        opened -> one -> two -> counted;
    }
}

workflow! {
    /// Waits for an `all` event (no key: every waiting instance takes it), then counts it.
    pub workflow Everyone(Tally) = sequence [event("all"), task(count_one)];
}

workflow! {
    /// Waits for `go`, then takes two `all` events (no key) in turn, counting each.
    pub workflow Gated(Tally) = sequence [
        event("go").key(id),
        event("all"), task(count_one),
        event("all"), task(count_two),
    ];
}

workflow! {
    /// A short durable nap, then a task.
    pub workflow Nap(Tally) = sequence [after(millis(50)), task(after_nap)];
}

fn stores() -> Vec<(&'static str, Arc<dyn Store>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("faulty.db")).unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()), None),
        ("sqlite", Arc::new(sqlite), Some(dir)),
    ]
}

fn runtime(store: &Arc<FaultyStore>) -> Runtime {
    let backend: Arc<dyn Store> = store.clone();
    Runtime::builder()
        .store(backend)
        .register::<Twice>()
        .register::<Nap>()
        .register::<Opened>()
        .register::<Everyone>()
        .lease_ttl(Duration::from_millis(400))
        .lease_renewal(Duration::from_millis(100))
        .recovery_sweep(Some(Duration::from_millis(100)))
        .inbox_sweep(Duration::from_millis(100))
        .sweep_interval(Some(Duration::from_millis(100)))
        .build()
        .unwrap()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn tally(id: &str) -> Tally {
    Tally {
        id: id.to_owned(),
        seen: Vec::new(),
    }
}

fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

async fn data(rt: &Runtime, id: &str) -> Tally {
    rt.get_state(id).await.unwrap().unwrap().data().unwrap()
}

// ---- scenarios -----------------------------------------------------------------------------

// ENG-29, RT-22: a send whose run cannot commit gets an error and leaves the instance as it
// was (version, bookmarks, journal); the same send again (same idempotency key) resumes it
// once.
#[test]
fn a_failed_commit_leaves_the_state_intact_and_the_retried_send_applies_once() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Twice>(tally("t-1"), with_id("t-1"))
                .await
                .unwrap();
            let before = rt.get_state("t-1").await.unwrap().unwrap();
            let version = store.load_instance("t-1").await.unwrap().version;

            store.inject(Op::Commit, 1, Fault::Fail);
            let send = || Stimulus::new("one").key("t-1").idempotency_key("t-1/one");
            let failed = rt.send(send()).await;
            assert!(
                matches!(failed, Err(SendError::Run(_) | SendError::Store(_))),
                "{label}: the caller is told: {failed:?}"
            );
            let after = rt.get_state("t-1").await.unwrap().unwrap();
            let unchanged = store.load_instance("t-1").await.unwrap().version;
            assert_eq!(unchanged, version, "{label}");
            assert_eq!(after.state.bookmarks(), before.state.bookmarks(), "{label}");
            assert_eq!(after.journal.len(), before.journal.len(), "{label}");
            assert_eq!(after.status(), WorkflowStatus::Suspended, "{label}");

            let report = rt.send(send()).await.unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            // Once more: a duplicate, not a second application.
            let again = rt.send(send()).await.unwrap();
            assert!(again.duplicate, "{label}: {again:?}");
            assert_eq!(data(&rt, "t-1").await.seen, ["one"], "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19: a send to several instances that stops after its first delivery's commit (the next
// delivery cannot commit, and the send's own last write fails: as if the process died there)
// is carried on by its retry: the instances not yet delivered get it, the one delivered does
// not get it twice, and only then is the send answered as a duplicate.
#[test]
fn a_send_stopped_after_its_first_delivery_is_carried_on_by_its_retry() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            // How many commits one delivery makes.
            rt.start_with::<Everyone>(tally("e-0"), with_id("e-0"))
                .await
                .unwrap();
            let commits = store.calls(Op::Commit);
            rt.send(Stimulus::new("all")).await.unwrap();
            let per_delivery = store.calls(Op::Commit) - commits;
            assert_eq!(data(&rt, "e-0").await.seen, ["one"], "{label}");

            for id in ["e-1", "e-2"] {
                rt.start_with::<Everyone>(tally(id), with_id(id))
                    .await
                    .unwrap();
            }
            store.inject_after(Op::Commit, per_delivery, 100, Fault::Fail);
            store.inject(Op::Enqueue, 1, Fault::Fail);
            let send = || Stimulus::new("all").idempotency_key("all/1");
            let stopped = rt.send(send()).await;
            assert!(stopped.is_err(), "{label}: {stopped:?}");
            store.clear();
            let delivered: Vec<&str> = {
                let mut delivered = Vec::new();
                for id in ["e-1", "e-2"] {
                    if data(&rt, id).await.seen == ["one"] {
                        delivered.push(id);
                    }
                }
                delivered
            };
            assert_eq!(
                delivered.len(),
                1,
                "{label}: one delivery committed: {delivered:?}"
            );

            let retried = rt.send(send()).await.unwrap();
            assert!(!retried.duplicate, "{label}: {retried:?}");
            assert_eq!(retried.resumed.len(), 1, "{label}: {retried:?}");
            for id in ["e-1", "e-2"] {
                assert_eq!(data(&rt, id).await.seen, ["one"], "{label}: {id}");
                assert_eq!(
                    rt.get_state(id).await.unwrap().unwrap().status(),
                    WorkflowStatus::Finished,
                    "{label}: {id}"
                );
            }
            let again = rt.send(send()).await.unwrap();
            assert!(again.duplicate, "{label}: {again:?}");
            assert_eq!(again.resumed, retried.resumed, "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// A commit that was written but whose answer was lost: the caller gets an error, the retried
// send finds the stimulus consumed (its receipt), and nothing is applied twice.
#[test]
fn a_commit_whose_answer_was_lost_is_not_applied_twice() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Twice>(tally("t-2"), with_id("t-2"))
                .await
                .unwrap();
            store.inject(Op::Commit, 1, Fault::FailAfter);
            let send = || Stimulus::new("one").key("t-2").idempotency_key("t-2/one");
            let failed = rt.send(send()).await;
            assert!(failed.is_err(), "{label}: {failed:?}");
            let retried = rt.send(send()).await;
            assert!(retried.is_ok(), "{label}: {retried:?}");
            assert_eq!(data(&rt, "t-2").await.seen, ["one"], "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19: a direct send's idempotency record is written by the commit that delivers it, so a
// send that fails after that commit (its completing write lost) is a duplicate when retried,
// not a stray copy queued for a bookmark that will never come.
#[test]
fn a_direct_send_failing_after_its_commit_is_a_duplicate_when_retried() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Twice>(tally("t-4"), with_id("t-4"))
                .await
                .unwrap();
            // The send's only write after its run's commit: completing its record.
            store.inject(Op::Enqueue, 1, Fault::Fail);
            let send = || Stimulus::new("one").key("t-4").idempotency_key("t-4/one");
            let failed = rt.send(send()).await;
            assert!(
                matches!(failed, Err(SendError::Store(_))),
                "{label}: {failed:?}"
            );
            assert_eq!(data(&rt, "t-4").await.seen, ["one"], "{label}");
            let again = rt.send(send()).await.unwrap();
            assert!(again.duplicate, "{label}: {again:?}");
            assert_eq!(again.inbox_item, None, "{label}: no stray copy queued");
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            assert_eq!(data(&rt, "t-4").await.seen, ["one"], "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

/// The ids of the queue items now in `store`, claimed for a microsecond (so the claim has
/// lapsed when the runtime looks).
async fn queued_items(store: &FaultyStore) -> Vec<QueueItem> {
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();
    store
        .inner
        .claim_queue_page("inspector", now, 1, 100)
        .await
        .unwrap()
}

// RT-19, RT-27: a queued stimulus for one instance is deleted by the commit that delivers it,
// so a worker stopped between that commit and its acknowledgement (here the acknowledgement
// fails) leaves nothing queued: the stimulus is applied once, nothing is delivered again, and
// no dead letter claims it was lost.
#[test]
fn a_delivered_queue_item_goes_with_its_commit_when_its_acknowledgement_is_lost() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let faulty: Arc<dyn Store> = store.clone();
            let rt = Runtime::builder()
                .store(faulty)
                .register::<Twice>()
                .lease_ttl(Duration::from_millis(300))
                .inbox_worker(false)
                .timer_driver(false)
                .recovery_sweep(None)
                .build()
                .unwrap();
            rt.start_with::<Twice>(tally("h-1"), with_id("h-1"))
                .await
                .unwrap();
            rt.suspend("h-1").await.unwrap();
            let held = rt.send(Stimulus::new("one").key("h-1")).await.unwrap();
            assert_eq!(held.deferred, ["h-1"], "{label}: {held:?}");
            rt.resume("h-1").await.unwrap();
            assert_eq!(data(&rt, "h-1").await.seen, Vec::<String>::new(), "{label}");

            store.inject(Op::SettleQueueItem, 1, Fault::Fail);
            let stopped = rt.deliver_inbox().await;
            assert!(stopped.is_err(), "{label}: {stopped:?}");
            assert_eq!(data(&rt, "h-1").await.seen, ["one"], "{label}");
            // The worker's claim on what it did not settle lapses.
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(
                queued_items(&store).await.is_empty(),
                "{label}: the delivered item is still queued"
            );
            assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}");
            assert_eq!(data(&rt, "h-1").await.seen, ["one"], "{label}");
            let dead = rt.dead_letters(DeadLetterFilter::all(10)).await.unwrap();
            assert!(dead.is_empty(), "{label}: {dead:?}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19, RT-21: a stimulus sent (without an idempotency key) before anyone waits for it is
// queued under the send's stimulus id and offered to every instance that waits for it later.
// Its delivery writes each instance's receipt, so when the worker stops between those
// commits and the item's acknowledgement (here the acknowledgement fails), the item found
// again is not applied a second time: each instance counts it once, although each now waits
// for the same event again. A direct send reaching an instance at once writes no receipt:
// its id is its own, and it reaches each instance once.
#[test]
fn a_queued_stimulus_redelivered_after_a_lost_acknowledgement_is_applied_once() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let faulty: Arc<dyn Store> = store.clone();
            let rt = Runtime::builder()
                .store(faulty)
                .register::<Gated>()
                .lease_ttl(Duration::from_millis(300))
                .inbox_worker(false)
                .timer_driver(false)
                .recovery_sweep(None)
                .build()
                .unwrap();
            for id in ["g-1", "g-2"] {
                rt.start_with::<Gated>(tally(id), with_id(id))
                    .await
                    .unwrap();
            }
            let early = rt.send(Stimulus::new("all")).await.unwrap();
            assert!(early.inbox_item.is_some(), "{label}: {early:?}");
            for id in ["g-1", "g-2"] {
                let go = rt.send(Stimulus::new("go").key(id)).await.unwrap();
                assert_eq!(go.resumed.len(), 1, "{label}: {go:?}");
                assert!(
                    !store.inner.has_receipt(id, &go.stimulus_id).await.unwrap(),
                    "{label}: a direct send without a key writes no receipt"
                );
            }

            store.inject(Op::SettleQueueItem, 1, Fault::Fail);
            let stopped = rt.deliver_inbox().await;
            assert!(stopped.is_err(), "{label}: {stopped:?}");
            for id in ["g-1", "g-2"] {
                assert_eq!(data(&rt, id).await.seen, ["one"], "{label}: {id}");
                assert!(
                    store
                        .inner
                        .has_receipt(id, &early.stimulus_id)
                        .await
                        .unwrap(),
                    "{label}: {id} holds the queued stimulus's receipt"
                );
            }
            // The worker's claim on the item it did not acknowledge lapses; the item is
            // found again, and each instance waits for `all` again.
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(queued_items(&store).await.len(), 1, "{label}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            rt.deliver_inbox().await.unwrap();
            for id in ["g-1", "g-2"] {
                assert_eq!(
                    data(&rt, id).await.seen,
                    ["one"],
                    "{label}: {id} applied the redelivered stimulus twice"
                );
            }
            // A new stimulus still reaches both.
            let next = rt.send(Stimulus::new("all")).await.unwrap();
            assert_eq!(next.resumed.len(), 2, "{label}: {next:?}");
            for id in ["g-1", "g-2"] {
                assert_eq!(data(&rt, id).await.seen, ["one", "two"], "{label}: {id}");
            }
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19, RT-23: an enqueued send is routed by the worker from its route item; when the
// worker stops between the delivery (its commit writes the instance's receipt) and the
// item's acknowledgement (here the acknowledgement fails), the item found again is routed
// again. The instance has moved on (it waits for `two` now), so nothing matches: the second
// routing knows the stimulus consumed by its receipt and is a no-op, instead of queuing a
// copy that would only wait to expire.
#[test]
fn a_route_item_routed_again_after_a_lost_acknowledgement_leaves_no_copy() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let faulty: Arc<dyn Store> = store.clone();
            let rt = Runtime::builder()
                .store(faulty)
                .register::<Twice>()
                .lease_ttl(Duration::from_millis(300))
                .inbox_worker(false)
                .timer_driver(false)
                .recovery_sweep(None)
                .build()
                .unwrap();
            rt.start_with::<Twice>(tally("r-1"), with_id("r-1"))
                .await
                .unwrap();
            let sent = rt
                .send(Stimulus::new("one").key("r-1").via_inbox())
                .await
                .unwrap();
            assert!(sent.inbox_item.is_some(), "{label}: {sent:?}");

            store.inject(Op::SettleQueueItem, 1, Fault::Fail);
            let stopped = rt.deliver_inbox().await;
            assert!(stopped.is_err(), "{label}: {stopped:?}");
            assert_eq!(data(&rt, "r-1").await.seen, ["one"], "{label}");
            assert!(
                store
                    .inner
                    .has_receipt("r-1", &sent.stimulus_id)
                    .await
                    .unwrap(),
                "{label}: the delivery wrote its receipt"
            );
            // The worker's claim on the route item lapses; it is found again.
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(queued_items(&store).await.len(), 1, "{label}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            rt.deliver_inbox().await.unwrap();
            assert_eq!(data(&rt, "r-1").await.seen, ["one"], "{label}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            let left = queued_items(&store).await;
            assert!(
                left.is_empty(),
                "{label}: a consumed stimulus was queued again: {left:?}"
            );
            let dead = rt.dead_letters(DeadLetterFilter::all(10)).await.unwrap();
            assert!(dead.is_empty(), "{label}: {dead:?}");
            // The instance goes on as before.
            let two = rt.send(Stimulus::new("two").key("r-1")).await.unwrap();
            assert_eq!(two.resumed.len(), 1, "{label}: {two:?}");
            assert_eq!(data(&rt, "r-1").await.seen, ["one", "two"], "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19: a send whose trigger starts an instance writes its idempotency record with the
// creation, so a send failing after that (its record's completion lost) is a duplicate when
// retried: no second run, no stray copy queued for a wait that could take it later.
#[test]
fn a_trigger_start_failing_after_its_creation_is_a_duplicate_when_retried() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            let send = || {
                Stimulus::new("opened")
                    .payload(serde_json::json!({ "id": "o-1", "seen": [] }))
                    .idempotency_key("o-1/opened")
            };
            // The send's first lookup of its record passes; the one completing it fails.
            store.inject_after(Op::FindIdempotencyRecord, 1, 1, Fault::Fail);
            let failed = rt.send(send()).await;
            assert!(
                matches!(failed, Err(SendError::Store(_))),
                "{label}: {failed:?}"
            );
            let again = rt.send(send()).await.unwrap();
            assert!(again.duplicate, "{label}: {again:?}");
            assert_eq!(again.inbox_item, None, "{label}: no stray copy queued");
            assert!(again.started.is_empty(), "{label}: {again:?}");
            let instances = rt
                .list_instances(workflow_runtime::InstanceQuery {
                    definition: Some("Opened".to_owned()),
                    ..workflow_runtime::InstanceQuery::default()
                })
                .await
                .unwrap();
            assert_eq!(instances.len(), 1, "{label}: one instance: {instances:?}");
            assert!(queued_items(&store).await.is_empty(), "{label}");
            assert_eq!(data(&rt, &instances[0].instance_id).await.seen, ["one"]);
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-18, RT-19: a send deferred for a paused instance writes its held item with its
// idempotency record, so a send failing after that is a duplicate when retried, and the
// instance finds one item, not two, when it is resumed.
#[test]
fn a_deferred_send_failing_after_its_enqueue_is_a_duplicate_when_retried() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Twice>(tally("t-5"), with_id("t-5"))
                .await
                .unwrap();
            rt.suspend("t-5").await.unwrap();
            let send = || Stimulus::new("one").key("t-5").idempotency_key("t-5/one");
            store.inject_after(Op::FindIdempotencyRecord, 1, 1, Fault::Fail);
            let failed = rt.send(send()).await;
            assert!(
                matches!(failed, Err(SendError::Store(_))),
                "{label}: {failed:?}"
            );
            let again = rt.send(send()).await.unwrap();
            assert!(again.duplicate, "{label}: {again:?}");
            assert_eq!(
                again.deferred,
                ["t-5"],
                "{label}: the first report: {again:?}"
            );
            // The runtime's queue worker may hold the item claimed for a moment (it finds
            // the instance paused and puts it back): the inspector looks again.
            let mut items = queued_items(&store).await;
            for _ in 0..20 {
                if !items.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                items = queued_items(&store).await;
            }
            assert_eq!(items.len(), 1, "{label}: one held item: {items:?}");
            rt.resume("t-5").await.unwrap();
            rt.deliver_inbox().await.unwrap();
            assert_eq!(data(&rt, "t-5").await.seen, ["one"], "{label}");
            assert!(queued_items(&store).await.is_empty(), "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// TM-6: a timer whose firing run cannot commit keeps its bookmark; the claim expires and the
// timer fires again.
#[test]
fn a_timer_whose_run_cannot_commit_fires_again() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Nap>(tally("n-1"), with_id("n-1"))
                .await
                .unwrap();
            // The firing run's next two commits fail.
            store.inject(Op::Commit, 2, Fault::Fail);
            let done = rt.await_completion("n-1", Duration::from_secs(10)).await;
            assert!(
                matches!(done, Ok(Completion::Finished(_))),
                "{label}: {done:?}"
            );
            assert_eq!(data(&rt, "n-1").await.seen, ["nap"], "{label}");
            assert!(store.injected() >= 2, "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

/// What a start whose first run met `fault` leaves, once the background work settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    /// Nothing: the start failed and was discarded (the id is free again).
    Nothing,
    /// A `Cancelled` instance, in the row and in the document alike (the discard's delete
    /// failed too).
    Cancelled,
    /// The instance, run to its first wait (the failure came after the work was written).
    Waiting,
}

// A start whose first run fails is an error for the caller, and what it leaves is coherent:
// nothing when the run could not commit (ENG-29); a `Cancelled` instance whose row and
// document agree when removing it failed too; the instance at its first wait when the
// failure only lost an answer (the creation, recovered by the sweep, or the commit).
#[test]
fn a_start_whose_first_run_fails_leaves_nothing_or_a_coherent_instance() {
    let cases = [
        (Op::CreateInstance, Fault::FailAfter, false, Left::Waiting),
        (Op::Commit, Fault::Fail, false, Left::Nothing),
        (Op::Commit, Fault::Fail, true, Left::Cancelled),
        (Op::Commit, Fault::FailAfter, false, Left::Waiting),
    ];
    for (label, backend, _dir) in stores() {
        for (n, (op, fault, delete_fails, left)) in cases.iter().enumerate() {
            let backend = Arc::clone(&backend);
            block_on(async {
                let store = FaultyStore::new(backend);
                let rt = runtime(&store);
                let id = format!("first-{n}");
                store.inject(*op, 1, fault.clone());
                if *delete_fails {
                    // Every purge for a while (the retention's first pass purges too).
                    store.inject(Op::Purge, 20, Fault::Fail);
                }
                let case = format!("{label}: {op:?} {fault:?}, delete fails: {delete_fails}");
                let started = rt.start_with::<Twice>(tally(&id), with_id(&id)).await;
                assert!(started.is_err(), "{case}: {started:?}");
                // Within two lease TTLs the recovery sweep has run what it may run.
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                let state = rt.get_state(&id).await.unwrap();
                let row = store.load_instance(&id).await.ok().map(|r| r.status);
                match left {
                    Left::Nothing => assert!(state.is_none() && row.is_none(), "{case}: {row:?}"),
                    Left::Cancelled => {
                        let status = state.map(|s| s.status());
                        assert_eq!(status, Some(WorkflowStatus::Cancelled), "{case}");
                        assert_eq!(row, Some(WorkflowStatus::Cancelled), "{case}");
                    }
                    Left::Waiting => {
                        let status = state.map(|s| s.status());
                        assert_eq!(status, Some(WorkflowStatus::Suspended), "{case}");
                    }
                }
                rt.shutdown(Duration::from_secs(1)).await;
            });
        }
    }
}

// RT-21: an early stimulus whose queueing fails is an error for the caller, never a silent
// loss; sent again, it is queued and delivered when the wait appears.
#[test]
fn an_early_stimulus_that_cannot_be_queued_is_an_error() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            rt.start_with::<Twice>(tally("t-3"), with_id("t-3"))
                .await
                .unwrap();
            // `two` before the instance waits for it: it has to be queued.
            store.inject(Op::Enqueue, 1, Fault::Fail);
            let early = || Stimulus::new("two").key("t-3").idempotency_key("t-3/two");
            let failed = rt.send(early()).await;
            assert!(failed.is_err(), "{label}: {failed:?}");
            let queued = rt.send(early()).await.unwrap();
            assert!(queued.inbox_item.is_some(), "{label}: {queued:?}");
            let one = rt.send(Stimulus::new("one").key("t-3")).await.unwrap();
            assert_eq!(one.resumed.len(), 1, "{label}: {one:?}");
            let done = rt.await_completion("t-3", Duration::from_secs(10)).await;
            assert!(
                matches!(done, Ok(Completion::Finished(_))),
                "{label}: {done:?}"
            );
            assert_eq!(data(&rt, "t-3").await.seen, ["one", "two"], "{label}");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-22, RT-28: a queued stimulus whose delivery meets transient store failures stays in the
// queue however many passes fail (only its TTL bounds it); it is not dead-lettered after a
// few attempts, and the next pass that finds the store well delivers it.
#[test]
fn transient_failures_of_queue_deliveries_do_not_dead_letter_the_stimulus() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = {
                let backend: Arc<dyn Store> = store.clone();
                Runtime::builder()
                    .store(backend)
                    .register::<Twice>()
                    .inbox_worker(false)
                    .build()
                    .unwrap()
            };
            rt.start_with::<Twice>(tally("q-1"), with_id("q-1"))
                .await
                .unwrap();
            let early = rt.send(Stimulus::new("two").key("q-1")).await.unwrap();
            assert!(early.inbox_item.is_some(), "{label}: {early:?}");
            let one = rt.send(Stimulus::new("one").key("q-1")).await.unwrap();
            assert_eq!(one.resumed.len(), 1, "{label}: {one:?}");
            // Five passes in a row cannot take the instance's lease (every claim of a lease
            // fails meanwhile, the background's own included; a run takes the lease and loads
            // the instance in one claim).
            store.inject(Op::ClaimInstance, 1_000, Fault::Fail);
            store.inject(Op::AcquireLease, 1_000, Fault::Fail);
            for pass in 0..5 {
                assert_eq!(rt.deliver_inbox().await.unwrap(), 0, "{label}: pass {pass}");
            }
            store.clear();
            let dead = rt.dead_letters(DeadLetterFilter::all(10)).await.unwrap();
            assert!(dead.is_empty(), "{label}: {dead:?}");
            assert_eq!(rt.deliver_inbox().await.unwrap(), 1, "{label}");
            assert_eq!(data(&rt, "q-1").await.seen, ["one", "two"], "{label}");
        });
    }
}

// ST-14: slow commits and slow lease renewals (longer than a renewal period) neither lose a
// stimulus nor apply one twice.
#[test]
fn slow_commits_and_renewals_lose_nothing() {
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            for i in 0..4 {
                let id = format!("s-{i}");
                rt.start_with::<Twice>(tally(&id), with_id(&id))
                    .await
                    .unwrap();
            }
            store.inject(Op::Commit, 6, Fault::Delay(Duration::from_millis(150)));
            store.inject(Op::RenewLease, 6, Fault::Delay(Duration::from_millis(150)));
            let mut sends = tokio::task::JoinSet::new();
            for i in 0..4 {
                for event in ["one", "two"] {
                    let rt = rt.clone();
                    let id = format!("s-{i}");
                    sends.spawn(async move {
                        let stimulus = Stimulus::new(event)
                            .key(&id)
                            .idempotency_key(format!("{id}/{event}"));
                        rt.send(stimulus).await
                    });
                }
            }
            while let Some(sent) = sends.join_next().await {
                assert!(sent.unwrap().is_ok(), "{label}");
            }
            for i in 0..4 {
                let id = format!("s-{i}");
                let done = rt.await_completion(&id, Duration::from_secs(10)).await;
                assert!(
                    matches!(done, Ok(Completion::Finished(_))),
                    "{label}: {id}: {done:?}"
                );
                assert_eq!(data(&rt, &id).await.seen, ["one", "two"], "{label}: {id}");
            }
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}

// RT-19, RT-22: under random failures (15 % of every call, before or after reaching the
// backend), each event sent until its send succeeded is applied exactly once: a transient
// error is the caller's to see, or the stimulus is queued and delivered later.
#[test]
fn under_random_store_failures_every_acknowledged_event_is_applied_exactly_once() {
    let seed = std::env::var("FAULTY_STORE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(11, |d| d.as_nanos() as u64)
        });
    println!("faulty store: seed {seed} (FAULTY_STORE_SEED={seed} replays the failure draws)");
    if std::env::var_os("FAULTY_STORE_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .try_init();
    }
    for (label, backend, _dir) in stores() {
        block_on(async {
            let store = FaultyStore::new(backend);
            let rt = runtime(&store);
            const INSTANCES: usize = 8;
            // Every call but the counters.
            store.chaos(Some((vec![Op::Stats], 15, seed)));
            let attempts = Arc::new(AtomicU64::new(0));
            let mut work = tokio::task::JoinSet::new();
            for i in 0..INSTANCES {
                let (rt, attempts) = (rt.clone(), Arc::clone(&attempts));
                work.spawn(async move {
                    let id = format!("r-{i}");
                    // Started until the start succeeds or the instance lives (its creation
                    // was written though the answer was lost); a failed start that left a
                    // `Cancelled` instance is purged and started again.
                    loop {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        if rt
                            .start_with::<Twice>(tally(&id), with_id(&id))
                            .await
                            .is_ok()
                        {
                            break;
                        }
                        match rt.get_state(&id).await {
                            Ok(Some(state)) if state.status() == WorkflowStatus::Cancelled => {
                                let _ = rt.purge(&id).await;
                            }
                            Ok(Some(_)) => break,
                            _ => {}
                        }
                    }
                    // Each event sent with its idempotency key until a send succeeds.
                    for event in ["one", "two"] {
                        let stimulus = Stimulus::new(event)
                            .key(&id)
                            .idempotency_key(format!("{id}/{event}"));
                        loop {
                            attempts.fetch_add(1, Ordering::SeqCst);
                            if rt.send(stimulus.clone()).await.is_ok() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                });
            }
            while let Some(done) = work.join_next().await {
                done.unwrap();
            }
            let injected = store.injected();
            // The store heals; what was queued or interrupted is delivered or recovered.
            store.clear();
            for i in 0..INSTANCES {
                let id = format!("r-{i}");
                let done = rt.await_completion(&id, Duration::from_secs(20)).await;
                if !matches!(done, Ok(Completion::Finished(_))) {
                    let state = rt.get_state(&id).await.unwrap().unwrap();
                    let dead = rt.dead_letters(DeadLetterFilter::all(100)).await.unwrap();
                    panic!(
                        "seed {seed}, {label}: {id}: {done:?}\ndata {:?}\nbookmarks {:?}\njournal {:#?}\ndead letters {dead:#?}",
                        state.data::<Tally>(),
                        state
                            .state
                            .bookmarks()
                            .iter()
                            .map(|b| &b.name)
                            .collect::<Vec<_>>(),
                        state.journal,
                    );
                }
                assert_eq!(
                    data(&rt, &id).await.seen,
                    ["one", "two"],
                    "seed {seed}, {label}: {id}: each event once"
                );
            }
            println!(
                "faulty store, {label}: {INSTANCES} instances, {} calls to start or send, {injected} failures injected",
                attempts.load(Ordering::SeqCst)
            );
            assert!(injected > 0, "seed {seed}, {label}: nothing was injected");
            rt.shutdown(Duration::from_secs(1)).await;
        });
    }
}
