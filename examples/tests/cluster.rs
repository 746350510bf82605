//! Three worker processes share one PostgreSQL schema and run 1,000 instances (state machines
//! and sequences with events, durable delays and retried tasks) plus a timer trigger firing
//! every second. One worker is killed with SIGKILL midway and restarted. Every instance
//! finishes; the recorded task executions show that no two executions of one instance
//! overlapped (ST-14: one lease holder at a time, fenced commits); no event or timer is lost;
//! each timer occurrence started one instance only (TM-11).
//!
//! The workers are this test binary run again as a child process (the `worker_process` test
//! below does nothing unless `CLUSTER_WORKER_SCHEMA` is set). The test reads
//! `WORKFLOW_PG_URL` and is skipped, saying why, when no server is reachable.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::panic
)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use examples::cluster::{WorkerConfig, run_worker};
use sqlx::{Connection, PgConnection};
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name,
};

const INSTANCES: u32 = 1000;
const WORKERS: u32 = 3;

/// A worker process's body; a no-op when run as an ordinary test.
#[test]
fn worker_process() {
    let Ok(schema) = std::env::var("CLUSTER_WORKER_SCHEMA") else {
        return;
    };
    let range = std::env::var("CLUSTER_WORKER_STARTS").unwrap();
    let (from, to) = range.split_once("..").unwrap();
    let mut config = WorkerConfig::new(database_url());
    config.schema = schema;
    config.starts = from.parse().unwrap()..to.parse().unwrap();
    config.record = true;
    config.lease_ttl = Duration::from_secs(2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stop = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
            term.recv().await;
        };
        run_worker(config, stop, Duration::from_secs(5))
            .await
            .unwrap();
    });
}

fn spawn_worker(schema: &str, starts: std::ops::Range<u32>) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "worker_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CLUSTER_WORKER_SCHEMA", schema)
        .env(
            "CLUSTER_WORKER_STARTS",
            format!("{}..{}", starts.start, starts.end),
        )
        .env("WORKFLOW_PG_URL", database_url())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn range_of(worker: u32) -> std::ops::Range<u32> {
    let per = INSTANCES.div_ceil(WORKERS);
    (worker * per)..((worker + 1) * per).min(INSTANCES)
}

async fn scalar(conn: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Counts finished cluster instances; 0 while the schema does not exist yet.
async fn finished(conn: &mut PgConnection, schema: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(&format!(
        "SELECT count(*) FROM \"{schema}\".wf_instances
         WHERE status = 'finished' AND definition_name IN ('Ticket', 'Pipeline')"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap_or(0)
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the workers still running when the test fails.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_a_thousand_instances_and_survive_a_sigkill() {
    let url = database_url();
    let mut conn = match PgConnection::connect(&url).await {
        Ok(conn) => conn,
        Err(e) => {
            eprintln!("skipped: no PostgreSQL server reachable at {url}: {e}");
            return;
        }
    };
    let began = Instant::now();
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(url.clone(), schema.clone());
    // All three start at once: they migrate the new schema concurrently (advisory lock).
    let mut workers = Workers(
        (0..WORKERS)
            .map(|w| spawn_worker(&schema, range_of(w)))
            .collect(),
    );

    // Midway, kill worker 0 without warning.
    let deadline = began + Duration::from_secs(150);
    while finished(&mut conn, &schema).await < i64::from(INSTANCES) / 3 {
        assert!(
            Instant::now() < deadline,
            "a third of the instances did not finish in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let killed = workers.0[0].id();
    workers.0[0].kill().unwrap();
    workers.0[0].wait().unwrap();
    // Its executions in flight ended when it died; they are closed at this instant at the
    // end. (Closing them now would not do: the server may still run a statement the worker
    // sent just before it died, as its backend notices the dead client only when it answers,
    // so a row of the killed worker can appear after the kill.)
    let t = format!("\"{schema}\".cluster_executions");
    let killed_at: String = sqlx::query_scalar("SELECT clock_timestamp()::text")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let at_kill = finished(&mut conn, &schema).await;
    eprintln!("cluster: killed worker {killed} with {at_kill} instances finished");
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.0[0] = spawn_worker(&schema, range_of(0));
    let restarted = workers.0[0].id();

    while finished(&mut conn, &schema).await < i64::from(INSTANCES) {
        assert!(
            Instant::now() < deadline,
            "only {} of {INSTANCES} instances finished in time",
            finished(&mut conn, &schema).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = began.elapsed();
    for child in &mut workers.0 {
        assert!(
            terminate(child).success(),
            "a worker did not shut down cleanly"
        );
    }
    eprintln!("cluster: {INSTANCES} instances finished in {elapsed:?}");

    // Every execution has ended. The killed worker's end at the kill (or at their start, for
    // one the server recorded after the kill).
    sqlx::query(&format!(
        "UPDATE {t} SET ended_at = GREATEST(started_at, $2::timestamptz)
          WHERE pid = $1 AND ended_at IS NULL"
    ))
    .bind(i64::from(killed))
    .bind(&killed_at)
    .execute(&mut conn)
    .await
    .unwrap();
    let open = scalar(
        &mut conn,
        &format!("SELECT count(*) FROM {t} WHERE ended_at IS NULL"),
    )
    .await;
    if open > 0 {
        let which: String = sqlx::query_scalar(&format!(
            "SELECT string_agg(e.instance_id || ' (pid ' || e.pid || ', token ' || e.lease_token
                               || ', ' || coalesce(i.definition_name, '?') || ')', ', ')
             FROM {t} e LEFT JOIN \"{schema}\".wf_instances i ON i.instance_id = e.instance_id
             WHERE e.ended_at IS NULL"
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        panic!("{open} executions without an end: {which}");
    }
    // No two executions of one instance overlapped, whichever processes ran them.
    let overlaps = scalar(
        &mut conn,
        &format!(
            "SELECT count(*) FROM {t} a JOIN {t} b
               ON a.instance_id = b.instance_id AND a.id < b.id
              AND a.started_at < b.ended_at AND b.started_at < a.ended_at"
        ),
    )
    .await;
    assert_eq!(overlaps, 0, "overlapping executions of one instance");
    // A later execution of an instance runs under a later lease token.
    let token_regressions = scalar(
        &mut conn,
        &format!(
            "SELECT count(*) FROM {t} a JOIN {t} b
               ON a.instance_id = b.instance_id AND a.started_at < b.started_at
              AND a.lease_token > b.lease_token"
        ),
    )
    .await;
    assert_eq!(
        token_regressions, 0,
        "an execution under an older lease token ran later"
    );
    // Each instance ran its first step, its flaky task twice (the retry) and its last step:
    // the event, the delay's timer and the retry's timer were all delivered.
    let short = scalar(
        &mut conn,
        &format!(
            "SELECT count(*) FROM (SELECT instance_id FROM {t}
               WHERE instance_id LIKE 'ticket-%' OR instance_id LIKE 'pipeline-%'
               GROUP BY instance_id HAVING count(*) < 4) s"
        ),
    )
    .await;
    assert_eq!(short, 0, "instances with fewer than four task executions");
    let s = format!("\"{schema}\"");
    let leftovers = scalar(
        &mut conn,
        &format!(
            "SELECT (SELECT count(*) FROM {s}.wf_timers WHERE instance_id IS NOT NULL
                       AND instance_id NOT IN (SELECT instance_id FROM {s}.wf_instances
                                               WHERE definition_name = 'Tick'))
                  + (SELECT count(*) FROM {s}.wf_dead_letters)"
        ),
    )
    .await;
    assert_eq!(
        leftovers, 0,
        "timers of finished instances or dead letters left"
    );
    // The work was shared: all three original processes and the restarted one executed tasks.
    let pids = scalar(&mut conn, &format!("SELECT count(DISTINCT pid) FROM {t}")).await;
    assert_eq!(
        pids,
        i64::from(WORKERS) + 1,
        "processes that executed tasks"
    );
    let by_restarted = scalar(
        &mut conn,
        &format!("SELECT count(*) FROM {t} WHERE pid = {restarted}"),
    )
    .await;
    assert!(by_restarted > 0, "the restarted worker ran nothing");
    // The timer trigger fired about once a second, one instance per occurrence.
    let ticks = scalar(
        &mut conn,
        &format!("SELECT count(*) FROM {s}.wf_instances WHERE definition_name = 'Tick'"),
    )
    .await;
    let duplicates = scalar(
        &mut conn,
        &format!(
            "SELECT count(*) FROM (SELECT origin_at FROM {s}.wf_instances
               WHERE definition_name = 'Tick' GROUP BY origin_at HAVING count(*) > 1) d"
        ),
    )
    .await;
    // How late the instances' timers fired (TM-8 journals both times), for the log; a journal
    // row holds a commit's entries, each `[at, kind, context, node, detail]` (ST-10).
    let lateness: String = sqlx::query_scalar(&format!(
        "SELECT 'timers fired ' || count(*) || ', late by avg ' || coalesce(avg(f - d)::bigint, 0)
                || ' ms, max ' || coalesce(max(f - d), 0) || ' ms'
         FROM (SELECT ((e->>4)::json->>'fired_at')::bigint f, ((e->>4)::json->>'due_at')::bigint d
               FROM {s}.wf_journal j, json_array_elements(j.entries::json) e
               WHERE e->>1 = 'BookmarkResumed' AND e->>4 LIKE '%fired_at%') x"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    // An occurrence every second while the cluster ran; under this load (the 2 cores shared
    // with the server and the other processes) a few are coalesced, but a driver that fired
    // the page of timers one run after the other fired the trigger only every 10 to 40 s
    // (7 occurrences in 88 s), its occurrences queued behind tens of seconds of timer backlog.
    let floor = i64::try_from(began.elapsed().as_secs() / 5).unwrap();
    assert!(
        ticks >= floor.max(3),
        "the timer trigger fired {ticks} times in {:?} ({lateness})",
        began.elapsed()
    );
    assert_eq!(
        duplicates, 0,
        "an occurrence started more than one instance"
    );
    eprintln!(
        "cluster: {pids} processes, {ticks} timer occurrences, {lateness}, elapsed {:?}",
        began.elapsed()
    );
}
