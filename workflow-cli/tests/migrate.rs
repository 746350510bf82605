//! `workflow migrate`: waiting instances moved between versions recorded in a SQLite store,
//! states mapped by name; an unmapped state refuses the whole migration, naming it.

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
use workflow_runtime::{Runtime, RuntimeBuilder, SqliteStore, Stimulus, Workflow, state_machine};

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
