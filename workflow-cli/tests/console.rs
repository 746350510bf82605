//! `workflow console`: the operator console served by the binary over an application's
//! SQLite store, and its refusal to listen beyond loopback unless told to.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use workflow_runtime::{Runtime, SqliteStore};

mod common;

async fn populated(path: &Path) {
    let rt =
        common::registered(Runtime::builder().store(Arc::new(SqliteStore::open(path).unwrap())))
            .timer_driver(false)
            .build()
            .unwrap();
    common::populate(&rt).await;
    rt.shutdown(Duration::from_secs(1)).await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The binary serving the console, killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(db: &Path, args: &[&str]) -> Served {
    let child = Command::new(env!("CARGO_BIN_EXE_workflow"))
        .arg("--store")
        .arg(format!("sqlite:{}", db.display()))
        .arg("console")
        .args(args)
        .env_remove("WORKFLOW_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Served(child)
}

/// `GET path` on `port` once the console listens (10 s at most): the whole response.
fn get(port: u16, path: &str) -> String {
    for _ in 0..100 {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            write!(
                stream,
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            return response;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the console did not listen on port {port} within 10 s");
}

#[tokio::test]
async fn the_console_command_serves_the_instances_of_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let port = free_port();
    let _served = serve(&db, &["--listen", &format!("127.0.0.1:{port}")]);
    let list = get(port, "/");
    assert!(list.starts_with("HTTP/1.1 200 OK"), "{list}");
    assert!(list.contains("<tr data-id=\"job-1\">"), "{list}");
    assert!(list.contains("<tr data-id=\"o-1\">"));
    let job = get(port, "/instances/job-1");
    assert!(
        job.contains("<g class=\"node current\" data-node=\"print\">"),
        "{job}"
    );
    assert!(job.contains("value=\"retry\">Retry</button>"));
    let missing = get(port, "/instances/nobody");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let metrics = get(port, "/metrics");
    assert!(
        metrics.contains("workflow_instances{definition=\"CliJob\",status=\"faulted\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn beyond_loopback_the_console_needs_a_flag_and_warns_that_it_has_no_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    populated(&db).await;
    let refused = common::run(
        &["--store".to_owned(), format!("sqlite:{}", db.display())],
        &["console", "--listen", "0.0.0.0:0"],
    );
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains("not a loopback address")
            && refused.stderr.contains("--allow-non-loopback"),
        "{}",
        refused.stderr
    );

    let port = free_port();
    let mut served = serve(
        &db,
        &[
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--allow-non-loopback",
            "--read-only",
        ],
    );
    let page = get(port, "/instances/job-1");
    assert!(page.contains("Read-only console: no actions."), "{page}");
    assert!(!page.contains("value=\"retry\""));
    let _ = served.0.kill();
    let mut stderr = String::new();
    served
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("warning: the console listens on 0.0.0.0")
            && stderr.contains("NO authentication"),
        "{stderr}"
    );
}
