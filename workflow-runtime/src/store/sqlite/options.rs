//! The options of [`SqliteStore::open_with`](super::SqliteStore::open_with) (ST-26, ST-28).

use std::time::Duration;

/// SQLite's `synchronous` setting (ST-26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced: survives power loss. The default.
    #[default]
    Full,
    /// Survives a process crash, may lose the last commits on power loss.
    Normal,
}

use crate::store::migrations::MigrateMode;

/// Options of [`SqliteStore::open_with`](super::SqliteStore::open_with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Durability of each transaction.
    pub synchronous: Synchronous,
    /// Migrations: apply or only check.
    pub migrate: MigrateMode,
    /// Read connections (at least one).
    pub readers: usize,
    /// The most write requests grouped into one transaction (ST-26: 256).
    pub max_batch: usize,
    /// The most state bytes grouped into one transaction (ST-26: 4 MiB); a batch closes once
    /// it reaches this size.
    pub max_batch_bytes: usize,
    /// How long a connection waits on a lock held by another process.
    pub busy_timeout: Duration,
    /// The name recorded as the file's owner and reported in `InUse` (default `pid <n>`).
    pub owner: Option<String>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            migrate: MigrateMode::Apply,
            readers: 2,
            max_batch: 256,
            max_batch_bytes: 4 * 1024 * 1024,
            busy_timeout: Duration::from_secs(5),
            owner: None,
        }
    }
}
