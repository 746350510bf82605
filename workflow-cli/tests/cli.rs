//! The `workflow` binary run against SQLite stores made by an application: what an operator
//! sees and what their requests do.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use workflow_runtime::{Runtime, SqliteStore, Workflow, WorkflowStatus};

mod common;
use common::{CliJob, CliOrder, Job, Order, Output, REPAIRED, populate, status_in, with_id};

fn runtime(path: &Path) -> Runtime {
    common::registered(Runtime::builder().store(Arc::new(SqliteStore::open(path).unwrap())))
        .timer_driver(false)
        .build()
        .unwrap()
}

fn store_args(store: &Path) -> Vec<String> {
    vec!["--store".to_owned(), format!("sqlite:{}", store.display())]
}

fn workflow(store: &Path, args: &[&str]) -> Output {
    common::run(&store_args(store), args)
}

/// Two orders waiting for their payment and one faulted job, in a file no process holds.
async fn populated(path: &Path) {
    let rt = runtime(path);
    populate(&rt).await;
    rt.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn list_shows_every_instance_with_where_it_is_and_filters_by_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;

    let all = workflow(&db, &["list"]);
    assert!(all.ok, "{}", all.stderr);
    let lines: Vec<&str> = all.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", all.stdout);
    assert!(lines[0].starts_with("ID"), "{}", all.stdout);
    let o1 = lines.iter().find(|l| l.starts_with("o-1")).unwrap();
    assert!(o1.contains("CliOrder") && o1.contains("suspended (waiting)") && o1.contains("New"));
    let job = lines.iter().find(|l| l.starts_with("job-1")).unwrap();
    assert!(job.contains("faulted"), "{job}");

    let faulted = workflow(&db, &["list", "--status", "faulted", "--json"]);
    let rows: Vec<Value> = faulted
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{}", faulted.stdout);
    assert_eq!(rows[0]["instance_id"], "job-1");
    assert_eq!(rows[0]["definition"], "CliJob");

    let none = workflow(&db, &["list", "--definition", "Nothing"]);
    assert_eq!(none.stdout, "no instances match\n");
}

/// `o-1` paid (finished in `Paid`), `o-2` cancelled while `New`, `job-1` faulted.
async fn ended(path: &Path) {
    let rt = runtime(path);
    populate(&rt).await;
    let paid = workflow_runtime::Stimulus::new("payment")
        .key("o-1")
        .payload(common::Payment { amount: 30 });
    assert_eq!(rt.send(paid).await.unwrap().resumed.len(), 1);
    rt.cancel("o-2", Some("the customer changed their mind".to_owned()))
        .await
        .unwrap();
    rt.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn list_shows_the_state_a_finished_or_cancelled_state_machine_ended_in() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    ended(&db).await;

    let all = workflow(&db, &["list"]);
    assert!(all.ok, "{}", all.stderr);
    let line = |id: &str| {
        all.stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no {id} in\n{}", all.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // After the id and definition: the version each runs (its fingerprint's first 12).
    let version = &CliOrder::version()[..12];
    assert_eq!(
        line("o-1")[2..5],
        [version, "finished", "Paid"],
        "{}",
        all.stdout
    );
    assert_eq!(
        line("o-2")[2..5],
        [version, "cancelled", "New"],
        "{}",
        all.stdout
    );
    // A finished flowchart has no state to name.
    assert_eq!(line("job-1")[3], "faulted", "{}", all.stdout);

    let json = workflow(&db, &["list", "--status", "finished", "--json"]);
    let row: Value = serde_json::from_str(json.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(row["at"], serde_json::json!(["Paid"]), "{}", json.stdout);
}

#[tokio::test]
async fn show_prints_the_last_entries_of_the_journal_or_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    ended(&db).await;

    let entries = |out: &str| -> Vec<u64> {
        let journal = out.split("\njournal (").nth(1).unwrap_or_default();
        journal
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    };
    let all = workflow(&db, &["show", "o-1", "--journal", "all"]);
    assert!(all.ok, "{}", all.stderr);
    let seqs = entries(&all.stdout);
    let total = seqs.len();
    assert!(total > 3, "{}", all.stdout);
    assert_eq!(
        seqs,
        (1..=total as u64).collect::<Vec<_>>(),
        "{}",
        all.stdout
    );
    assert!(
        all.stdout
            .contains(&format!("journal ({total} entries, newest last)")),
        "{}",
        all.stdout
    );
    // Each entry says what it records beyond its kind.
    assert!(
        all.stdout
            .lines()
            .any(|l| l.contains("StateChanged") && l.contains(r#""to":"Paid""#)),
        "{}",
        all.stdout
    );

    let last = workflow(&db, &["show", "o-1", "--journal", "3"]);
    assert!(last.ok, "{}", last.stderr);
    let newest: Vec<u64> = (total as u64 - 2..=total as u64).collect();
    assert_eq!(entries(&last.stdout), newest, "{}", last.stdout);
    assert!(
        last.stdout.contains(&format!(
            "journal (the last 3 of {total} entries, newest last; `--journal all` prints every one)"
        )),
        "{}",
        last.stdout
    );

    let json = workflow(&db, &["show", "o-1", "--json", "--journal", "2"]);
    let detail: Value = serde_json::from_str(&json.stdout).unwrap();
    let journal = detail["journal"].as_array().unwrap();
    assert_eq!(journal.len(), 2, "{}", json.stdout);
    assert_eq!(journal[1]["seq"], total as u64);

    let bad = workflow(&db, &["show", "o-1", "--journal", "some"]);
    assert!(!bad.ok);
    assert!(
        bad.stderr
            .contains("`some` is not a number of journal entries"),
        "{}",
        bad.stderr
    );
}

#[tokio::test]
async fn show_and_why_explain_a_waiting_order_and_a_faulted_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;

    let show = workflow(&db, &["show", "o-1"]);
    assert!(show.ok, "{}", show.stderr);
    assert!(
        show.stdout.contains("status      suspended (waiting)"),
        "{}",
        show.stdout
    );
    assert!(show.stdout.contains("at          New"), "{}", show.stdout);
    assert!(show.stdout.contains("payment"), "{}", show.stdout);
    assert!(
        show.stdout.contains("\"o-1\""),
        "the bookmark's key: {}",
        show.stdout
    );

    // Named by the definition the application recorded in the file.
    assert!(
        show.stdout.contains("at          New (state)\n")
            && show.stdout.contains(
                "next: `pay`: on the event `payment` (its key is the data's `order_id`) -> Paid"
            ),
        "{}",
        show.stdout
    );
    let job = workflow(&db, &["show", "job-1"]);
    assert!(
        job.stdout
            .contains("at          print (task: runs the task `always_fails`)"),
        "{}",
        job.stdout
    );

    let json = workflow(&db, &["show", "o-1", "--json"]);
    let detail: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(detail["bookmarks"][0]["name"], "payment");
    assert_eq!(detail["data"]["order_id"], "o-1");

    let why = workflow(&db, &["why", "o-1"]);
    assert!(
        why.stdout.contains("o-1 is suspended, waiting:"),
        "{}",
        why.stdout
    );
    assert!(
        why.stdout
            .contains("for the event `payment` with key \"o-1\""),
        "{}",
        why.stdout
    );

    assert!(
        why.stdout
            .contains("where it is, by its recorded definition:\n  - state `New`\n"),
        "{}",
        why.stdout
    );

    let why = workflow(&db, &["why", "job-1"]);
    assert!(why.stdout.contains("job-1 is faulted"), "{}", why.stdout);
    assert!(
        why.stdout.contains("workflow retry job-1"),
        "{}",
        why.stdout
    );
    assert!(
        why.stdout.contains("the printer is on fire"),
        "{}",
        why.stdout
    );

    let incidents = workflow(&db, &["incidents"]);
    assert!(incidents.ok, "{}", incidents.stderr);
    let line = incidents
        .stdout
        .lines()
        .find(|l| l.starts_with("job-1"))
        .unwrap();
    assert!(
        line.contains("print") && line.contains("the printer is on fire"),
        "{line}"
    );

    let missing = workflow(&db, &["show", "nope"]);
    assert!(!missing.ok);
    assert!(
        missing.stderr.contains("no instance `nope`"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn reads_work_beside_the_running_application_that_holds_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let app = runtime(&db);

    let list = workflow(&db, &["list"]);
    assert!(list.ok, "{}", list.stderr);
    assert!(list.stdout.contains("o-2"), "{}", list.stdout);
    let why = workflow(&db, &["why", "o-2"]);
    assert!(why.ok, "{}", why.stderr);
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_sent_event_is_queued_and_delivered_by_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;

    let sent = workflow(
        &db,
        &[
            "send",
            "payment",
            "--key",
            "o-1",
            "--payload",
            r#"{"amount": 30}"#,
        ],
    );
    assert!(sent.ok, "{}", sent.stderr);
    assert!(
        sent.stdout.starts_with("sent `payment` to the inbox"),
        "{}",
        sent.stdout
    );
    assert!(
        sent.stdout.contains("waiting for it now: o-1"),
        "{}",
        sent.stdout
    );

    let app = runtime(&db);
    assert_eq!(app.deliver_inbox().await.unwrap(), 1);
    let state = app.get_state("o-1").await.unwrap().unwrap();
    assert_eq!(state.current_state(), Some("Paid"));
    assert_eq!(state.status(), WorkflowStatus::Finished);
    assert_eq!(state.data::<Order>().unwrap().paid, 30);
    app.shutdown(std::time::Duration::from_secs(1)).await;

    // Nothing waits for a payment of an order that does not exist: said, and queued.
    let unawaited = workflow(&db, &["send", "payment", "--key", "o-9"]);
    assert!(unawaited.ok, "{}", unawaited.stderr);
    assert!(
        unawaited.stdout.contains("no instance waits for it now;"),
        "{}",
        unawaited.stdout
    );
    // A second payment of the paid order: nothing waits for it, and the order with that key
    // is named, finished.
    let again = workflow(&db, &["send", "payment", "--key", "o-1"]);
    assert!(again.ok, "{}", again.stderr);
    assert!(
        again
            .stdout
            .contains("no instance waits for it now (with its key: o-1 is Finished);"),
        "{}",
        again.stdout
    );

    let bad = workflow(&db, &["send", "payment", "--payload", "{not json"]);
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains("`--payload` is not JSON"),
        "{}",
        bad.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_sent_beside_the_running_application_is_delivered_by_its_queue_worker() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let app = application(&db);
    app.start_workers().await.unwrap();

    let sent = workflow(
        &db,
        &[
            "send",
            "payment",
            "--key",
            "o-2",
            "--payload",
            r#"{"amount": 5}"#,
        ],
    );
    assert!(sent.ok, "{}", sent.stderr);
    let mut state = None;
    for _ in 0..100 {
        state = app
            .get_state("o-2")
            .await
            .unwrap()
            .unwrap()
            .current_state()
            .map(str::to_owned);
        if state.as_deref() == Some("Paid") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        state.as_deref(),
        Some("Paid"),
        "the worker delivered the operator's event"
    );
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[test]
fn a_bad_store_url_or_a_missing_file_is_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_workflow"))
        .args(["--store", "mysql://db/x", "list"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`mysql://db/x` is not a store URL"),
        "{stderr}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_workflow"))
        .args(["--store", "sqlite:/nonexistent/app.db", "list"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no SQLite file at `/nonexistent/app.db`"),
        "{stderr}"
    );
}

/// The application, as it runs in production: its queue worker on, checking for operators'
/// requests every 50 ms.
fn application(path: &Path) -> Runtime {
    common::registered(Runtime::builder().store(Arc::new(SqliteStore::open(path).unwrap())))
        .inbox_sweep(std::time::Duration::from_millis(50))
        .build()
        .unwrap()
}

/// The binary, run without blocking the application's tasks.
async fn operator(store: &Path, args: &[&str]) -> Output {
    common::run_async(&store_args(store), args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_and_resume_beside_the_running_application_pause_and_release_an_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let app = application(&db);
    app.start_workers().await.unwrap();

    let suspended = operator(&db, &["suspend", "o-1"]).await;
    assert!(suspended.ok, "{}", suspended.stderr);
    assert!(
        suspended
            .stdout
            .contains("suspend of `o-1` applied by the process running `CliOrder`: it is now suspended (paused)"),
        "{}",
        suspended.stdout
    );
    assert_eq!(
        status_in(&app, "o-1").await,
        (
            WorkflowStatus::Suspended,
            Some(workflow_runtime::SubStatus::Paused)
        )
    );
    let why = operator(&db, &["why", "o-1"]).await;
    assert!(
        why.stdout.contains("suspended by an operator"),
        "{}",
        why.stdout
    );

    // A payment sent while it is paused is held, not lost.
    let sent = operator(
        &db,
        &[
            "send",
            "payment",
            "--key",
            "o-1",
            "--payload",
            r#"{"amount": 7}"#,
        ],
    )
    .await;
    assert!(sent.ok, "{}", sent.stderr);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        app.get_state("o-1").await.unwrap().unwrap().current_state(),
        Some("New")
    );

    let again = operator(&db, &["resume", "o-2"]).await;
    assert!(!again.ok);
    assert!(
        again.stderr.contains("cannot resume `o-2`") && again.stderr.contains("not paused"),
        "{}",
        again.stderr
    );

    let resumed = operator(&db, &["resume", "o-1"]).await;
    assert!(resumed.ok, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("resume of `o-1` applied"),
        "{}",
        resumed.stdout
    );
    let mut state = None;
    for _ in 0..100 {
        let snapshot = app.get_state("o-1").await.unwrap().unwrap();
        state = snapshot.current_state().map(str::to_owned);
        if state.as_deref() == Some("Paid") {
            assert_eq!(snapshot.data::<Order>().unwrap().paid, 7);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        state.as_deref(),
        Some("Paid"),
        "the held payment was delivered"
    );
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_retry_beside_the_running_application_change_the_instances() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let app = application(&db);
    app.start_workers().await.unwrap();

    let cancelled = operator(&db, &["cancel", "o-2", "--reason", "customer called"]).await;
    assert!(cancelled.ok, "{}", cancelled.stderr);
    assert!(
        cancelled.stdout.contains("it is now cancelled"),
        "{}",
        cancelled.stdout
    );
    let done = app
        .await_completion("o-2", std::time::Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        done,
        workflow_runtime::Completion::Cancelled(Some("customer called".to_owned()))
    );

    // The job's printer is repaired; the operator retries it and it finishes.
    let job = app
        .start_with::<CliJob>(
            Job {
                name: "invoices".into(),
            },
            with_id("job-2"),
        )
        .await
        .unwrap();
    assert_eq!(job.status, WorkflowStatus::Faulted);
    REPAIRED.lock().unwrap().push("invoices".to_owned());
    let retried = operator(&db, &["retry", "job-2"]).await;
    assert!(retried.ok, "{}", retried.stderr);
    assert!(
        retried.stdout.contains("it is now finished"),
        "{}",
        retried.stdout
    );
    assert_eq!(
        status_in(&app, "job-2").await,
        (WorkflowStatus::Finished, None)
    );
    let incidents = app.incidents("job-2").await.unwrap().unwrap();
    assert_eq!(incidents[0].resolution.as_deref(), Some("retried"));

    let refused = operator(&db, &["cancel", "o-2"]).await;
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains("already Cancelled"),
        "{}",
        refused.stderr
    );
    let missing = operator(&db, &["suspend", "nope"]).await;
    assert!(
        missing.stderr.contains("no instance `nope`"),
        "{}",
        missing.stderr
    );
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_while_the_application_is_down_is_honoured_when_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;

    let requested = operator(&db, &["cancel", "o-1", "--wait", "0"]).await;
    assert!(requested.ok, "{}", requested.stderr);
    assert!(
        requested.stdout.contains("cancel of `o-1` requested"),
        "{}",
        requested.stdout
    );
    let show = operator(&db, &["show", "o-1"]).await;
    assert!(
        show.stdout.contains("requested   cancel"),
        "{}",
        show.stdout
    );

    let app = application(&db);
    app.start_workers().await.unwrap();
    let done = app
        .await_completion("o-1", std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done, workflow_runtime::Completion::Cancelled(None));
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn why_names_the_queued_events_that_do_not_match_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    for (name, key) in [("payment", "o-9"), ("paymnet", "o-1")] {
        let sent = workflow(&db, &["send", name, "--key", key, "--payload", "{}"]);
        assert!(sent.ok, "{}", sent.stderr);
    }

    let why = workflow(&db, &["why", "o-1"]);
    assert!(why.ok, "{}", why.stderr);
    assert!(
        why.stdout.contains("stimuli in the inbox that concern it:"),
        "{}",
        why.stdout
    );
    assert!(
        why.stdout.contains(r#"`payment` with key "o-9" (sent "#)
            && why
                .stdout
                .contains(r#"does not match: it waits for key "o-1""#),
        "{}",
        why.stdout
    );
    assert!(
        why.stdout.contains(r#"`paymnet` with key "o-1""#)
            && why
                .stdout
                .contains("is not `payment`, the event it waits for"),
        "{}",
        why.stdout
    );
    // The faulted job waits for no event: nothing queued concerns it.
    let why = workflow(&db, &["why", "job-1"]);
    assert!(!why.stdout.contains("queued stimuli"), "{}", why.stdout);
}

/// The runtime records each registered definition in the store, so `diagram NAME` draws it
/// from the file alone, without the application's code.
#[tokio::test]
async fn diagram_draws_a_definition_recorded_by_the_application() {
    use workflow_runtime::Workflow;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let rt = runtime(&db);
    rt.index_triggers().await.unwrap();
    rt.shutdown(std::time::Duration::from_secs(1)).await;
    drop(rt);

    let name = CliOrder::name();
    let drawn = workflow(&db, &["diagram", name]);
    assert!(drawn.ok, "{}", drawn.stderr);
    assert!(
        drawn.stdout.contains("flowchart") || drawn.stdout.contains("stateDiagram"),
        "{}",
        drawn.stdout
    );
    // An instance's diagram is its version's, with where it is highlighted.
    populated(&db).await;
    let at = workflow(&db, &["diagram", "o-1"]);
    assert!(at.ok, "{}", at.stderr);
    assert!(
        at.stdout.contains("stateDiagram") && at.stdout.contains(" current\n"),
        "{}",
        at.stdout
    );
    let plain = workflow(&db, &["diagram", name]);
    assert!(!plain.stdout.contains(" current\n"), "{}", plain.stdout);
    let unknown = workflow(&db, &["diagram", "NoSuchFlow"]);
    assert!(!unknown.ok);
    assert!(unknown.stderr.contains("NoSuchFlow"), "{}", unknown.stderr);
}

/// `workflow queues` lists each flow-control queue with its limits, the slots held, the line
/// and the rate window's use.
#[tokio::test]
async fn queues_lists_limits_running_waiting_and_rate_used() {
    use workflow_runtime::store::{SlotAsk, Storage};
    use workflow_runtime::{Priority, Queue};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flow.db");
    {
        let storage = Storage::new(Arc::new(SqliteStore::open(&db).unwrap()));
        let payments = Queue::new("payments")
            .concurrency(2)
            .rate(25, std::time::Duration::from_secs(1));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros();
        let now = i64::try_from(now).unwrap();
        for holder in ["a", "b", "c"] {
            let ask = SlotAsk {
                holder: holder.to_owned(),
                owner: "node-a".to_owned(),
                key: None,
                priority: Priority::MIN,
                now,
                ttl: 600_000_000,
                place_ttl: None,
            };
            storage.acquire_slot(&payments, ask).await.unwrap();
        }
    }
    let queues = workflow(&db, &["queues"]);
    assert!(queues.ok, "{}", queues.stderr);
    let line = queues
        .stdout
        .lines()
        .find(|l| l.starts_with("payments"))
        .unwrap_or_else(|| panic!("{}", queues.stdout));
    assert!(line.contains("2 at once, 25 per 1s"), "{line}");
    assert!(line.contains("2 of 25"), "{line}");
    let json = workflow(&db, &["queues", "--json"]);
    let row: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(row["queue"], "payments");
    assert_eq!(
        (row["running"].as_u64(), row["waiting"].as_u64()),
        (Some(2), Some(1))
    );
}

/// `why` names the time triggers of the instance's definition with their zone, their
/// missed-occurrence policy and when they fire next (TM-16, TM-19).
#[tokio::test]
async fn why_names_the_zone_and_missed_policy_of_the_definitions_cron_trigger() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let definition = serde_json::json!({
        "name": "Reminder",
        "root": { "kind": "flowchart", "id": "root",
            "nodes": [
                { "kind": "cron", "id": "tick", "expression": "* * * * * *",
                  "time_zone": "Europe/Berlin", "missed": "skip", "trigger": true },
                { "kind": "event", "id": "ack", "event": "ack" },
                { "kind": "task", "id": "done", "function": "done" }
            ],
            "connections": [
                { "source": "tick", "target": "ack" },
                { "source": "ack", "target": "done" }
            ] }
    });
    let registry = workflow_runtime::Registry::<Value>::new().task(
        "done",
        |_cx: &mut workflow_runtime::TaskContext<Value>| {
            Box::pin(async { Ok(workflow_runtime::Outcome::done()) })
        },
    );
    let rt = Runtime::builder()
        .store(Arc::new(SqliteStore::open(&db).unwrap()))
        .register_json(definition.to_string(), registry)
        .timer_driver(false)
        .build()
        .unwrap();
    // The schedule is written by the first call; its first occurrence is the next second.
    let mut started = Vec::new();
    for _ in 0..50 {
        started.extend(rt.fire_due_timers().await.unwrap().fired);
        if !started.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (id, _) = started
        .first()
        .expect("the trigger started an instance")
        .clone();
    rt.shutdown(std::time::Duration::from_secs(1)).await;

    let why = workflow(&db, &["why", &id]);
    assert!(why.ok, "{}", why.stderr);
    assert!(
        why.stdout.contains(
            "`Reminder` is started by its time triggers:\n  - `tick` waits for the schedule \
             `* * * * * *` in Europe/Berlin; occurrences missed while no process ran are \
             skipped (next due "
        ),
        "{}",
        why.stdout
    );
}

/// `why` of an instance whose task waits in line for a flow-control slot says for which
/// queue, how many run and how many are ahead (QU-13); once it ran, it says nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_says_an_instance_waits_for_a_slot_of_its_queue() {
    use workflow_runtime::{Queue, Registry, StartOptions, TaskContext};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flow.db");
    let definition: workflow_runtime::model::Definition =
        serde_json::from_value(serde_json::json!({
            "name": "Charge",
            "root": { "kind": "sequence", "id": "root", "steps": [
                { "kind": "task", "id": "charge", "function": "charge", "queue": "single" }
            ] }
        }))
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let registry = {
        let gate = Arc::clone(&gate);
        Registry::new().task("charge", move |cx: &mut TaskContext<Value>| {
            let gate = Arc::clone(&gate);
            let blocks = cx.data()["block"].as_bool().unwrap_or(false);
            Box::pin(async move {
                if blocks {
                    gate.acquire().await.unwrap().forget();
                }
                Ok(workflow_runtime::Outcome::done())
            })
        })
    };
    let storage = workflow_runtime::store::Storage::new(Arc::new(SqliteStore::open(&db).unwrap()));
    let app = Arc::new(
        Runtime::builder()
            .store(storage.clone())
            .queue(Queue::new("single").concurrency(1))
            .register_definition(definition, registry)
            .build()
            .unwrap(),
    );
    let start = |id: &'static str, block: bool| {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let options = StartOptions {
                instance_id: Some(id.to_owned()),
                ..StartOptions::default()
            };
            app.start_by_name("Charge", serde_json::json!({ "block": block }), options)
                .await
                .unwrap()
        })
    };
    let blocker = start("blocker", true);
    let waits = |n: u32| {
        let storage = storage.clone();
        async move {
            for _ in 0..500 {
                let now = i64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_micros(),
                )
                .unwrap();
                let usage = storage.queue_usage(now).await.unwrap();
                if usage
                    .first()
                    .is_some_and(|u| u.running == 1 && u.waiting == n)
                {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("never {n} waiting");
        }
    };
    waits(0).await;
    let late = start("late", false);
    waits(1).await;
    // `late` waits suspended (QU-11): its start returns once the suspension is committed.
    // The runtime's store answers the slot ask before its commit (QU-6), and `waits` reads
    // through its writer; but the writer runs the ask before the suspension's commit is even
    // sent, in that commit's transaction or an earlier one, so the command, another process
    // reading the file, sees the place in line with the suspension.
    let late_started = late.await.unwrap();
    assert_eq!(
        late_started.sub_status,
        Some(workflow_runtime::SubStatus::WaitingForSlot)
    );
    let why = workflow(&db, &["why", "late"]);
    assert!(why.ok, "{}", why.stderr);
    assert!(
        why.stdout
            .contains("late is suspended, waiting for a slot of a flow-control queue:\n"),
        "{}",
        why.stdout
    );
    assert!(
        why.stdout
            .contains("  - for a slot: waiting for `single`: 1 of 1 running\n"),
        "{}",
        why.stdout
    );
    let why = workflow(&db, &["why", "blocker"]);
    assert!(!why.stdout.contains("for a slot"), "{}", why.stdout);
    let list = workflow(&db, &["list", "--status", "suspended"]);
    assert!(
        list.stdout.contains("suspended (waiting_for_slot)"),
        "{}",
        list.stdout
    );
    gate.add_permits(1);
    blocker.await.unwrap();
    // The blocker's release resumes `late` in the background.
    for id in ["blocker", "late"] {
        app.await_completion(id, std::time::Duration::from_secs(10))
            .await
            .unwrap();
    }
    let why = workflow(&db, &["why", "late"]);
    assert!(why.stdout.contains("late is finished"), "{}", why.stdout);
    assert!(!why.stdout.contains("for a slot"), "{}", why.stdout);
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// `head` -> sleeps an hour -> `tail`, as JSON.
const SLEEPER: &str = r#"{
  "name": "Sleeper",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "start": "head",
    "nodes": [
      { "kind": "task", "id": "head", "function": "head" },
      { "kind": "delay", "id": "nap", "duration_ms": 3600000 },
      { "kind": "task", "id": "tail", "function": "tail" }
    ],
    "connections": [
      { "source": "head", "target": "nap" },
      { "source": "nap", "target": "tail" }
    ]
  }
}"#;

/// ST-22: `why` names a timer row whose due time does not decode, before the timer driver
/// meets it (the row's error) and after (the `damaged_timer` incident that faulted it).
#[tokio::test]
async fn why_names_a_timer_row_whose_due_time_does_not_decode() {
    use workflow_runtime::model::Definition;
    use workflow_runtime::{Outcome, Registry, StartOptions, TaskContext};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let mut registry: Registry<Value> = Registry::new();
    for name in ["head", "tail"] {
        registry = registry.task(name, |_: &mut TaskContext<Value>| {
            Box::pin(async { Ok(Outcome::done()) })
        });
    }
    let rt = Runtime::builder()
        .store(Arc::new(SqliteStore::open(&db).unwrap()))
        .register_definition(Definition::from_json(SLEEPER).unwrap(), registry)
        .timer_driver(false)
        .inbox_worker(false)
        .recovery_sweep(None)
        .build()
        .unwrap();
    let id = rt
        .start_by_name("Sleeper", serde_json::json!({}), StartOptions::default())
        .await
        .unwrap()
        .instance_id;
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    let timer: String = conn
        .query_row(
            "SELECT timer_id FROM wf_timers WHERE instance_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "UPDATE wf_timers SET due_at = 'garbage' WHERE instance_id = ?1",
        [&id],
    )
    .unwrap();
    let before = workflow(&db, &["why", &id]);
    assert!(before.ok, "{}", before.stderr);
    assert!(
        before.stdout.contains("a damaged row: timer")
            && before.stdout.contains(&timer)
            && before.stdout.contains("due_at"),
        "{}",
        before.stdout
    );
    let fired = rt.fire_due_timers().await.unwrap();
    assert_eq!(fired.damaged.len(), 1, "{fired:?}");
    let after = workflow(&db, &["why", &id]);
    assert!(after.ok, "{}", after.stderr);
    assert!(after.stdout.contains("is faulted"), "{}", after.stdout);
    assert!(
        after.stdout.contains("(damaged_timer)")
            && after.stdout.contains(&timer)
            && after.stdout.contains("garbage"),
        "{}",
        after.stdout
    );
    rt.shutdown(std::time::Duration::from_secs(1)).await;
}
