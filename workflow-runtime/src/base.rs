//! Identifiers: ULID-shaped instance and bookmark ids, generated without a dependency.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
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
        hasher.write_u64(now_ms());
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let time = u128::from(now_ms() & 0xFFFF_FFFF_FFFF);
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
}
