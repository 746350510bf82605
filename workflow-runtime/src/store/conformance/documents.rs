//! State documents: undecodable rows, formats too new, the size limit.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::{T0, bookmark, create_leased, doc, new_instance, waiting};
use super::harness::{Harness, TestBackend};
use crate::store::{DEFAULT_MAX_STATE_BYTES, InstanceFilter, StoreError};

/// C-25: a corrupted state document gives `Decode` naming the instance; a list returns it as
/// an error item; other instances load normally.
pub async fn c25_decode_error(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    for id in ["wf-1", "wf-2", "wf-3"] {
        store.create_instance(new_instance(id)).await.unwrap();
    }
    store
        .write_raw_state("wf-2", "{\"format\": 1, oops")
        .await
        .unwrap();
    let err = store.load_instance("wf-2").await.unwrap_err();
    match &err {
        StoreError::Decode { what, id, path, .. } => {
            assert_eq!(
                (*what, id.as_str(), path.as_str()),
                ("instance", "wf-2", "state")
            );
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    assert!(err.to_string().contains("wf-2"));
    assert_eq!(store.load_instance("wf-1").await.unwrap().state, doc(0));
    assert_eq!(store.load_instance("wf-3").await.unwrap().state, doc(0));
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
    // A listing reads columns, not documents: the corrupted row is listed with its columns,
    // and loading it names it.
    assert!(listed[0].summary.is_ok());
    assert_eq!(listed[1].instance_id, "wf-2");
    assert!(listed[1].summary.is_ok());
    assert!(matches!(
        store.load_instance(&listed[1].instance_id).await,
        Err(StoreError::Decode { .. })
    ));
    assert!(listed[2].summary.is_ok());
    // A document without a format is a decode error too.
    store.write_raw_state("wf-3", "{\"n\": 1}").await.unwrap();
    assert!(matches!(
        store.load_instance("wf-3").await,
        Err(StoreError::Decode { path, .. }) if path == "state.format"
    ));
}

/// C-26: a document with a newer format gives `FormatTooNew` and is not modified.
pub async fn c26_format_too_new(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    store.create_instance(new_instance("wf-1")).await.unwrap();
    let newer = crate::store::STATE_FORMAT + 1;
    let raw = format!("{{\"format\":{newer},\"future\":[1,2,3]}}");
    store.write_raw_state("wf-1", &raw).await.unwrap();
    assert_eq!(
        store.load_instance("wf-1").await.unwrap_err(),
        StoreError::FormatTooNew {
            what: "instance",
            id: "wf-1".to_owned(),
            found: newer,
            supported: crate::store::STATE_FORMAT
        }
    );
    let listed = store
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(listed[0].summary.as_ref().unwrap().version, 1);
    assert_eq!(store.read_raw_state("wf-1").await.unwrap(), raw);
    // Writing a newer format is refused.
    let mut new = new_instance("wf-2");
    new.state = json!({ "format": newer });
    assert!(matches!(
        store.create_instance(new).await,
        Err(StoreError::Invalid { what: "state", .. })
    ));
}

/// C-27: an oversized document gives `TooLarge` and nothing is written.
pub async fn c27_too_large(backend: Arc<dyn TestBackend>) {
    let store = Harness::new(backend);
    let lease = create_leased(&store, "wf-1").await;
    let big = json!({ "format": 1, "blob": "x".repeat(DEFAULT_MAX_STATE_BYTES) });
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.state = big.clone();
    c.bookmarks_added = vec![bookmark("b1", "h", T0)];
    let err = store.commit(c).await.unwrap_err();
    assert!(
        matches!(err, StoreError::TooLarge { what: "state", limit, .. } if limit == DEFAULT_MAX_STATE_BYTES),
        "{err:?}"
    );
    let loaded = store.load_instance("wf-1").await.unwrap();
    assert_eq!((loaded.version, loaded.state), (1, doc(0)));
    assert!(store.list_bookmarks("wf-1").await.unwrap().is_empty());
    let mut new = new_instance("wf-2");
    new.state = big;
    assert!(matches!(
        store.create_instance(new).await,
        Err(StoreError::TooLarge { .. })
    ));
    assert!(matches!(
        store.load_instance("wf-2").await,
        Err(StoreError::NotFound { .. })
    ));
}
