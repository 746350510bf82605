//! The instance leases of a file this process owns, kept in memory (ST-14, ST-26).
//!
//! One process owns a file for writing (the owner lock, ST-26) and a lease promises no
//! durability (its holder dies with the process), so an instance's lease need not be written
//! to its row: a claim, a renewal and a release are a check and a change of this table under
//! its mutex, on the calling thread, with no trip to the writer and no write. A commit checks
//! its token here (fencing) and writes the token into the instance row it updates anyway, so
//! the row always carries the highest token a committed change presented: the next open of the
//! file issues tokens above it, and no token a committed row carries is issued twice.
//!
//! A slot is kept for an instance while its lease is held, and after a release while the last
//! token issued is above the one its row carries (a claim released without a commit): a later
//! claim must still get a higher token. A slot whose last token is on the row and whose lease
//! is not held is removed: the row remembers the token, so the table holds only the instances
//! being worked on.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::base::Micros;
use crate::store::backend::LeaseKey;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{Lease, LeaseState};

/// The holder of a lease.
#[derive(Debug, Clone)]
struct Holder {
    owner: String,
    expires_at: Micros,
}

/// One instance's lease.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// While held (possibly expired).
    holder: Option<Holder>,
    /// The last token issued (never below `stored`).
    token: u64,
    /// The highest token the instance's row is known to carry.
    stored: u64,
}

impl Slot {
    /// Whether the slot says nothing the row does not: no holder, its last token stored.
    fn idle(&self) -> bool {
        self.holder.is_none() && self.token <= self.stored
    }

    /// Issues the next token to `owner` unless a live lease is held at `now`.
    fn take(&mut self, id: &str, owner: &str, now: Micros, ttl: Micros) -> StoreResult<Lease> {
        if let Some(holder) = &self.holder
            && holder.expires_at > now
        {
            return Err(StoreError::LeaseHeld {
                resource: LeaseKey::instance(id).resource(),
                holder: holder.owner.clone(),
                until: holder.expires_at,
            });
        }
        let expires_at = now.saturating_add(ttl);
        self.token = self.token.max(self.stored).saturating_add(1);
        self.holder = Some(Holder {
            owner: owner.to_owned(),
            expires_at,
        });
        Ok(Lease {
            token: self.token,
            expires_at,
        })
    }

    /// `Ok` when `token` is the current token of a held lease, else `Fenced`.
    fn check(&self, id: &str, token: u64) -> StoreResult<()> {
        if self.holder.is_some() && self.token == token {
            Ok(())
        } else {
            Err(fenced(id, token, self.token))
        }
    }
}

/// `Fenced` for an instance lease: `token` presented, `current` the one in force.
pub(super) fn fenced(id: &str, token: u64, current: u64) -> StoreError {
    StoreError::Fenced {
        resource: LeaseKey::instance(id).resource(),
        token,
        current,
    }
}

/// What [`InstanceLeases::acquire_known`] found.
pub(super) enum Known {
    /// The instance has a slot: the claim was decided (taken, or refused).
    Decided(StoreResult<Lease>),
    /// No slot: the caller reads the row's token and calls
    /// [`InstanceLeases::acquire_stored`].
    Unknown,
}

/// The in-memory instance leases of one store (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct InstanceLeases {
    slots: Mutex<HashMap<String, Slot>>,
}

impl InstanceLeases {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Slot>) -> T) -> T {
        // A panic while the mutex was held left the table consistent (every change is one
        // assignment), so a poisoned lock is taken over.
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut slots)
    }

    /// Acquires the lease of an instance that has a slot; [`Known::Unknown`] when it has none
    /// (the row's token is needed then).
    pub(super) fn acquire_known(&self, id: &str, owner: &str, now: Micros, ttl: Micros) -> Known {
        self.with(|slots| match slots.get_mut(id) {
            Some(slot) => Known::Decided(slot.take(id, owner, now, ttl)),
            None => Known::Unknown,
        })
    }

    /// Acquires the lease of an instance whose row carries `stored` (read before the call).
    /// Also says whether a slot had appeared meanwhile (another claim took and maybe
    /// committed it: the row read before may be older than the lease).
    pub(super) fn acquire_stored(
        &self,
        id: &str,
        stored: u64,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> (StoreResult<Lease>, bool) {
        self.with(|slots| {
            let raced = slots.contains_key(id);
            let slot = slots.entry(id.to_owned()).or_default();
            slot.stored = slot.stored.max(stored);
            let taken = slot.take(id, owner, now, ttl);
            if taken.is_err() && slot.idle() {
                slots.remove(id);
            }
            (taken, raced)
        })
    }

    /// Forgets an instance that does not exist (a claim found no row).
    pub(super) fn forget(&self, id: &str) {
        self.with(|slots| slots.remove(id));
    }

    /// Extends a held lease to `now + ttl` when `token` is current. `None` when the instance
    /// has no slot (no lease held: the caller reads the row for the error).
    pub(super) fn renew(
        &self,
        id: &str,
        token: u64,
        now: Micros,
        ttl: Micros,
    ) -> Option<StoreResult<Lease>> {
        self.with(|slots| {
            let slot = slots.get_mut(id)?;
            Some(slot.check(id, token).map(|()| {
                let expires_at = now.saturating_add(ttl);
                if let Some(holder) = &mut slot.holder {
                    holder.expires_at = expires_at;
                }
                Lease { token, expires_at }
            }))
        })
    }

    /// Releases a held lease when `token` is current. `None` when the instance has no slot.
    pub(super) fn release(&self, id: &str, token: u64) -> Option<StoreResult<()>> {
        self.with(|slots| {
            let slot = slots.get_mut(id)?;
            let checked = slot.check(id, token);
            if checked.is_ok() {
                slot.holder = None;
                if slot.idle() {
                    slots.remove(id);
                }
            }
            Some(checked)
        })
    }

    /// The fencing check of a commit presenting `token` for an instance whose row carries
    /// `stored`: `Ok` only while that lease is held.
    pub(super) fn check(&self, id: &str, token: u64, stored: u64) -> StoreResult<()> {
        self.with(|slots| match slots.get(id) {
            Some(slot) => slot.check(id, token),
            None => Err(fenced(id, token, stored)),
        })
    }

    /// A commit presenting `token` has committed (its row carries the token now); `release`:
    /// it released the lease too.
    pub(super) fn committed(&self, id: &str, token: u64, release: bool) {
        self.with(|slots| {
            let Some(slot) = slots.get_mut(id) else {
                return;
            };
            slot.stored = slot.stored.max(token);
            if release && slot.token == token {
                slot.holder = None;
            }
            if slot.idle() {
                slots.remove(id);
            }
        });
    }

    /// Recovery (ST-15): takes the lease of an instance whose row carries `stored` unless a
    /// live lease is held; `None` then.
    pub(super) fn take_runnable(
        &self,
        id: &str,
        stored: u64,
        owner: &str,
        now: Micros,
        ttl: Micros,
    ) -> Option<Lease> {
        self.acquire_stored(id, stored, owner, now, ttl).0.ok()
    }

    /// The lease to report for an instance, replacing what its row says when the table knows
    /// it: `lease` is left as read from the row when the instance has no slot.
    pub(super) fn overlay(&self, id: &str, lease: &mut Option<LeaseState>) {
        self.with(|slots| {
            if let Some(slot) = slots.get(id) {
                *lease = slot.holder.as_ref().map(|h| LeaseState {
                    owner: h.owner.clone(),
                    token: slot.token,
                    expires_at: h.expires_at,
                });
            }
        });
    }

    /// How many instances have a slot (held leases, and released ones whose token is not on
    /// their row yet).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.with(|slots| slots.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_rise_above_the_stored_one_and_the_table_empties() {
        let leases = InstanceLeases::default();
        assert!(matches!(
            leases.acquire_known("a", "n", 0, 10),
            Known::Unknown
        ));
        let (lease, raced) = leases.acquire_stored("a", 7, "n", 0, 10);
        assert!(!raced);
        let lease = lease.unwrap();
        assert_eq!(lease.token, 8);
        // Held: refused until it expires.
        let Known::Decided(Err(StoreError::LeaseHeld { until, .. })) =
            leases.acquire_known("a", "m", 5, 10)
        else {
            panic!("a live lease must be refused");
        };
        assert_eq!(until, 10);
        // Released without a commit: the slot stays so the next token is higher still.
        leases.release("a", 8).unwrap().unwrap();
        assert_eq!(leases.len(), 1);
        let Known::Decided(Ok(next)) = leases.acquire_known("a", "m", 5, 10) else {
            panic!("a released lease can be taken");
        };
        assert_eq!(next.token, 9);
        // The old token is fenced; the new one commits and releases: the slot goes.
        assert!(matches!(
            leases.check("a", 8, 7),
            Err(StoreError::Fenced { current: 9, .. })
        ));
        leases.check("a", 9, 7).unwrap();
        leases.committed("a", 9, true);
        assert_eq!(leases.len(), 0);
        assert!(matches!(
            leases.check("a", 9, 9),
            Err(StoreError::Fenced { current: 9, .. })
        ));
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_its_holder_fenced() {
        let leases = InstanceLeases::default();
        let first = leases.acquire_stored("a", 0, "n", 0, 10).0.unwrap();
        let second = leases.take_runnable("a", 0, "m", 10, 10).unwrap();
        assert_eq!(second.token, first.token + 1);
        assert!(leases.take_runnable("a", 0, "o", 15, 10).is_none());
        assert!(matches!(
            leases.renew("a", first.token, 15, 10),
            Some(Err(StoreError::Fenced { .. }))
        ));
        let mut shown = None;
        leases.overlay("a", &mut shown);
        assert_eq!(shown.map(|l| (l.owner, l.token)), Some(("m".to_owned(), 2)));
    }
}
