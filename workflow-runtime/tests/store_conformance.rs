//! The store conformance suite (ST-33) run against every backend.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use workflow_runtime::conformance::TestBackend;

mod memory {
    use super::{Arc, TestBackend};
    use workflow_runtime::MemoryStore;

    async fn make() -> (Arc<dyn TestBackend>, ()) {
        (Arc::new(MemoryStore::new()), ())
    }

    workflow_runtime::store_conformance_tests!(make);
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::{Arc, TestBackend};
    use workflow_runtime::SqliteStore;

    async fn make() -> (Arc<dyn TestBackend>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("store.db")).unwrap();
        (Arc::new(store), dir)
    }

    workflow_runtime::store_conformance_tests!(make);
}
