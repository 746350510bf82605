//! Durable storage: the policy layer [`Storage`] over a thin backend trait [`Store`]
//! (`docs/reference/store.md`).
//!
//! Everything durable goes through [`Storage`], which the runtime holds (cheap to clone) around
//! an `Arc<dyn Store>`: instances guarded by an optimistic version and a lease fencing token
//! (ST-13, ST-14), bookmarks indexed by stimulus hash (ST-6), triggers (ST-7), the stimulus
//! queue and its dead letters (ST-8), timers by due time (ST-9), the journal (ST-10),
//! receipts and incidents (ST-12) and leases (ST-11).
//!
//! # Two layers
//!
//! * [`Storage`] (policy, written once): validation of ids and sizes (ST-23, ST-24), state
//!   document encoding and decoding (ST-19, ST-22), journal detail truncation and the journal
//!   cap (ST-10, ENG-42), the trigger-index diff (ST-7), the cleanup of a final instance
//!   (ENG-22), page defaults, and in-process wake-up hints (ST-18).
//! * [`Store`] (the backend trait, 30 operations): storage and the atomic guards only
//!   (version, fencing token, uniqueness, activation scope). See [`backend`] for what a
//!   backend author needs; every type it uses is public here, so a backend can live outside
//!   this crate, and the conformance suite (`conformance`, feature `test-support`) checks it.
//!
//! Three backends ship: [`MemoryStore`] (always compiled, not durable); behind the default
//! feature `sqlite`, `SqliteStore` (one file, WAL, one writer thread with group commit,
//! library-owned migrations; one process per file); and behind the feature `postgres`,
//! `PostgresStore` (several processes on one database, `FOR UPDATE SKIP LOCKED` claims,
//! LISTEN/NOTIFY wake-ups, migrations under an advisory lock). None imports another.
//!
//! # Design notes
//!
//! * **Object safety (ST-1).** Every backend method returns a [`BoxFuture`] whose lifetime is
//!   tied to `&self` only, so the trait is `dyn`-compatible without helper crates.
//! * **Opaque state (ST-1, ST-19).** Backends receive and return the state document as
//!   encoded JSON text and never parse it; [`Storage`] decodes it, so a corrupted row fails
//!   alone with [`StoreError::Decode`] (ST-22).
//! * **Time is passed in (ST-3).** Every time-dependent operation takes `now` as [`Micros`]
//!   (UTC microseconds since the Unix epoch, ST-23); no backend reads a clock.
//! * **Wake-ups (ST-18)** are an in-process `tokio::sync::broadcast` owned by [`Storage`]
//!   ([`Storage::subscribe`]), sent after the operation succeeded; they may be lost and no
//!   rule depends on them.
//! * **Errors (ST-4).** One [`StoreError`]. A duplicate receipt is
//!   [`StoreError::ReceiptExists`] (a conflict for [`StoreError::is_conflict`]), and
//!   `Unavailable` carries a `message` string.

pub mod backend;
mod convert;
mod error;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod journal_rows;
mod memory;
mod migrations;
pub(crate) mod policy;
#[cfg(feature = "postgres")]
mod postgres;
mod rows;
pub mod slots;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "test-support")]
pub mod conformance;

pub(crate) use backend::hint_heard;
pub use backend::{
    BookmarkSelect, CHILD_WAIT, Capabilities, CensusCount, ChangeCount, ChildWaitIndex, ClaimKnown,
    ClaimedRecord, DamagedTimer, DebounceStore, DefinitionRecord, DefinitionStore, DueDebounces,
    DueTimers, Enqueue, IncidentQuery, KeyIndex, LATEST_DUE, LeaseClaim, LeaseKey, PurgeTarget,
    ReceiptIndex, RemoteHints, RouteReads, Settled, Settlement, Store, TimerScope, TriggerSelect,
    TriggerWrite, WakeUp,
};
pub use error::{StoreError, StoreResult};
pub use memory::MemoryStore;
pub use migrations::MigrateMode;
pub use policy::{
    DEFAULT_MAX_STATE_BYTES, MAX_JOURNAL_DETAIL_BYTES, STATE_FORMAT, StateDocument, Storage,
};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresStore};
pub use rows::*;
pub use slots::{
    FlowControl, QueueUsage, SlotAsk, SlotLease, SlotLimits, SlotOutcome, SlotRelease, SlotRequest,
    SlotWait, WaitReason,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};

pub use crate::base::{BoxFuture, Micros};
