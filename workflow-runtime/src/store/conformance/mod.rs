//! The store conformance suite (ST-33, ST-34), written once and run against every backend.
//!
//! Each case is an async function taking a fresh, empty store as an
//! `Arc<dyn TestBackend>`; it chooses every instant it passes (ST-3) and panics on a
//! violation. [`store_conformance_tests!`](crate::store_conformance_tests) instantiates every
//! case as a `#[tokio::test]` for a backend factory:
//!
//! ```text
//! async fn make() -> (Arc<dyn TestBackend>, ()) { (Arc::new(MemoryStore::new()), ()) }
//! workflow_runtime::store_conformance_tests!(make);
//! ```
//!
//! The factory returns the store and a guard (a temporary directory, say) dropped after the
//! case. Cases are numbered as in `docs/reference/store.md` (ST-34).
//!
//! The cases are grouped by area, one module each (instances, state documents, leases,
//! bookmarks, triggers, timers, queue, dead letters, debounced sends, journal, hints,
//! incidents, definitions); all are
//! re-exported here, where the macro finds them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::missing_panics_doc
)]

mod bookmarks;
mod dead_letters;
mod debounce;
mod definitions;
mod documents;
mod fixtures;
mod harness;
mod hints;
mod incidents;
mod instances;
mod journal;
mod leases;
#[cfg(feature = "postgres")]
pub mod postgres;
mod queue;
mod slots;
mod timers;
mod triggers;

pub use bookmarks::{
    c08_bookmark_lookup, c09_bookmark_diff, c10_correlation_rewrite, c19_receipts, c35_child_waits,
    c45_repin, c46_consumed_anywhere, c47_key_index,
};
pub use dead_letters::{c17_dead_letter_once, c18_dead_letters};
pub use debounce::c44_debounce;
pub use definitions::c36_definitions;
pub use documents::{c25_decode_error, c26_format_too_new, c27_too_large};
pub use fixtures::{
    JOURNAL_BEFORE_UPGRADE, OldJournalRow, SEC, T0, TTL,
    assert_journal_reads_as_before_the_upgrade, bookmark, create_leased, doc, journal_entry,
    new_instance, queue_item, waiting,
};
pub use harness::{Harness, TestBackend};
pub use hints::c28_wake_ups;
pub use incidents::incidents;
pub use instances::{
    c01_round_trip, c02_create_existing, c03_commit_increments_version,
    c04_stale_version_writes_nothing, c05_concurrent_commits_one_wins,
    c16_commit_writes_other_instances, c21_activation_guard, c23_list_instances, c23_listing_text,
    c24_purge, final_status_clears_bookmarks_and_timers,
};
pub use journal::{c22_journal, c22_journal_cap, c22_journal_compaction, c22_journal_pages};
pub use leases::{
    c06_fencing, c07_leases, c07_named_leases, c13_claim_runnable, c29_control_requests, c34_clock,
    c37_claim_known, c48_released_lease_is_free_for_others, c49_claim_after_release_sees_writes,
};
pub use queue::{
    c14_queue_pages, c15_queue_ttl, c16_queue_attempts, c20_idempotency_record_in_commit,
    c20_idempotency_record_in_creation, c20_idempotency_record_with_items, c20_idempotency_records,
    retention_of_receipts_and_idempotency_records,
};
pub use slots::{
    c38_slot_concurrency, c39_slot_leases, c40_slot_rate, c41_slot_order,
    c42_slot_limits_and_bad_input, c43_slot_concurrent_asks, c50_slot_place_lease,
};
pub use timers::c12_timers;
pub use triggers::{c11_triggers, trigger_schedules};

/// Instantiates every conformance case as a `#[tokio::test]` in the calling module, for a
/// factory `async fn() -> (Arc<dyn TestBackend>, Guard)`.
///
/// `store_conformance_tests!(optional make)` takes a factory returning
/// `Option<(Arc<dyn TestBackend>, Guard)>` instead: `None` skips the case (the factory prints
/// why, e.g. no database server is reachable).
#[macro_export]
macro_rules! store_conformance_tests {
    (optional $make:path) => {
        $crate::store_conformance_tests!(@list @optional $make);
    };
    ($make:path) => {
        $crate::store_conformance_tests!(@list @required $make);
    };
    (@list @$mode:ident $make:path) => {
        $crate::store_conformance_tests!(@cases $mode $make;
            c01_round_trip,
            c02_create_existing,
            c03_commit_increments_version,
            c04_stale_version_writes_nothing,
            c05_concurrent_commits_one_wins,
            c06_fencing,
            c07_leases,
            c07_named_leases,
            c08_bookmark_lookup,
            c09_bookmark_diff,
            c10_correlation_rewrite,
            c11_triggers,
            c12_timers,
            c13_claim_runnable,
            c14_queue_pages,
            c15_queue_ttl,
            c16_queue_attempts,
            c17_dead_letter_once,
            c19_receipts,
            c22_journal,
            c23_list_instances,
            c23_listing_text,
            c24_purge,
            c25_decode_error,
            c26_format_too_new,
            c27_too_large,
            c29_control_requests,
            c35_child_waits,
            c34_clock,
            c16_commit_writes_other_instances,
            c22_journal_compaction,
            c22_journal_cap,
            c22_journal_pages,
            c28_wake_ups,
            c18_dead_letters,
            c20_idempotency_records,
            c20_idempotency_record_in_commit,
            c20_idempotency_record_in_creation,
            c20_idempotency_record_with_items,
            c21_activation_guard,
            incidents,
            retention_of_receipts_and_idempotency_records,
            trigger_schedules,
            final_status_clears_bookmarks_and_timers,
            c36_definitions,
            c37_claim_known,
            c38_slot_concurrency,
            c39_slot_leases,
            c40_slot_rate,
            c41_slot_order,
            c42_slot_limits_and_bad_input,
            c43_slot_concurrent_asks,
            c44_debounce,
            c45_repin,
            c46_consumed_anywhere,
            c47_key_index,
            c48_released_lease_is_free_for_others,
            c49_claim_after_release_sees_writes,
            c50_slot_place_lease,
        );
    };
    (@cases required $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (store, guard) = $make().await;
                $crate::store::conformance::$case(store).await;
                drop(guard);
            }
        )*
    };
    (@cases optional $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some((store, guard)) = $make().await else { return };
                $crate::store::conformance::$case(store).await;
                drop(guard);
            }
        )*
    };
}
