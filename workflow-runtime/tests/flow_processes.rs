//! Flow-control queues shared by several processes on PostgreSQL (QU-6, QU-11, QU-12): child
//! processes of this test binary run tasks of one queue and record when each ran in a table;
//! the test reads the table. Across 3 processes, a queue of 5 with 2 per process never runs
//! more than 5 at once, nor more than 2 in one process; the slots of a SIGKILLed process come
//! back well within the lease TTL, repeatedly, none lost or doubled; a rate of 10 a second
//! grants 95 to 100 slots in the busiest 10 s. Skipped, saying why, without a reachable server
//! (`WORKFLOW_PG_URL`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::{Connection, PgPool};
use workflow_runtime::model::Definition;
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name,
};
use workflow_runtime::store::{PostgresOptions, PostgresStore, Storage};
use workflow_runtime::{Queue, Registry, Runtime, StartOptions, TaskContext};

/// The queue of the concurrency test: 5 at once, 2 per process.
const SHARED: Queue = Queue::new("shared").concurrency(5).per_process(2);
/// The queue of the kill test: 2 at once.
const HELD: Queue = Queue::new("held").concurrency(2);
/// The queue of the rate test: 10 starts a second.
const PACED: Queue = Queue::new("paced").rate(10, Duration::from_secs(1));

/// Wall-clock now, µs (every process reads the same clock).
fn wall_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// A workflow `name` of one task `work` in `queue`.
fn definition(name: &str, queue: &str) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "work", "function": "work", "queue": queue }
        ] }
    }))
    .unwrap()
}

/// What a task does: `hang` never ends (after counting itself in `began`), otherwise it
/// sleeps `busy` (or the data's `busy_ms`) and records its start and end, as this process, in the `flow_log` table.
#[derive(Clone)]
struct Work {
    log: PgPool,
    owner: String,
    busy: Duration,
    hang: bool,
    began: Arc<AtomicUsize>,
}

fn registry(work: &Work) -> Registry<serde_json::Value> {
    let work = work.clone();
    Registry::new().task("work", move |cx: &mut TaskContext<serde_json::Value>| {
        let work = work.clone();
        let busy = cx.data()["busy_ms"]
            .as_u64()
            .map_or(work.busy, Duration::from_millis);
        Box::pin(async move {
            let started = wall_now();
            work.began.fetch_add(1, Ordering::SeqCst);
            if work.hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(busy).await;
            let ended = wall_now();
            sqlx::query("INSERT INTO flow_log (owner, started, ended) VALUES ($1, $2, $3)")
                .bind(&work.owner)
                .bind(started)
                .bind(ended)
                .execute(&work.log)
                .await
                .map_err(|e| workflow_runtime::TaskError::new(e.to_string()))?;
            Ok(workflow_runtime::Outcome::done())
        })
    })
}

/// A pool on the test's server whose connections look in `schema` first.
async fn log_pool(schema: &str) -> PgPool {
    let options: sqlx::postgres::PgConnectOptions = database_url().parse().unwrap();
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.options([("search_path", schema)]))
        .await
        .unwrap()
}

/// A process: a runtime owned by `owner` on the test's schema, declaring `queue`, running
/// the workflow `name`.
async fn process(schema: &str, owner: &str, name: &str, queue: Queue, work: &Work) -> Runtime {
    let store =
        PostgresStore::connect_with(&database_url(), &PostgresOptions::default().schema(schema))
            .await
            .unwrap();
    let runtime = Runtime::builder()
        .store(Storage::new(Arc::new(store)))
        .owner(owner)
        .queue(queue.clone())
        .register_definition(definition(name, queue.name()), registry(work))
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    runtime
}

fn queue_of(mode: &str) -> Queue {
    match mode {
        "shared" => SHARED,
        "held" => HELD,
        _ => PACED,
    }
}

/// The child: runs `FLOW_COUNT` instances on the queue `FLOW_MODE` as owner `FLOW_OWNER`. In
/// mode `held` its tasks never end: it says `ready` once they all began and waits to be
/// killed; otherwise it says `done` once they all finished. Does nothing unless run by the
/// tests below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_child() {
    let Ok(schema) = std::env::var("FLOW_SCHEMA") else {
        return;
    };
    let mode = std::env::var("FLOW_MODE").unwrap();
    let owner = std::env::var("FLOW_OWNER").unwrap();
    let count: usize = std::env::var("FLOW_COUNT").unwrap().parse().unwrap();
    let work = Work {
        log: log_pool(&schema).await,
        owner: owner.clone(),
        busy: Duration::from_millis(if mode == "shared" { 150 } else { 30 }),
        hang: mode == "held",
        began: Arc::new(AtomicUsize::new(0)),
    };
    // The held tasks are of a workflow no other process runs (one per child): nobody takes
    // them over.
    let name: Arc<str> = if mode == "held" {
        format!("Hold-{owner}").into()
    } else {
        "Work".into()
    };
    let runtime = Arc::new(process(&schema, &owner, &name, queue_of(&mode), &work).await);
    let starts: Vec<_> = (0..count)
        .map(|i| {
            let (runtime, name) = (Arc::clone(&runtime), Arc::clone(&name));
            let options = StartOptions {
                instance_id: Some(format!("{owner}-{i}")),
                ..StartOptions::default()
            };
            let id = format!("{owner}-{i}");
            tokio::spawn(async move {
                loop {
                    match runtime
                        .start_by_name(&name, json!({}), options.clone())
                        .await
                    {
                        Ok(started) => return started.instance_id,
                        Err(workflow_runtime::StartError::InstanceExists { .. }) => return id,
                        // Created, then claimed by another process's recovery before this
                        // start took its lease: the start gave up; start it again.
                        Err(workflow_runtime::StartError::Run(error))
                            if error.to_string().contains("lease") =>
                        {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(error) => panic!("{id}: {error}"),
                    }
                }
            })
        })
        .collect();
    if mode == "held" {
        let began = Instant::now();
        while work.began.load(Ordering::SeqCst) < count {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "tasks did not begin"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("ready");
        std::future::pending::<()>().await;
    }
    // QU-11: a start whose task waits for a slot returns with its instance suspended; any
    // process may run it when it is resumed.
    for start in starts {
        let id = start.await.unwrap();
        runtime
            .await_completion(&id, Duration::from_secs(80))
            .await
            .unwrap();
    }
    // The others' instances may be resumed here too (by a release or a timer this process
    // claimed): stay until every task of the test ran, so no claim dies with this process.
    if let Ok(total) = std::env::var("FLOW_TOTAL") {
        let total: i64 = total.parse().unwrap();
        let waited = Instant::now();
        loop {
            let ran: i64 = sqlx::query_scalar("SELECT count(*) FROM flow_log")
                .fetch_one(&work.log)
                .await
                .unwrap();
            if ran >= total || waited.elapsed() > Duration::from_secs(60) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    runtime.shutdown(Duration::from_secs(5)).await;
    println!("done");
}

/// The tests here run one at a time: each spawns processes, and a rate measured while
/// another test's processes compete for the machine would measure the machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A schema of its own with the `flow_log` table, migrated before any child opens it; `None`
/// (saying why) without a server.
async fn setup() -> Option<(String, SchemaGuard, PgPool)> {
    let url = database_url();
    if let Err(error) = sqlx::PgConnection::connect(&url).await {
        eprintln!("skipped: no PostgreSQL server reachable at {url}: {error}");
        return None;
    }
    let schema = fresh_schema_name();
    let guard = SchemaGuard::new(url.clone(), schema.clone());
    // Migrates the schema.
    drop(
        PostgresStore::connect_with(&url, &PostgresOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let log = log_pool(&schema).await;
    sqlx::query("CREATE TABLE flow_log (owner TEXT NOT NULL, started BIGINT NOT NULL, ended BIGINT NOT NULL)")
        .execute(&log)
        .await
        .unwrap();
    Some((schema, guard, log))
}

/// Spawns a child running `count` instances on queue `mode` as `owner`.
fn spawn_child(schema: &str, mode: &str, owner: &str, count: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "flow_child", "--nocapture", "--test-threads=1"])
        .env("FLOW_SCHEMA", schema)
        .env("FLOW_MODE", mode)
        .env("FLOW_OWNER", owner)
        .env("FLOW_COUNT", count.to_string())
        // Three children run the same count (the kill test's child never finishes).
        .env("FLOW_TOTAL", (3 * count).to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `child` prints `word` (a line ending with it); kills it and fails after 90 s.
/// Its output is read to the end meanwhile, so the child never writes to a closed pipe.
async fn said(child: &mut Child, word: &'static str) {
    let stdout = child.stdout.take().unwrap();
    let (tell, seen) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tell = Some(tell);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim_end().ends_with(word)
                && let Some(tell) = tell.take()
            {
                let _ = tell.send(());
            }
        }
    });
    let seen = tokio::time::timeout(Duration::from_secs(90), seen).await;
    if !matches!(seen, Ok(Ok(()))) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child did not say `{word}`: {seen:?}");
    }
}

/// The rows of `flow_log`: (owner, started, ended).
async fn logged(log: &PgPool) -> Vec<(String, i64, i64)> {
    sqlx::query_as("SELECT owner, started, ended FROM flow_log")
        .fetch_all(log)
        .await
        .unwrap()
}

/// The most intervals that overlap at any instant (an end before a start at the same µs).
fn max_overlap<'a>(intervals: impl Iterator<Item = &'a (String, i64, i64)>) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals
        .flat_map(|(_, s, e)| [(*s, 1), (*e, -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        max = max.max(now);
    }
    usize::try_from(max).unwrap()
}

/// How many slot and waiter rows the store holds for `queue`.
async fn rows(log: &PgPool, queue: &str) -> (i64, i64) {
    let slots = sqlx::query_scalar("SELECT count(*) FROM wf_flow_slots WHERE queue = $1")
        .bind(queue)
        .fetch_one(log)
        .await
        .unwrap();
    let waiters = sqlx::query_scalar("SELECT count(*) FROM wf_flow_waiters WHERE queue = $1")
        .bind(queue)
        .fetch_one(log)
        .await
        .unwrap();
    (slots, waiters)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_run_more_than_5_at_once_nor_more_than_2_each() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some((schema, _guard, log)) = setup().await else {
        return;
    };
    let owners = ["flow-a", "flow-b", "flow-c"];
    let mut children: Vec<Child> = owners
        .iter()
        .map(|owner| spawn_child(&schema, "shared", owner, 30))
        .collect();
    for child in &mut children {
        said(child, "done").await;
        assert!(child.wait().unwrap().success());
    }
    let rows_logged = logged(&log).await;
    assert_eq!(rows_logged.len(), 90, "every task ran once");
    let overall = max_overlap(rows_logged.iter());
    assert!(overall <= 5, "{overall} tasks of a queue of 5 overlapped");
    assert!(
        overall >= 3,
        "the processes never ran more than {overall} at once together"
    );
    for owner in owners {
        let mine = max_overlap(rows_logged.iter().filter(|r| r.0 == owner));
        assert!(
            mine <= 2,
            "{mine} tasks overlapped in {owner}, limit 2 per process"
        );
        assert!(mine >= 1, "{owner} ran nothing");
    }
    assert_eq!(rows(&log, "shared").await, (0, 0), "every slot released");
    eprintln!("3 processes: at most {overall} at once overall");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_slots_come_back_within_seconds_none_lost_or_doubled() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some((schema, _guard, log)) = setup().await else {
        return;
    };
    let work = Work {
        log: log.clone(),
        owner: "survivor".into(),
        busy: Duration::from_millis(30),
        hang: false,
        began: Arc::new(AtomicUsize::new(0)),
    };
    // The lease TTL (and so the slots') is the default 30 s. The survivor does not run the
    // child's workflow: only the liveness check can give the child's slots back.
    let survivor = Arc::new(process(&schema, "survivor", "Work", HELD, &work).await);
    for round in 0..3 {
        let owner = format!("held-{round}");
        let mut child = spawn_child(&schema, "held", &owner, 2);
        said(&mut child, "ready").await;
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM wf_flow_slots WHERE queue = $1 AND owner = $2",
        )
        .bind("held")
        .bind(&owner)
        .fetch_one(&log)
        .await
        .unwrap();
        assert_eq!(held, 2, "round {round}: the child holds both slots");
        // Two of the survivor's own wait in line behind the child's slots.
        let waiting: Vec<_> = (0..2)
            .map(|_| {
                let survivor = Arc::clone(&survivor);
                tokio::spawn(async move {
                    survivor
                        .start_by_name("Work", json!({}), StartOptions::default())
                        .await
                        .unwrap()
                })
            })
            .collect();
        let queued = Instant::now();
        while rows(&log, "held").await.1 < 2 {
            assert!(
                queued.elapsed() < Duration::from_secs(30),
                "round {round}: nobody waits"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let killed = Instant::now();
        for run in waiting {
            let id = run.await.unwrap().instance_id;
            survivor
                .await_completion(
                    &id,
                    Duration::from_secs(10).saturating_sub(killed.elapsed()),
                )
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "round {round}: the killed process's slots did not come back within \
                         10 s (lease TTL 30 s): {error}"
                    )
                });
        }
        eprintln!(
            "round {round}: the killed process's slots came back; the waiting work finished {:?} after the SIGKILL",
            killed.elapsed()
        );
        assert_eq!(
            rows(&log, "held").await,
            (0, 0),
            "round {round}: a slot leaked or a waiter stayed"
        );
    }
    // None lost: the survivor still runs 2 at once; none doubled: never 3.
    sqlx::query("DELETE FROM flow_log")
        .execute(&log)
        .await
        .unwrap();
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let survivor = Arc::clone(&survivor);
            tokio::spawn(async move {
                survivor
                    .start_by_name("Work", json!({ "busy_ms": 400 }), StartOptions::default())
                    .await
                    .unwrap()
            })
        })
        .collect();
    for start in starts {
        let id = start.await.unwrap().instance_id;
        survivor
            .await_completion(&id, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let after = logged(&log).await;
    assert_eq!(after.len(), 6);
    assert_eq!(max_overlap(after.iter()), 2, "the queue of 2 after 3 kills");
    assert_eq!(rows(&log, "held").await, (0, 0));
    survivor.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_of_10_a_second_grants_95_to_100_in_any_10_s_across_3_processes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some((schema, _guard, log)) = setup().await else {
        return;
    };
    // Every grant of the queue, as the store records it in its rate window (whose rows are
    // deleted once they leave it): the rate is measured on the grants, not on the tasks'
    // starts, which come later by the start-up of each process.
    for statement in [
        "CREATE TABLE grant_log (token BIGINT NOT NULL, at BIGINT NOT NULL)".to_owned(),
        // The children's connections do not look in the schema first: name it.
        format!(
            "CREATE FUNCTION log_grant() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO \"{schema}\".grant_log VALUES (NEW.token, NEW.at); \
             RETURN NEW; END $$"
        ),
        "CREATE TRIGGER log_grant AFTER INSERT ON wf_flow_starts \
         FOR EACH ROW EXECUTE FUNCTION log_grant()"
            .to_owned(),
    ] {
        sqlx::query(&statement).execute(&log).await.unwrap();
    }
    let mut children: Vec<Child> = ["rate-a", "rate-b", "rate-c"]
        .iter()
        .map(|owner| spawn_child(&schema, "paced", owner, 45))
        .collect();
    for child in &mut children {
        said(child, "done").await;
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(logged(&log).await.len(), 135, "every task ran once");
    let mut grants: Vec<i64> = sqlx::query_scalar("SELECT at FROM grant_log")
        .fetch_all(&log)
        .await
        .unwrap();
    assert_eq!(grants.len(), 135, "one grant per task");
    grants.sort_unstable();
    // The grants in the 10 s from each grant: never more than the rate allows, and at the
    // limit once the processes are all in line (5 of slack for the start-up).
    let windows: Vec<usize> = grants
        .iter()
        .map(|&from| {
            grants
                .iter()
                .filter(|&&s| s >= from && s < from + 10_000_000)
                .count()
        })
        .collect();
    let (most, first) = (windows.iter().copied().max().unwrap(), windows[0]);
    eprintln!("rate 10/s: {first} grants in the 10 s from the first, at most {most} in any 10 s");
    assert!(
        (95..=100).contains(&most),
        "at most {most} grants in any 10 s at 10 a second; ms after the first: {:?}",
        grants
            .iter()
            .map(|s| (s - grants[0]) / 1_000)
            .collect::<Vec<_>>()
    );
}
