//! The console in a real browser: headless Chromium driven over chromedriver (WebDriver)
//! opens the list, filters it to the faulted instances, opens one, sees its diagram with
//! the current node highlighted, presses retry, confirms, and sees it finish; then sends an
//! event from the form and sees the order move on. A screenshot of each page is kept under
//! `target/console-screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (Debian's `chromium` and `chromium-driver`, which
//! `.ci/run` installs). Without them the test fails when `CI` is set, and is skipped with a
//! message otherwise.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    missing_docs
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{application, populate, repair};
use fantoccini::{Client, ClientBuilder, Locator};
use workflow_console::Console;
use workflow_runtime::WorkflowStatus;
use workflow_runtime::store::SqliteStore;

/// The first of `names` found on `PATH`.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// chromedriver, killed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_driver(chromedriver: &Path) -> (Driver, u16) {
    let port = free_port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
    let driver = Driver(child);
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (driver, port);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not listen on port {port} within 10 s");
}

async fn browser(port: u16, chromium: &Path, profile: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": chromium.display().to_string(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1400,1500",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("cannot open a Chromium session: {e}"))
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn snap(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    std::fs::write(screenshots().join(format!("{name}.png")), png).unwrap();
}

/// The element `css` finds, once the page shows it (10 s at most).
async fn wait(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no `{css}` on the page within 10 s: {e}"))
}

async fn source(client: &Client) -> String {
    client.source().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_retries_a_faulted_job_and_pays_an_order_in_chromium() {
    let chromium = on_path(&["chromium", "chromium-browser", "google-chrome"]);
    let chromedriver = on_path(&["chromedriver"]);
    let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but chromium or chromedriver is missing: `.ci/run` installs Debian's \
             `chromium` and `chromium-driver`"
        );
        eprintln!(
            "skipped: no chromium and chromedriver on PATH (install Debian's `chromium` and \
             `chromium-driver` to run the browser test)"
        );
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("app.db")).unwrap());
    let app = application(store);
    populate(&app, "browser-report").await;
    app.run_background().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = axum::Router::new().nest("/console", Console::new(app.clone()).router());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let base = format!("http://{addr}/console");

    let (_driver, port) = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(port, &chromium, profile.path()).await;

    // The list: three instances, one faulted.
    client.goto(&base).await.unwrap();
    wait(&client, "tr[data-id='job-1']").await;
    snap(&client, "01-instances").await;

    // Filter to faulted.
    client
        .find(Locator::Css("select[name='status']"))
        .await
        .unwrap()
        .select_by_value("faulted")
        .await
        .unwrap();
    client
        .find(Locator::Css("form.filters button[type='submit']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait(&client, "a.count.faulted.selected").await;
    let listed = source(&client).await;
    assert!(listed.contains("data-id=\"job-1\""));
    assert!(!listed.contains("data-id=\"o-1\""));
    snap(&client, "02-faulted").await;

    // Open it: its diagram, with the failed task highlighted.
    client
        .find(Locator::Css("tr[data-id='job-1'] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let current = wait(&client, "svg g.node.current[data-node='print']").await;
    let fill = current
        .find(Locator::Css("rect"))
        .await
        .unwrap()
        .css_value("fill")
        .await
        .unwrap();
    assert_eq!(
        fill, "rgb(255, 243, 176)",
        "the current node is filled yellow"
    );
    assert!(source(&client).await.contains("the printer is on fire"));
    snap(&client, "03-faulted-job").await;

    // Retry, confirm, and see it finish.
    repair("browser-report");
    client
        .find(Locator::Css("button[value='retry']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let confirm = wait(&client, "form.confirm button[value='confirm']").await;
    assert!(source(&client).await.contains("Retry instance job-1?"));
    snap(&client, "04-confirm-retry").await;
    confirm.click().await.unwrap();
    wait(&client, "h1 [data-status='finished']").await;
    assert!(source(&client).await.contains("class=\"result\""));
    snap(&client, "05-retried").await;
    assert_eq!(
        app.get_state("job-1").await.unwrap().unwrap().status(),
        WorkflowStatus::Finished
    );

    // Send the payment of o-1 from its page's form.
    client.goto(&format!("{base}/instances/o-1")).await.unwrap();
    wait(&client, "svg g.node.current[data-node='New']").await;
    let payload = client
        .find(Locator::Css("form.send textarea[name='payload']"))
        .await
        .unwrap();
    payload.clear().await.unwrap();
    payload.send_keys(r#"{"amount": 30}"#).await.unwrap();
    snap(&client, "06-send-form").await;
    client
        .find(Locator::Css("form.send button[value='send']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait(&client, "form.confirm button[value='confirm']")
        .await
        .click()
        .await
        .unwrap();
    wait(&client, "svg g.node.current[data-node='Paid']").await;
    assert!(
        source(&client)
            .await
            .contains("sent `payment` to the inbox")
    );
    snap(&client, "07-paid").await;

    // The other pages.
    client.goto(&format!("{base}/definitions")).await.unwrap();
    wait(&client, "section.definition svg").await;
    snap(&client, "08-definitions").await;
    client.goto(&format!("{base}/dead-letters")).await.unwrap();
    wait(&client, "table.dead-letters").await;
    snap(&client, "09-dead-letters").await;

    // The queues, reached from the navigation: a queue of 2 at once with both slots held
    // and one ask in line.
    let payments = workflow_runtime::Queue::new("payments")
        .concurrency(2)
        .rate(10, Duration::from_secs(1));
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap();
    for holder in ["attempt-a", "attempt-b", "attempt-c"] {
        app.store()
            .acquire_slot(
                &payments,
                workflow_runtime::store::SlotAsk {
                    holder: holder.to_owned(),
                    owner: "process-1".to_owned(),
                    key: None,
                    priority: workflow_runtime::Priority::default(),
                    now,
                    ttl: 60_000_000,
                    place_ttl: None,
                },
            )
            .await
            .unwrap();
    }
    client
        .find(Locator::Css("header nav a[href$='/queues']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let running = wait(&client, "tr[data-queue='payments'] td.running").await;
    assert_eq!(running.text().await.unwrap(), "2 of 2");
    let waiting = wait(&client, "tr[data-queue='payments'] td.waiting").await;
    assert_eq!(waiting.text().await.unwrap(), "1");
    snap(&client, "10-queues").await;
    client
        .goto(&format!("{base}/instances/nobody"))
        .await
        .unwrap();
    assert!(
        source(&client)
            .await
            .contains("no instance `nobody` in this store")
    );

    client.close().await.unwrap();
    server.abort();
    app.shutdown(Duration::from_secs(1)).await;
    let order = app.get_state("o-1").await.unwrap().unwrap();
    assert_eq!(order.data::<common::Order>().unwrap().paid, 30);
}
