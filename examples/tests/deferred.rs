//! The `deferred` example run as its user runs it: a first process starts the instance and
//! exits while it sleeps, a second one (started after the due time) fires the sleep once,
//! late, and finishes; a third says it finished already. What each says, in order.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use examples::deferred::{Say, run};

/// A `Say` that keeps the lines, and a way to take those said so far.
fn recorder() -> (Say, impl Fn() -> Vec<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&lines);
    let say: Say = Arc::new(move |line| kept.lock().unwrap().push(line));
    (say, move || std::mem::take(&mut *lines.lock().unwrap()))
}

/// Each line starts as `expected` says, in this order, and there are no others.
fn assert_lines(lines: &[String], expected: &[&str]) {
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, start) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(start),
            "`{line}` should start with `{start}`: {lines:#?}"
        );
    }
}

#[tokio::test]
async fn the_deferred_step_runs_once_across_a_restart_and_says_so_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deferred.db");
    let (say, said) = recorder();

    run(&path, 1, Arc::clone(&say)).await.unwrap();
    let first = said();
    assert_lines(
        &first,
        &[
            "SQLite file ",
            "starting deferred-1: step `hello`, a durable sleep of 1 s, then step `goodbye`",
            "  step `hello` runs: Hello world",
            "deferred-1 is suspended, sleeping. This process exits now",
        ],
    );

    // No process runs while the sleep falls due.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    run(&path, 1, Arc::clone(&say)).await.unwrap();
    let second = said();
    assert_lines(
        &second,
        &[
            "SQLite file ",
            "deferred-1 is sleeping; its sleep fell due ",
            "  step `goodbye` runs: Goodbye world",
            "deferred-1 finished: its steps ran once each: hello, goodbye; the timer fired ",
        ],
    );
    assert!(
        second[1].ends_with("ago while no process ran: it fires once, now, late"),
        "{second:#?}"
    );
    // Nothing in Debug form: no quotes, brackets or struct names.
    for line in first.iter().chain(&second) {
        assert!(
            !line.contains('"') && !line.contains('[') && !line.contains("Greeting"),
            "{line}"
        );
    }

    run(&path, 1, say).await.unwrap();
    assert_lines(
        &said(),
        &[
            "SQLite file ",
            "deferred-1 finished in an earlier run; its steps ran once each: hello, goodbye",
            "(delete ",
        ],
    );
}

#[tokio::test]
async fn a_second_process_before_the_due_time_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deferred.db");
    let (say, said) = recorder();
    run(&path, 2, Arc::clone(&say)).await.unwrap();
    said();
    run(&path, 2, say).await.unwrap();
    assert_lines(
        &said(),
        &[
            "SQLite file ",
            "deferred-1 is sleeping; its sleep is due in ",
            "  step `goodbye` runs: Goodbye world",
            "deferred-1 finished: its steps ran once each: hello, goodbye",
        ],
    );
}
