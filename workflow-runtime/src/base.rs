//! The bottom of the crate: small helpers every layer uses and that depend on nothing else in
//! the crate: [`BoxFuture`], ULID-shaped ids (generated without a dependency) and time.

use std::future::Future;
use std::pin::Pin;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A boxed, sendable future borrowing from `'a`: what a registered task returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Milliseconds since the Unix epoch (0 if the clock is before it): the time field of a ULID,
/// which its format fixes in ms; not workflow time.
pub(crate) fn ulid_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A new ULID-shaped id: 48 bits of milliseconds, then 80 bits that are unique within the
/// process (a counter) and random across processes (a per-process seed), as 26 Crockford
/// base32 characters. Ids made in one millisecond by one process sort in creation order.
pub(crate) fn new_ulid() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(ulid_now_ms());
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let time = u128::from(ulid_now_ms() & 0xFFFF_FFFF_FFFF);
    // 16 bits of seed, then 64 bits of (seed + counter): unique per process, varied across.
    let random = (u128::from(seed >> 48) << 64) | u128::from(seed.wrapping_add(count));
    let value = (time << 80) | random;
    let mut out = String::with_capacity(26);
    for i in (0..26).rev() {
        let digit = usize::try_from((value >> (i * 5)) & 0x1F).unwrap_or(0);
        out.push(char::from(CROCKFORD.get(digit).copied().unwrap_or(b'0')));
    }
    out
}

// ---- time ------------------------------------------------------------------------------
//
// One unit: the engine, its state document, the runtime, the timers, the store and the
// [`Clock`](crate::Clock) count [`Micros`] (UTC microseconds since the Unix epoch, ST-23).
// Durations users write in milliseconds (a delay, an attempt timeout, a schedule's interval, a
// look-back window, a delay's or start's instant given in ms) are inputs, converted once where
// they are read by [`ms_to_micros`], which saturates instead of overflowing.

/// A UTC instant as integer microseconds since the Unix epoch (ST-23), or a duration in
/// microseconds where a parameter says so (`ttl`).
pub type Micros = i64;

/// A user-written millisecond duration or instant to microseconds, saturating at
/// `Micros::MAX`: the one input boundary of time.
pub(crate) fn ms_to_micros(ms: u64) -> Micros {
    i64::try_from(ms).unwrap_or(i64::MAX).saturating_mul(1000)
}

/// Whole seconds since the epoch (a cron occurrence) to microseconds, saturating.
pub(crate) fn secs_to_micros(seconds: u64) -> Micros {
    i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000)
}

/// An instant in microseconds to whole seconds since the epoch (for cron); 0 before it.
pub(crate) fn micros_to_secs(at: Micros) -> u64 {
    u64::try_from(at.div_euclid(1_000_000)).unwrap_or(0)
}

/// The wall clock in µs since the epoch (ST-23).
pub(crate) fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

// ---- names ---------------------------------------------------------------------------

/// The name of `T` without module paths (`Vec<Payment>` for `alloc::vec::Vec<app::Payment>`):
/// what errors and stored data may say about a Rust type (ST-20: no type paths stored).
pub(crate) fn neutral_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let mut out = String::with_capacity(full.len());
    let mut ident_start = 0;
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(ident_start);
            continue;
        }
        if !(c.is_alphanumeric() || c == '_') {
            out.push(c);
            ident_start = out.len();
            continue;
        }
        out.push(c);
    }
    out
}

/// Locks `mutex`, taking the data of a poisoned one as it is: a panic elsewhere does not stop
/// the runtime's bookkeeping.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_are_26_chars_unique_and_sorted_within_a_millisecond_burst() {
        let ids: Vec<String> = (0..1000).map(|_| new_ulid()).collect();
        assert!(ids.iter().all(|id| id.len() == 26));
        let mut dedup = ids.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), ids.len());
    }

    #[test]
    fn neutral_type_names_have_no_paths() {
        assert_eq!(neutral_type_name::<String>(), "String");
        assert_eq!(
            neutral_type_name::<Vec<std::collections::BTreeMap<u8, String>>>(),
            "Vec<BTreeMap<u8, String>>"
        );
    }
}
