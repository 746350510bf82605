//! The `workflow` binary run against PostgreSQL stores made by an application (a fresh schema
//! per test, dropped afterwards): every command works as it does on SQLite, beside the
//! running application. Skipped, saying so, when `WORKFLOW_PG_URL` is not set.

#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_schema_name};
use workflow_runtime::store::{PostgresOptions, PostgresStore};
use workflow_runtime::{Completion, Runtime, SubStatus, Workflow, WorkflowStatus};

mod common;
use common::{
    CliJob, CliOrder, Job, Output, REPAIRED, populate, run_async, status_in, wait_for_state,
    with_id,
};

/// A fresh schema on the test server, the application's store on it, and the arguments that
/// name it to the binary.
struct Pg {
    url: String,
    store: Arc<PostgresStore>,
    args: Vec<String>,
    guard: SchemaGuard,
}

impl Pg {
    async fn fresh() -> Option<Self> {
        let Ok(url) = std::env::var("WORKFLOW_PG_URL") else {
            eprintln!("skipped: WORKFLOW_PG_URL is not set (no PostgreSQL server to test on)");
            return None;
        };
        let schema = fresh_schema_name();
        let guard = SchemaGuard::new(url.clone(), schema.clone());
        let options = PostgresOptions {
            max_connections: 4,
            ..PostgresOptions::default().schema(schema.clone())
        };
        let store = PostgresStore::connect_with(&url, &options)
            .await
            .unwrap_or_else(|e| panic!("WORKFLOW_PG_URL={url} is set but unusable: {e}"));
        let args = vec![
            "--store".to_owned(),
            url.clone(),
            "--schema".to_owned(),
            schema,
        ];
        Some(Self {
            url,
            store: Arc::new(store),
            args,
            guard,
        })
    }

    /// The application, as it runs in production: its queue worker on, sweeping every 50 ms.
    fn application(&self) -> Runtime {
        common::registered(Runtime::builder().store(self.store.clone()))
            .inbox_sweep(Duration::from_millis(50))
            .build()
            .unwrap()
    }

    async fn workflow(&self, args: &[&str]) -> Output {
        run_async(&self.args, args).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_why_incidents_and_diagram_read_a_postgres_store_beside_the_application() {
    let Some(pg) = Pg::fresh().await else { return };
    let app = pg.application();
    app.start_workers().await.unwrap();
    populate(&app).await;

    let all = pg.workflow(&["list"]).await;
    assert!(all.ok, "{}", all.stderr);
    let lines: Vec<&str> = all.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", all.stdout);
    assert!(lines[0].starts_with("ID"), "{}", all.stdout);
    let o1 = lines.iter().find(|l| l.starts_with("o-1")).unwrap();
    assert!(
        o1.contains("CliOrder") && o1.contains("suspended (waiting)") && o1.contains("New"),
        "{o1}"
    );
    let job = lines.iter().find(|l| l.starts_with("job-1")).unwrap();
    assert!(job.contains("faulted"), "{job}");

    let faulted = pg
        .workflow(&["list", "--status", "faulted", "--json"])
        .await;
    let rows: Vec<Value> = faulted
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{}", faulted.stdout);
    assert_eq!(rows[0]["instance_id"], "job-1");
    assert_eq!(rows[0]["definition"], "CliJob");

    // The schema may be named in the URL instead.
    let in_url = format!("{}?schema={}", pg.url, pg.guard.schema());
    let listed = run_async(
        &["--store".to_owned(), in_url],
        &["list", "--definition", "CliJob"],
    )
    .await;
    assert!(listed.ok, "{}", listed.stderr);
    assert_eq!(listed.stdout.lines().count(), 2, "{}", listed.stdout);

    let show = pg.workflow(&["show", "o-1"]).await;
    assert!(show.ok, "{}", show.stderr);
    assert!(
        show.stdout.contains("status      suspended (waiting)")
            && show.stdout.contains("at          New")
            && show.stdout.contains("payment")
            && show.stdout.contains("\"o-1\""),
        "{}",
        show.stdout
    );
    let json = pg.workflow(&["show", "o-1", "--json"]).await;
    let detail: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(detail["bookmarks"][0]["name"], "payment");
    assert_eq!(detail["data"]["order_id"], "o-1");

    let why = pg.workflow(&["why", "o-1"]).await;
    assert!(
        why.stdout.contains("o-1 is suspended, waiting:")
            && why
                .stdout
                .contains("for the event `payment` with key \"o-1\""),
        "{}",
        why.stdout
    );
    let why = pg.workflow(&["why", "job-1"]).await;
    assert!(
        why.stdout.contains("job-1 is faulted")
            && why.stdout.contains("workflow retry job-1")
            && why.stdout.contains("the printer is on fire"),
        "{}",
        why.stdout
    );

    let incidents = pg.workflow(&["incidents"]).await;
    assert!(incidents.ok, "{}", incidents.stderr);
    let line = incidents
        .stdout
        .lines()
        .find(|l| l.starts_with("job-1"))
        .unwrap_or_else(|| panic!("{}", incidents.stdout));
    assert!(
        line.contains("print") && line.contains("the printer is on fire"),
        "{line}"
    );

    // The application recorded its definitions in the database: drawn without its code.
    let drawn = pg.workflow(&["diagram", CliOrder::name()]).await;
    assert!(drawn.ok, "{}", drawn.stderr);
    assert!(drawn.stdout.contains("stateDiagram"), "{}", drawn.stdout);
    assert!(drawn.stdout.contains("New"), "{}", drawn.stdout);
    let dot = pg
        .workflow(&["diagram", CliJob::name(), "--format", "dot"])
        .await;
    assert!(
        dot.ok && dot.stdout.contains("digraph"),
        "{}{}",
        dot.stdout,
        dot.stderr
    );
    let unknown = pg.workflow(&["diagram", "NoSuchFlow"]).await;
    assert!(!unknown.ok);
    assert!(unknown.stderr.contains("NoSuchFlow"), "{}", unknown.stderr);

    let missing = pg.workflow(&["show", "nope"]).await;
    assert!(!missing.ok);
    assert!(
        missing.stderr.contains("no instance `nope`"),
        "{}",
        missing.stderr
    );
    let letters = pg.workflow(&["dead-letters"]).await;
    assert!(letters.ok, "{}", letters.stderr);
    assert_eq!(letters.stdout, "no dead letters\n");
    app.shutdown(Duration::from_secs(1)).await;

    // Where an instance is, named and drawn by the definition recorded in the database.
    let show = pg.workflow(&["show", "o-1"]).await;
    assert!(
        show.stdout.contains("at          New (state)\n")
            && show.stdout.contains("next: `pay`: on the event `payment`"),
        "{}",
        show.stdout
    );
    let at = pg.workflow(&["diagram", "o-1"]).await;
    assert!(
        at.ok && at.stdout.contains("stateDiagram") && at.stdout.contains(" current\n"),
        "{}{}",
        at.stdout,
        at.stderr
    );
    // Without the recorded definition, the command says so instead of guessing.
    sqlx::query(&format!(
        "DELETE FROM \"{}\".wf_definitions",
        pg.guard.schema()
    ))
    .execute(pg.store.pool())
    .await
    .unwrap();
    let show = pg.workflow(&["show", "o-1"]).await;
    assert!(
        show.stdout.contains("at          New\n")
            && show
                .stdout
                .contains("is not recorded in this store: a process that runs it records it"),
        "{}",
        show.stdout
    );
    let at = pg.workflow(&["diagram", "o-1"]).await;
    assert!(
        !at.ok && at.stderr.contains("cannot draw instance `o-1`"),
        "{}",
        at.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_event_is_delivered_by_the_running_applications_queue_worker() {
    let Some(pg) = Pg::fresh().await else { return };
    let app = pg.application();
    app.start_workers().await.unwrap();
    populate(&app).await;

    let sent = pg
        .workflow(&[
            "send",
            "payment",
            "--key",
            "o-2",
            "--payload",
            r#"{"amount": 5}"#,
        ])
        .await;
    assert!(sent.ok, "{}", sent.stderr);
    assert!(
        sent.stdout.starts_with("sent `payment` to the inbox"),
        "{}",
        sent.stdout
    );
    assert_eq!(
        wait_for_state(&app, "o-2", "Paid").await.as_deref(),
        Some("Paid"),
        "the worker delivered the operator's event"
    );
    let snapshot = app.get_state("o-2").await.unwrap().unwrap();
    assert_eq!(snapshot.data::<common::Order>().unwrap().paid, 5);

    let bad = pg
        .workflow(&["send", "payment", "--payload", "{not json"])
        .await;
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains("`--payload` is not JSON"),
        "{}",
        bad.stderr
    );
    app.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_names_the_queued_events_that_do_not_match_while_the_application_is_down() {
    let Some(pg) = Pg::fresh().await else { return };
    let app = pg.application();
    populate(&app).await;
    app.shutdown(Duration::from_secs(1)).await;
    for (name, key) in [("payment", "o-9"), ("paymnet", "o-1")] {
        let sent = pg
            .workflow(&["send", name, "--key", key, "--payload", "{}"])
            .await;
        assert!(sent.ok, "{}", sent.stderr);
    }

    let why = pg.workflow(&["why", "o-1"]).await;
    assert!(why.ok, "{}", why.stderr);
    assert!(
        why.stdout.contains("stimuli in the inbox that concern it:")
            && why
                .stdout
                .contains(r#"does not match: it waits for key "o-1""#)
            && why
                .stdout
                .contains("is not `payment`, the event it waits for"),
        "{}",
        why.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_suspend_resume_retry_and_purge_beside_the_running_application() {
    let Some(pg) = Pg::fresh().await else { return };
    let app = pg.application();
    app.start_workers().await.unwrap();
    populate(&app).await;

    let cancelled = pg
        .workflow(&["cancel", "o-2", "--reason", "customer called"])
        .await;
    assert!(cancelled.ok, "{}", cancelled.stderr);
    assert!(
        cancelled.stdout.contains(
            "cancel of `o-2` applied by the process running `CliOrder`: it is now cancelled"
        ),
        "{}",
        cancelled.stdout
    );
    let done = app
        .await_completion("o-2", Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        done,
        Completion::Cancelled(Some("customer called".to_owned()))
    );
    let refused = pg.workflow(&["cancel", "o-2"]).await;
    assert!(
        !refused.ok && refused.stderr.contains("already Cancelled"),
        "{}",
        refused.stderr
    );

    let suspended = pg.workflow(&["suspend", "o-1"]).await;
    assert!(suspended.ok, "{}", suspended.stderr);
    assert!(
        suspended.stdout.contains("it is now suspended (paused)"),
        "{}",
        suspended.stdout
    );
    assert_eq!(
        status_in(&app, "o-1").await,
        (WorkflowStatus::Suspended, Some(SubStatus::Paused))
    );
    let resumed = pg.workflow(&["resume", "o-1"]).await;
    assert!(
        resumed.ok && resumed.stdout.contains("resume of `o-1` applied"),
        "{}{}",
        resumed.stdout,
        resumed.stderr
    );
    assert_eq!(
        status_in(&app, "o-1").await,
        (WorkflowStatus::Suspended, Some(SubStatus::Waiting))
    );

    let job = app
        .start_with::<CliJob>(
            Job {
                name: "pg-invoices".into(),
            },
            with_id("job-2"),
        )
        .await
        .unwrap();
    assert_eq!(job.status, WorkflowStatus::Faulted);
    REPAIRED.lock().unwrap().push("pg-invoices".to_owned());
    let retried = pg.workflow(&["retry", "job-2"]).await;
    assert!(
        retried.ok && retried.stdout.contains("it is now finished"),
        "{}{}",
        retried.stdout,
        retried.stderr
    );
    let missing = pg.workflow(&["suspend", "nope"]).await;
    assert!(
        missing.stderr.contains("no instance `nope`"),
        "{}",
        missing.stderr
    );

    // o-2 (cancelled) and job-2 (finished) are purged; the others stay.
    let purged = pg.workflow(&["purge", "--older-than", "0s"]).await;
    assert!(purged.ok, "{}", purged.stderr);
    assert!(
        purged.stdout.starts_with("purged 2 finished or cancelled"),
        "{}",
        purged.stdout
    );
    let gone = pg.workflow(&["show", "o-2"]).await;
    assert!(gone.stderr.contains("no instance `o-2`"), "{}", gone.stderr);
    app.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_schema_without_workflow_tables_is_named_and_left_uncreated() {
    let Some(pg) = Pg::fresh().await else { return };
    let other = fresh_schema_name();
    let _other_guard = SchemaGuard::new(pg.url.clone(), other.clone());
    let output = run_async(
        &[
            "--store".to_owned(),
            pg.url.clone(),
            "--schema".to_owned(),
            other.clone(),
        ],
        &["list"],
    )
    .await;
    assert!(!output.ok);
    assert!(
        output
            .stderr
            .contains(&format!("no workflow tables in schema `{other}`")),
        "{}",
        output.stderr
    );
    let created: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
    )
    .bind(&other)
    .fetch_one(pg.store.pool())
    .await
    .unwrap();
    assert!(!created, "a read created the schema");

    let sqlite = run_async(
        &[
            "--store".to_owned(),
            "sqlite:app.db".to_owned(),
            "--schema".to_owned(),
            "x".to_owned(),
        ],
        &["list"],
    )
    .await;
    assert!(
        sqlite.stderr.contains("a SQLite store has none"),
        "{}",
        sqlite.stderr
    );
}
