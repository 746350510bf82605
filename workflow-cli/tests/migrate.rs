//! `workflow migrate`: waiting instances moved between versions recorded in a SQLite store,
//! states (or a flowchart's waiting nodes) mapped by name; an unmapped state or node refuses
//! the whole migration, naming it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, Runtime, RuntimeBuilder, SqliteStore, Stimulus, Workflow, state_machine, workflow,
};

mod common;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sale {
    pub order_id: String,
}

mod v1 {
    #[workflow_runtime::state_machine(data = super::Sale, initial = New, name = "shop")]
    pub enum Shop {
        #[on(pay: event("payment").key(order_id) => Paid)]
        New,
        Paid,
    }
}

/// The next version: the same states, and a cancel.
#[state_machine(data = Sale, initial = New, name = "shop")]
pub enum Shop {
    #[on(pay: event("payment").key(order_id) => Paid)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    New,
    Paid,
    Cancelled,
}

mod renamed {
    /// A version whose first state is named otherwise: no state `New` to map to.
    #[workflow_runtime::state_machine(data = super::Sale, initial = Open, name = "shop")]
    pub enum Shop {
        #[on(pay: event("payment").key(order_id) => Paid)]
        Open,
        Paid,
    }
}

mod flow_v1 {
    workflow_runtime::workflow! {
        /// A flowchart: paid, then shipped.
        #[workflow(name = "parcel")]
        pub workflow Parcel(super::Sale) {
            paid = event("payment").key(order_id);
            shipped = event("shipped").key(order_id);
            start -> paid -> shipped;
        }
    }
}

workflow! {
    /// The next version: packing between payment and shipment.
    #[workflow(name = "parcel")]
    pub workflow Parcel(Sale) {
        paid = event("payment").key(order_id);
        packed = event("packed").key(order_id);
        shipped = event("shipped").key(order_id);
        start -> paid -> packed -> shipped;
    }
}

fn app(path: &Path, register: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder) -> Runtime {
    register(Runtime::builder().store(Arc::new(SqliteStore::open(path).unwrap())))
        .timer_driver(false)
        .build()
        .unwrap()
}

fn workflow(store: &Path, args: &[&str]) -> common::Output {
    common::run(
        &["--store".to_owned(), format!("sqlite:{}", store.display())],
        args,
    )
}

fn short(version: &str) -> &str {
    &version[..12]
}

#[tokio::test]
async fn migrate_moves_waiting_instances_between_recorded_versions_by_state_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    {
        let first = app(&db, RuntimeBuilder::register::<v1::Shop>);
        for id in ["s-1", "s-2"] {
            first
                .start_with::<v1::Shop>(
                    Sale {
                        order_id: id.to_owned(),
                    },
                    common::with_id(id),
                )
                .await
                .unwrap();
        }
        first.shutdown(Duration::from_secs(1)).await;
    }
    {
        // A deploy that runs the new version records it (and keeps the old one running).
        let second = app(&db, |b| {
            b.register_previous::<v1::Shop>()
                .register_previous::<renamed::Shop>()
                .register::<Shop>()
        });
        second.index_triggers().await.unwrap();
        second.shutdown(Duration::from_secs(1)).await;
    }
    let (old, new) = (v1::Shop::version(), Shop::version());

    let unmapped = workflow(
        &db,
        &[
            "migrate",
            "shop",
            "--from",
            short(old),
            "--to",
            renamed::Shop::version(),
        ],
    );
    assert!(!unmapped.ok, "{}", unmapped.stdout);
    assert!(
        unmapped.stderr.contains("no state named `New`"),
        "{}",
        unmapped.stderr
    );

    let dry = workflow(
        &db,
        &[
            "migrate",
            "shop",
            "--from",
            short(old),
            "--to",
            short(new),
            "--dry-run",
        ],
    );
    assert!(dry.ok, "{}", dry.stderr);
    assert_eq!(
        dry.stdout.matches("would migrate").count(),
        2,
        "{}",
        dry.stdout
    );
    assert!(dry.stdout.contains("nothing was written"), "{}", dry.stdout);
    let listed = workflow(&db, &["list"]);
    assert_eq!(
        listed.stdout.matches(short(old)).count(),
        2,
        "{}",
        listed.stdout
    );

    let moved = workflow(
        &db,
        &["migrate", "shop", "--from", short(old), "--to", short(new)],
    );
    assert!(moved.ok, "{}", moved.stderr);
    assert!(
        moved.stdout.contains("2 instance(s) of `shop` moved"),
        "{}",
        moved.stdout
    );
    let listed = workflow(&db, &["list"]);
    assert_eq!(
        listed.stdout.matches(short(new)).count(),
        2,
        "{}",
        listed.stdout
    );

    // The application with the new version only runs them, the cancel included.
    let third = app(&db, RuntimeBuilder::register::<Shop>);
    let cancelled = third
        .send(Stimulus::new("cancel").key("s-1"))
        .await
        .unwrap();
    assert_eq!(cancelled.resumed.len(), 1, "{cancelled:?}");
    assert_eq!(
        third.current_state::<Shop>("s-1").await.unwrap(),
        Some(Shop::Cancelled)
    );
    third
        .send(Stimulus::new("payment").key("s-2"))
        .await
        .unwrap();
    assert_eq!(
        third.current_state::<Shop>("s-2").await.unwrap(),
        Some(Shop::Paid)
    );
    third.shutdown(Duration::from_secs(1)).await;

    let unknown = workflow(
        &db,
        &["migrate", "shop", "--from", "ffff", "--to", short(new)],
    );
    assert!(!unknown.ok);
    assert!(
        unknown
            .stderr
            .contains("no version `ffff` of `shop` is recorded"),
        "{}",
        unknown.stderr
    );
}

#[tokio::test]
async fn migrate_moves_waiting_flowchart_instances_by_node_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("parcel.db");
    {
        let first = app(&db, RuntimeBuilder::register::<flow_v1::Parcel>);
        for id in ["p-1", "p-2"] {
            first
                .start_with::<flow_v1::Parcel>(
                    Sale {
                        order_id: id.to_owned(),
                    },
                    common::with_id(id),
                )
                .await
                .unwrap();
        }
        first
            .send(Stimulus::new("payment").key("p-2"))
            .await
            .unwrap();
        first.shutdown(Duration::from_secs(1)).await;
    }
    {
        let second = app(&db, |b| {
            b.register_previous::<flow_v1::Parcel>()
                .register::<Parcel>()
        });
        second.index_triggers().await.unwrap();
        second.shutdown(Duration::from_secs(1)).await;
    }
    let (old, new) = (flow_v1::Parcel::version(), Parcel::version());

    // Back from the new version: its `packed` has no node of that name in the first.
    let unmapped = workflow(
        &db,
        &[
            "migrate",
            "parcel",
            "--from",
            short(new),
            "--to",
            short(old),
        ],
    );
    assert!(!unmapped.ok, "{}", unmapped.stdout);
    assert!(
        unmapped.stderr.contains("no waiting node named `packed`"),
        "{}",
        unmapped.stderr
    );

    let moved = workflow(
        &db,
        &[
            "migrate",
            "parcel",
            "--from",
            short(old),
            "--to",
            short(new),
        ],
    );
    assert!(moved.ok, "{}", moved.stderr);
    assert!(
        moved.stdout.contains("2 instance(s) of `parcel` moved"),
        "{}",
        moved.stdout
    );
    // The table names the nodes each instance waited at and waits at now.
    assert!(moved.stdout.contains("shipped"), "{}", moved.stdout);

    let third = app(&db, RuntimeBuilder::register::<Parcel>);
    for (id, events) in [
        ("p-1", &["payment", "packed", "shipped"][..]),
        ("p-2", &["shipped"][..]),
    ] {
        for event in events {
            let sent = third.send(Stimulus::new(*event).key(id)).await.unwrap();
            assert_eq!(sent.resumed.len(), 1, "{id} {event}: {sent:?}");
        }
        let done = third
            .await_completion(id, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(done, Completion::Finished(_)), "{id}: {done:?}");
    }
    third.shutdown(Duration::from_secs(1)).await;
}
