//! Every page and action of the console over HTTP (`tower::ServiceExt::oneshot`), with every
//! bad input, on a SQLite store and, when `WORKFLOW_PG_URL` is set, on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::panic, clippy::print_stderr, missing_docs)]

mod common;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use common::{application, get, populate, post, repair};
use workflow_console::Console;
use workflow_runtime::store::{SqliteStore, Store};
use workflow_runtime::{Runtime, WorkflowStatus};

/// The application over a fresh SQLite file, populated; the file's directory is kept alive.
async fn sqlite_app(job: &str) -> (tempfile::TempDir, Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("app.db")).unwrap());
    let app = application(store);
    populate(&app, job).await;
    (dir, app)
}

/// The whole tour of the console over `app` (populated with a job named `job`).
async fn tour(app: &Runtime, job: &str) {
    let console = Console::new(app.clone()).router();

    // The instances: counts per status, every instance, where each is.
    let list = get(&console, "/").await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.content_type.starts_with("text/html"));
    assert!(
        list.body.contains("data-status=\"all\"><b>3</b>"),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains("data-status=\"faulted\"><b>1</b>faulted")
    );
    assert!(
        list.body
            .contains("data-status=\"suspended\"><b>2</b>suspended")
    );
    for id in ["o-1", "o-2", "job-1"] {
        assert!(
            list.body.contains(&format!("<tr data-id=\"{id}\">")),
            "{id}"
        );
    }
    assert!(list.body.contains("<td>New</td><td>payment</td>"));
    assert!(!list.body.contains("<link") && !list.body.contains("http://"));
    assert!(
        list.policy.contains("default-src 'none'"),
        "{}",
        list.policy
    );
    assert!(list.policy.contains("frame-ancestors 'none'"));

    // Filters: status, definition, state, sub-status, version, time ranges, paging.
    let faulted = get(&console, "/?status=faulted").await;
    assert!(faulted.body.contains("<tr data-id=\"job-1\">"));
    assert!(!faulted.body.contains("<tr data-id=\"o-1\">"));
    let at_new = get(&console, "/?at=New&definition=ShopOrder").await;
    assert!(at_new.body.contains("<tr data-id=\"o-2\">"));
    assert!(!at_new.body.contains("<tr data-id=\"job-1\">"));
    let waiting = get(&console, "/?sub_status=waiting").await;
    assert!(waiting.body.contains("<tr data-id=\"o-1\">"));
    assert!(!waiting.body.contains("<tr data-id=\"job-1\">"));
    let future = get(&console, "/?created_from=2999-01-01").await;
    assert!(future.body.contains("No instance matches."));
    let past = get(
        &console,
        "/?updated_to=2000-01-01T00:00&created_from=1999-01-01",
    )
    .await;
    assert!(past.body.contains("No instance matches."));
    let version = get(&console, "/?version=not-a-version").await;
    assert!(version.body.contains("No instance matches."));
    let first = get(&console, "/?limit=2").await;
    assert!(first.body.contains("<tr data-id=\"job-1\">"));
    assert!(first.body.contains("<tr data-id=\"o-1\">"));
    assert!(!first.body.contains("<tr data-id=\"o-2\">"));
    assert!(
        first
            .body
            .contains("href=\"/?limit=2&amp;after=o-1\">Next page"),
        "{}",
        first.body
    );
    let second = get(&console, "/?limit=2&after=o-1").await;
    assert!(second.body.contains("<tr data-id=\"o-2\">"));
    assert!(!second.body.contains("<tr data-id=\"o-1\">"));
    assert!(!second.body.contains("Next page"));

    // Bad filters: a 400 saying what is wrong.
    for (uri, says) in [
        ("/?status=asleep", "`status` is `asleep`: expected one of"),
        ("/?sub_status=dozing", "`sub_status` is `dozing`"),
        ("/?created_from=yesterday", "`created_from` is `yesterday`"),
        ("/?updated_to=2026-02-30", "`updated_to` is `2026-02-30`"),
        (
            "/?limit=9999",
            "`limit` is `9999`: expected a number from 1 to 500",
        ),
        ("/?colour=red", "unknown filter `colour`"),
        (
            "/?created_from=2026-02-01&created_to=2026-01-01",
            "`created_from` is after `created_to`",
        ),
    ] {
        let page = get(&console, uri).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(page.body.contains(says), "{uri}: {}", page.body);
    }

    // The id search goes to the instance; an unknown id is a 404.
    let found = get(&console, "/?id=job-1").await;
    assert_eq!(found.status, StatusCode::SEE_OTHER);
    assert_eq!(found.location.as_deref(), Some("/instances/job-1"));
    let missing = get(&console, "/?id=nobody").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("no instance `nobody` in this store"));

    // An instance: where it is on its diagram, what it waits for, its data, escaped.
    let order = get(&console, "/instances/o-2").await;
    assert_eq!(order.status, StatusCode::OK);
    assert!(
        order
            .body
            .contains("<g class=\"node current\" data-node=\"New\">"),
        "{}",
        order.body
    );
    assert!(order.body.contains("<g class=\"node\" data-node=\"Paid\">"));
    assert!(
        order
            .body
            .contains("for the event `payment` with key &quot;o-2&quot;")
    );
    assert!(
        order
            .body
            .contains("<td>payment</td><td class=\"mono\">&quot;o-2&quot;</td>")
    );
    assert!(
        order
            .body
            .contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;")
    );
    assert!(!order.body.contains("<script>"));
    assert!(order.body.contains("<ol class=\"timeline\">"));
    let job_page = get(&console, "/instances/job-1").await;
    assert!(
        job_page
            .body
            .contains("<g class=\"node current\" data-node=\"print\">")
    );
    assert!(job_page.body.contains("the printer is on fire"));
    assert!(job_page.body.contains("It is faulted"));
    assert!(job_page.body.contains("value=\"retry\">Retry</button>"));
    let unknown = get(&console, "/instances/nobody").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.body.contains("no instance `nobody` in this store"));
    let nowhere = get(&console, "/no/such/page").await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);

    // Actions: a CSRF token, then a confirmation, then the outcome.
    let token = job_page.csrf();
    let forged = post(&console, "/instances/job-1/retry", &[("csrf", "forged")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(forged.body.contains("CSRF token"));
    let tokenless = post(&console, "/instances/job-1/retry", &[]).await;
    assert_eq!(tokenless.status, StatusCode::FORBIDDEN);
    let ask = post(&console, "/instances/job-1/retry", &[("csrf", &token)]).await;
    assert_eq!(ask.status, StatusCode::OK);
    assert!(ask.body.contains("Retry instance job-1?"));
    assert!(ask.body.contains("name=\"confirmed\" value=\"yes\""));
    assert_eq!(
        app.get_state("job-1").await.unwrap().unwrap().status(),
        WorkflowStatus::Faulted
    );
    let unknown_action = post(&console, "/instances/job-1/explode", &[("csrf", &token)]).await;
    assert_eq!(unknown_action.status, StatusCode::NOT_FOUND);
    assert!(unknown_action.body.contains("no action `explode`"));
    let unknown_target = post(&console, "/instances/nobody/retry", &[("csrf", &token)]).await;
    assert_eq!(unknown_target.status, StatusCode::NOT_FOUND);

    // A refused action says why.
    let refused = post(
        &console,
        "/instances/o-1/retry",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(
        refused.body.contains("class=\"result refused\""),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("cannot retry:"));

    // Retry, repaired: it finishes.
    repair(job);
    let retried = post(
        &console,
        "/instances/job-1/retry",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.body);
    assert!(retried.body.contains("class=\"result\""));
    assert!(
        retried.body.contains("data-status=\"finished\""),
        "{}",
        retried.body
    );
    assert_eq!(
        app.get_state("job-1").await.unwrap().unwrap().status(),
        WorkflowStatus::Finished
    );

    // Suspend and resume an order, then cancel it and purge it.
    for (action, status) in [("suspend", "paused"), ("resume", "waiting")] {
        let done = post(
            &console,
            &format!("/instances/o-1/{action}"),
            &[("csrf", &token), ("confirmed", "yes")],
        )
        .await;
        assert_eq!(done.status, StatusCode::OK, "{action}: {}", done.body);
        assert!(
            done.body
                .contains(&format!("<span class=\"muted\">{status}</span>")),
            "{action}"
        );
    }
    let early_purge = post(
        &console,
        "/instances/o-1/purge",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(early_purge.status, StatusCode::CONFLICT);
    assert!(early_purge.body.contains("cannot purge:"));
    let cancelled = post(
        &console,
        "/instances/o-1/cancel",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert!(
        cancelled.body.contains("data-status=\"cancelled\""),
        "{}",
        cancelled.body
    );
    let purged = post(
        &console,
        "/instances/o-1/purge",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(purged.status, StatusCode::OK);
    assert!(
        purged
            .body
            .contains("Instance o-1 and its journal were removed.")
    );
    assert_eq!(
        get(&console, "/instances/o-1").await.status,
        StatusCode::NOT_FOUND
    );

    // Send an event from the form: confirmed, queued, delivered by the application.
    let bad_payload = post(
        &console,
        "/send",
        &[
            ("csrf", &token),
            ("name", "payment"),
            ("payload", "{not json"),
        ],
    )
    .await;
    assert_eq!(bad_payload.status, StatusCode::BAD_REQUEST);
    assert!(bad_payload.body.contains("`payload` is not JSON"));
    let nameless = post(&console, "/send", &[("csrf", &token), ("name", " ")]).await;
    assert_eq!(nameless.status, StatusCode::BAD_REQUEST);
    assert!(nameless.body.contains("`name`: an event needs a name"));
    let send = [
        ("csrf", token.as_str()),
        ("name", "payment"),
        ("key", "o-2"),
        ("payload", r#"{"amount": 30}"#),
        ("instance", "o-2"),
    ];
    let confirm = post(&console, "/send", &send).await;
    assert!(
        confirm
            .body
            .contains("Send the event `payment` to instance o-2?")
    );
    let mut confirmed = send.to_vec();
    confirmed.push(("confirmed", "yes"));
    let sent = post(&console, "/send", &confirmed).await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
    assert!(
        sent.body.contains("sent `payment` to the inbox"),
        "{}",
        sent.body
    );
    app.deliver_inbox().await.unwrap();
    let paid = app.get_state("o-2").await.unwrap().unwrap();
    assert_eq!(paid.current_state(), Some("Paid"));
    let after = get(&console, "/instances/o-2").await;
    assert!(
        after
            .body
            .contains("<g class=\"node current\" data-node=\"Paid\">")
    );
    assert!(
        after
            .body
            .contains("<g class=\"edge taken\" data-from=\"New\" data-to=\"Paid\">"),
        "{}",
        after.body
    );

    // Definitions, each version with its diagram and counts.
    let definitions = get(&console, "/definitions").await;
    assert_eq!(definitions.status, StatusCode::OK);
    assert!(definitions.body.contains("data-definition=\"ShopOrder\""));
    assert!(definitions.body.contains("data-definition=\"PrintJob\""));
    assert!(definitions.body.contains("<svg"));
    assert!(definitions.body.contains("<b>1</b>finished"));

    // Dead letters: a stimulus whose time to live ran out, replayed from the console.
    let store = app.store();
    store
        .enqueue(expired_item("01KCONSOLEDEADLETTER00000A"))
        .await
        .unwrap();
    assert_eq!(store.expire_queue(i64::MAX / 2, 10).await.unwrap(), 1);
    let letters = get(&console, "/dead-letters").await;
    assert_eq!(letters.status, StatusCode::OK);
    assert!(
        letters
            .body
            .contains("<tr data-item=\"01KCONSOLEDEADLETTER00000A\">"),
        "{}",
        letters.body
    );
    assert!(letters.body.contains("<td>refund &lt;b&gt;</td>"));
    assert!(letters.body.contains("<td>expired</td>"));
    let metrics = get(&console, "/metrics").await.body;
    assert!(metrics.contains("workflow_dead_letters 1"), "{metrics}");
    let expired = get(&console, "/dead-letters?reason=expired").await;
    assert!(expired.body.contains("01KCONSOLEDEADLETTER00000A"));
    let failed = get(&console, "/dead-letters?reason=failed").await;
    assert!(failed.body.contains("No dead letters."));
    let replayed = post(
        &console,
        "/dead-letters/01KCONSOLEDEADLETTER00000A/replay",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(replayed.status, StatusCode::OK, "{}", replayed.body);
    assert!(
        replayed
            .body
            .contains("Replayed `refund &lt;b&gt;` (01KCONSOLEDEADLETTER00000A)")
    );
    assert!(
        get(&console, "/dead-letters")
            .await
            .body
            .contains("No dead letters.")
    );
    let metrics = get(&console, "/metrics").await.body;
    assert!(metrics.contains("workflow_dead_letters 0"), "{metrics}");
    assert!(metrics.contains("workflow_stimuli_in_inbox 1"), "{metrics}");
    app.deliver_inbox().await.unwrap();
    assert_eq!(
        get(&console, "/dead-letters?reason=lost").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&console, "/dead-letters?after=x").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&console, "/dead-letters?page=2").await.status,
        StatusCode::BAD_REQUEST
    );
    let replay = post(
        &console,
        "/dead-letters/nothing/replay",
        &[("csrf", &token), ("confirmed", "yes")],
    )
    .await;
    assert_eq!(replay.status, StatusCode::NOT_FOUND);
    let ask_replay = post(
        &console,
        "/dead-letters/nothing/replay",
        &[("csrf", &token)],
    )
    .await;
    assert!(ask_replay.body.contains("Replay the dead letter nothing?"));

    // Metrics: by definition and status, no instance id.
    let metrics = get(&console, "/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(metrics.content_type.starts_with("text/plain"));
    let text = metrics.body;
    assert!(
        text.contains("workflow_instances{definition=\"PrintJob\",status=\"finished\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("workflow_instances{definition=\"PrintJob\",status=\"faulted\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("workflow_instances{definition=\"ShopOrder\",status=\"finished\"} 1"),
        "{text}"
    );
    assert!(!text.contains("o-2") && !text.contains("job-1"));

    queues(app, &console, None).await;
}

/// The queues page: none before any slot was asked; then a queue of 2 at once and 10 a
/// second with both slots held and one ask in line, as the store counts them.
/// `waiter`: an instance that waits for an event, to be put in the queue's line.
async fn queues(app: &Runtime, console: &Router, waiter: Option<&str>) {
    use workflow_runtime::store::SlotAsk;
    use workflow_runtime::{Priority, Queue};
    let empty = get(console, "/queues").await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(
        empty
            .body
            .contains("No flow-control queue has been used with this store yet"),
        "{}",
        empty.body
    );
    assert!(
        empty
            .body
            .contains("href=\"/queues\" aria-current=\"page\">Queues</a>")
    );
    let payments = Queue::new("payments")
        .concurrency(2)
        .rate(10, std::time::Duration::from_secs(1));
    let now = workflow_console_now();
    for holder in ["attempt-a", "attempt-b", "attempt-c"] {
        app.store()
            .acquire_slot(
                &payments,
                SlotAsk {
                    holder: holder.to_owned(),
                    owner: "process-1".to_owned(),
                    key: None,
                    priority: Priority::default(),
                    now,
                    ttl: 60_000_000,
                    place_ttl: None,
                },
            )
            .await
            .unwrap();
    }
    let page = get(console, "/queues").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(
            "<tr data-queue=\"payments\"><td class=\"mono\">payments</td><td>2 at once, 10 per \
             1s</td><td class=\"running\">2 of 2</td><td class=\"waiting\">1</td>"
        ),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<td class=\"rate\">2 of 10 in the last 1s</td>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("No flow-control queue"));
    // The nav of every page links it.
    assert!(
        get(console, "/")
            .await
            .body
            .contains("href=\"/queues\">Queues</a>")
    );
    // An instance whose task attempt waits in line says so on its page, as `why` does.
    let Some(suspended) = waiter else {
        return;
    };
    app.store()
        .acquire_slot(
            &payments,
            SlotAsk {
                holder: format!("{suspended}/charge/1"),
                owner: "process-1".to_owned(),
                key: None,
                priority: Priority::default(),
                now,
                ttl: 60_000_000,
                place_ttl: None,
            },
        )
        .await
        .unwrap();
    let waiting = get(console, &format!("/instances/{suspended}")).await.body;
    assert!(
        waiting
            .contains("<li>for a slot: waiting for `payments`: 2 of 2 running, 1 ahead of it</li>"),
        "{waiting}"
    );
}

/// Microseconds since the epoch, now (the stores' wall clock).
fn workflow_console_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// A stimulus nobody waits for whose time to live has run out.
fn expired_item(item_id: &str) -> workflow_runtime::store::QueueItem {
    workflow_runtime::store::QueueItem {
        item_id: item_id.to_owned(),
        stimulus_id: item_id.to_owned(),
        name: "refund <b>".to_owned(),
        hash: "console-test-hash".to_owned(),
        key_display: Some("\"o-9\"".to_owned()),
        payload: serde_json::json!({"amount": 5}),
        correlation_id: None,
        targets: serde_json::json!({}),
        sent_at: 1,
        enqueued_at: 1,
        expires_at: 2,
        attempts: 0,
        last_error: None,
        last_attempt_at: None,
        held: false,
        idempotency_key: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_on_a_sqlite_store() {
    let (_dir, app) = sqlite_app("sqlite-report").await;
    tour(&app, "sqlite-report").await;
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_on_a_postgres_store() {
    use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_schema_name};
    use workflow_runtime::store::{PostgresOptions, PostgresStore};
    let Ok(url) = std::env::var("WORKFLOW_PG_URL") else {
        eprintln!("skipped: WORKFLOW_PG_URL is not set (no PostgreSQL server to test on)");
        return;
    };
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    let options = PostgresOptions {
        max_connections: 4,
        ..PostgresOptions::default().schema(schema)
    };
    let store = PostgresStore::connect_with(&url, &options)
        .await
        .unwrap_or_else(|e| panic!("WORKFLOW_PG_URL={url} is set but unusable: {e}"));
    let app = application(Arc::new(store));
    populate(&app, "postgres-report").await;
    tour(&app, "postgres-report").await;
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// The metrics after a known workload: 3 started, 1 faulted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_known_workload() {
    let (_dir, app) = sqlite_app("metrics-report").await;
    let console = Console::new(app.clone()).router();
    let text = get(&console, "/metrics").await.body;
    for line in [
        "workflow_instances{definition=\"ShopOrder\",status=\"suspended\"} 2",
        "workflow_instances{definition=\"ShopOrder\",status=\"faulted\"} 0",
        "workflow_instances{definition=\"PrintJob\",status=\"faulted\"} 1",
        "workflow_instances{definition=\"PrintJob\",status=\"running\"} 0",
        "workflow_incidents_open{definition=\"PrintJob\"} 1",
        "workflow_incidents_open{definition=\"ShopOrder\"} 0",
        "workflow_stimuli_in_inbox 0",
        "workflow_dead_letters 0",
        // What the application's runtime counted as it ran them: three first runs, the
        // printer's one attempt failing for good.
        "workflow_transitions_total{definition=\"ShopOrder\",outcome=\"suspended\"} 2",
        "workflow_transitions_total{definition=\"PrintJob\",outcome=\"faulted\"} 1",
        "workflow_transitions_total{definition=\"PrintJob\",outcome=\"finished\"} 0",
        "workflow_task_attempts_total{definition=\"PrintJob\"} 1",
        "workflow_task_failures_total{definition=\"PrintJob\"} 1",
        "workflow_task_retries_total{definition=\"PrintJob\"} 0",
        "workflow_task_duration_seconds_count{definition=\"PrintJob\"} 1",
        "workflow_store_call_seconds_count{call=\"commit\"} 3",
        "workflow_lease_losses_total 0",
        "workflow_stimuli_sent_total 0",
        "workflow_stimuli_delivered_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }

    // Stimuli: a payment delivered to `o-1`; one for an order nobody waits for yet, kept in
    // the inbox; one nobody waits for within its 1 ms time to live, dead-lettered.
    use workflow_runtime::Stimulus;
    let payment = |order: &str| {
        Stimulus::new("payment")
            .key(order)
            .payload(serde_json::json!({"amount": 5}))
    };
    let paid = app.send(payment("o-1")).await.unwrap();
    assert_eq!(paid.resumed.len(), 1);
    let kept = app.send(payment("o-404")).await.unwrap();
    assert!(kept.inbox_item.is_some());
    app.send(payment("o-405").ttl(std::time::Duration::from_millis(1)))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    app.deliver_inbox().await.unwrap();
    let text = get(&console, "/metrics").await.body;
    for line in [
        "workflow_stimuli_sent_total 3",
        "workflow_stimuli_delivered_total 1",
        "workflow_stimuli_to_inbox_total 2",
        "workflow_stimuli_dead_lettered_total{reason=\"expired\"} 1",
        "workflow_stimuli_dead_lettered_total{reason=\"rejected\"} 0",
        "workflow_stimuli_dead_lettered_total{reason=\"failed\"} 0",
        "workflow_dead_letters 1",
        "workflow_stimuli_in_inbox 1",
        "workflow_transitions_total{definition=\"ShopOrder\",outcome=\"finished\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from:\n{text}"
        );
    }
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// Read-only: no forms, and every action refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_console_hides_and_refuses_the_actions() {
    let (_dir, app) = sqlite_app("read-only-report").await;
    let writable = Console::new(app.clone()).router();
    let token = get(&writable, "/instances/job-1").await.csrf();
    let console = Console::new(app.clone()).read_only(true).router();
    let page = get(&console, "/instances/job-1").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Read-only console: no actions."));
    assert!(!page.body.contains("<form method=\"post\""));
    assert!(!page.body.contains("name=\"csrf\""));
    for uri in ["/instances/job-1/retry", "/send", "/dead-letters/x/replay"] {
        let refused = post(
            &console,
            uri,
            &[("csrf", &token), ("confirmed", "yes"), ("name", "payment")],
        )
        .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{uri}");
        assert!(refused.body.contains("read-only"), "{uri}");
    }
    assert_eq!(
        app.get_state("job-1").await.unwrap().unwrap().status(),
        WorkflowStatus::Faulted
    );
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// Mounted under a prefix, every link and form keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_forms_work_under_the_applications_prefix() {
    let (_dir, app) = sqlite_app("prefix-report").await;
    let router = Router::new().nest("/ops/workflows", Console::new(app.clone()).router());
    let list = get(&router, "/ops/workflows").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(
        list.body
            .contains("href=\"/ops/workflows/instances/job-1\"")
    );
    assert!(list.body.contains("href=\"/ops/workflows/definitions\""));
    assert!(list.body.contains("action=\"/ops/workflows\""));
    let page = get(&router, "/ops/workflows/instances/job-1").await;
    assert!(
        page.body
            .contains("action=\"/ops/workflows/instances/job-1/retry\"")
    );
    assert!(page.body.contains("href=\"/ops/workflows/dead-letters\""));
    let found = get(&router, "/ops/workflows?id=o-1").await;
    assert_eq!(
        found.location.as_deref(),
        Some("/ops/workflows/instances/o-1")
    );
    let missing = get(&router, "/ops/workflows/instances/nobody").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("href=\"/ops/workflows\">Back"));
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// The census of an in-memory store counts as the SQL ones do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_store_is_counted_too() {
    let app = application(Arc::new(workflow_runtime::store::MemoryStore::new()));
    populate(&app, "memory-report").await;
    let console = Console::new(app.clone()).router();
    let list = get(&console, "/").await;
    assert!(
        list.body.contains("data-status=\"all\"><b>3</b>"),
        "{}",
        list.body
    );
    assert!(
        list.body
            .contains("data-status=\"faulted\"><b>1</b>faulted")
    );
    let text = get(&console, "/metrics").await.body;
    assert!(
        text.contains("workflow_instances{definition=\"ShopOrder\",status=\"suspended\"} 2"),
        "{text}"
    );
    assert!(text.contains("workflow_stimuli_in_inbox 0"), "{text}");
    queues(&app, &console, Some("o-2")).await;
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// An instance page shows the trace id its start carried; a page of one started outside any
/// trace shows none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_page_shows_the_trace_its_start_carried() {
    let app = application(Arc::new(workflow_runtime::store::MemoryStore::new()));
    let parent: workflow_runtime::TraceParent =
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap();
    let order = common::Order {
        order_id: "o-7".to_owned(),
        ..common::Order::default()
    };
    let options = workflow_runtime::StartOptions {
        traceparent: Some(parent),
        ..common::with_id("o-7")
    };
    app.start_with::<common::ShopOrder>(order.clone(), options)
        .await
        .unwrap();
    app.start_with::<common::ShopOrder>(order, common::with_id("o-8"))
        .await
        .unwrap();
    let console = Console::new(app.clone()).router();
    let traced = get(&console, "/instances/o-7").await;
    assert!(
        traced.body.contains(
            "<dt>Trace</dt><dd class=\"mono\" data-trace-id=\"4bf92f3577b34da6a3ce929d0e0e4736\""
        ),
        "{}",
        traced.body
    );
    let untraced = get(&console, "/instances/o-8").await;
    assert_eq!(untraced.status, StatusCode::OK);
    assert!(!untraced.body.contains("<dt>Trace</dt>"));
    app.shutdown(std::time::Duration::from_secs(1)).await;
}

/// The first version of the shop's order, before payments: the definitions page lists it
/// beside the current one.
#[allow(unreachable_pub)]
mod v1 {
    use workflow_runtime::state_machine;

    /// An order that can only be cancelled.
    #[state_machine(data = super::common::Order, initial = New, name = "ShopOrder")]
    pub enum ShopOrder {
        /// Waits.
        #[on(cancel: event("cancel") => Cancelled)]
        New,
        /// Cancelled.
        Cancelled,
    }
}

/// Each recorded version on the definitions page, with its instances and whether the
/// console's runtime runs it; the instance page names its version, and the instances page
/// filters by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_definitions_page_counts_the_instances_of_each_version() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("app.db")).unwrap());
    // Yesterday's process ran the first version: two orders on it.
    let old = Runtime::builder()
        .store(Arc::clone(&store))
        .register::<v1::ShopOrder>()
        .build()
        .unwrap();
    for id in ["old-1", "old-2"] {
        old.start_with::<v1::ShopOrder>(common::Order::default(), common::with_id(id))
            .await
            .unwrap();
    }
    old.shutdown(std::time::Duration::from_secs(1)).await;
    // Today's runs both, the new one current: one order on it.
    let app = common::registered(
        Runtime::builder()
            .store(store)
            .register_previous::<v1::ShopOrder>(),
    )
    .build()
    .unwrap();
    app.start_with::<common::ShopOrder>(common::Order::default(), common::with_id("new-1"))
        .await
        .unwrap();
    let versions = app.registered_versions("ShopOrder");
    assert_eq!(versions.len(), 2, "{versions:?}");
    let (current, _) = versions.iter().find(|(_, current)| *current).unwrap();
    let (previous, _) = versions.iter().find(|(_, current)| !*current).unwrap();

    let console = Console::new(app.clone()).router();
    let page = get(&console, "/definitions").await;
    assert_eq!(page.status, StatusCode::OK);
    let section = |version: &str| -> String {
        let at = page
            .body
            .find(&format!(
                "data-definition=\"ShopOrder\" data-version=\"{version}\""
            ))
            .unwrap_or_else(|| panic!("no section for version {version}:\n{}", page.body));
        let rest = &page.body[at..];
        rest[..rest.find("</section>").unwrap()].to_owned()
    };
    let old_section = section(previous);
    assert!(
        old_section.contains("registered here beside the current one"),
        "{old_section}"
    );
    assert!(old_section.contains("data-count=\"2\""), "{old_section}");
    assert!(old_section.contains(">2 instances</a>"), "{old_section}");
    assert!(old_section.contains("<svg"), "{old_section}");
    assert!(
        old_section.contains("data-node=\"Cancelled\""),
        "{old_section}"
    );
    let new_section = section(current);
    assert!(new_section.contains("current here"), "{new_section}");
    assert!(new_section.contains(">1 instance</a>"), "{new_section}");
    assert!(new_section.contains("data-node=\"Paid\""), "{new_section}");

    // The instance page names its version; the instances page filters by it.
    let short = &previous[..12];
    let old_page = get(&console, "/instances/old-1").await;
    assert!(
        old_page
            .body
            .contains(&format!("version <span class=\"mono\">{short}</span>")),
        "{}",
        old_page.body
    );
    let listed = get(&console, &format!("/?version={short}")).await;
    assert!(listed.body.contains("<tr data-id=\"old-1\">"));
    assert!(listed.body.contains("<tr data-id=\"old-2\">"));
    assert!(!listed.body.contains("<tr data-id=\"new-1\">"));
    app.shutdown(std::time::Duration::from_secs(1)).await;
}
