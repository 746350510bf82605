//! The harness a case runs against and the test hooks a backend offers.

use std::sync::Arc;

use crate::store::{BoxFuture, Storage, Store, StoreResult};

/// What a case runs against: the backend under test wrapped in the [`Storage`] policy layer
/// (every case goes through it, as the runtime does), plus the backend's raw test hooks.
/// Dereferences to the [`Storage`].
///
/// A backend written outside this crate runs the suite by implementing [`TestBackend`] and
/// calling [`store_conformance_tests!`](crate::store_conformance_tests) with a factory.
pub struct Harness {
    storage: Storage,
    backend: Arc<dyn TestBackend>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").finish_non_exhaustive()
    }
}

impl Harness {
    /// The harness of a fresh, empty backend.
    pub fn new(backend: Arc<dyn TestBackend>) -> Self {
        let store: Arc<dyn Store> = Arc::clone(&backend) as Arc<dyn Store>;
        Self {
            storage: Storage::new(store),
            backend,
        }
    }

    /// The policy layer over the backend.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The harness with a state size limit (C-27).
    #[must_use]
    pub fn with_max_state_bytes(mut self, limit: usize) -> Self {
        self.storage = self.storage.with_max_state_bytes(limit);
        self
    }

    /// Replaces an instance's stored state text as is (C-25).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn write_raw_state(&self, instance_id: &str, raw: &str) -> StoreResult<()> {
        self.backend.write_raw_state(instance_id, raw).await
    }

    /// The stored state text of an instance, as is (C-26).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub async fn read_raw_state(&self, instance_id: &str) -> StoreResult<String> {
        self.backend.read_raw_state(instance_id).await
    }
}

impl std::ops::Deref for Harness {
    type Target = Storage;

    fn deref(&self) -> &Storage {
        &self.storage
    }
}

/// A store with the test hooks the suite needs (C-25, C-26): raw access to a state row.
pub trait TestBackend: Store {
    /// Replaces an instance's stored state text as is.
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>>;

    /// The stored state text of an instance, as is.
    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>>;
}

impl TestBackend for crate::store::MemoryStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(std::future::ready(
            crate::store::MemoryStore::write_raw_state(self, instance_id, raw),
        ))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(std::future::ready(
            crate::store::MemoryStore::read_raw_state(self, instance_id),
        ))
    }
}

#[cfg(feature = "sqlite")]
impl TestBackend for crate::store::SqliteStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(crate::store::SqliteStore::write_raw_state(
            self,
            instance_id,
            raw,
        ))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(crate::store::SqliteStore::read_raw_state(self, instance_id))
    }
}

#[cfg(feature = "postgres")]
impl TestBackend for crate::store::PostgresStore {
    fn write_raw_state<'a>(
        &'a self,
        instance_id: &'a str,
        raw: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(crate::store::PostgresStore::write_raw_state(
            self,
            instance_id,
            raw,
        ))
    }

    fn read_raw_state<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(crate::store::PostgresStore::read_raw_state(
            self,
            instance_id,
        ))
    }
}
