//! The leased run guard (ST-14, ENG-28, ENG-36): the one place where this runtime acquires,
//! renews and releases instance leases, and claims the instances that recovery runs again.
//!
//! A run holds its instance's lease from before it loads the instance until its last commit
//! releases it. While the run lasts, [`LeaseGuard::hold`] renews the lease every
//! [`LeaseSettings::renew_every`] for another [`LeaseSettings::ttl`], so a run longer than the
//! TTL keeps its instance. When a renewal is refused (`Fenced`: another owner took the
//! expired lease, or the instance is gone), or keeps failing until the lease has expired, the
//! lease is *lost*: the run's cancellation token fires, and whatever the run still tries to
//! commit is refused by fencing, so two owners never both commit a run of one instance.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cancel::CancellationToken;
use crate::store::{
    ClaimedRecord, InstanceRecord, InstanceSubStatus, LeaseClaim, LeaseKey, Micros, Renewal,
    Storage, StoreError, StoreResult,
};

use super::cache::Cached;
use super::signals::RunSignals;
use crate::base::{lock, now_micros};
use crate::engine::state::WorkflowState;

/// The default lease TTL (ST-14): 30 s.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The default renewal interval (ST-14): 10 s.
pub(crate) const DEFAULT_RENEW_EVERY: Duration = Duration::from_secs(10);
/// The longest a run waits for a lease this runtime's own recovery sweep holds: the sweep
/// hands an instance another run of this process is about to take back at once.
const OWN_LEASE_WAIT: Duration = Duration::from_secs(5);

/// How long leases last and how often they are renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseSettings {
    /// The lease duration granted by each acquire and renewal.
    pub(crate) ttl: Duration,
    /// How often a running run renews its lease.
    pub(crate) renew_every: Duration,
}

impl LeaseSettings {
    /// `ttl` and `renew_every`, with the renewal made shorter than the TTL: at most a third of
    /// it when it is not.
    pub(crate) fn new(ttl: Duration, renew_every: Option<Duration>) -> Self {
        let ttl = ttl.max(Duration::from_millis(1));
        let third = ttl / 3;
        let renew_every = match renew_every {
            Some(every) if every < ttl => every,
            Some(_) => third,
            None => DEFAULT_RENEW_EVERY.min(third),
        };
        Self {
            ttl,
            renew_every: renew_every.max(Duration::from_millis(1)),
        }
    }

    /// The TTL in µs, as the store takes it.
    pub(crate) fn ttl_micros(&self) -> Micros {
        i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX)
    }
}

/// A claim made with a kept state (ENG-53) as the record a run loads: the stored text, or,
/// when the store found it unchanged, the kept text itself (the same bytes) with the kept
/// state, taken out of `kept`.
fn with_kept(
    claimed: ClaimedRecord<Option<String>>,
    kept: &mut Option<Box<Cached>>,
) -> (ClaimedRecord<String>, Option<Box<Cached>>) {
    let mut kept_state = None;
    let record = claimed
        .record
        .try_map_state(|_, state| {
            Ok::<_, std::convert::Infallible>(match state {
                Some(text) => text,
                None => match kept.take() {
                    Some(mut known) => {
                        let document = std::mem::take(&mut known.document);
                        kept_state = Some(known);
                        document
                    }
                    // Not reached: a state of `None` answers a claim made with a kept state.
                    None => String::new(),
                },
            })
        })
        .unwrap_or_else(|never| match never {});
    (
        ClaimedRecord {
            lease: claimed.lease,
            record,
        },
        kept_state,
    )
}

/// An instance lease held by this runtime (ST-14). Every store call about instance leases
/// goes through it. Release it with [`LeaseGuard::release`] unless the run's last commit
/// released it ([`LeaseGuard::released_by_commit`]); a guard dropped otherwise leaves the
/// lease to expire.
pub(crate) struct LeaseGuard<'s> {
    store: &'s Storage,
    instance_id: String,
    token: u64,
    expires_at: Micros,
    settings: LeaseSettings,
    /// Why the lease was lost, once it was.
    lost: Mutex<Option<StoreError>>,
    /// The instance as the acquisition read it (one store operation takes the lease and
    /// loads the instance), until the run takes it.
    loaded: Mutex<Option<Result<InstanceRecord<String>, StoreError>>>,
    /// The state this runtime kept of the instance (ENG-53), when the claim found the stored
    /// record to be the very commit it was kept from, until the run takes it.
    kept: Mutex<Option<Box<Cached>>>,
    /// The instance's definition, once the run loaded it: a field of the lease-lost event.
    definition: Mutex<Option<String>>,
    /// The node of the task attempt in progress under this lease, which the engine keeps
    /// (a field of the lease-lost event).
    executing: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for LeaseGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("instance_id", &self.instance_id)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl<'s> LeaseGuard<'s> {
    /// Acquires the lease of `instance_id` for `owner`. A lease held by `owner` itself
    /// belongs to this runtime's recovery sweep, which gives it back at once when another run
    /// of this process holds the instance: that is waited for (briefly), not reported.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown instance, `LeaseHeld` when another owner holds a live lease,
    /// and the store's errors.
    pub(crate) async fn acquire(
        store: &'s Storage,
        owner: &str,
        instance_id: &str,
        settings: LeaseSettings,
    ) -> Result<Self, StoreError> {
        Self::acquire_waiting(store, owner, instance_id, settings, false, None).await
    }

    /// [`LeaseGuard::acquire`] with the state this runtime kept of the instance (ENG-53):
    /// the claim compares the stored record with it in the store, and the run takes the
    /// kept state ([`LeaseGuard::take_kept`]) when it is unchanged, with the kept text as the
    /// record's: no copy of the stored one is made.
    pub(crate) async fn acquire_kept(
        store: &'s Storage,
        owner: &str,
        instance_id: &str,
        settings: LeaseSettings,
        kept: Option<Box<Cached>>,
    ) -> Result<Self, StoreError> {
        Self::acquire_waiting(store, owner, instance_id, settings, false, kept).await
    }

    /// [`LeaseGuard::acquire`] for the first run of an instance just created: nobody but a
    /// recovery sweep (of any process) can hold its lease, and a sweep hands the lease of a
    /// never-run instance back at once, so a lease held by anyone is waited for (briefly).
    ///
    /// With the state this runtime kept of it at its creation (ENG-53), claimed as
    /// [`LeaseGuard::acquire_kept`] does: its stored text is not copied out.
    pub(crate) async fn acquire_first(
        store: &'s Storage,
        owner: &str,
        instance_id: &str,
        settings: LeaseSettings,
        kept: Option<Box<Cached>>,
    ) -> Result<Self, StoreError> {
        Self::acquire_waiting(store, owner, instance_id, settings, true, kept).await
    }

    async fn acquire_waiting(
        store: &'s Storage,
        owner: &str,
        instance_id: &str,
        settings: LeaseSettings,
        any_holder: bool,
        mut kept: Option<Box<Cached>>,
    ) -> Result<Self, StoreError> {
        let give_up = std::time::Instant::now() + OWN_LEASE_WAIT;
        let mut pause = Duration::from_millis(1);
        loop {
            let claim = LeaseClaim {
                owner: owner.to_owned(),
                token: None,
                now: now_micros(),
                ttl: settings.ttl_micros(),
            };
            let claimed = match &kept {
                None => store
                    .claim_instance_raw(instance_id, claim)
                    .await
                    .map(|claimed| (claimed, None)),
                Some(known) => store
                    .claim_instance_raw_known(instance_id, claim, known.version, &known.document)
                    .await
                    .map(|claimed| with_kept(claimed, &mut kept)),
            };
            match claimed {
                Ok((ClaimedRecord { lease, record }, kept_state)) => {
                    return Ok(Self {
                        store,
                        instance_id: instance_id.to_owned(),
                        token: lease.token,
                        expires_at: lease.expires_at,
                        settings,
                        lost: Mutex::new(None),
                        definition: Mutex::new(Some(record.definition_name.clone())),
                        loaded: Mutex::new(Some(Ok(record))),
                        kept: Mutex::new(kept_state),
                        executing: Arc::default(),
                    });
                }
                Err(StoreError::LeaseHeld { holder, .. })
                    if (any_holder || holder == owner) && std::time::Instant::now() < give_up =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Claims up to `limit` `Running` instances whose lease is free or expired (ST-15): the
    /// instances a recovery pass runs again, with their sub-status (`Executing` means
    /// interrupted, ENG-2).
    pub(crate) async fn claim_runnable(
        store: &'s Storage,
        owner: &str,
        settings: LeaseSettings,
        limit: usize,
    ) -> Result<Vec<(Self, Option<InstanceSubStatus>)>, StoreError> {
        let claimed = store
            .claim_runnable(owner, now_micros(), settings.ttl_micros(), limit)
            .await?;
        Ok(claimed
            .into_iter()
            .map(|claim| {
                let guard = Self {
                    store,
                    instance_id: claim.instance_id,
                    token: claim.lease.token,
                    expires_at: claim.lease.expires_at,
                    settings,
                    lost: Mutex::new(None),
                    loaded: Mutex::new(None),
                    kept: Mutex::new(None),
                    definition: Mutex::new(None),
                    executing: Arc::default(),
                };
                (guard, claim.sub_status)
            })
            .collect())
    }

    /// The instance.
    pub(crate) fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The fencing token every commit of the run presents (ENG-28).
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// The instance as the acquisition loaded it, once: `None` when it was not loaded with
    /// the lease (a recovery claim) or was taken already.
    pub(crate) fn take_loaded(&self) -> Option<Result<InstanceRecord<String>, StoreError>> {
        lock(&self.loaded).take()
    }

    /// The kept state of the instance, once, when the claim found its record unchanged
    /// ([`LeaseGuard::acquire_kept`]).
    pub(crate) fn take_kept(&self) -> Option<WorkflowState> {
        lock(&self.kept).take().map(|kept| kept.state)
    }

    /// Records the instance's definition, as the run loaded it.
    pub(crate) fn set_definition(&self, name: &str) {
        let mut definition = lock(&self.definition);
        // The claim recorded it already, in the common case: no second copy then.
        if definition.as_deref() != Some(name) {
            *definition = Some(name.to_owned());
        }
    }

    /// Where the engine keeps the node of the task attempt it runs under this lease.
    pub(crate) fn executing(&self) -> Arc<Mutex<Option<String>>> {
        Arc::clone(&self.executing)
    }

    /// Why the lease was lost, if it was: the run must not be reported as done.
    pub(crate) fn lost(&self) -> Option<StoreError> {
        lock(&self.lost).clone()
    }

    /// Runs `run` while renewing the lease (ST-14). A lost lease fires `cancel`, the run's
    /// cancellation token (ENG-36): its task is asked to stop, and its commit is refused by
    /// fencing (ENG-52's grace still applies to the task). A control request a renewal returns
    /// is passed to `signals` (FLT-15, ENG-50).
    pub(crate) async fn hold<F: Future>(
        &self,
        cancel: &CancellationToken,
        signals: Option<&RunSignals>,
        run: std::pin::Pin<&mut F>,
    ) -> F::Output {
        let renew = std::pin::pin!(self.renew(cancel, signals));
        match futures_select(run, renew).await {
            Ok(output) => output,
            Err(never) => match never {},
        }
    }

    /// Renews every `renew_every` until the lease is lost; then waits for ever.
    async fn renew(
        &self,
        cancel: &CancellationToken,
        signals: Option<&RunSignals>,
    ) -> std::convert::Infallible {
        if tokio::runtime::Handle::try_current().is_err() {
            // Polled outside tokio (a bare executor): no timer to renew with; the run keeps
            // the lease for its TTL, and fencing still guards its commits.
            return std::future::pending().await;
        }
        let mut expires_at = self.expires_at;
        loop {
            tokio::time::sleep(self.settings.renew_every).await;
            let now = now_micros();
            match self.renew_once(now).await {
                Ok(renewal) => {
                    expires_at = renewal.lease.expires_at;
                    if let (Some(signals), Some(request)) = (signals, &renewal.control_request) {
                        signals.signal(request, cancel);
                    }
                }
                Err(error) if error.is_transient() && now_micros() < expires_at => {
                    let definition = lock(&self.definition).clone().unwrap_or_default();
                    tracing::warn!(
                        definition = definition.as_str(),
                        instance = self.instance_id.as_str(),
                        %error,
                        "lease renewal failed; retrying while the lease lasts"
                    );
                }
                Err(error) => {
                    let definition = lock(&self.definition).clone().unwrap_or_default();
                    let node = lock(&self.executing).clone().unwrap_or_default();
                    tracing::warn!(
                        definition = definition.as_str(),
                        instance = self.instance_id.as_str(),
                        node = node.as_str(),
                        token = self.token,
                        %error,
                        "instance lease lost: the run is cancelled and its commit will be fenced"
                    );
                    *lock(&self.lost) = Some(error);
                    cancel.cancel();
                    return std::future::pending().await;
                }
            }
        }
    }

    /// One renewal, on a task of its own: the run ending drops [`LeaseGuard::hold`]'s
    /// renewal loop at whatever point it is, and a renewal cut off inside its store operation
    /// could leave that operation's transaction open on a pooled connection, holding the
    /// instance row's lock until the connection is used again (ST-27). On its own task it
    /// runs to its end, and only its answer is dropped.
    async fn renew_once(&self, now: Micros) -> StoreResult<Renewal> {
        let store = self.store.clone();
        let key = LeaseKey::instance(self.instance_id.as_str());
        let (token, ttl) = (self.token, self.settings.ttl_micros());
        tokio::spawn(async move { store.renew_lease(&key, token, now, ttl).await })
            .await
            .unwrap_or_else(|error| {
                Err(StoreError::unavailable(format_args!(
                    "the lease renewal did not finish: {error}"
                )))
            })
    }

    /// Releases the lease (after a run that did not commit its release). Failing to release
    /// is logged: the lease then expires after its TTL.
    pub(crate) async fn release(self) {
        if let Err(error) = self
            .store
            .release_lease(&LeaseKey::instance(self.instance_id.as_str()), self.token)
            .await
        {
            // Fenced: someone else took it over already; otherwise it expires by itself.
            tracing::debug!(instance = %self.instance_id, %error, "lease not released");
        }
    }

    /// The run's last commit released the lease (ENG-28): nothing left to do.
    pub(crate) fn released_by_commit(self) {}
}

/// Polls `a` and `b` together; the first to finish wins (`Ok` for `a`).
async fn futures_select<A: Future, B: Future>(
    a: std::pin::Pin<&mut A>,
    b: std::pin::Pin<&mut B>,
) -> Result<A::Output, B::Output> {
    tokio::select! {
        biased;
        out = a => Ok(out),
        out = b => Err(out),
    }
}

/// A named lease (ST-11) held by this runtime: one process of a store at a time does the
/// singleton job it guards (the retention purge).
pub(crate) struct NamedLease<'s> {
    store: &'s Storage,
    name: String,
    token: u64,
}

impl<'s> NamedLease<'s> {
    /// Takes the lease `name` for `ttl` unless another owner holds it (`None` then).
    pub(crate) async fn try_acquire(
        store: &'s Storage,
        owner: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<Self>, StoreError> {
        let ttl = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        match store
            .acquire_lease(&LeaseKey::named(name), owner, now_micros(), ttl)
            .await
        {
            Ok(lease) => Ok(Some(Self {
                store,
                name: name.to_owned(),
                token: lease.token,
            })),
            Err(StoreError::LeaseHeld { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Releases the lease; a failure leaves it to expire.
    pub(crate) async fn release(self) {
        if let Err(error) = self
            .store
            .release_lease(&LeaseKey::named(self.name.as_str()), self.token)
            .await
        {
            tracing::debug!(lease = %self.name, %error, "named lease not released");
        }
    }
}
