//! The leases this store claimed, with their nonces (ST-35), and the leases it keeps across
//! transitions (ST-38).
//!
//! A commit that would release the lease of an instance it leaves waiting keeps the lease
//! instead (the commit function's `p_keep_until`), unless another process marked it wanted.
//! The store then keeps the instance's columns as that commit left them, so that the next
//! claim of the instance by the same owner, for the version it committed
//! ([`ClaimKnown`](crate::store::ClaimKnown)), is answered here, with no statement. The
//! commit under that claim presents the lease's token and nonce to the commit function,
//! which checks them under the row's lock: that is the fencing, as for any lease. A kept
//! lease idle for longer than [`IDLE_GIVE_BACK`] is given back, and one nearing its expiry
//! renewed, by [`tend`], one statement for all of them; one another process wants is given
//! back when the store hears so (`notify.rs`) or at its next commit.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::mpsc;

use super::notify;
use super::ops;
use super::schema::Schema;
use crate::base::{Micros, now_micros};
use crate::store::backend::{ClaimedRecord, LeaseClaim, WakeUp};
use crate::store::rows::{
    Commit, InstanceRecord, InstanceStatus, InstanceSubStatus, Lease, LeaseState,
};

/// A kept lease idle (no run of this process holds it) for longer than this is given back.
pub(super) const IDLE_GIVE_BACK: Duration = Duration::from_secs(1);

/// How often [`tend`] looks at the kept leases.
const TEND_EVERY: Duration = Duration::from_millis(250);

/// What the store knows of an instance whose lease it claimed, for keeping the lease.
#[derive(Debug, Clone)]
pub(super) struct Known {
    /// The owner the lease was claimed for.
    owner: String,
    /// The TTL it was claimed with.
    ttl: Micros,
    /// The instance's columns as the claim read them, then as the keeping commit left them.
    record: InstanceRecord<()>,
}

/// A lease this store claimed (see `ops::claim_instance`): the nonce its commits and
/// renewals name, and what it needs to keep the lease.
#[derive(Debug, Clone)]
pub(super) struct HeldClaim {
    pub(super) token: u64,
    pub(super) nonce: i64,
    pub(super) expires_at: Micros,
    known: Option<Box<Known>>,
    /// `Some`: kept, and idle since then (no run of this process holds it); `None`: a run
    /// holds it (or it is not kept).
    idle_since: Option<Instant>,
    /// Another process asked for the lease: the next commit releases it.
    wanted: bool,
}

/// A kept lease to give back or renew: the instance, the lease's token and nonce.
pub(super) type KeptLease = (String, u64, i64);

/// What a claim of an instance makes of the lease this store holds on it.
#[derive(Debug)]
pub(super) enum HeldAnswer {
    /// Answered from memory: the lease is kept for the claim's owner, live, on the version
    /// the claimer committed.
    Memory(Box<ClaimedRecord<Option<String>>>),
    /// The lease is kept for the claim's owner but cannot be answered here: refresh it under
    /// its token and nonce (one statement), then claim afresh if that is refused.
    Refresh { token: u64, nonce: i64 },
    /// The lease is kept for another owner of this process: give it back first.
    GiveBack { token: u64, nonce: i64 },
    /// No kept lease: claim as usual.
    Claim,
}

/// The leases this store claimed, by instance. An entry goes when its lease is released (by a
/// commit or a release, or given back) or taken by a durable claim; past
/// [`HeldClaims::KEEP`] entries, the expired ones that are not kept go.
#[derive(Debug, Default)]
pub(super) struct HeldClaims(Mutex<HashMap<String, HeldClaim>>);

impl HeldClaims {
    const KEEP: usize = 4096;

    fn map(&self) -> MutexGuard<'_, HashMap<String, HeldClaim>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh nonce: unique within the process (a counter), random across processes and
    /// runs (hashed under a key drawn once per process).
    pub(super) fn new_nonce() -> i64 {
        static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut hasher = KEY.get_or_init(Default::default).build_hasher();
        hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
        i64::from_ne_bytes(hasher.finish().to_ne_bytes())
    }

    /// The token of the lease this store holds on `id` (0 for none).
    pub(super) fn token(&self, id: &str) -> u64 {
        self.map().get(id).map_or(0, |held| held.token)
    }

    /// The nonce of the lease of `id` under `token`, if this store claimed it so.
    pub(super) fn nonce(&self, id: &str, token: u64) -> Option<i64> {
        self.map()
            .get(id)
            .filter(|held| held.token == token)
            .map(|held| held.nonce)
    }

    /// Records a lease claimed afresh for `claim`, with the record the claim read.
    pub(super) fn claimed(
        &self,
        id: &str,
        lease: Lease,
        nonce: i64,
        claim: &LeaseClaim,
        record: &InstanceRecord<String>,
    ) {
        let held = HeldClaim {
            token: lease.token,
            nonce,
            expires_at: lease.expires_at,
            known: Some(Box::new(Known {
                owner: claim.owner.clone(),
                ttl: claim.ttl,
                record: without_state(record),
            })),
            idle_since: None,
            wanted: false,
        };
        let mut map = self.map();
        map.insert(id.to_owned(), held);
        if map.len() > Self::KEEP {
            let now = claim.now;
            map.retain(|_, held| held.expires_at > now || held.idle_since.is_some());
        }
    }

    /// A lease refreshed under `token` until `expires_at` (a run holds it now), with the
    /// record the refresh read when it read one.
    pub(super) fn refreshed(
        &self,
        id: &str,
        token: u64,
        expires_at: Micros,
        record: Option<&InstanceRecord<String>>,
    ) {
        if let Some(held) = self.map().get_mut(id).filter(|held| held.token == token) {
            held.expires_at = expires_at;
            held.idle_since = None;
            if let (Some(known), Some(record)) = (held.known.as_mut(), record) {
                known.record = without_state(record);
            }
        }
    }

    /// Forgets the lease of `id` (under `token`, or any).
    pub(super) fn remove(&self, id: &str, token: Option<u64>) {
        let mut map = self.map();
        if map
            .get(id)
            .is_some_and(|held| token.is_none_or(|t| held.token == t))
        {
            map.remove(id);
        }
    }

    /// What a claim of `id` for `claim` makes of a kept lease: with `known_version` (the
    /// version the claimer committed last), a live lease kept for the same owner on that
    /// version is answered from memory, and lent to the claimer's run.
    pub(super) fn answer(
        &self,
        id: &str,
        claim: &LeaseClaim,
        known_version: Option<u64>,
    ) -> HeldAnswer {
        let mut map = self.map();
        let Some(held) = map.get_mut(id) else {
            return HeldAnswer::Claim;
        };
        let (Some(known), Some(_)) = (held.known.as_ref(), held.idle_since) else {
            return HeldAnswer::Claim;
        };
        let (token, nonce) = (held.token, held.nonce);
        if known.owner != claim.owner {
            map.remove(id);
            return HeldAnswer::GiveBack { token, nonce };
        }
        // Live for at least half its TTL more: a run's first renewal comes after a third.
        let live = held.expires_at.saturating_sub(claim.now) >= known.ttl / 2;
        if known_version == Some(known.record.version) && live && !held.wanted {
            let mut record = known.record.clone();
            record.lease = Some(LeaseState {
                owner: known.owner.clone(),
                token,
                expires_at: held.expires_at,
            });
            let lease = Lease {
                token,
                expires_at: held.expires_at,
            };
            held.idle_since = None;
            return HeldAnswer::Memory(Box::new(ClaimedRecord {
                lease,
                record: record
                    .try_map_state(|_, ()| Ok::<_, std::convert::Infallible>(None))
                    .unwrap_or_else(|never| match never {}),
            }));
        }
        held.idle_since = None;
        HeldAnswer::Refresh { token, nonce }
    }

    /// The expiry to keep the lease of `commit` until, when the commit may keep it (ST-38):
    /// it would release the lease of an instance it leaves waiting, under a lease this store
    /// claimed, that no other process asked for.
    pub(super) fn keep_until(&self, commit: &Commit<String>) -> Option<Micros> {
        let waiting = commit.status == InstanceStatus::Suspended
            && commit.sub_status == Some(InstanceSubStatus::Waiting);
        if !commit.release_lease || !waiting || commit.definition_version.is_some() {
            return None;
        }
        let id = commit.instance_id.as_str();
        if commit
            .control_requests
            .iter()
            .any(|(target, _)| target == id)
        {
            return None;
        }
        let map = self.map();
        let held = map
            .get(id)
            .filter(|held| held.token == commit.lease_token)?;
        let known = held.known.as_ref().filter(|_| !held.wanted)?;
        let control_left = known.record.control_request.is_some() && !commit.clear_control_request;
        (!control_left).then(|| commit.now.saturating_add(known.ttl))
    }

    /// Follows `commit`, applied at `version`: a lease it kept (until `kept_until`) is idle
    /// from now on, with the instance's columns as the commit left them; a lease it released
    /// is forgotten.
    pub(super) fn committed(
        &self,
        commit: &Commit<String>,
        version: u64,
        kept_until: Option<Micros>,
    ) {
        let id = commit.instance_id.as_str();
        let mut map = self.map();
        let Some(held) = map
            .get_mut(id)
            .filter(|held| held.token == commit.lease_token)
        else {
            return;
        };
        if let Some(until) = kept_until {
            if let Some(known) = held.known.as_mut() {
                let record = &mut known.record;
                record.version = version;
                record.status = commit.status;
                record.sub_status = commit.sub_status;
                record.correlation_id.clone_from(&commit.correlation_id);
                record.updated_at = commit.now;
                record.finished_at = None;
                record.listing.clone_from(&commit.listing);
                if commit.clear_control_request {
                    record.control_request = None;
                }
                held.expires_at = until;
                held.idle_since = Some(Instant::now());
                return;
            }
        } else if !commit.release_lease && !commit.status.is_final() {
            if let Some(known) = held.known.as_mut() {
                known.record.version = version;
                if commit.clear_control_request {
                    known.record.control_request = None;
                }
            }
            return;
        }
        map.remove(id);
    }

    /// Another process wants the lease of `id` (ST-38): its next commit releases it, and a
    /// kept lease that is idle is taken out, for the caller to give back.
    pub(super) fn wanted(&self, id: &str) -> Option<KeptLease> {
        let mut map = self.map();
        let held = map.get_mut(id)?;
        held.wanted = true;
        if held.idle_since.is_some() {
            let taken = (id.to_owned(), held.token, held.nonce);
            map.remove(id);
            return Some(taken);
        }
        None
    }

    /// Takes out every lease this store keeps idle, for the caller to give back: the process
    /// is about to go (ST-38).
    pub(super) fn take_all_idle(&self) -> Vec<KeptLease> {
        let mut taken = Vec::new();
        self.map().retain(|id, held| {
            if held.idle_since.is_some() {
                taken.push((id.clone(), held.token, held.nonce));
                return false;
            }
            true
        });
        taken
    }

    /// Takes out the lease of `id` if this store keeps it idle, for the caller to give back.
    pub(super) fn take_idle(&self, id: &str) -> Option<KeptLease> {
        let mut map = self.map();
        let held = map.get(id).filter(|held| held.idle_since.is_some())?;
        let taken = (id.to_owned(), held.token, held.nonce);
        map.remove(id);
        Some(taken)
    }

    /// The kept leases to give back (idle for longer than [`IDLE_GIVE_BACK`], taken out) and
    /// those to renew (live, with less than half their TTL left), with the expiry to renew
    /// them until.
    fn due(&self, now: Micros) -> (Vec<KeptLease>, Vec<KeptLease>, Micros) {
        let mut map = self.map();
        let mut give_back = Vec::new();
        let mut renew = Vec::new();
        let mut until = Micros::MAX;
        map.retain(|id, held| {
            let (Some(since), Some(known)) = (held.idle_since, held.known.as_ref()) else {
                return true;
            };
            if since.elapsed() > IDLE_GIVE_BACK {
                give_back.push((id.clone(), held.token, held.nonce));
                return false;
            }
            if held.expires_at > now && held.expires_at - now < known.ttl / 2 {
                renew.push((id.clone(), held.token, held.nonce));
                until = until.min(now.saturating_add(known.ttl));
            }
            true
        });
        (give_back, renew, until)
    }

    fn renewed(&self, renewed: &[(String, i64)], expires_at: Micros) {
        let mut map = self.map();
        for (id, token) in renewed {
            if let Some(held) = map
                .get_mut(id)
                .filter(|held| i64::try_from(held.token).ok() == Some(*token))
            {
                held.expires_at = expires_at;
            }
        }
    }
}

/// The columns of `record`, without its state.
fn without_state(record: &InstanceRecord<String>) -> InstanceRecord<()> {
    InstanceRecord {
        instance_id: record.instance_id.clone(),
        definition_name: record.definition_name.clone(),
        definition_version: record.definition_version.clone(),
        status: record.status,
        sub_status: record.sub_status,
        correlation_id: record.correlation_id.clone(),
        version: record.version,
        lease: None,
        control_request: record.control_request.clone(),
        origin_at: record.origin_at,
        created_at: record.created_at,
        updated_at: record.updated_at,
        finished_at: record.finished_at,
        listing: record.listing.clone(),
        state: (),
    }
}

/// The pool, schema and channels the tending of kept leases writes with.
pub(super) struct Tending {
    pub(super) pool: PgPool,
    pub(super) schema: Schema,
    pub(super) notifier: mpsc::UnboundedSender<notify::Outgoing>,
    /// The store's write counters: a give-back or renewal is a write transaction.
    pub(super) counters: Arc<super::Counters>,
}

impl Tending {
    /// Gives back the kept leases `leases` (taken out of the store's claims) in one
    /// statement (ST-38). With `announce` (another process wanted them), tells the other
    /// processes the instances are free; a lease given back for being idle was wanted by
    /// nobody, and tells nothing.
    pub(super) async fn give_back(&self, leases: Vec<KeptLease>, announce: bool) {
        if leases.is_empty() {
            return;
        }
        self.counters.count();
        let (ids, tokens, nonces) = columns(leases);
        let given = match self.pool.acquire().await {
            Ok(mut conn) => {
                ops::give_back_kept(&mut conn, &self.schema, &ids, &tokens, &nonces).await
            }
            Err(error) => Err(error.into()),
        };
        match given {
            Ok(given) if announce && !given.is_empty() => {
                let mut hints: Vec<WakeUp> = given
                    .into_iter()
                    .map(|id| WakeUp::InstanceRunnable { id })
                    .collect();
                hints.push(WakeUp::QueueChanged);
                // The notifier ends only with the store: a closed channel loses nothing.
                let _ = self.notifier.send(notify::Outgoing::Hints(hints));
            }
            Ok(_) => {}
            // The leases expire by themselves (or go with the owner's liveness, ST-36).
            Err(error) => tracing::debug!(%error, "postgres store: kept leases not given back"),
        }
    }
}

fn columns(leases: Vec<KeptLease>) -> (Vec<String>, Vec<i64>, Vec<i64>) {
    let mut ids = Vec::with_capacity(leases.len());
    let mut tokens = Vec::with_capacity(leases.len());
    let mut nonces = Vec::with_capacity(leases.len());
    for (id, token, nonce) in leases {
        ids.push(id);
        tokens.push(i64::try_from(token).unwrap_or(i64::MAX));
        nonces.push(nonce);
    }
    (ids, tokens, nonces)
}

/// Gives back the kept leases idle for longer than [`IDLE_GIVE_BACK`] and renews those
/// nearing their expiry, every [`TEND_EVERY`], while the store lives: one statement for each
/// when there is any (ST-38).
pub(super) async fn tend(claims: Weak<HeldClaims>, tending: Arc<Tending>) {
    loop {
        tokio::time::sleep(TEND_EVERY).await;
        let Some(claims) = claims.upgrade() else {
            return;
        };
        let now = now_micros();
        let (give_back, renew, until) = claims.due(now);
        tending.give_back(give_back, false).await;
        if renew.is_empty() {
            continue;
        }
        let (ids, tokens, nonces) = columns(renew);
        tending.counters.count();
        let renewed = match tending.pool.acquire().await {
            Ok(mut conn) => {
                ops::renew_kept(&mut conn, &tending.schema, &ids, &tokens, &nonces, until).await
            }
            Err(error) => Err(error.into()),
        };
        match renewed {
            Ok(renewed) => {
                let renewed: Vec<(String, i64)> = ids
                    .into_iter()
                    .zip(tokens)
                    .filter(|(id, _)| renewed.contains(id))
                    .collect();
                claims.renewed(&renewed, until);
            }
            Err(error) => tracing::debug!(%error, "postgres store: kept leases not renewed"),
        }
    }
}

/// Gives back, as the listener hears of them, the kept leases another process wants (ST-38):
/// one statement each (a lease a run of this process holds is released by its next commit).
pub(super) async fn give_back_wanted(
    claims: Weak<HeldClaims>,
    tending: Arc<Tending>,
    mut wanted: mpsc::UnboundedReceiver<String>,
) {
    while let Some(id) = wanted.recv().await {
        let Some(claims) = claims.upgrade() else {
            return;
        };
        let mut leases: Vec<_> = claims.wanted(&id).into_iter().collect();
        while let Ok(id) = wanted.try_recv() {
            leases.extend(claims.wanted(&id));
        }
        tending.give_back(leases, true).await;
    }
}
