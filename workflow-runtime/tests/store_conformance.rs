//! The store conformance suite (ST-33) run against every backend.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use workflow_runtime::store::conformance::TestBackend;

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

#[cfg(feature = "postgres")]
mod postgres {
    use super::{Arc, TestBackend};
    use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_store};

    async fn make() -> Option<(Arc<dyn TestBackend>, SchemaGuard)> {
        let (store, guard) = fresh_store().await?;
        Some((store, guard))
    }

    workflow_runtime::store_conformance_tests!(optional make);
}

/// ST-25: the memory store's failure hooks fail chosen operations, writing nothing.
#[tokio::test]
async fn memory_failure_injection() {
    use workflow_runtime::store::conformance::{create_leased, doc, new_instance, waiting};
    use workflow_runtime::store::{LeaseKey, MemoryStore, Storage, StoreError};

    let memory = Arc::new(MemoryStore::new());
    let store = Storage::new(memory.clone());
    let lease = create_leased(&store, "wf-1").await;
    memory.fail_next_commits(1).unwrap();
    let err = store
        .commit(waiting("wf-1", 1, lease.token, 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }) && err.is_transient());
    assert_eq!(store.load_instance("wf-1").await.unwrap().state, doc(0));
    assert_eq!(
        store
            .commit(waiting("wf-1", 1, lease.token, 1))
            .await
            .unwrap(),
        2
    );
    memory.fail_next_writes(2).unwrap();
    assert!(store.create_instance(new_instance("wf-2")).await.is_err());
    assert!(
        store
            .acquire_lease(&LeaseKey::instance("wf-1"), "x", 0, 1)
            .await
            .is_err()
    );
    store.create_instance(new_instance("wf-2")).await.unwrap();
}
