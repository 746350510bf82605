//! [`Storage`]: the policy layer the runtime holds around a backend, written once for every
//! backend (ST-1, ST-18, ST-19, ST-22 to ST-24, ENG-22, ENG-42).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tokio::sync::broadcast;

use super::backend::{
    BookmarkSelect, CHILD_WAIT, ClaimedRecord, DefinitionRecord, DueDebounces, DueTimers, Enqueue,
    IncidentQuery, LeaseClaim, LeaseKey, PurgeTarget, RemoteHints, Settled, Settlement, Store,
    TimerScope, TriggerSelect, TriggerWrite, WakeUp,
};
use super::error::{StoreError, StoreResult};
use super::rows::DebounceRow;
use super::rows::{
    BookmarkQuery, BookmarkRow, Census, ClaimedInstance, Commit, ControlRequest, DeadLetter,
    DeadLetterFilter, DeadLetterReason, IdempotencyRecord, IncidentRecord, InstanceCount,
    InstanceFilter, InstanceRecord, InstanceStatus, InstanceSummary, JournalCompaction,
    JournalRecord, Lease, ListedInstance, NewIncident, NewInstance, NewJournalRecord, PurgeFilter,
    QueueFailure, QueueItem, Renewal, Schedule, ScheduleFiring, StoreStats, TimerRow, TriggerDiff,
    TriggerRow,
};
use super::slots::{
    FlowControl, QueueUsage, SlotAsk, SlotLease, SlotOutcome, SlotRelease, SlotRequest,
};
use crate::base::Micros;
use workflow_model::Queue;

/// The state-document format this library writes and the newest it reads (ST-19); format 1
/// (instants in milliseconds) is still read and converted by the runtime.
pub const STATE_FORMAT: u64 = 2;

/// The default limit on an encoded state document: 16 MiB (ST-24).
pub const DEFAULT_MAX_STATE_BYTES: usize = 16 * 1024 * 1024;

/// The largest journal detail kept as is; longer ones are replaced by a marker (ST-10).
pub const MAX_JOURNAL_DETAIL_BYTES: usize = 64 * 1024;

/// The default page size of listings whose limit is 0.
const DEFAULT_PAGE: usize = 100;
/// The default purge batch (ST-31).
const DEFAULT_PURGE_BATCH: usize = 500;
/// The capacity of the wake-up broadcast; a slow subscriber loses older hints.
const WAKE_UP_CAPACITY: usize = 1024;

/// The store as the runtime uses it: a cheap-to-clone policy layer around a backend
/// (`Arc<dyn Store>`).
///
/// It owns every rule that does not need the backend's atomicity, so each is written once:
/// validation of instance ids (ST-23) and state sizes (ST-24, [`Storage::with_max_state_bytes`]),
/// state document encoding and decoding (ST-19, ST-22), journal detail truncation (ST-10)
/// and the journal cap (ENG-42, [`Storage::with_max_journal_entries`]), the trigger-index
/// diff (ST-7), the cleanup of a final instance (ENG-22), page defaults, and in-process
/// wake-up hints (ST-18, [`Storage::subscribe`]). Clones share the backend and the hints.
///
/// # Examples
///
/// A run as the engine drives it: create, claim (lease and load in one call), commit under
/// version and token.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use workflow_runtime::store::{
///     Commit, InstanceStatus, InstanceSubStatus, LeaseClaim, MemoryStore, NewBookmark,
///     NewInstance, Storage, StoreError,
/// };
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let storage = Storage::new(Arc::new(MemoryStore::new()));
/// let now = 1_700_000_000_000_000; // µs since the epoch, from the caller's clock
/// storage.create_instance(NewInstance {
///     instance_id: "order-1".into(),
///     definition_name: "order".into(),
///     definition_version: "fingerprint".into(),
///     status: InstanceStatus::Running,
///     sub_status: Some(InstanceSubStatus::Pending),
///     correlation_id: None,
///     origin_at: now,
///     created_at: now,
///     state: json!({ "format": 1 }),
///     receipt: None,
///     consumed_queue_item: None,
///     activation_scope: None,
///     listing: None,
///     idempotency: None,
/// }).await?;
/// let claim = LeaseClaim { owner: "node-a".into(), token: None, now, ttl: 30_000_000 };
/// let claimed = storage.claim_instance("order-1", claim).await?;
///
/// let mut commit = Commit::new(
///     "order-1", claimed.record.version, claimed.lease.token, now,
///     json!({ "format": 1, "step": 1 }),
///     InstanceStatus::Suspended, Some(InstanceSubStatus::Waiting),
/// );
/// commit.bookmarks_added.push(NewBookmark {
///     bookmark_id: "bm-1".into(), hash: "approved".into(), name: "approved".into(),
///     node_id: "root:wait".into(), context_id: 2, look_back: None, created_at: now,
/// });
/// commit.release_lease = true;
/// assert_eq!(storage.commit(commit.clone()).await?, 2);
///
/// // The same commit again is stale: nothing is written.
/// assert!(matches!(storage.commit(commit).await, Err(StoreError::Conflict { .. })));
/// # Ok::<(), StoreError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn Store>,
    max_state_bytes: usize,
    max_journal_entries: Option<u64>,
    hints: broadcast::Sender<WakeUp>,
    /// Counts the changes that may make held work possible (RT-27): every commit, every hint
    /// sent here, every hint heard from another process. Shared by every `Storage` over the
    /// same backend value ([`shared_count`]).
    changes: Arc<AtomicU64>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("max_state_bytes", &self.max_state_bytes)
            .field("max_journal_entries", &self.max_journal_entries)
            .finish_non_exhaustive()
    }
}

impl From<Arc<dyn Store>> for Storage {
    fn from(store: Arc<dyn Store>) -> Self {
        Self::new(store)
    }
}

impl<T: Store> From<Arc<T>> for Storage {
    fn from(store: Arc<T>) -> Self {
        Self::new(store)
    }
}

/// The change count of the [`Storage`]s over `store` (RT-27): one per backend value, so
/// runtimes of one process built over one store value (clones of one `Arc`), each with its
/// own `Storage`, hear each other's writes, which the backend does not tell itself (a
/// notification's own origin is ignored, SQLite's `data_version` does not move for its own
/// connection). An entry lives as long as a `Storage` holds its count: a backend value's
/// address is not reused meanwhile, since that `Storage` holds the backend.
fn shared_count(store: &Arc<dyn Store>) -> Arc<AtomicU64> {
    static COUNTS: std::sync::Mutex<Vec<(usize, std::sync::Weak<AtomicU64>)>> =
        std::sync::Mutex::new(Vec::new());
    let key = Arc::as_ptr(store).cast::<()>().addr();
    let mut counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    counts.retain(|(_, count)| count.strong_count() > 0);
    if let Some(count) = counts
        .iter()
        .find(|(at, _)| *at == key)
        .and_then(|(_, count)| count.upgrade())
    {
        return count;
    }
    let count = Arc::new(AtomicU64::new(0));
    counts.push((key, Arc::downgrade(&count)));
    count
}

tokio::task_local! {
    /// Set while the queue worker's pass runs (see [`Storage::uncounted`]).
    static UNCOUNTED: ();
}

impl Storage {
    /// The policy layer over `store`, with the default state size limit (16 MiB) and no
    /// journal cap.
    ///
    /// A backend that hears of other processes' changes ([`RemoteHints`]) has them
    /// forwarded to this layer's subscribers by a task on the current tokio runtime (none
    /// outside one: the runtime's periodic sweeps then find that work).
    pub fn new(store: Arc<dyn Store>) -> Self {
        let hints = broadcast::Sender::new(WAKE_UP_CAPACITY);
        let changes = shared_count(&store);
        if let Some(mut remote) = store
            .capabilities()
            .remote_hints
            .map(RemoteHints::subscribe)
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let forward = hints.clone();
            let heard = Arc::clone(&changes);
            handle.spawn(async move {
                loop {
                    let hint = remote.recv().await;
                    if !matches!(hint, Err(broadcast::error::RecvError::Closed)) {
                        heard.fetch_add(1, Ordering::Release);
                    }
                    match hint {
                        Ok(hint) => {
                            // No subscriber is not an error: hints are advisory (ST-18).
                            let _ = forward.send(hint);
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            let _ = forward.send(WakeUp::QueueChanged);
                            let _ = forward.send(WakeUp::TimersChanged { earliest: None });
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        Self {
            store,
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            max_journal_entries: None,
            hints,
            changes,
        }
    }

    /// Refuses state documents larger than `max_state_bytes` encoded (ST-24) with
    /// [`StoreError::TooLarge`], writing nothing.
    #[must_use]
    pub fn with_max_state_bytes(mut self, max_state_bytes: usize) -> Self {
        self.max_state_bytes = max_state_bytes;
        self
    }

    /// Keeps at most `max` journal entries per instance in the store (ENG-42): every commit
    /// deletes the oldest rows beyond it. `None` keeps them all.
    #[must_use]
    pub fn with_max_journal_entries(mut self, max: Option<u64>) -> Self {
        self.max_journal_entries = max;
        self
    }

    /// The journal cap per instance, if any.
    pub fn max_journal_entries(&self) -> Option<u64> {
        self.max_journal_entries
    }

    /// The state size limit.
    pub fn max_state_bytes(&self) -> usize {
        self.max_state_bytes
    }

    /// The backend, for its own operations (skipping every policy of this layer).
    pub fn backend(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Subscribes to change hints (ST-18), sent after each operation that caused them.
    pub fn subscribe(&self) -> broadcast::Receiver<WakeUp> {
        self.hints.subscribe()
    }

    /// Sends a hint to the subscribers: for a backend that learns of changes made by other
    /// processes (a database notification, say).
    pub fn notify(&self, hint: WakeUp) {
        self.count_change();
        // No subscriber is not an error: hints are advisory (ST-18).
        let _ = self.hints.send(hint);
    }

    /// How many changes that may make held work possible this layer has seen (RT-27): it
    /// moves with every commit, every hint sent through this layer or through another
    /// `Storage` over the same backend value, every item a queue worker put back for another
    /// runtime to try, every hint heard from another process, and, over a backend that counts
    /// the changes of everyone sharing it
    /// ([`ChangeCount`](super::ChangeCount): the in-process store), with that count. A worker
    /// that found nothing it could do compares it with the count it saw then, and looks again
    /// only when it moved: an idle runtime writes nothing.
    pub fn changes(&self) -> u64 {
        let own = self.changes.load(Ordering::Acquire);
        match self.store.capabilities().change_count {
            Some(count) => own.wrapping_add(count.changes()),
            None => own,
        }
    }

    /// Whether [`Storage::changes`] now moves with every change anyone makes that could make
    /// held work deliverable (RT-27): the backend counts every change itself
    /// ([`ChangeCount`](super::ChangeCount)), or hears every other process's change
    /// ([`RemoteHints::hears_every_change`]).
    pub(crate) fn hears_every_change(&self) -> bool {
        let capabilities = self.store.capabilities();
        capabilities.change_count.is_some()
            || capabilities
                .remote_hints
                .is_some_and(RemoteHints::hears_every_change)
    }

    /// Whether the backend hears other processes' changes ([`RemoteHints`]): only then can a
    /// hint name a waiter a release in another process freed a slot for (QU-12).
    pub(crate) fn hears_other_processes(&self) -> bool {
        self.store.capabilities().remote_hints.is_some()
    }

    /// Whether a change may go unheard even when [`Storage::hears_every_change`] holds (a hint
    /// lost to a crash, a dead process's claim lapsing: [`RemoteHints::can_miss_a_crash`]):
    /// the queue worker then looks at least once per lease TTL anyway (RT-27).
    pub(crate) fn can_miss_a_crash(&self) -> bool {
        self.store
            .capabilities()
            .remote_hints
            .is_some_and(RemoteHints::can_miss_a_crash)
    }

    /// Sends the hints of this store's committed writes that still wait to be sent to the
    /// other processes ([`RemoteHints::flush`]; PostgreSQL sends a commit's after it), and
    /// returns once they are: a process about to exit (a command-line tool, a runtime
    /// shutting down) awaits it, so its last writes are heard. PostgreSQL first gives back the
    /// instance leases it keeps between transitions, so other processes need not wait for
    /// them to expire. Nothing to do for a backend without remote hints.
    pub async fn flush_hints(&self) {
        if let Some(remote) = self.store.capabilities().remote_hints {
            remote.flush().await;
        }
    }

    /// Runs `work` without counting its changes in [`Storage::changes`]: the queue worker's
    /// own pass (RT-27), whose claims, put-backs and attempts announce nothing that pass did
    /// not see (its deliveries start another pass by themselves).
    pub(crate) async fn uncounted<F: Future>(work: F) -> F::Output {
        UNCOUNTED.scope((), work).await
    }

    /// Awaits a write whose failure may hide that it was applied (an answer lost after the
    /// commit): a failure counts as a change too (RT-27), so a worker looks again.
    async fn counted<T>(&self, write: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        let result = write.await;
        if result.is_err() {
            self.count_change();
        }
        result
    }

    fn count_change(&self) {
        if UNCOUNTED.try_with(|()| ()).is_err() {
            self.changes.fetch_add(1, Ordering::Release);
        }
    }

    /// Counts a change even inside the queue worker's own pass: an item it put back for
    /// another runtime to try (RT-27). Another runtime over the same backend value hears of
    /// it through the shared count; this one's next sweep passes once more for it.
    fn count_announced(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    fn notify_all(&self, hints: Vec<WakeUp>) {
        for hint in hints {
            self.notify(hint);
        }
    }

    // ----- instances -----

    /// Creates an instance at version 1 (ST-17), validating its id (ST-23) and state (ST-19,
    /// ST-24).
    ///
    /// # Errors
    ///
    /// `Invalid` for a bad id or state, `TooLarge`, `AlreadyExists`, `ActivationConflict`
    /// and the backend's errors; nothing is written then.
    pub async fn create_instance<S: StateDocument>(
        &self,
        instance: NewInstance<S>,
    ) -> StoreResult<u64> {
        let hint = WakeUp::of_creation(&instance);
        let encoded = self.encode_instance(instance)?;
        let version = self.counted(self.store.create_instance(encoded)).await?;
        self.notify_all(hint.into_iter().collect());
        Ok(version)
    }

    /// Loads an instance with its state from one snapshot (ST-13).
    ///
    /// # Errors
    ///
    /// `NotFound`, `Decode` or `FormatTooNew` for its state (ST-22), the backend's errors.
    pub async fn load_instance(&self, instance_id: &str) -> StoreResult<InstanceRecord> {
        self.store
            .load_instance(instance_id)
            .await?
            .try_map_state(decode_state)
    }

    /// [`Storage::load_instance`] with the state as its stored text, its `"format"` checked
    /// but not decoded: for a caller that decodes it into its own type at once (the
    /// runtime, straight into its state, without a [`Value`] tree in between).
    ///
    /// # Errors
    ///
    /// As [`Storage::load_instance`].
    pub async fn load_instance_text(
        &self,
        instance_id: &str,
    ) -> StoreResult<InstanceRecord<String>> {
        let record = self.store.load_instance(instance_id).await?;
        check_stored_format(instance_id, &record.state)?;
        Ok(record)
    }

    /// An instance's status and sub-status, without decoding its state.
    ///
    /// # Errors
    ///
    /// `NotFound`, the backend's.
    pub async fn instance_status(
        &self,
        instance_id: &str,
    ) -> StoreResult<(
        InstanceStatus,
        Option<crate::store::rows::InstanceSubStatus>,
    )> {
        let record = self.store.load_instance(instance_id).await?;
        Ok((record.status, record.sub_status))
    }

    /// The runtime's claim: the lease and the record with its stored text **unchecked**;
    /// the runtime decodes it into its state at once and checks the format there
    /// (`check_stored_format` when that fails), so the text is read once, not twice.
    pub(crate) async fn claim_instance_raw(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> StoreResult<ClaimedRecord<String>> {
        self.store.claim_instance(instance_id, claim).await
    }

    /// [`Storage::claim_instance_raw`] for a runtime that kept the document it committed at
    /// `known_version` (ENG-53): the state is `None` when the stored record is still that
    /// very text (with the backend's [`ClaimKnown`](super::ClaimKnown) where it has one,
    /// which compares where the text is held).
    pub(crate) async fn claim_instance_raw_known(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
        known_version: u64,
        known_text: &str,
    ) -> StoreResult<ClaimedRecord<Option<String>>> {
        if let Some(claim_known) = self.store.capabilities().claim_known {
            return claim_known
                .claim_instance_known(instance_id, claim, known_version, known_text)
                .await;
        }
        let claimed = self.store.claim_instance(instance_id, claim).await?;
        let unchanged =
            claimed.record.version == known_version && claimed.record.state == known_text;
        let record = claimed
            .record
            .try_map_state(|_, state| {
                Ok::<_, std::convert::Infallible>((!unchanged).then_some(state))
            })
            .unwrap_or_else(|never| match never {});
        Ok(ClaimedRecord {
            lease: claimed.lease,
            record,
        })
    }

    /// The runtime's load: the record with its stored text unchecked (see
    /// [`Storage::claim_instance_raw`]).
    pub(crate) async fn load_instance_raw(
        &self,
        instance_id: &str,
    ) -> StoreResult<InstanceRecord<String>> {
        self.store.load_instance(instance_id).await
    }

    /// Takes (or refreshes) an instance's lease and loads it in one call: the first call of a
    /// run (ST-14).
    ///
    /// # Errors
    ///
    /// `NotFound`, `LeaseHeld`, `Fenced`, a state that does not decode (the lease is then
    /// held: release it), the backend's errors.
    pub async fn claim_instance(
        &self,
        instance_id: &str,
        claim: LeaseClaim,
    ) -> StoreResult<ClaimedRecord> {
        let claimed = self.store.claim_instance(instance_id, claim).await?;
        Ok(ClaimedRecord {
            lease: claimed.lease,
            record: claimed.record.try_map_state(decode_state)?,
        })
    }

    /// Applies a commit atomically (ST-16) and returns the new version. A final status also
    /// removes the instance's bookmarks and timers (ENG-22); the journal is capped (ENG-42).
    ///
    /// # Errors
    ///
    /// `Conflict`, `Fenced`, `ReceiptExists`, `TooLarge` (nothing written), `Invalid` for a
    /// bad state or created id, the backend's errors.
    pub async fn commit<S: StateDocument>(&self, commit: Commit<S, Value>) -> StoreResult<u64> {
        self.commit_detailed(commit).await
    }

    /// [`Storage::commit`] with the journal details already JSON text (the runtime writes
    /// them as text at once): the same checks, the same 64 KiB bound (ST-10).
    ///
    /// The commit is checked, encoded and handed to the backend when this is called; the
    /// future returned holds only the backend's answer (and the wake-ups to send after it),
    /// not the commit: a run's commit is not laid out, and moved, once more in each future
    /// above it.
    pub(crate) fn commit_text_details<S: StateDocument>(
        &self,
        commit: Commit<S, String>,
    ) -> impl Future<Output = StoreResult<u64>> + Send + '_ {
        self.commit_detailed(commit)
    }

    fn commit_detailed<S: StateDocument, D: JournalDetail>(
        &self,
        commit: Commit<S, D>,
    ) -> impl Future<Output = StoreResult<u64>> + Send + '_ {
        let hints = WakeUp::of_commit(&commit);
        let write = self
            .encode_commit(commit)
            .map(|encoded| self.store.commit(encoded));
        async move {
            let version = self.counted(write?).await?;
            self.count_change();
            self.notify_all(hints);
            Ok(version)
        }
    }

    /// Records a cancel or suspend request without changing the version (ST-13, C-29).
    ///
    /// # Errors
    ///
    /// `NotFound`, `Invalid` for a final instance (nothing recorded), the backend's errors.
    pub async fn request_control(
        &self,
        instance_id: &str,
        request: ControlRequest,
    ) -> StoreResult<()> {
        // The backend records the request only on a live instance (atomically with reading
        // its status); a final one refuses it (ST-13).
        let status = self
            .counted(self.store.request_control(instance_id, request))
            .await?;
        if status.is_final() {
            return Err(StoreError::Invalid {
                what: "control request",
                reason: format!("instance {instance_id} is {status}"),
            });
        }
        self.notify(WakeUp::ControlRequested {
            id: instance_id.to_owned(),
        });
        Ok(())
    }

    /// Instance summaries with filters, in `instance_id` keyset order (C-23); a limit of 0
    /// means 100.
    ///
    /// # Errors
    ///
    /// The backend's; an undecodable row is an error item of the page (ST-22).
    pub async fn list_instances(
        &self,
        mut filter: InstanceFilter,
    ) -> StoreResult<Vec<ListedInstance>> {
        filter.limit = page(filter.limit, DEFAULT_PAGE);
        self.store.list_instances(filter).await
    }

    /// The live (not final) instance with this correlation id, other than `except`: one
    /// indexed query (RT-15).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn live_with_correlation(
        &self,
        correlation_id: &str,
        except: Option<&str>,
    ) -> StoreResult<Option<String>> {
        let page = self
            .store
            .list_instances(InstanceFilter {
                correlation_id: Some(correlation_id.to_owned()),
                live_only: true,
                limit: 2,
                ..InstanceFilter::default()
            })
            .await?;
        Ok(page
            .into_iter()
            .map(|listed| listed.instance_id)
            .find(|id| Some(id.as_str()) != except))
    }

    /// Claims up to `limit` runnable instances with their leases (ST-15, C-13).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn claim_runnable(
        &self,
        owner: &str,
        now: Micros,
        ttl: Micros,
        limit: usize,
    ) -> StoreResult<Vec<ClaimedInstance>> {
        self.store.claim_runnable(owner, now, ttl, limit).await
    }

    /// Removes one final instance with its dependent rows (ST-32).
    ///
    /// # Errors
    ///
    /// `NotTerminal` for a live instance, `NotFound`, the backend's.
    pub async fn delete_instance(&self, instance_id: &str) -> StoreResult<()> {
        self.store
            .purge(PurgeTarget::Instance(instance_id.to_owned()))
            .await
            .map(drop)
    }

    /// Removes final instances finished before the cut-off in atomic batches; returns how
    /// many (ST-31).
    ///
    /// # Errors
    ///
    /// `Invalid` for a non-final status in the filter (ST-32), the backend's.
    pub async fn purge(&self, mut filter: PurgeFilter) -> StoreResult<u64> {
        filter.statuses = purge_statuses(&filter)?;
        filter.batch_size = page(filter.batch_size, DEFAULT_PURGE_BATCH);
        self.store.purge(PurgeTarget::Finished(filter)).await
    }

    // ----- leases -----

    /// Acquires a lease (ST-14).
    ///
    /// # Errors
    ///
    /// `LeaseHeld` while a live lease exists, `NotFound` for an unknown instance, the
    /// backend's.
    pub async fn acquire_lease(
        &self,
        key: &LeaseKey,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Lease> {
        self.store.acquire_lease(key, owner, now, ttl).await
    }

    /// Renews a lease; for an instance also returns its pending control request (ST-14).
    ///
    /// # Errors
    ///
    /// `Fenced` when `token` is not current, the backend's.
    pub async fn renew_lease(
        &self,
        key: &LeaseKey,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<Renewal> {
        self.store.renew_lease(key, token, now, ttl).await
    }

    /// Releases a lease; a released instance may be runnable (a hint).
    ///
    /// # Errors
    ///
    /// `Fenced` when `token` is not current, the backend's.
    pub async fn release_lease(&self, key: &LeaseKey, token: u64) -> StoreResult<()> {
        self.counted(self.store.release_lease(key, token)).await?;
        if let LeaseKey::Instance(id) = key {
            self.notify(WakeUp::InstanceRunnable { id: id.clone() });
        }
        Ok(())
    }

    // ----- bookmarks, receipts, triggers -----

    /// Bookmarks with a hash, filtered, in `(created_at, bookmark_id)` order (C-8); a limit
    /// of 0 means 100.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn find_bookmarks(&self, mut query: BookmarkQuery) -> StoreResult<Vec<BookmarkRow>> {
        query.limit = page(query.limit, DEFAULT_PAGE);
        self.store.find_bookmarks(BookmarkSelect::Hash(query)).await
    }

    /// What a send routes by, read together: the trigger rows with any of `hashes` and the
    /// first page of bookmarks matching `query` (a limit of 0 means 100).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn find_routes(
        &self,
        hashes: Vec<String>,
        mut query: BookmarkQuery,
    ) -> StoreResult<(Vec<TriggerRow>, Vec<BookmarkRow>)> {
        query.limit = page(query.limit, DEFAULT_PAGE);
        if let Some(routes) = self.store.capabilities().routes {
            return routes.find_routes(hashes, query).await;
        }
        let triggers = async {
            if hashes.is_empty() {
                Ok(Vec::new())
            } else {
                self.store
                    .find_triggers(TriggerSelect::Hashes(hashes))
                    .await
            }
        };
        let (triggers, rows) = tokio::join!(
            triggers,
            self.store.find_bookmarks(BookmarkSelect::Hash(query))
        );
        Ok((triggers?, rows?))
    }

    /// Bookmarks of parents waiting on a child workflow, in bookmark-id order after `after`
    /// (ACT-24, read by start-up instead of every suspended instance).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn find_child_waits(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> StoreResult<Vec<BookmarkRow>> {
        let limit = page(limit, DEFAULT_PAGE);
        if let Some(index) = self.store.capabilities().child_waits {
            return index.find_child_waits(after, limit).await;
        }
        // No index: page through the suspended instances and their bookmarks (correct, but
        // O(suspended instances)).
        let mut filter = InstanceFilter {
            status: Some(InstanceStatus::Suspended),
            limit: 500,
            ..InstanceFilter::default()
        };
        let mut rows = Vec::new();
        loop {
            let listed = self.store.list_instances(filter.clone()).await?;
            let Some(last) = listed.last() else { break };
            filter.after = Some(last.instance_id.clone());
            for instance in listed {
                let bookmarks = self
                    .store
                    .find_bookmarks(BookmarkSelect::Instance(instance.instance_id))
                    .await?;
                rows.extend(bookmarks.into_iter().filter(|b| {
                    b.name == CHILD_WAIT && after.as_ref().is_none_or(|a| b.bookmark_id > *a)
                }));
            }
        }
        rows.sort_by(|a, b| a.bookmark_id.cmp(&b.bookmark_id));
        rows.truncate(limit);
        Ok(rows)
    }

    /// An instance's bookmark rows.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_bookmarks(&self, instance_id: &str) -> StoreResult<Vec<BookmarkRow>> {
        self.store
            .find_bookmarks(BookmarkSelect::Instance(instance_id.to_owned()))
            .await
    }

    /// Whether the instance has consumed the stimulus (RT-19).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn has_receipt(&self, instance_id: &str, stimulus_id: &str) -> StoreResult<bool> {
        self.store.has_receipt(instance_id, stimulus_id).await
    }

    /// Whether any instance has consumed the stimulus (RT-19, C-46); `false` from a backend
    /// without the [`ReceiptIndex`](super::ReceiptIndex) capability.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn consumed_anywhere(&self, stimulus_id: &str) -> StoreResult<bool> {
        match self.store.capabilities().receipts {
            Some(receipts) => receipts.consumed_anywhere(stimulus_id).await,
            None => Ok(false),
        }
    }

    /// The instances whose waits carried the key with this
    /// [`key_digest`](crate::routing::key_digest), at most `limit`, in instance-id order
    /// (RT-36, C-47); none from a backend without the [`KeyIndex`](super::KeyIndex)
    /// capability.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn instances_with_key(&self, key: &str, limit: usize) -> StoreResult<Vec<String>> {
        match self.store.capabilities().keys {
            Some(keys) => keys.instances_with_key(key, limit).await,
            None => Ok(Vec::new()),
        }
    }

    /// Replaces a definition's event triggers by difference (ST-7, C-11): rows equal but for
    /// `registered_at` are left alone, so re-running it writes nothing.
    ///
    /// # Errors
    ///
    /// `Invalid` for a row of another definition, the backend's.
    pub async fn replace_triggers(
        &self,
        definition_name: &str,
        triggers: Vec<TriggerRow>,
    ) -> StoreResult<TriggerDiff> {
        if let Some(other) = triggers
            .iter()
            .find(|t| t.definition_name != definition_name)
        {
            return Err(StoreError::Invalid {
                what: "trigger",
                reason: format!(
                    "trigger of `{}` given for definition `{definition_name}`",
                    other.definition_name
                ),
            });
        }
        let existing = self
            .store
            .find_triggers(TriggerSelect::Definition(definition_name.to_owned()))
            .await?;
        let mut diff = TriggerDiff::default();
        let mut write = TriggerWrite::default();
        for old in &existing {
            if !triggers
                .iter()
                .any(|t| t.node_id == old.node_id && t.hash == old.hash)
            {
                write.deletes.push((old.node_id.clone(), old.hash.clone()));
                diff.removed += 1;
            }
        }
        for new in triggers {
            let old = existing
                .iter()
                .find(|o| o.node_id == new.node_id && o.hash == new.hash);
            if old.is_some_and(|old| same_trigger(old, &new)) {
                diff.unchanged += 1;
            } else {
                diff.added += 1;
                write.upserts.push(new);
            }
        }
        if !write.upserts.is_empty() || !write.deletes.is_empty() {
            self.store.write_triggers(definition_name, write).await?;
        }
        Ok(diff)
    }

    /// Triggers with any of these hashes.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn find_triggers(&self, hashes: &[String]) -> StoreResult<Vec<TriggerRow>> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        self.store
            .find_triggers(TriggerSelect::Hashes(hashes.to_vec()))
            .await
    }

    // ----- timers and schedules -----

    /// The earliest due time among unparked timers not under a live claim at `now`.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn earliest_timer(&self, now: Micros) -> StoreResult<Option<Micros>> {
        Ok(self.store.claim_due_timers("", now, 0, 0).await?.next_due)
    }

    /// Claims due timers (ST-15, C-12) and reports the next due time after them.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn claim_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> StoreResult<DueTimers> {
        self.store
            .claim_due_timers(owner, now, claim_ttl, limit)
            .await
    }

    /// Claims up to `limit` due timers (ST-15, C-12).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn claim_due_timers(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> StoreResult<Vec<TimerRow>> {
        Ok(self
            .claim_timers(owner, now, claim_ttl, page(limit, DEFAULT_PAGE))
            .await?
            .claimed)
    }

    /// An instance's timers, in `(due_at, timer_id)` order.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_timers(&self, instance_id: &str) -> StoreResult<Vec<TimerRow>> {
        self.store
            .list_timers(TimerScope::Instance(instance_id.to_owned()))
            .await
    }

    /// Registers a trigger schedule unless one has its id; returns whether it was inserted.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn put_schedule(&self, schedule: Schedule) -> StoreResult<bool> {
        let inserted = self.store.put_schedule(schedule).await?;
        if inserted {
            self.notify(WakeUp::TimersChanged { earliest: None });
        }
        Ok(inserted)
    }

    /// Deletes a trigger schedule; returns whether it existed.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn delete_schedule(&self, schedule_id: &str) -> StoreResult<bool> {
        Ok(self
            .store
            .purge(PurgeTarget::Schedule(schedule_id.to_owned()))
            .await?
            > 0)
    }

    /// A definition's schedules, by id.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_schedules(&self, definition_name: &str) -> StoreResult<Vec<Schedule>> {
        let rows = self
            .store
            .list_timers(TimerScope::Schedules(definition_name.to_owned()))
            .await?;
        Ok(rows.iter().filter_map(schedule_of).collect())
    }

    /// Fires one occurrence of a schedule atomically (ST-17, TM-11 to TM-13); without an
    /// instance, only advances it past skipped occurrences (TM-19).
    ///
    /// # Errors
    ///
    /// `Invalid` or `TooLarge` for the instance, the backend's.
    pub async fn fire_schedule(
        &self,
        schedule_id: &str,
        expected_due_at: Micros,
        instance: Option<NewInstance<impl StateDocument>>,
        next_due: Option<Micros>,
    ) -> StoreResult<ScheduleFiring> {
        let mut hints: Vec<WakeUp> = instance
            .as_ref()
            .and_then(WakeUp::of_creation)
            .into_iter()
            .collect();
        hints.push(WakeUp::TimersChanged { earliest: next_due });
        let encoded = match instance {
            Some(instance) => Some(self.encode_instance(instance)?),
            None => None,
        };
        let firing = self
            .store
            .fire_schedule(schedule_id, expected_due_at, encoded, next_due)
            .await?;
        if firing != ScheduleFiring::Stale {
            self.notify_all(hints);
        }
        Ok(firing)
    }

    // ----- journal -----

    /// Journal entries with `seq >= from_seq`, at most `limit` (0 means 100), in order
    /// (ST-10). An entry whose stored detail does not decode keeps its place, with a detail
    /// `{"undecodable": "<why>"}` (ST-22): one bad row never hides the others.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn read_journal(
        &self,
        instance_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<JournalRecord>> {
        let rows = self
            .store
            .read_journal(instance_id, from_seq, page(limit, DEFAULT_PAGE))
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let detail = match serde_json::from_str::<Value>(&row.detail) {
                    Ok(detail) => detail,
                    Err(error) => {
                        tracing::warn!(
                            instance = instance_id,
                            seq = row.seq,
                            %error,
                            "journal entry detail does not decode"
                        );
                        serde_json::json!({ "undecodable": error.to_string() })
                    }
                };
                JournalRecord {
                    seq: row.seq,
                    at: row.at,
                    kind: row.kind,
                    context_id: row.context_id,
                    node_id: row.node_id,
                    detail,
                }
            })
            .collect())
    }

    // ----- queue -----

    /// Enqueues an item (RT-25).
    ///
    /// # Errors
    ///
    /// `AlreadyExists` for an existing item id, the backend's.
    pub async fn enqueue(&self, item: QueueItem) -> StoreResult<()> {
        self.enqueue_send(vec![item], None).await.map(drop)
    }

    /// Writes a send's queue items and its idempotency record atomically (RT-19); returns
    /// the existing record, having written nothing, when the key is taken.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` for an existing item id, the backend's.
    pub async fn enqueue_send(
        &self,
        items: Vec<QueueItem>,
        idempotency: Option<IdempotencyRecord>,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        let queued = !items.is_empty();
        let existing = self
            .counted(self.store.enqueue(Enqueue {
                items,
                idempotency,
                replace_record: false,
            }))
            .await?;
        if queued && existing.is_none() {
            self.notify(WakeUp::QueueChanged);
        }
        Ok(existing)
    }

    /// Writes a send's queue items and replaces its idempotency record with `record` in one
    /// operation (RT-19): a send queueing items after one of its own commits wrote its
    /// record pending ([`Commit::idempotency`], [`NewInstance::idempotency`]).
    ///
    /// # Errors
    ///
    /// `AlreadyExists` for an existing item id (nothing is written), the backend's.
    pub async fn enqueue_completing(
        &self,
        items: Vec<QueueItem>,
        record: IdempotencyRecord,
    ) -> StoreResult<()> {
        let queued = !items.is_empty();
        self.counted(self.store.enqueue(Enqueue {
            items,
            idempotency: Some(record),
            replace_record: true,
        }))
        .await?;
        if queued {
            self.notify(WakeUp::QueueChanged);
        }
        Ok(())
    }

    /// Stores an idempotency record unless its key exists; returns the existing record in
    /// that case (C-20).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn put_idempotency_record(
        &self,
        record: IdempotencyRecord,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        self.enqueue_send(Vec::new(), Some(record)).await
    }

    /// Replaces the idempotency record with `record`'s key by `record` (or stores it): a
    /// send completing, with its full report, the record its delivery's commit wrote
    /// ([`Commit::idempotency`], RT-19).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn replace_idempotency_record(&self, record: IdempotencyRecord) -> StoreResult<()> {
        self.store
            .enqueue(Enqueue {
                items: Vec::new(),
                idempotency: Some(record),
                replace_record: true,
            })
            .await
            .map(drop)
    }

    /// Looks up an idempotency record.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn find_idempotency_record(
        &self,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        self.store.find_idempotency_record(key).await
    }

    /// Records a debounced send (RT-35, C-44): a new row, or the row of its debounce id with
    /// the last stimulus and the due time pushed back. Wakes this process's timer driver.
    ///
    /// # Errors
    ///
    /// The backend's; [`StoreError::Invalid`] for a backend without the debounce capability.
    pub async fn put_debounce(&self, row: DebounceRow) -> StoreResult<DebounceRow> {
        let Some(debounce) = self.store.capabilities().debounce else {
            return Err(StoreError::Invalid {
                what: "debounce",
                reason: "this store does not keep debounced sends".to_owned(),
            });
        };
        let stored = debounce.put_debounce(row).await?;
        self.notify(WakeUp::TimersChanged {
            earliest: Some(stored.due_at),
        });
        Ok(stored)
    }

    /// The earliest due time of a debounced send not under a live claim at `now` (a read).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn earliest_debounce(&self, now: Micros) -> StoreResult<Option<Micros>> {
        match self.store.capabilities().debounce {
            Some(debounce) => Ok(debounce.claim_due_debounces("", now, 0, 0).await?.next_due),
            None => Ok(None),
        }
    }

    /// Claims up to `limit` due debounced sends (C-44).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn claim_due_debounces(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> StoreResult<DueDebounces> {
        match self.store.capabilities().debounce {
            Some(debounce) => {
                debounce
                    .claim_due_debounces(owner, now, claim_ttl, page(limit, DEFAULT_PAGE))
                    .await
            }
            None => Ok(DueDebounces::default()),
        }
    }

    /// Settles a delivered debounced send (C-44): deleted unless a send came since its claim.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn finish_debounce(
        &self,
        debounce_id: &str,
        burst_id: &str,
        sends: u64,
    ) -> StoreResult<bool> {
        match self.store.capabilities().debounce {
            Some(debounce) => debounce.finish_debounce(debounce_id, burst_id, sends).await,
            None => Ok(false),
        }
    }

    /// Claims a page of queue items (ST-15, C-14).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn claim_queue_page(
        &self,
        owner: &str,
        now: Micros,
        claim_ttl: Micros,
        limit: usize,
    ) -> StoreResult<Vec<QueueItem>> {
        self.store
            .claim_queue_page(owner, now, claim_ttl, page(limit, DEFAULT_PAGE))
            .await
    }

    /// Releases `owner`'s claim on an item (RT-27).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn release_queue_item(&self, item_id: &str, owner: &str) -> StoreResult<()> {
        self.store
            .settle_queue_item(
                item_id,
                Settlement::Release {
                    owner: owner.to_owned(),
                    announce: true,
                },
            )
            .await?;
        self.count_announced();
        self.notify(WakeUp::QueueChanged);
        Ok(())
    }

    /// Releases `owner`'s claim on an item it has already failed to deliver for a reason of
    /// its own, without a wake-up here or in the other processes (RT-27): what may make it
    /// deliverable (a new bookmark, a resume, a process that runs the instance's version)
    /// wakes the workers itself, and the periodic sweep finds it anyway.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn park_queue_item(&self, item_id: &str, owner: &str) -> StoreResult<()> {
        self.store
            .settle_queue_item(
                item_id,
                Settlement::Release {
                    owner: owner.to_owned(),
                    announce: false,
                },
            )
            .await?;
        Ok(())
    }

    /// Keeps `owner`'s claim on an item until `until`, or takes it back if it lapsed and
    /// nobody claimed it since (RT-29); returns whether the claim is `owner`'s: `false` when
    /// another owner holds it or the item is gone (delivered elsewhere).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn renew_queue_claim(
        &self,
        item_id: &str,
        owner: &str,
        now: Micros,
        until: Micros,
    ) -> StoreResult<bool> {
        Ok(matches!(
            self.store
                .settle_queue_item(
                    item_id,
                    Settlement::Renew {
                        owner: owner.to_owned(),
                        now,
                        until,
                    },
                )
                .await?,
            Settled::Renewed(true)
        ))
    }

    /// Deletes a queue item outside a commit; returns whether it existed.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn ack_queue_item(&self, item_id: &str) -> StoreResult<bool> {
        Ok(matches!(
            self.store
                .settle_queue_item(item_id, Settlement::Ack)
                .await?,
            Settled::Acked(true)
        ))
    }

    /// Records a failed delivery (C-16).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown item, the backend's.
    pub async fn record_queue_failure(
        &self,
        item_id: &str,
        error: &str,
        now: Micros,
        max_attempts: u32,
    ) -> StoreResult<QueueFailure> {
        let settled = self
            .store
            .settle_queue_item(
                item_id,
                Settlement::Fail {
                    error: error.to_owned(),
                    now,
                    max_attempts,
                },
            )
            .await?;
        self.count_announced();
        self.notify(WakeUp::QueueChanged);
        Ok(match settled {
            Settled::Retry { attempts } => QueueFailure::Retry { attempts },
            _ => QueueFailure::DeadLettered,
        })
    }

    /// Moves an item to the dead letters, at most once (C-17); returns whether this call
    /// moved it.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn dead_letter(
        &self,
        item_id: &str,
        reason: DeadLetterReason,
        error: Option<&str>,
        now: Micros,
    ) -> StoreResult<bool> {
        let settled = self
            .store
            .settle_queue_item(
                item_id,
                Settlement::DeadLetter {
                    reason,
                    error: error.map(str::to_owned),
                    now,
                },
            )
            .await?;
        Ok(settled == Settled::DeadLettered(true))
    }

    /// Moves up to `limit` expired items to the dead letters as `Expired` (C-15).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn expire_queue(&self, now: Micros, limit: usize) -> StoreResult<u64> {
        self.store
            .purge(PurgeTarget::ExpiredQueueItems {
                now,
                limit: page(limit, DEFAULT_PAGE),
            })
            .await
    }

    /// Re-enqueues a dead letter with a fresh TTL (RT-28, C-18).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown dead letter, the backend's.
    pub async fn replay_dead_letter(
        &self,
        item_id: &str,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<QueueItem> {
        let item = self.store.replay_dead_letter(item_id, now, ttl).await?;
        self.notify(WakeUp::QueueChanged);
        Ok(item)
    }

    /// Deletes a dead letter; returns whether it existed (C-18).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn delete_dead_letter(&self, item_id: &str) -> StoreResult<bool> {
        Ok(self
            .store
            .purge(PurgeTarget::DeadLetter(item_id.to_owned()))
            .await?
            > 0)
    }

    /// Dead letters matching the filter (C-18); a limit of 0 means 100.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_dead_letters(
        &self,
        mut filter: DeadLetterFilter,
    ) -> StoreResult<Vec<DeadLetter>> {
        filter.limit = page(filter.limit, DEFAULT_PAGE);
        self.store.list_dead_letters(filter).await
    }

    /// Deletes up to `limit` dead letters that died before `dead_before` (ST-30).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn purge_dead_letters(&self, dead_before: Micros, limit: usize) -> StoreResult<u64> {
        self.store
            .purge(PurgeTarget::DeadLettersBefore {
                before: dead_before,
                limit: page(limit, DEFAULT_PURGE_BATCH),
            })
            .await
    }

    /// Deletes up to `limit` receipts written before `before` (ST-30).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn purge_receipts(&self, before: Micros, limit: usize) -> StoreResult<u64> {
        self.store
            .purge(PurgeTarget::ReceiptsBefore {
                before,
                limit: page(limit, DEFAULT_PURGE_BATCH),
            })
            .await
    }

    /// Deletes up to `limit` idempotency records created before `before` (ST-30).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn purge_idempotency_records(
        &self,
        before: Micros,
        limit: usize,
    ) -> StoreResult<u64> {
        self.store
            .purge(PurgeTarget::IdempotencyRecordsBefore {
                before,
                limit: page(limit, DEFAULT_PURGE_BATCH),
            })
            .await
    }

    // ----- incidents -----

    /// Records an incident alone, leaving the instance row untouched (FLT-9).
    ///
    /// # Errors
    ///
    /// `AlreadyExists`, `NotFound` for an unknown instance, the backend's.
    pub async fn insert_incident(
        &self,
        instance_id: &str,
        incident: NewIncident,
    ) -> StoreResult<()> {
        self.store.insert_incident(instance_id, incident).await
    }

    /// An instance's incidents, in `(created_at, incident_id)` order.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_incidents(&self, instance_id: &str) -> StoreResult<Vec<IncidentRecord>> {
        self.store
            .list_incidents(IncidentQuery {
                instance_id: Some(instance_id.to_owned()),
                limit: usize::MAX,
                ..IncidentQuery::default()
            })
            .await
    }

    /// Incidents across instances (FLT-6) after the keyset `after`; a limit of 0 means 100.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_all_incidents(
        &self,
        unresolved_only: bool,
        after: Option<(Micros, String)>,
        limit: usize,
    ) -> StoreResult<Vec<IncidentRecord>> {
        self.store
            .list_incidents(IncidentQuery {
                instance_id: None,
                unresolved_only,
                after,
                limit: page(limit, DEFAULT_PAGE),
            })
            .await
    }

    // ----- flow control (QU-5) -----

    fn flow_control(&self) -> StoreResult<&dyn FlowControl> {
        self.store
            .capabilities()
            .flow_control
            .ok_or_else(|| StoreError::Invalid {
                what: "store",
                reason: "this backend keeps no flow-control slots".to_owned(),
            })
    }

    /// Asks for a slot of `queue` (QU-5): granted when every limit has room and no waiter is
    /// served first, else the holder keeps (or takes) its place in line.
    ///
    /// # Errors
    ///
    /// `Invalid` naming the field for a declaration [`Queue::validate`] refuses, an empty or
    /// oversized holder, owner or key, or a `ttl` of 0 or less (nothing is written); `Invalid`
    /// when the backend keeps no slots; the backend's.
    pub async fn acquire_slot(&self, queue: &Queue, ask: SlotAsk) -> StoreResult<SlotOutcome> {
        queue.validate().map_err(|e| StoreError::Invalid {
            what: "queue",
            reason: e.to_string(),
        })?;
        check_slot_text("holder", &ask.holder, false)?;
        check_slot_text("owner", &ask.owner, false)?;
        if let Some(key) = &ask.key {
            check_slot_text("key", key, true)?;
        }
        if ask.ttl <= 0 {
            return Err(StoreError::Invalid {
                what: "ttl",
                reason: format!("must be more than 0, got {} µs", ask.ttl),
            });
        }
        if let Some(place_ttl) = ask.place_ttl.filter(|t| *t <= 0) {
            return Err(StoreError::Invalid {
                what: "place_ttl",
                reason: format!("must be more than 0, got {place_ttl} µs"),
            });
        }
        let request = SlotRequest {
            queue: queue.name().to_owned(),
            limits: super::slots::limits_of(queue),
            holder: ask.holder,
            owner: ask.owner,
            key: ask.key,
            priority: ask.priority.get(),
            now: ask.now,
            ttl: ask.ttl,
            place_ttl: ask.place_ttl,
        };
        self.flow_control()?.acquire_slot(request).await
    }

    /// Extends a held slot to `now + ttl`.
    ///
    /// # Errors
    ///
    /// `Fenced` when the slot was reclaimed or is held under another token; `Invalid` for a
    /// `ttl` of 0 or less; the backend's.
    pub async fn renew_slot(
        &self,
        lease: &SlotLease,
        now: Micros,
        ttl: Micros,
    ) -> StoreResult<SlotLease> {
        if ttl <= 0 {
            return Err(StoreError::Invalid {
                what: "ttl",
                reason: format!("must be more than 0, got {ttl} µs"),
            });
        }
        self.flow_control()?.renew_slot(lease, now, ttl).await
    }

    /// Gives a held slot back (QU-5: at the end of the attempt, whatever its outcome).
    ///
    /// # Errors
    ///
    /// `Fenced` when the slot is held under another token; the backend's.
    pub async fn release_slot(&self, lease: &SlotLease, now: Micros) -> StoreResult<SlotRelease> {
        self.flow_control()?
            .release_slot(&lease.queue, &lease.holder, Some(lease.token), now)
            .await
    }

    /// Leaves the line of `queue` without a slot (the waiting instance was cancelled).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn leave_queue(
        &self,
        queue: &str,
        holder: &str,
        now: Micros,
    ) -> StoreResult<SlotRelease> {
        self.flow_control()?
            .release_slot(queue, holder, None, now)
            .await
    }

    /// Every queue the store knows, by name, with its slots, waiters and rate use at `now`
    /// (empty when the backend keeps no slots).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn queue_usage(&self, now: Micros) -> StoreResult<Vec<QueueUsage>> {
        match self.store.capabilities().flow_control {
            Some(flow) => flow.queue_usage(now).await,
            None => Ok(Vec::new()),
        }
    }

    /// For each queue an attempt or a run of `instance_id` waits in line in at `now`, the words
    /// `why` uses for the wait (QU-13, `QueueUsage::waiting_words`); empty when it waits for
    /// no slot.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn slot_waits(&self, instance_id: &str, now: Micros) -> StoreResult<Vec<String>> {
        Ok(self
            .queue_usage(now)
            .await?
            .iter()
            .filter_map(|usage| usage.waiting_words(instance_id, now))
            .collect())
    }

    // ----- definitions -----

    /// Records a definition version (JSON form and fingerprint) when the backend records
    /// definitions; returns whether it was inserted (`false` also when unsupported).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn put_definition(&self, definition: DefinitionRecord) -> StoreResult<bool> {
        match self.store.capabilities().definitions {
            Some(definitions) => definitions.put_definition(definition).await,
            None => Ok(false),
        }
    }

    /// Recorded definitions (all, or those named `name`), by `(name, recorded_at)`; empty
    /// when the backend does not record definitions.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn list_definitions(&self, name: Option<&str>) -> StoreResult<Vec<DefinitionRecord>> {
        match self.store.capabilities().definitions {
            Some(definitions) => definitions.list_definitions(name).await,
            None => Ok(Vec::new()),
        }
    }

    /// The definition `name` as recorded: `version` if given, else the most recently
    /// recorded version.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn definition(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> StoreResult<Option<DefinitionRecord>> {
        let mut all = self.list_definitions(Some(name)).await?;
        Ok(match version {
            Some(version) => all.into_iter().find(|d| d.version == version),
            None => all.pop(),
        })
    }

    // ----- maintenance -----

    /// Counts instances by definition and status (from the index on both, on the SQL
    /// backends), the queued stimuli and the dead letters: one aggregate query per table, for
    /// a dashboard or a metrics scrape.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn census(&self) -> StoreResult<Census> {
        if let Some(census) = self.store.capabilities().census {
            return census.census().await;
        }
        // A backend without aggregate queries: its pages, counted here.
        let mut census = Census::default();
        self.each_instance_summary(|summary| count_instance(&mut census.instances, summary))
            .await?;
        let mut after = None;
        loop {
            let page = self
                .store
                .list_dead_letters(DeadLetterFilter {
                    after: after.take(),
                    limit: 1000,
                    ..DeadLetterFilter::default()
                })
                .await?;
            let Some(last) = page.last() else { break };
            after = Some((last.dead_at, last.item.item_id.clone()));
            census.dead_letters += page.len() as u64;
        }
        Ok(census)
    }

    /// Counts instances by definition and version, `(name, version, count)` sorted by name
    /// and version: one aggregate query on the SQL backends (it reads the instances' rows:
    /// no index covers the version), the instances' pages counted here on a backend without
    /// aggregate queries.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn version_census(&self) -> StoreResult<Vec<(String, String, u64)>> {
        if let Some(census) = self.store.capabilities().census {
            return census.version_census().await;
        }
        let mut counts: std::collections::BTreeMap<(String, String), u64> = Default::default();
        self.each_instance_summary(|summary| {
            *counts
                .entry((summary.definition_name, summary.definition_version))
                .or_default() += 1;
        })
        .await?;
        Ok(counts
            .into_iter()
            .map(|((name, version), n)| (name, version, n))
            .collect())
    }

    /// Calls `count` with the summary of every instance, page by page: the census of a backend
    /// without aggregate queries. Rows whose summary does not decode are left out.
    async fn each_instance_summary(
        &self,
        mut count: impl FnMut(InstanceSummary),
    ) -> StoreResult<()> {
        let mut after = None;
        loop {
            let page = self
                .store
                .list_instances(InstanceFilter {
                    after: after.take(),
                    limit: 1000,
                    ..InstanceFilter::default()
                })
                .await?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            after = Some(last.instance_id.clone());
            for summary in page.into_iter().filter_map(|listed| listed.summary.ok()) {
                count(summary);
            }
        }
    }

    /// The backend's operation counters.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn stats(&self) -> StoreResult<StoreStats> {
        self.store.stats().await
    }

    // ----- encoding -----

    pub(crate) fn encode_instance<S: StateDocument>(
        &self,
        instance: NewInstance<S>,
    ) -> StoreResult<NewInstance<String>> {
        validate_instance_id(&instance.instance_id)?;
        let state = instance.state.into_text(self.max_state_bytes)?;
        Ok(NewInstance {
            instance_id: instance.instance_id,
            definition_name: instance.definition_name,
            definition_version: instance.definition_version,
            status: instance.status,
            sub_status: instance.sub_status,
            correlation_id: instance.correlation_id,
            origin_at: instance.origin_at,
            created_at: instance.created_at,
            state,
            receipt: instance.receipt,
            consumed_queue_item: instance.consumed_queue_item,
            activation_scope: instance.activation_scope,
            listing: instance.listing,
            idempotency: instance.idempotency,
        })
    }

    fn encode_commit<S: StateDocument, D: JournalDetail>(
        &self,
        c: Commit<S, D>,
    ) -> StoreResult<Commit<String>> {
        let state = c.state.into_text(self.max_state_bytes)?;
        let instances_created = c
            .instances_created
            .into_iter()
            .map(|i| self.encode_instance(i))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Commit {
            instance_id: c.instance_id,
            expected_version: c.expected_version,
            lease_token: c.lease_token,
            now: c.now,
            state,
            status: c.status,
            sub_status: c.sub_status,
            correlation_id: c.correlation_id,
            clear_control_request: c.clear_control_request,
            release_lease: c.release_lease,
            bookmarks_added: c.bookmarks_added,
            bookmarks_removed: c.bookmarks_removed,
            timers_added: c.timers_added,
            timers_removed: c.timers_removed,
            timers_parked: c.timers_parked,
            journal: c.journal.into_iter().map(encode_journal).collect(),
            receipts: c.receipts,
            consumed_queue_items: c.consumed_queue_items,
            journal_compaction: c.journal_compaction.map(|j| JournalCompaction {
                through_seq: j.through_seq,
                summary: encode_journal(j.summary),
            }),
            instances_created,
            queue_items: c.queue_items,
            control_requests: c.control_requests,
            incidents_opened: c.incidents_opened,
            incidents_resolved: c.incidents_resolved,
            max_journal_entries: c.max_journal_entries.or(self.max_journal_entries),
            // ENG-22: a final instance waits for nothing.
            clear_waits: c.clear_waits || c.status.is_final(),
            idempotency: c.idempotency,
            listing: c.listing,
            definition_version: c.definition_version,
            keys_added: c.keys_added,
        })
    }
}

/// A journal detail a commit carries: a [`Value`], or its JSON text.
trait JournalDetail: Send {
    fn into_text(self) -> String;
}

impl JournalDetail for Value {
    fn into_text(self) -> String {
        serde_json::to_string(&self).unwrap_or_else(|_| "null".to_owned())
    }
}

impl JournalDetail for String {
    fn into_text(self) -> String {
        self
    }
}

/// A journal entry as stored: its detail as JSON text, at most 64 KiB, else a truncation
/// marker (ST-10).
fn encode_journal<D: JournalDetail>(entry: NewJournalRecord<D>) -> NewJournalRecord<String> {
    let text = entry.detail.into_text();
    let detail = if text.len() <= MAX_JOURNAL_DETAIL_BYTES {
        text
    } else {
        serde_json::json!({ "truncated": true, "original_bytes": text.len() }).to_string()
    };
    NewJournalRecord {
        at: entry.at,
        kind: entry.kind,
        context_id: entry.context_id,
        node_id: entry.node_id,
        detail,
    }
}

/// Checks a holder, owner or partition key of a slot ask: at most 256 bytes, not empty
/// (a key may be).
fn check_slot_text(what: &'static str, text: &str, may_be_empty: bool) -> StoreResult<()> {
    if (text.is_empty() && !may_be_empty) || text.len() > 256 {
        return Err(StoreError::Invalid {
            what,
            reason: format!("must be 1 to 256 bytes, got {}", text.len()),
        });
    }
    Ok(())
}

/// Checks a caller-supplied instance id (ST-23).
pub(crate) fn validate_instance_id(id: &str) -> StoreResult<()> {
    if id.is_empty() || id.len() > 128 {
        return Err(StoreError::Invalid {
            what: "instance_id",
            reason: format!("must be 1 to 128 bytes, got {}", id.len()),
        });
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(StoreError::Invalid {
            what: "instance_id",
            reason: format!("character {bad:?} is not in [A-Za-z0-9._:-]"),
        });
    }
    Ok(())
}

/// Encodes a state document to write, checking its `"format"` and size (ST-19, ST-24).
fn encode_state(state: &Value, max_bytes: usize) -> StoreResult<String> {
    match state.get("format").and_then(Value::as_u64) {
        Some(format) if format <= STATE_FORMAT => {}
        Some(format) => {
            return Err(StoreError::Invalid {
                what: "state",
                reason: format!("format {format} is newer than {STATE_FORMAT}"),
            });
        }
        None => {
            return Err(StoreError::Invalid {
                what: "state",
                reason: "must be a JSON object with an integer \"format\"".to_owned(),
            });
        }
    }
    let text = serde_json::to_string(state).map_err(|e| StoreError::Invalid {
        what: "state",
        reason: e.to_string(),
    })?;
    if text.len() > max_bytes {
        return Err(StoreError::TooLarge {
            what: "state",
            size: text.len(),
            limit: max_bytes,
        });
    }
    Ok(text)
}

/// A state document [`Storage`] writes: a [`Value`], or its encoded JSON text (what the
/// runtime passes, serialized straight from its state). Both are checked the same way: a
/// JSON object with an integer `"format"` no newer than [`STATE_FORMAT`], at most the
/// storage's size limit (ST-19, ST-24).
pub trait StateDocument: Send + sealed::Sealed {
    /// The document as stored text, checked.
    ///
    /// # Errors
    ///
    /// `Invalid` for a missing or newer format or text that is not JSON, `TooLarge` over
    /// `max_bytes`.
    fn into_text(self, max_bytes: usize) -> StoreResult<String>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for serde_json::Value {}
    impl Sealed for String {}
}

impl StateDocument for Value {
    fn into_text(self, max_bytes: usize) -> StoreResult<String> {
        encode_state(&self, max_bytes)
    }
}

impl StateDocument for String {
    fn into_text(self, max_bytes: usize) -> StoreResult<String> {
        // The same checks as for a `Value`, in the same order (format, then size), read
        // from the text without building a tree.
        let invalid = |reason: String| StoreError::Invalid {
            what: "state",
            reason,
        };
        let format = FormatField::read(&self)
            .map_err(|e| invalid(format!("not JSON: {e}")))?
            .as_u64()
            .flatten();
        match format {
            Some(format) if format <= STATE_FORMAT => {}
            Some(format) => {
                return Err(invalid(format!(
                    "format {format} is newer than {STATE_FORMAT}"
                )));
            }
            None => {
                return Err(invalid(
                    "must be a JSON object with an integer \"format\"".to_owned(),
                ));
            }
        }
        if self.len() > max_bytes {
            return Err(StoreError::TooLarge {
                what: "state",
                size: self.len(),
                limit: max_bytes,
            });
        }
        Ok(self)
    }
}

/// A state document the runtime serialized itself from its state (`serde_json::to_string`
/// of a state whose format is the current one): valid JSON with a current `"format"` by
/// construction, so only its size is checked, not its text scanned again.
pub(crate) struct SerializedState(pub(crate) String);

impl sealed::Sealed for SerializedState {}

impl StateDocument for SerializedState {
    fn into_text(self, max_bytes: usize) -> StoreResult<String> {
        if self.0.len() > max_bytes {
            return Err(StoreError::TooLarge {
                what: "state",
                size: self.0.len(),
                limit: max_bytes,
            });
        }
        Ok(self.0)
    }
}

/// The top-level `"format"` of a document, every other member skipped unread.
#[derive(serde::Deserialize)]
struct FormatField {
    format: Option<Value>,
}

impl FormatField {
    /// Reads a JSON object's `"format"` (a JSON array, which serde would also accept for a
    /// struct, is refused like any other non-object).
    fn read(text: &str) -> serde_json::Result<Self> {
        if !text.trim_start().starts_with('{') {
            return Ok(Self { format: None });
        }
        serde_json::from_str(text)
    }

    fn as_u64(&self) -> Option<Option<u64>> {
        self.format.as_ref().map(Value::as_u64)
    }
}

/// Checks the `"format"` of a stored document without decoding the rest (ST-19, ST-22):
/// the errors of [`decode_state`] for a document that is not JSON or has a newer format.
pub(crate) fn check_stored_format(instance_id: &str, text: &str) -> StoreResult<()> {
    let decode = |path: &str, message: String| StoreError::Decode {
        what: "instance",
        id: instance_id.to_owned(),
        path: path.to_owned(),
        message,
    };
    let field = FormatField::read(text).map_err(|e| decode("state", e.to_string()))?;
    match field.as_u64() {
        Some(Some(format)) if format <= STATE_FORMAT => Ok(()),
        Some(Some(format)) => Err(StoreError::FormatTooNew {
            what: "instance",
            id: instance_id.to_owned(),
            found: format,
            supported: STATE_FORMAT,
        }),
        Some(None) | None => Err(decode(
            "state.format",
            "missing or not an unsigned integer".to_owned(),
        )),
    }
}

/// Decodes a stored state document (ST-19, ST-22).
#[allow(clippy::needless_pass_by_value)] // the shape `InstanceRecord::try_map_state` takes
fn decode_state(instance_id: &str, text: String) -> StoreResult<Value> {
    let value: Value = serde_json::from_str(&text).map_err(|e| StoreError::Decode {
        what: "instance",
        id: instance_id.to_owned(),
        path: "state".to_owned(),
        message: e.to_string(),
    })?;
    match value.get("format").map(Value::as_u64) {
        Some(Some(format)) if format <= STATE_FORMAT => Ok(value),
        Some(Some(format)) => Err(StoreError::FormatTooNew {
            what: "instance",
            id: instance_id.to_owned(),
            found: format,
            supported: STATE_FORMAT,
        }),
        Some(None) | None => Err(StoreError::Decode {
            what: "instance",
            id: instance_id.to_owned(),
            path: "state.format".to_owned(),
            message: "missing or not an unsigned integer".to_owned(),
        }),
    }
}

/// Checks a purge filter's statuses (ST-32) and returns them (empty means both final ones).
fn purge_statuses(filter: &PurgeFilter) -> StoreResult<Vec<InstanceStatus>> {
    if let Some(live) = filter.statuses.iter().find(|s| !s.is_final()) {
        return Err(StoreError::Invalid {
            what: "purge filter",
            reason: format!("status {live} is not final; cancel live instances first"),
        });
    }
    if filter.statuses.is_empty() {
        Ok(vec![InstanceStatus::Finished, InstanceStatus::Cancelled])
    } else {
        Ok(filter.statuses.clone())
    }
}

/// Page sizes: 0 means the default.
fn page(limit: usize, default: usize) -> usize {
    if limit == 0 { default } else { limit }
}

/// Whether two trigger rows are equal but for `registered_at` (C-11).
fn same_trigger(a: &TriggerRow, b: &TriggerRow) -> bool {
    a.definition_name == b.definition_name
        && a.definition_version == b.definition_version
        && a.node_id == b.node_id
        && a.hash == b.hash
        && a.name == b.name
        && a.key_display == b.key_display
        && a.payload == b.payload
        && a.activation == b.activation
}

/// The schedule a timer row without instance describes.
fn schedule_of(row: &TimerRow) -> Option<Schedule> {
    Some(Schedule {
        schedule_id: row.timer_id.clone(),
        definition_name: row.definition_name.clone()?,
        node_id: row.node_id.clone()?,
        kind: row.kind.clone(),
        due_at: row.due_at,
        fired: row.parked,
    })
}

/// Adds one instance to the counts of its group.
fn count_instance(counts: &mut Vec<InstanceCount>, summary: InstanceSummary) {
    let group = counts
        .iter_mut()
        .find(|c| c.status == summary.status && c.definition_name == summary.definition_name);
    match group {
        Some(group) => group.count += 1,
        None => counts.push(InstanceCount {
            definition_name: summary.definition_name,
            status: summary.status,
            count: 1,
        }),
    }
}
