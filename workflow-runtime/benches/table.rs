//! Every performance number of the runtime side by side, measured in one run: one table of
//! medians with the min and max over repetitions. Benchmarks, not timed tests: the machines
//! are shared and noisy, so read the ratios measured in the same run.
//!
//! ```text
//! cargo bench -p workflow-runtime --bench table
//! ```
//!
//! Sections (each row is repeated `TABLE_REPS` times; the table shows the median, min and max
//! of the per-repetition values):
//!
//! - **in memory**: a 3-activity sequence started and run to its end; a state-machine
//!   transition resumed by a stimulus (`send`); a flowchart with a fork into two tasks and an
//!   `all` join; the same steps written as a hand-written `match` (the floor).
//! - **SQLite**: durable transitions per second (`send` on `SqliteStore`, each a real
//!   transition with an action) with 1, 16 and 64 concurrent instances, beside the raw rate of
//!   one-row-per-commit INSERTs (rusqlite, WAL) on the same disk at the same `synchronous`
//!   (FULL, then NORMAL).
//! - **PostgreSQL** (against `WORKFLOW_PG_URL`, each repetition on a fresh schema; skipped
//!   with the reason printed when no server answers): durable transitions per second on
//!   `PostgresStore` with 1 and 8 concurrent instances in one process, beside the raw rate of
//!   single-row commits (one `INSERT` per transaction, sqlx) with 1 and 8 clients on the same
//!   server in the same repetition; beside each, the CPU time of the server's backends per
//!   transition and per raw commit (from their `/proc/<pid>/stat`, when the server runs on
//!   this machine) and the store's write transactions per transition; this process's CPU
//!   per transition and per raw commit, and the share of the machine's CPU busy during each
//!   (the client shares the machine with the server: where it is busy, the rates follow
//!   server and client CPU together); and with 1, 2 and 4 processes (this binary re-run as
//!   children) of 8 instances each on one schema.
//! - **routing**: `send` latency from the stimulus to its bookmark resumed and committed
//!   (p50, p99) with 10,000 and 1,000,000 suspended instances in a SQLite file, and the process
//!   RSS while they are suspended. Each population is measured in a child process of its own
//!   (this binary re-run), so the RSS is that of a process holding only that population.
//! - **start-up**: `SqliteStore::open` + `Runtime::build` + `recover()` with 100,000
//!   suspended instances in the file, in a child process.
//! - **timers**: lateness (fired minus due) p50/p99 over 1,000 durable Delay timers fired by
//!   the in-process driver (MemoryStore, sweep disabled).
//! - **queues**: a one-task workflow started to its end through an uncontended flow-control
//!   queue against the same without a queue (memory, SQLite), with the SQLite store's write
//!   transactions per start; the start rate of 3,000 tasks of a queue limited to 1,000 starts
//!   a second (memory), in the steady state: the 2,000 starts after the first window's burst
//!   over the time from the 1,000th start to the last; and on PostgreSQL (against
//!   `WORKFLOW_PG_URL`, a fresh schema per repetition), the wait for a slot (p50, p99) of a
//!   task on a queue of 5 slots held 5 ms each, from the end of the task before it (its
//!   commit included) to its start, with 3 processes (this binary re-run as children) of 4
//!   loops each starting such workflows one after the other, against 1 process of 1 loop
//!   (the same path without a wait: the floor).
//! - **macro**: `cargo build` time of a generated crate holding a 50-state, 200-transition
//!   `#[state_machine]` versus the same crate without it (incremental compilation off).
//!
//! Large populations are written straight into the SQLite file, not through the store API
//! (the store has no bulk insert): one instance is started through the `Runtime` as a
//! template, then its rows (instance, bookmarks, journal, receipts...) are copied in one
//! transaction per 50,000 instances with the ids substituted (every text column of every copied
//! row has the template's instance id and bookmark ids replaced) and the bookmark hash
//! recomputed with [`stimulus_hash`] for the copy's key. Every copy is a valid suspended
//! instance: the routing rows send to random ones among them.
//!
//! Environment knobs (defaults in brackets):
//!
//! - `TABLE_REPS` [5]: repetitions of every row.
//! - `TABLE_ITERS` [5000]: iterations per repetition of the in-memory rows (the floor runs
//!   100x as many).
//! - `TABLE_SECS` [1]: seconds per repetition of each SQLite throughput row.
//! - `TABLE_ROUTING` [10000,1000000]: the suspended populations for the routing rows.
//! - `TABLE_ROUTING_SENDS` [500]: sends per repetition of a routing row.
//! - `TABLE_RECOVER` [100000]: the suspended population for the start-up row.
//! - `TABLE_TIMERS` [1000]: timers per repetition of the lateness row.
//! - `TABLE_MACRO` [1]: `0` skips the macro rows.
//! - `TABLE_PG_SLOTS` [200]: tasks per process of the PostgreSQL slot rows (`0` for none).
//! - `TABLE_ONLY` [all]: a comma-separated subset of
//!   `memory,sqlite,postgres,routing,recover,timers,queues,macro`.
//! - `TABLE_SYNC` [full,normal] and `TABLE_INSTANCES` [1,16,64]: a subset of the SQLite rows.
//! - `TABLE_PG_CLIENTS` [1,8] and `TABLE_PG_PROCESSES` [1,2,4] (`0` for none): a subset of the
//!   PostgreSQL rows.
//! - `TABLE_DIR` [a temporary directory]: where the database files and the generated crate go.
//! - `WORKFLOW_PG_URL`: when set, the table says where the PostgreSQL rows are measured.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    missing_docs,
    unreachable_pub
)]

use std::future::Future;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod flow;
use flow::{Task1, Task1Queued};

use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::model::Definition;
use workflow_runtime::routing::stimulus_hash;
use workflow_runtime::store::{SqliteOptions, SqliteStore, Storage, Synchronous};
use workflow_runtime::{
    Outcome, Registry, Runtime, StartOptions, Stimulus, TaskContext, WorkflowStatus, state_machine,
    workflow,
};

// ---------------------------------------------------------------------------------------------
// Workflows

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Counter {
    id: String,
    count: u64,
}

async fn incr(cx: &mut TaskContext<Counter>) {
    cx.data_mut().count += 1;
}

workflow! {
    pub workflow Seq3(Counter) = sequence [a = task(incr), b = task(incr), c = task(incr)];
}

workflow! {
    pub workflow ForkJoin(Counter) {
        split = fork [left, right];
        a = task(incr);
        b = task(incr);
        both = join(all);
        c = task(incr);

        start -> split;
        split.left -> a -> both;
        split.right -> b -> both;
        both -> c;
    }
}

#[state_machine(data = Counter, initial = Even)]
pub enum PingPong {
    #[on(tick: event("tick").key(id) => Odd, action = incr)]
    Even,
    #[on(tock: event("tick").key(id) => Even, action = incr)]
    Odd,
}

// ---------------------------------------------------------------------------------------------
// Rows and the table

/// One line of the table: a value per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    section: String,
    what: String,
    unit: String,
    samples: Vec<f64>,
    /// The target, or the ratio to the row it is compared with.
    note: String,
}

impl Row {
    fn new(section: &str, what: impl Into<String>, unit: &str, samples: Vec<f64>) -> Self {
        Self {
            section: section.to_owned(),
            what: what.into(),
            unit: unit.to_owned(),
            samples,
            note: String::new(),
        }
    }

    fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    fn sorted(&self) -> Vec<f64> {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    fn median(&self) -> f64 {
        let s = self.sorted();
        if s.is_empty() {
            return f64::NAN;
        }
        let mid = s.len() / 2;
        if s.len() % 2 == 1 {
            s[mid]
        } else {
            f64::midpoint(s[mid - 1], s[mid])
        }
    }
}

fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        "-".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn print_table(rows: &[Row], reps: usize) {
    println!();
    println!(
        "| {:<9} | {:<62} | {:>10} | {:>10} | {:>10} | {:<6} | {:<24} |",
        "section", "measurement", "median", "min", "max", "unit", "target / ratio"
    );
    println!(
        "|{:-<11}|{:-<64}|{:->12}|{:->12}|{:->12}|{:-<8}|{:-<26}|",
        "", "", "", "", "", "", ""
    );
    for row in rows {
        let s = row.sorted();
        println!(
            "| {:<9} | {:<62} | {:>10} | {:>10} | {:>10} | {:<6} | {:<24} |",
            row.section,
            row.what,
            fmt_num(row.median()),
            fmt_num(s.first().copied().unwrap_or(f64::NAN)),
            fmt_num(s.last().copied().unwrap_or(f64::NAN)),
            row.unit,
            row.note,
        );
    }
    println!();
    println!("{reps} repetitions per row; median, min and max are over the repetitions.");
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A comma-separated list of numbers from `name`, or `default` when unset or empty; `0`s are
/// dropped (so `0` alone means none).
fn env_counts<T>(name: &str, default: &[T]) -> Vec<T>
where
    T: std::str::FromStr + PartialEq + From<u8> + Clone,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .filter_map(|n| n.trim().parse().ok())
            .filter(|n: &T| *n != T::from(0))
            .collect(),
        _ => default.to_vec(),
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// Polls a future that never really waits (in-memory store, tasks that complete at once) with
/// a no-op waker: the numbers are the engine's, not an async executor's.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

/// Mean nanoseconds per call of `f` over `iterations` (after a tenth as warm-up).
fn time_ns<F: FnMut()>(iterations: u32, mut f: F) -> f64 {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(iterations)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn wall_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    for suffix in ["", "-wal", "-shm", "-owner"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    path
}

fn sync_name(sync: Synchronous) -> &'static str {
    match sync {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    }
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A small xorshift generator: the routing rows pick random instances reproducibly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// ---------------------------------------------------------------------------------------------
// In memory

#[derive(Clone, Copy)]
enum SeqStep {
    A,
    B,
    C,
    Done,
}

fn hand_sequence(data: &mut Counter) {
    let mut step = SeqStep::A;
    loop {
        step = match step {
            SeqStep::A => {
                data.count += 1;
                SeqStep::B
            }
            SeqStep::B => {
                data.count += 1;
                SeqStep::C
            }
            SeqStep::C => {
                data.count += 1;
                SeqStep::Done
            }
            SeqStep::Done => return,
        };
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Machine {
    Even,
    Odd,
}

fn hand_transition(state: Machine, event: &str, key: &str, data: &mut Counter) -> Machine {
    match (state, event) {
        (Machine::Even, "tick") if key == data.id => {
            data.count += 1;
            Machine::Odd
        }
        (Machine::Odd, "tick") if key == data.id => {
            data.count += 1;
            Machine::Even
        }
        (s, _) => s,
    }
}

fn memory_rows(reps: usize, iters: u32) -> Vec<Row> {
    let rt = Runtime::builder()
        .register::<Seq3>()
        .register::<ForkJoin>()
        .register::<PingPong>()
        .sweep_interval(None)
        .timer_driver(false)
        .build()
        .unwrap();
    let id = block_on(rt.start_with::<PingPong>(
        Counter {
            id: "k-1".into(),
            count: 0,
        },
        StartOptions {
            instance_id: Some("k-1".into()),
            ..StartOptions::default()
        },
    ))
    .unwrap()
    .instance_id;
    let stimulus = Stimulus::new("tick").key("k-1");
    // The same transition on a runtime that counts no metrics (ENG-60): what counting costs.
    let quiet = Runtime::builder()
        .register::<PingPong>()
        .sweep_interval(None)
        .timer_driver(false)
        .metrics(false)
        .build()
        .unwrap();
    block_on(quiet.start_with::<PingPong>(
        Counter {
            id: "k-1".into(),
            count: 0,
        },
        StartOptions {
            instance_id: Some("k-1".into()),
            ..StartOptions::default()
        },
    ))
    .unwrap();
    let (mut seq, mut tr, mut tr_quiet, mut fork, mut hand_seq, mut hand_tr) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut sent = 0u64;
    // `TABLE_MEMORY=seq,send,fork,floor` runs a subset (for a profile of one path).
    let rows = std::env::var("TABLE_MEMORY").unwrap_or_default();
    let row = |name: &str| rows.is_empty() || rows.split(',').any(|r| r.trim() == name);
    for _ in 0..reps {
        if row("seq") {
            seq.push(time_ns(iters, || {
                let started = block_on(rt.start::<Seq3>(Counter::default())).unwrap();
                assert_eq!(started.status, WorkflowStatus::Finished);
            }));
        }
        if row("send") {
            tr.push(time_ns(iters, || {
                let report = block_on(rt.send(stimulus.clone())).unwrap();
                assert_eq!(report.resumed.len(), 1);
                sent += 1;
            }));
            tr_quiet.push(time_ns(iters, || {
                let report = block_on(quiet.send(stimulus.clone())).unwrap();
                assert_eq!(report.resumed.len(), 1);
            }));
        }
        if row("fork") {
            fork.push(time_ns(iters, || {
                let started = block_on(rt.start::<ForkJoin>(Counter::default())).unwrap();
                assert_eq!(started.status, WorkflowStatus::Finished);
            }));
        }
        if !row("floor") {
            continue;
        }
        hand_seq.push(time_ns(iters * 100, || {
            let mut data = black_box(Counter::default());
            hand_sequence(&mut data);
            black_box(data);
        }));
        let mut state = Machine::Even;
        let mut data = Counter {
            id: "k-1".into(),
            count: 0,
        };
        hand_tr.push(time_ns(iters * 100, || {
            state = hand_transition(black_box(state), black_box("tick"), "k-1", &mut data);
            black_box(state);
        }));
    }
    // Every send was a committed transition: the action counted it.
    let snapshot = block_on(rt.get_state(&id)).unwrap().unwrap();
    assert_eq!(snapshot.data::<Counter>().unwrap().count, sent);
    // One counted every send, the other none.
    assert_eq!(rt.metrics().stimuli.sent, sent);
    assert_eq!(quiet.metrics().stimuli.sent, 0);
    let per_op = |v: Vec<f64>| v.into_iter().map(|ns| ns / 1000.0).collect::<Vec<_>>();
    // The cost of metrics: the median of the per-repetition ratios (each repetition measures
    // both runtimes back to back).
    let mut ratios: Vec<f64> = tr.iter().zip(&tr_quiet).map(|(on, off)| on / off).collect();
    ratios.sort_by(f64::total_cmp);
    let metrics_cost = ratios.get(ratios.len() / 2).map_or_else(String::new, |r| {
        format!(
            "metrics cost {:+.1}% (median ratio); target < 3%",
            (r - 1.0) * 100.0
        )
    });
    vec![
        Row::new(
            "memory",
            "3-activity sequence, start to finish (start)",
            "µs",
            per_op(seq),
        )
        .note("target <= 10 µs"),
        Row::new(
            "memory",
            "state-machine transition resumed by a stimulus (send)",
            "µs",
            per_op(tr),
        )
        .note("target <= 5 µs"),
        Row::new(
            "memory",
            "the same transition, metrics(false)",
            "µs",
            per_op(tr_quiet),
        )
        .note(metrics_cost),
        Row::new(
            "memory",
            "flowchart: fork -> 2 tasks -> join(all) -> task (start)",
            "µs",
            per_op(fork),
        ),
        Row::new(
            "memory",
            "floor: hand-written match, the 3-step sequence",
            "ns",
            hand_seq,
        ),
        Row::new(
            "memory",
            "floor: hand-written match, one transition",
            "ns",
            hand_tr,
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// SQLite throughput

fn raw_inserts(path: &Path, sync: Synchronous, duration: Duration) -> f64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch(&format!("PRAGMA synchronous = {}", sync_name(sync)))
        .unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, version INTEGER, state TEXT)",
    )
    .unwrap();
    let text = "x".repeat(1024);
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < duration {
        let tx = conn.unchecked_transaction().unwrap();
        tx.execute(
            "INSERT INTO t (version, state) VALUES (?1, ?2)",
            rusqlite::params![commits, text],
        )
        .unwrap();
        tx.commit().unwrap();
        commits += 1;
    }
    commits as f64 / start.elapsed().as_secs_f64()
}

fn open_sqlite(path: &Path, sync: Synchronous) -> Storage {
    let options = SqliteOptions {
        synchronous: sync,
        ..SqliteOptions::default()
    };
    Arc::new(SqliteStore::open_with(path, &options).unwrap()).into()
}

fn sqlite_runtime(store: Storage) -> Runtime {
    Runtime::builder()
        .store(store)
        .register::<PingPong>()
        .build()
        .unwrap()
}

/// `instances` tasks, each sending `tick` to its own instance until the deadline; the rate of
/// committed transitions.
async fn durable_rate(path: &Path, sync: Synchronous, instances: usize, duration: Duration) -> f64 {
    durable_rate_on(open_sqlite(path, sync), instances, duration).await
}

/// [`durable_rate`] on any store.
async fn durable_rate_on(store: Storage, instances: usize, duration: Duration) -> f64 {
    durable_rate_prefixed(store, "c-", instances, duration, None)
        .await
        .rate
}

/// What [`durable_rate_prefixed`] measured.
struct Measured {
    /// Transitions per second.
    rate: f64,
    /// Per transition, when a [`BackendCpu`] probe was given.
    server: Option<ServerPer>,
    /// This process's CPU per transition (µs) and the share of the machine's CPU busy
    /// meanwhile (all processes, all cores).
    client: ClientCpu,
}

/// What the PostgreSQL server spent per transition or per raw commit.
#[derive(Clone, Copy)]
struct ServerPer {
    /// The CPU of the backends serving the database, µs.
    cpu: f64,
    /// The store's write transactions (1 for a raw commit).
    transactions: f64,
    /// The WAL the server wrote, bytes (the whole server's: the benchmark's database alone
    /// on a quiet server).
    wal: f64,
}

/// What the benchmark process spent of the machine during a row.
#[derive(Clone, Copy)]
struct ClientCpu {
    /// This process's CPU (all threads) per operation, µs.
    per_op: f64,
    /// The machine's CPU busy during the row, as a share of all its cores (0 to 1).
    busy: f64,
}

/// A sample of this process's CPU and the machine's, for [`ClientCpu`].
struct CpuMark {
    process: f64,
    machine: (f64, f64),
}

impl CpuMark {
    fn now() -> Self {
        Self {
            process: process_usage().0,
            machine: machine_cpu(),
        }
    }

    /// What was spent since this mark, over `ops` operations.
    fn spent(&self, ops: u64) -> ClientCpu {
        let now = Self::now();
        let all = now.machine.1 - self.machine.1;
        ClientCpu {
            per_op: (now.process - self.process) * 1e6 / ops.max(1) as f64,
            busy: if all > 0.0 {
                (now.machine.0 - self.machine.0) / all
            } else {
                0.0
            },
        }
    }
}

/// The machine's CPU time in seconds from `/proc/stat`, all cores: (busy, all). Idle and I/O
/// wait are not busy; zero where it cannot be read.
fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    let all: f64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    ((all - idle) / CLOCK_TICKS, all / CLOCK_TICKS)
}

/// [`durable_rate_on`] with instance ids (and keys) `<prefix><n>`, and with `probe`, the CPU
/// its PostgreSQL backends used.
async fn durable_rate_prefixed(
    store: Storage,
    prefix: &str,
    instances: usize,
    duration: Duration,
    mut probe: Option<&mut BackendCpu>,
) -> Measured {
    let runtime = sqlite_runtime(store.clone());
    for i in 0..instances {
        let id = format!("{prefix}{i}");
        let data = Counter {
            id: id.clone(),
            count: 0,
        };
        let options = StartOptions {
            instance_id: Some(id),
            ..StartOptions::default()
        };
        runtime.start_with::<PingPong>(data, options).await.unwrap();
    }
    let before = (store.stats().await.unwrap(), process_usage());
    let server_before = match probe.as_mut() {
        Some(probe) => Some(probe.sample().await),
        None => None,
    };
    let mark = CpuMark::now();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for i in 0..instances {
        let runtime = runtime.clone();
        let key = format!("{prefix}{i}");
        tasks.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while Instant::now() < deadline {
                let report = runtime.send(Stimulus::new("tick").key(&key)).await.unwrap();
                assert_eq!(report.resumed.len(), 1);
                sent += 1;
            }
            sent
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let client = mark.spent(total);
    let server = match (probe.as_mut(), server_before) {
        (Some(probe), Some(server_start)) => {
            let (cpu, wal) = probe.since(&server_start).await;
            let transactions = store.stats().await.unwrap().transactions - before.0.transactions;
            let per = total.max(1) as f64;
            Some(ServerPer {
                cpu: cpu * 1e6 / per,
                transactions: transactions as f64 / per,
                wal: wal / per,
            })
        }
        _ => None,
    };
    if std::env::var_os("TABLE_STATS").is_some() {
        // Write requests and store transactions per transition (a profile aid).
        let after = (store.stats().await.unwrap(), process_usage());
        let per = |n: u64| n as f64 / total.max(1) as f64;
        eprintln!(
            "table: {instances} instance(s): {total} transitions; per transition: {:.2} write requests, {:.2} transactions, {:.0} µs of CPU (process), {:.1} context switches",
            per(after.0.write_requests - before.0.write_requests),
            per(after.0.transactions - before.0.transactions),
            client.per_op,
            per(after.1.1.saturating_sub(before.1.1)),
        );
    }
    let mut counted = 0;
    for i in 0..instances {
        let snapshot = runtime
            .get_state(&format!("{prefix}{i}"))
            .await
            .unwrap()
            .unwrap();
        counted += snapshot.data::<Counter>().unwrap().count;
    }
    assert_eq!(counted, total, "every transition committed");
    Measured {
        rate: total as f64 / secs,
        server,
        client,
    }
}

/// The CPU seconds this process used so far (all threads) and the context switches of its
/// live threads, from `/proc` (zero where it cannot be read): a profile aid of `TABLE_STATS`.
fn process_usage() -> (f64, u64) {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The fields after the command name (which may hold spaces) in parentheses.
            let rest = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .collect::<Vec<_>>();
            let ticks = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
            Some(ticks / CLOCK_TICKS)
        })
        .unwrap_or(0.0);
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            for line in status.lines() {
                if let Some((name, n)) = line.split_once(':')
                    && name.ends_with("ctxt_switches")
                {
                    switches += n.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    (cpu, switches)
}

fn sqlite_rows(dir: &Path, reps: usize, secs: f64) -> Vec<Row> {
    let duration = Duration::from_secs_f64(secs);
    let rt = tokio_rt();
    let mut rows = Vec::new();
    // `TABLE_SYNC=full|normal` and `TABLE_INSTANCES=1,16,64` run a subset (for a profile).
    let syncs = std::env::var("TABLE_SYNC")
        .unwrap_or_default()
        .to_lowercase();
    let counts: Vec<usize> = std::env::var("TABLE_INSTANCES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 16, 64]);
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let name = sync_name(sync);
        if !syncs.is_empty() && !syncs.split(',').any(|s| s.trim() == name.to_lowercase()) {
            continue;
        }
        let mut raw = Vec::new();
        let mut durable: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
        for _ in 0..reps {
            raw.push(raw_inserts(&fresh(dir, "raw.db"), sync, duration));
            for (slot, &instances) in counts.iter().enumerate() {
                let path = fresh(dir, &format!("durable-{instances}.db"));
                durable[slot].push(rt.block_on(durable_rate(&path, sync, instances, duration)));
            }
        }
        let raw_row = Row::new(
            "sqlite",
            format!("raw rusqlite: 1 INSERT per commit, WAL, {name}"),
            "/s",
            raw,
        )
        .note("1.00x");
        let raw_median = raw_row.median();
        rows.push(raw_row);
        for (slot, &instances) in counts.iter().enumerate() {
            let row = Row::new(
                "sqlite",
                format!("durable transitions, {instances:>2} instance(s), {name}"),
                "/s",
                durable[slot].clone(),
            );
            let ratio = row.median() / raw_median;
            let target = match instances {
                1 => " (target >= 0.5x)",
                64 => " (target >= 1.5x)",
                _ => "",
            };
            rows.push(row.note(format!("{ratio:.2}x raw{target}")));
        }
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL throughput

/// The CPU time of the PostgreSQL backends serving the benchmark's database (every session
/// on it but the probe's own), read from `/proc/<pid>/stat` of each backend: the server runs
/// on this machine. A backend's time is counted from the first sample that sees it, so the
/// pools are opened before it; one that ends between two samples is not counted at all.
/// `None` where the backends' `/proc` cannot be read.
struct BackendCpu {
    conn: sqlx::PgConnection,
}

/// Clock ticks a second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const CLOCK_TICKS: f64 = 100.0;

impl BackendCpu {
    async fn connect(url: &str) -> Option<Self> {
        use sqlx::Connection;
        let mut probe = Self {
            conn: sqlx::PgConnection::connect(url).await.ok()?,
        };
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut probe.conn)
            .await
            .ok()?;
        backend_ticks(pid).map(|_| probe)
    }

    /// The CPU ticks (user + system) of each backend of the database by pid, and the
    /// server's WAL position (bytes).
    async fn sample(&mut self) -> ServerMark {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut self.conn)
        .await
        .unwrap();
        let wal: f64 =
            sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8")
                .fetch_one(&mut self.conn)
                .await
                .unwrap();
        ServerMark {
            ticks: pids
                .into_iter()
                .filter_map(|pid| backend_ticks(pid).map(|t| (pid, t)))
                .collect(),
            wal,
        }
    }

    /// The CPU seconds the backends used and the WAL bytes the server wrote since `before`
    /// was sampled.
    async fn since(&mut self, before: &ServerMark) -> (f64, f64) {
        let after = self.sample().await;
        let ticks: u64 = after
            .ticks
            .iter()
            .map(|(pid, t)| t.saturating_sub(before.ticks.get(pid).copied().unwrap_or(0)))
            .sum();
        (ticks as f64 / CLOCK_TICKS, after.wal - before.wal)
    }
}

/// A [`BackendCpu`] sample.
struct ServerMark {
    ticks: std::collections::HashMap<i32, u64>,
    wal: f64,
}

/// utime + stime of process `pid`, in clock ticks.
fn backend_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// What [`pg_raw_commits`] measured.
struct RawMeasured {
    /// Commits per second.
    rate: f64,
    /// With a probe: what the server spent per commit.
    server: Option<ServerPer>,
    /// This process's CPU per commit and the machine's busy share.
    client: ClientCpu,
}

/// `clients` connections, each committing one-row `INSERT` transactions until the deadline.
async fn pg_raw_commits(
    url: &str,
    schema: &str,
    clients: u32,
    duration: Duration,
    probe: Option<&mut BackendCpu>,
) -> RawMeasured {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(clients)
        .connect(url)
        .await
        .unwrap();
    // Every client's connection open before the probe's first sample.
    let mut opened = Vec::new();
    for _ in 0..clients {
        opened.push(pool.acquire().await.unwrap());
    }
    drop(opened);
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".raw_commits
         (id BIGSERIAL PRIMARY KEY, version BIGINT, state TEXT)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let insert = format!("INSERT INTO \"{schema}\".raw_commits (version, state) VALUES ($1, $2)");
    let mut probe = probe;
    let server_start = match probe.as_mut() {
        Some(probe) => Some(probe.sample().await),
        None => None,
    };
    let mark = CpuMark::now();
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (pool, insert) = (pool.clone(), insert.clone());
        tasks.push(tokio::spawn(async move {
            let text = "x".repeat(1024);
            let mut commits = 0i64;
            while Instant::now() < deadline {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query(&insert)
                    .bind(commits)
                    .bind(&text)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                commits += 1;
            }
            commits
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let client = mark.spent(u64::try_from(total).unwrap_or(0));
    let server = match (probe, server_start) {
        (Some(probe), Some(server_start)) => {
            let (cpu, wal) = probe.since(&server_start).await;
            let per = total.max(1) as f64;
            Some(ServerPer {
                cpu: cpu * 1e6 / per,
                transactions: 1.0,
                wal: wal / per,
            })
        }
        _ => None,
    };
    pool.close().await;
    RawMeasured {
        rate,
        server,
        client,
    }
}

/// A child process of the multi-process rows: 8 instances of its own (ids prefixed by its
/// pid) on the shared schema for `secs`; prints its transitions per second.
fn child_pg_durable(url: &str, schema: &str, instances: usize, secs: f64) {
    use workflow_runtime::store::{PostgresOptions, PostgresStore};
    let rt = tokio_rt();
    let rate = rt.block_on(async {
        let options = PostgresOptions {
            max_connections: u32::try_from(instances).unwrap() + 4,
            ..PostgresOptions::default().schema(schema)
        };
        let store = PostgresStore::connect_with(url, &options).await.unwrap();
        let prefix = format!("p{}-", std::process::id());
        durable_rate_prefixed(
            Storage::new(Arc::new(store)),
            &prefix,
            instances,
            Duration::from_secs_f64(secs),
            None,
        )
        .await
        .rate
    });
    println!("{rate}");
}

/// Transitions per second of `processes` child processes on one schema, 8 instances each.
fn pg_processes_rate(url: &str, schema: &str, processes: usize, secs: f64) -> f64 {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args(["--child", "pg-durable", url, schema, "8", &secs.to_string()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "a benchmark child failed");
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse::<f64>()
                .unwrap()
        })
        .sum()
}

fn postgres_rows(reps: usize, secs: f64) -> Vec<Row> {
    use workflow_runtime::store::conformance::postgres::{
        SchemaGuard, database_url, fresh_schema_name,
    };
    use workflow_runtime::store::{PostgresOptions, PostgresStore};

    let duration = Duration::from_secs_f64(secs);
    let rt = tokio_rt();
    let url = database_url();
    if let Err(e) = rt.block_on(async {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await
    }) {
        eprintln!("table: PostgreSQL rows skipped: no server reachable at {url}: {e}");
        return Vec::new();
    }
    let clients = env_counts("TABLE_PG_CLIENTS", &[1u32, 8]);
    let mut raw: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
    let mut durable: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
    // Server CPU per raw commit and per transition, and transactions per transition.
    let mut raw_server: Vec<Vec<ServerPer>> = vec![Vec::new(); clients.len()];
    let mut durable_server: Vec<Vec<ServerPer>> = vec![Vec::new(); clients.len()];
    // This process's CPU per raw commit and per transition, and the machine's busy share.
    let mut raw_client: Vec<Vec<ClientCpu>> = vec![Vec::new(); clients.len()];
    let mut durable_client: Vec<Vec<ClientCpu>> = vec![Vec::new(); clients.len()];
    let mut probe = rt.block_on(BackendCpu::connect(&url));
    if probe.is_none() {
        eprintln!("table: PostgreSQL server CPU not measured: its backends' /proc is not readable");
    }
    for _ in 0..reps {
        for (slot, &n) in clients.iter().enumerate() {
            let schema = fresh_schema_name();
            let _guard = SchemaGuard::new(url.clone(), schema.clone());
            let store = rt.block_on(async {
                let options = PostgresOptions {
                    max_connections: n + 4,
                    ..PostgresOptions::default().schema(schema.clone())
                };
                PostgresStore::connect_with(&url, &options).await.unwrap()
            });
            let measured_raw =
                rt.block_on(pg_raw_commits(&url, &schema, n, duration, probe.as_mut()));
            raw[slot].push(measured_raw.rate);
            raw_server[slot].extend(measured_raw.server);
            raw_client[slot].push(measured_raw.client);
            let measured = rt.block_on(durable_rate_prefixed(
                Storage::new(Arc::new(store)),
                "c-",
                n as usize,
                duration,
                probe.as_mut(),
            ));
            durable[slot].push(measured.rate);
            durable_client[slot].push(measured.client);
            durable_server[slot].extend(measured.server);
        }
    }
    let processes = env_counts("TABLE_PG_PROCESSES", &[1usize, 2, 4]);
    let mut spread: Vec<Vec<f64>> = vec![Vec::new(); processes.len()];
    for _ in 0..reps {
        for (slot, &n) in processes.iter().enumerate() {
            let schema = fresh_schema_name();
            let _guard = SchemaGuard::new(url.clone(), schema.clone());
            // Migrate once, so the children do not all wait on the advisory lock.
            drop(rt.block_on(async {
                PostgresStore::connect_with(
                    &url,
                    &PostgresOptions::default().schema(schema.clone()),
                )
                .await
                .unwrap()
            }));
            spread[slot].push(pg_processes_rate(&url, &schema, n, secs));
        }
    }
    let mut rows = Vec::new();
    for (slot, &n) in clients.iter().enumerate() {
        let raw_row = Row::new(
            "postgres",
            format!("raw sqlx: 1 INSERT per commit, {n} client(s)"),
            "/s",
            raw[slot].clone(),
        )
        .note("1.00x");
        let raw_median = raw_row.median();
        rows.push(raw_row);
        let row = Row::new(
            "postgres",
            format!("durable transitions, {n} instance(s), 1 process"),
            "/s",
            durable[slot].clone(),
        );
        let ratio = row.median() / raw_median;
        let target = match n {
            1 => ", target >= 0.6x",
            8 => ", target >= 1.0x",
            _ => "",
        };
        rows.push(row.note(format!("{ratio:.2}x raw ({n} client(s){target})")));
        if !raw_server[slot].is_empty() && !durable_server[slot].is_empty() {
            let field = |m: &[ServerPer], f: fn(&ServerPer) -> f64| m.iter().map(f).collect();
            let raw_row = Row::new(
                "postgres",
                format!("server CPU per raw commit, {n} client(s)"),
                "µs",
                field(&raw_server[slot], |p| p.cpu),
            )
            .note("1.00x");
            let raw_median = raw_row.median();
            rows.push(raw_row);
            let row = Row::new(
                "postgres",
                format!("server CPU per transition, {n} instance(s)"),
                "µs",
                field(&durable_server[slot], |p| p.cpu),
            );
            let server_median = row.median();
            let ratio = server_median / raw_median;
            rows.push(row.note(format!("{ratio:.2}x raw (target <= 2x)")));
            rows.push(Row::new(
                "postgres",
                format!("store write transactions per transition, {n} instance(s)"),
                "",
                field(&durable_server[slot], |p| p.transactions),
            ));
            // What the server writes: a transition's rows and index entries against one row.
            let raw_wal = Row::new(
                "postgres",
                format!("WAL per raw commit, {n} client(s)"),
                "bytes",
                field(&raw_server[slot], |p| p.wal),
            )
            .note("1.00x");
            let raw_wal_median = raw_wal.median();
            rows.push(raw_wal);
            let wal = Row::new(
                "postgres",
                format!("WAL per transition, {n} instance(s)"),
                "bytes",
                field(&durable_server[slot], |p| p.wal),
            );
            let ratio = wal.median() / raw_wal_median.max(f64::EPSILON);
            rows.push(wal.note(format!("{ratio:.2}x raw")));
            // What bounds the rates: the client shares the machine with the server, so a
            // row whose machine is busy is bound by server and client CPU together.
            let client = |m: &[ClientCpu]| m.iter().map(|c| c.per_op).collect::<Vec<_>>();
            let busy = |m: &[ClientCpu]| m.iter().map(|c| c.busy * 100.0).collect::<Vec<_>>();
            let raw_client_row = Row::new(
                "postgres",
                format!("client CPU per raw commit, {n} client(s)"),
                "µs",
                client(&raw_client[slot]),
            );
            let raw_both = raw_median + raw_client_row.median();
            rows.push(raw_client_row);
            let client_row = Row::new(
                "postgres",
                format!("client CPU per transition, {n} instance(s)"),
                "µs",
                client(&durable_client[slot]),
            );
            let both = server_median + client_row.median();
            rows.push(client_row.note(format!(
                "server + client {:.2}x raw's",
                both / raw_both.max(f64::EPSILON)
            )));
            rows.push(Row::new(
                "postgres",
                format!("machine CPU busy, raw commits, {n} client(s)"),
                "%",
                busy(&raw_client[slot]),
            ));
            rows.push(Row::new(
                "postgres",
                format!("machine CPU busy, transitions, {n} instance(s)"),
                "%",
                busy(&durable_client[slot]),
            ));
        }
    }
    let one = spread
        .first()
        .map_or(0.0, |s| Row::new("postgres", "", "/s", s.clone()).median());
    for (slot, &n) in processes.iter().enumerate() {
        let row = Row::new(
            "postgres",
            format!("durable transitions, {n} process(es) x 8 instances"),
            "/s",
            spread[slot].clone(),
        );
        let ratio = row.median() / one;
        rows.push(row.note(format!("{ratio:.2}x 1 process")));
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// Populations written straight into the SQLite file

const TEMPLATE: &str = "p0000000";

fn population_id(n: u64) -> String {
    format!("p{n:07}")
}

/// A bookmark id of the same length as `template` (a ULID), unique per `(n, j)`.
fn population_bookmark(template: &str, n: u64, j: usize) -> String {
    let tail = format!("{j:02}{n:09}");
    let keep = template.len().saturating_sub(tail.len());
    format!("{}{tail}", &template[..keep])
}

/// Creates `count` suspended `PingPong` instances (`p0000000`, `p0000001`, ...) in a fresh
/// file at `path`, each waiting on `tick` with its own key; returns the seconds it took.
///
/// The template is started through the `Runtime`; its rows in every `wf_*` table with an
/// `instance_id` column are read once and written again per copy, every text value with the
/// template's instance id and bookmark id replaced by the copy's, and the bookmark hash
/// recomputed for the copy's key. The secondary indexes are dropped for the load and created
/// again after it (from their own `CREATE INDEX` text), as a bulk load does.
fn populate(path: &Path, count: u64) -> f64 {
    use rusqlite::types::Value as Sql;
    let started = Instant::now();
    {
        let rt = tokio_rt();
        let runtime = sqlite_runtime(open_sqlite(path, Synchronous::Normal));
        let data = Counter {
            id: TEMPLATE.into(),
            count: 0,
        };
        let options = StartOptions {
            instance_id: Some(TEMPLATE.into()),
            ..StartOptions::default()
        };
        let s = rt
            .block_on(runtime.start_with::<PingPong>(data, options))
            .unwrap();
        assert_eq!(s.status, WorkflowStatus::Suspended);
        rt.block_on(runtime.shutdown(Duration::from_secs(1)));
    }
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;")
        .unwrap();
    let strings = |conn: &rusqlite::Connection, sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let tables = strings(
        &conn,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'wf_%'",
    );
    // (table, columns, the template's rows)
    let mut copies: Vec<(String, Vec<String>, Vec<Vec<Sql>>)> = Vec::new();
    for table in tables {
        let columns = strings(
            &conn,
            &format!("SELECT name FROM pragma_table_info('{table}')"),
        );
        if !columns.iter().any(|c| c == "instance_id") {
            continue;
        }
        let rows: Vec<Vec<Sql>> = {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {table} WHERE instance_id = ?1"))
                .unwrap();
            stmt.query_map([TEMPLATE], |r| {
                (0..columns.len()).map(|i| r.get::<_, Sql>(i)).collect()
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        };
        if !rows.is_empty() {
            copies.push((table, columns, rows));
        }
    }
    let bookmarks: Vec<(String, String)> = {
        let mut stmt = conn
            .prepare("SELECT bookmark_id, hash FROM wf_bookmarks WHERE instance_id = ?1")
            .unwrap();
        stmt.query_map([TEMPLATE], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let template_hash = stimulus_hash("tick", Some(&json!(TEMPLATE)), None).unwrap();
    assert_eq!(bookmarks.len(), 1, "the template waits on one bookmark");
    assert_eq!(bookmarks[0].1, template_hash, "the bookmark is the tick's");
    let template_bookmark = bookmarks[0].0.clone();
    let names: Vec<String> = copies.iter().map(|(t, _, _)| format!("'{t}'")).collect();
    let indexes = strings(
        &conn,
        &format!(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({})",
            names.join(", ")
        ),
    );
    let index_names = strings(
        &conn,
        &format!(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({})",
            names.join(", ")
        ),
    );
    for name in &index_names {
        conn.execute_batch(&format!("DROP INDEX {name}")).unwrap();
    }
    let statements: Vec<String> = copies
        .iter()
        .map(|(table, columns, _)| {
            let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
            format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                columns.join(", "),
                marks.join(", ")
            )
        })
        .collect();
    let batch = 100_000;
    let mut n = 1;
    while n < count {
        let tx = conn.transaction().unwrap();
        {
            let mut prepared: Vec<_> = statements
                .iter()
                .map(|s| tx.prepare_cached(s).unwrap())
                .collect();
            for i in n..(n + batch).min(count) {
                let id = population_id(i);
                let bookmark = population_bookmark(&template_bookmark, i, 0);
                let hash = stimulus_hash("tick", Some(&json!(id)), None).unwrap();
                for (stmt, (table, columns, rows)) in prepared.iter_mut().zip(&copies) {
                    for row in rows {
                        let values = row.iter().zip(columns).map(|(value, column)| {
                            match (column.as_str(), value) {
                                ("instance_id", _) => Sql::Text(id.clone()),
                                ("hash", _) if table == "wf_bookmarks" => Sql::Text(hash.clone()),
                                (_, Sql::Text(text)) => Sql::Text(
                                    text.replace(TEMPLATE, &id)
                                        .replace(&template_bookmark, &bookmark),
                                ),
                                (_, other) => other.clone(),
                            }
                        });
                        stmt.execute(rusqlite::params_from_iter(values)).unwrap();
                    }
                }
            }
        }
        tx.commit().unwrap();
        n += batch;
    }
    for sql in &indexes {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    started.elapsed().as_secs_f64()
}

/// Child process: `count` suspended instances in `path` (created by `populate`), then
/// `reps` x `sends` sends to random ones. Prints the rows as JSON on stdout.
fn child_routing(path: &Path, count: u64, reps: usize, sends: usize) {
    let rt = tokio_rt();
    let runtime = sqlite_runtime(open_sqlite(path, Synchronous::Normal));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ count);
    let (mut p50, mut p99, mut rss) = (vec![], vec![], vec![]);
    let mut ticks = std::collections::HashMap::<u64, u64>::new();
    for _ in 0..reps {
        let mut latencies = Vec::with_capacity(sends);
        for _ in 0..sends {
            let n = rng.below(count);
            let key = population_id(n);
            let start = Instant::now();
            let report = rt
                .block_on(runtime.send(Stimulus::new("tick").key(&key)))
                .unwrap();
            latencies.push(start.elapsed().as_secs_f64() * 1e6);
            assert_eq!(report.resumed.len(), 1, "{key} resumed");
            *ticks.entry(n).or_default() += 1;
        }
        latencies.sort_by(f64::total_cmp);
        p50.push(percentile(&latencies, 0.50));
        p99.push(percentile(&latencies, 0.99));
        rss.push(rss_mib());
    }
    // The sends were real transitions of the chosen instances.
    for (n, count) in ticks.iter().take(20) {
        let snapshot = rt
            .block_on(runtime.get_state(&population_id(*n)))
            .unwrap()
            .unwrap();
        assert_eq!(snapshot.data::<Counter>().unwrap().count, *count);
    }
    let label = human(count);
    let rows = vec![
        Row::new(
            "routing",
            format!("send -> bookmark resumed + committed, {label} suspended, p50"),
            "µs",
            p50,
        ),
        Row::new(
            "routing",
            format!("send -> bookmark resumed + committed, {label} suspended, p99"),
            "µs",
            p99,
        ),
        Row::new(
            "routing",
            format!("process RSS with {label} suspended (after the sends)"),
            "MiB",
            rss,
        ),
    ];
    println!("{}", serde_json::to_string(&rows).unwrap());
}

/// Child process: opening the file, building the runtime and `recover()`, `reps` times.
fn child_recover(path: &Path, count: u64, reps: usize) {
    let rt = tokio_rt();
    let (mut total, mut recover) = (vec![], vec![]);
    for _ in 0..reps {
        let start = Instant::now();
        let runtime = sqlite_runtime(open_sqlite(path, Synchronous::Normal));
        let built = Instant::now();
        let report = rt.block_on(runtime.recover()).unwrap();
        let end = Instant::now();
        assert!(report.failed.is_empty());
        total.push((end - start).as_secs_f64() * 1e3);
        recover.push((end - built).as_secs_f64() * 1e3);
        rt.block_on(runtime.shutdown(Duration::from_secs(1)));
    }
    let label = human(count);
    let rows = vec![
        Row::new(
            "start-up",
            format!("open + build + recover(), {label} suspended"),
            "ms",
            total,
        )
        .note("target < 1000 ms"),
        Row::new(
            "start-up",
            format!("of which recover(), {label} suspended"),
            "ms",
            recover,
        ),
    ];
    println!("{}", serde_json::to_string(&rows).unwrap());
}

fn human(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// Runs this binary again as `--child <args>` and reads the rows it prints.
fn in_child(args: &[String]) -> Vec<Row> {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .arg("--child")
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "child {args:?} failed");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap()
}

fn routing_rows(dir: &Path, sizes: &[u64], reps: usize, sends: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut p50s = Vec::new();
    for &count in sizes {
        let path = fresh(dir, &format!("routing-{count}.db"));
        let secs = populate(&path, count);
        eprintln!(
            "table: {} suspended instances written in {secs:.1} s",
            human(count)
        );
        let mut child = in_child(&[
            "routing".into(),
            path.display().to_string(),
            count.to_string(),
            reps.to_string(),
            sends.to_string(),
        ]);
        p50s.push(child[0].median());
        fresh(dir, &format!("routing-{count}.db"));
        rows.append(&mut child);
    }
    if let (Some(first), Some(last)) = (p50s.first(), p50s.last())
        && p50s.len() > 1
    {
        let ratio = last / first;
        let n = rows.len();
        let idx = n - 3;
        let note = format!("{ratio:.2}x the first (target <= 2x)");
        rows[idx].note = note;
    }
    rows
}

fn recover_rows(dir: &Path, count: u64, reps: usize) -> Vec<Row> {
    let path = fresh(dir, "recover.db");
    let secs = populate(&path, count);
    eprintln!(
        "table: {} suspended instances written in {secs:.1} s",
        human(count)
    );
    let rows = in_child(&[
        "recover".into(),
        path.display().to_string(),
        count.to_string(),
        reps.to_string(),
    ]);
    fresh(dir, "recover.db");
    rows
}

// ---------------------------------------------------------------------------------------------
// Timers

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Wait {
    until_ms: u64,
    fired_ms: Option<u64>,
}

async fn timer_round(runtime: &Runtime, count: u64) -> (f64, f64) {
    let base = wall_ms() + 500;
    let mut ids = Vec::new();
    for i in 0..count {
        // Due between 500 ms and 1.5 s from now, spread evenly, started in shuffled order.
        let offset = (i * 7919) % count * 1000 / count;
        let data = Wait {
            until_ms: base + offset,
            fired_ms: None,
        };
        let started = runtime
            .start_by_name(
                "Lateness",
                serde_json::to_value(data).unwrap(),
                StartOptions::default(),
            )
            .await
            .unwrap();
        ids.push(started.instance_id);
    }
    // All fired first: reading and purging meanwhile would compete with the driver.
    for id in &ids {
        runtime
            .await_completion(id, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let mut lateness = Vec::new();
    for id in &ids {
        let data: Wait = runtime
            .get_state(id)
            .await
            .unwrap()
            .unwrap()
            .data()
            .unwrap();
        lateness.push(data.fired_ms.unwrap().saturating_sub(data.until_ms) as f64);
        runtime.purge(id).await.unwrap();
    }
    lateness.sort_by(f64::total_cmp);
    (percentile(&lateness, 0.5), percentile(&lateness, 0.99))
}

fn timer_rows(reps: usize, count: u64) -> Vec<Row> {
    let definition: Definition = serde_json::from_value(json!({
        "name": "Lateness",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "delay", "id": "wait", "until": "until" },
            { "kind": "task", "id": "mark", "function": "mark" }
        ] }
    }))
    .unwrap();
    let registry = Registry::new().value("until", |w: &Wait| w.until_ms).task(
        "mark",
        |cx: &mut TaskContext<Wait>| {
            Box::pin(async move {
                cx.data_mut().fired_ms = Some(wall_ms());
                Ok(Outcome::done())
            })
        },
    );
    let rt = tokio_rt();
    let _guard = rt.enter();
    let runtime = Runtime::builder()
        .register_definition(definition, registry)
        .sweep_interval(None)
        .build()
        .unwrap();
    let (mut p50, mut p99) = (vec![], vec![]);
    for _ in 0..reps {
        let (a, b) = rt.block_on(timer_round(&runtime, count));
        p50.push(a);
        p99.push(b);
    }
    let label = human(count);
    vec![
        Row::new(
            "timers",
            format!("lateness over {label} timers, p50"),
            "ms",
            p50,
        ),
        Row::new(
            "timers",
            format!("lateness over {label} timers, p99"),
            "ms",
            p99,
        )
        .note("target <= 5 ms"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Macro cost

const STATES: usize = 50;
const TRANSITIONS_PER_STATE: usize = 4;

fn macro_source(with_machine: bool) -> String {
    let mut src = String::from(
        "//! Generated by the `table` bench.\n\
         #![allow(missing_docs, dead_code)]\n\
         use workflow_runtime::TaskContext;\n\
         #[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]\n\
         pub struct Data { pub id: String, pub n: u64 }\n\
         pub async fn step(ctx: &mut TaskContext<Data>) { ctx.data_mut().n += 1; }\n\
         pub fn touch(d: &mut Data) -> u64 { d.n += 1; d.n }\n",
    );
    if with_machine {
        src.push_str(
            "#[workflow_runtime::state_machine(data = Data, initial = S0)]\npub enum Big {\n",
        );
        for s in 0..STATES {
            for (j, step) in [1, 2, 7, 13]
                .into_iter()
                .take(TRANSITIONS_PER_STATE)
                .enumerate()
            {
                let target = (s + step) % STATES;
                let action = if j == 0 { ", action = step" } else { "" };
                src.push_str(&format!(
                    "    #[on(t{s}_{j}: event(\"e{s}_{j}\").key(id) => S{target}{action})]\n"
                ));
            }
            src.push_str(&format!("    S{s},\n"));
        }
        src.push_str("}\n");
    }
    src
}

fn macro_rows(dir: &Path, reps: usize) -> Vec<Row> {
    let crate_dir = dir.join("macro-crate");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    let runtime_dir = env!("CARGO_MANIFEST_DIR");
    let workspace = Path::new(runtime_dir).parent().unwrap();
    std::fs::write(
        crate_dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"table-macro-cost\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\n\
             workflow-runtime = {{ path = {runtime_dir:?}, default-features = false, features = [\"macros\"] }}\n\
             serde = {{ version = \"1\", features = [\"derive\"] }}\n\n\
             [workspace]\n"
        ),
    )
    .unwrap();
    // The workspace's lock file: the same dependency versions as the workspace builds.
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    let target = workspace.join("target").join("table-macro");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let build = |with_machine: bool| -> f64 {
        std::fs::write(crate_dir.join("src/lib.rs"), macro_source(with_machine)).unwrap();
        let start = Instant::now();
        let status = Command::new(&cargo)
            .args(["build", "-q", "--offline", "--lib"])
            .current_dir(&crate_dir)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_INCREMENTAL", "0")
            .env_remove("RUSTFLAGS")
            .status()
            .unwrap();
        assert!(status.success(), "cargo build of the generated crate");
        start.elapsed().as_secs_f64()
    };
    let warm = build(false);
    eprintln!("table: macro crate dependencies built in {warm:.1} s (not counted)");
    let (mut without, mut with) = (vec![], vec![]);
    for _ in 0..reps {
        with.push(build(true));
        without.push(build(false));
    }
    let diffs: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a - b).collect();
    vec![
        Row::new(
            "macro",
            "cargo build, crate without the machine",
            "s",
            without,
        ),
        Row::new(
            "macro",
            format!(
                "cargo build, same crate + {STATES}-state, {}-transition machine",
                STATES * TRANSITIONS_PER_STATE
            ),
            "s",
            with,
        ),
        Row::new("macro", "difference (per repetition)", "s", diffs).note("target < 1 s"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Flow-control queues

/// Mean µs per start of `W` to its end, `iterations` of them one after the other on `runtime`
/// (after a tenth as many to warm up).
async fn start_us<W: workflow_runtime::Workflow<Data = flow::Count>>(
    runtime: &Runtime,
    iterations: u32,
) -> f64 {
    flow::starts::<W>(runtime, iterations / 10).await;
    let started = Instant::now();
    flow::starts::<W>(runtime, iterations).await;
    started.elapsed().as_secs_f64() * 1e6 / f64::from(iterations)
}

/// A one-task workflow through an uncontended queue against the same task without one (memory
/// and SQLite), and the start rate of 3,000 tasks on a queue of 1,000 starts a second.
fn queue_rows(dir: &Path, reps: usize, iters: u32) -> Vec<Row> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sqlite_iters = (iters / 10).max(50);
    let (mut mem, mut mem_q, mut lite, mut lite_q, mut rate) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut lite_tx, mut lite_q_tx) = (vec![], vec![]);
    for rep in 0..reps {
        let memory = Runtime::builder()
            .register::<Task1>()
            .register::<Task1Queued>()
            .sweep_interval(None)
            .timer_driver(false)
            .build()
            .unwrap();
        mem.push(rt.block_on(start_us::<Task1>(&memory, iters)));
        mem_q.push(rt.block_on(start_us::<Task1Queued>(&memory, iters)));
        let store: Storage = Arc::new(SqliteStore::open(fresh(dir, "queues.db")).unwrap()).into();
        let sqlite = Runtime::builder()
            .store(store.clone())
            .register::<Task1>()
            .register::<Task1Queued>()
            .sweep_interval(None)
            .timer_driver(false)
            .build()
            .unwrap();
        // Each timed with its write transactions per start (warm-up included), in turn first
        // (the file grows as it goes).
        let with_tx = |queued: bool| {
            let before = rt.block_on(store.stats()).unwrap().transactions;
            let us = if queued {
                rt.block_on(start_us::<Task1Queued>(&sqlite, sqlite_iters))
            } else {
                rt.block_on(start_us::<Task1>(&sqlite, sqlite_iters))
            };
            let after = rt.block_on(store.stats()).unwrap().transactions;
            let starts = f64::from(sqlite_iters + sqlite_iters / 10);
            (us, (after - before) as f64 / starts)
        };
        let order = if rep % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for queued in order {
            let (us, tx) = with_tx(queued);
            if queued {
                lite_q.push(us);
                lite_q_tx.push(tx);
            } else {
                lite.push(us);
                lite_tx.push(tx);
            }
        }
        // 3,000 at once: 1,000 start at once, then the window lets 1,000 more a second. The
        // rate is the starts after the first window over the time they took.
        rate.push(flow::rated_burst(&rt).steady());
    }
    let ratio = |with: &[f64], without: &[f64]| {
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        format!(
            "{:.2}x the row above; target <= 1.2x",
            median(with) / median(without)
        )
    };
    let mem_note = ratio(&mem_q, &mem);
    let lite_note = ratio(&lite_q, &lite);
    vec![
        Row::new(
            "queues",
            "memory: 1-task workflow, no queue (start)",
            "µs",
            mem,
        ),
        Row::new(
            "queues",
            "memory: same task in an uncontended queue",
            "µs",
            mem_q,
        )
        .note(mem_note),
        Row::new(
            "queues",
            "SQLite: 1-task workflow, no queue (start)",
            "µs",
            lite,
        ),
        Row::new(
            "queues",
            "SQLite: same task in an uncontended queue",
            "µs",
            lite_q,
        )
        .note(lite_note),
        Row::new(
            "queues",
            "SQLite: write transactions per start, no queue",
            "tx",
            lite_tx,
        ),
        Row::new(
            "queues",
            "SQLite: write transactions per start, uncontended queue",
            "tx",
            lite_q_tx,
        ),
        Row::new(
            "queues",
            "memory: starts/s of 3,000 tasks at a 1,000/s rate limit (steady)",
            "/s",
            rate,
        )
        .note("starts 1,001-3,000 over their span; target within 2% of 1,000/s"),
    ]
}

/// A queue 3 processes contend for: 5 slots.
const CONTENDED: workflow_runtime::Queue = workflow_runtime::Queue::new("contended").concurrency(5);

/// How long a task of [`Contended`] holds its slot.
const HOLD: Duration = Duration::from_millis(5);

fn wall_us() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// How long each attempt of `held` waited, µs: from the end of the task before it to its
/// own start.
fn slot_waits() -> &'static std::sync::Mutex<Vec<u64>> {
    static WAITS: std::sync::OnceLock<std::sync::Mutex<Vec<u64>>> = std::sync::OnceLock::new();
    WAITS.get_or_init(Default::default)
}

async fn mark(cx: &mut TaskContext<Counter>) {
    cx.data_mut().count = wall_us();
}

async fn held(cx: &mut TaskContext<Counter>) {
    let waited = wall_us().saturating_sub(cx.data().count);
    slot_waits().lock().unwrap().push(waited);
    tokio::time::sleep(HOLD).await;
}

workflow! {
    pub workflow Contended(Counter) = sequence [task(mark), task(held).queue(CONTENDED)];
}

/// A child process of the slot latency rows: `workers` loops starting [`Contended`] one after
/// the other, `tasks` in all, from the wall-clock instant `at_ms` on (so the processes
/// contend from the same moment); prints each wait (µs), one a line.
fn child_pg_slots(url: &str, schema: &str, workers: usize, tasks: usize, at_ms: u64) {
    use workflow_runtime::store::{PostgresOptions, PostgresStore};
    let rt = tokio_rt();
    rt.block_on(async {
        let options = PostgresOptions {
            max_connections: u32::try_from(workers).unwrap() + 4,
            ..PostgresOptions::default().schema(schema)
        };
        let store = PostgresStore::connect_with(url, &options).await.unwrap();
        let runtime = Runtime::builder()
            .store(Arc::new(store))
            .register::<Contended>()
            .build()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(at_ms.saturating_sub(wall_ms()))).await;
        let loops: Vec<_> = (0..workers)
            .map(|w| {
                let runtime = runtime.clone();
                let mine = tasks / workers + usize::from(w < tasks % workers);
                tokio::spawn(async move {
                    for _ in 0..mine {
                        let done = runtime
                            .start::<Contended>(Counter::default())
                            .await
                            .unwrap();
                        // A start whose task waits for a slot returns with its instance
                        // suspended (QU-11): the loop's next start follows its end.
                        if done.status != WorkflowStatus::Finished {
                            runtime
                                .await_completion(&done.instance_id, Duration::from_secs(120))
                                .await
                                .unwrap();
                        }
                    }
                })
            })
            .collect();
        for one in loops {
            one.await.unwrap();
        }
    });
    for waited in slot_waits().lock().unwrap().iter() {
        println!("{waited}");
    }
}

/// The waits (µs) of `processes` children of `workers` loops each, `tasks` per child, on a
/// fresh schema.
fn pg_slot_waits(url: &str, processes: usize, workers: usize, tasks: usize) -> Vec<f64> {
    use workflow_runtime::store::conformance::postgres::{SchemaGuard, fresh_schema_name};
    use workflow_runtime::store::{PostgresOptions, PostgresStore};
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(url.to_owned(), schema.clone());
    // Migrate once, so the children do not all wait on the advisory lock.
    drop(tokio_rt().block_on(async {
        PostgresStore::connect_with(url, &PostgresOptions::default().schema(schema.clone()))
            .await
            .unwrap()
    }));
    let exe = std::env::current_exe().unwrap();
    let at = (wall_ms() + 3_000).to_string();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--child",
                    "pg-slots",
                    url,
                    &schema,
                    &workers.to_string(),
                    &tasks.to_string(),
                    &at,
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut waits = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a benchmark child failed");
        waits.extend(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| l.trim().parse::<f64>().unwrap()),
        );
    }
    assert_eq!(
        waits.len(),
        processes * tasks,
        "a task did not report its wait"
    );
    waits
}

/// Slot acquisition latency on PostgreSQL: 3 processes of 4 loops each on a queue of 5
/// slots held 5 ms (12 tasks for 5 slots), against 1 process of 1 loop (no wait for a slot);
/// p50 and p99 per repetition, ms.
fn pg_slot_rows(reps: usize, tasks: usize) -> Vec<Row> {
    use workflow_runtime::store::conformance::postgres::database_url;
    let url = database_url();
    if let Err(e) = tokio_rt().block_on(async {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await
    }) {
        eprintln!("table: PostgreSQL slot rows skipped: no server reachable at {url}: {e}");
        return Vec::new();
    }
    let (mut p50, mut p99, mut alone50, mut alone99) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let ms = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (percentile(&v, 0.5) / 1e3, percentile(&v, 0.99) / 1e3)
        };
        let (a, b) = ms(pg_slot_waits(&url, 3, 4, tasks));
        p50.push(a);
        p99.push(b);
        let (a, b) = ms(pg_slot_waits(&url, 1, 1, tasks / 2));
        alone50.push(a);
        alone99.push(b);
    }
    let what = "PostgreSQL: queue of 5, 5 ms tasks";
    vec![
        Row::new(
            "queues",
            format!("{what}, 3 processes x 4 loops: slot wait p50"),
            "ms",
            p50,
        ),
        Row::new(
            "queues",
            format!("{what}, 3 processes x 4 loops: slot wait p99"),
            "ms",
            p99,
        ),
        Row::new(
            "queues",
            format!("{what}, 1 process x 1 loop (floor): p50"),
            "ms",
            alone50,
        ),
        Row::new(
            "queues",
            format!("{what}, 1 process x 1 loop (floor): p99"),
            "ms",
            alone99,
        ),
    ]
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(pos) = args.iter().position(|a| a == "--child") {
        let rest = &args[pos + 1..];
        if rest[0] == "pg-slots" {
            child_pg_slots(
                &rest[1],
                &rest[2],
                rest[3].parse().unwrap(),
                rest[4].parse().unwrap(),
                rest[5].parse().unwrap(),
            );
            return;
        }
        if rest[0] == "pg-durable" {
            child_pg_durable(
                &rest[1],
                &rest[2],
                rest[3].parse().unwrap(),
                rest[4].parse().unwrap(),
            );
            return;
        }
        let path = PathBuf::from(&rest[1]);
        let count: u64 = rest[2].parse().unwrap();
        let reps: usize = rest[3].parse().unwrap();
        match rest[0].as_str() {
            "routing" => child_routing(&path, count, reps, rest[4].parse().unwrap()),
            "recover" => child_recover(&path, count, reps),
            other => panic!("unknown child {other}"),
        }
        return;
    }
    let started = Instant::now();
    let reps = env_or("TABLE_REPS", 5usize).max(1);
    let iters = env_or("TABLE_ITERS", 5000u32).max(10);
    let secs = env_or("TABLE_SECS", 1.0f64);
    let routing: Vec<u64> = std::env::var("TABLE_ROUTING")
        .unwrap_or_else(|_| "10000,1000000".to_owned())
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect();
    let sends = env_or("TABLE_ROUTING_SENDS", 500usize).max(1);
    let recover = env_or("TABLE_RECOVER", 100_000u64).max(1);
    let timers = env_or("TABLE_TIMERS", 1000u64).max(1);
    let only = std::env::var("TABLE_ONLY").unwrap_or_default();
    let wanted = |s: &str| only.is_empty() || only.split(',').any(|o| o.trim() == s);
    let temp = tempfile::tempdir().unwrap();
    let dir =
        std::env::var_os("TABLE_DIR").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();

    let mut rows = Vec::new();
    if wanted("memory") {
        eprintln!("table: in memory...");
        rows.extend(memory_rows(reps, iters));
    }
    if wanted("sqlite") {
        eprintln!("table: SQLite throughput...");
        rows.extend(sqlite_rows(&dir, reps, secs));
    }
    if wanted("postgres") {
        eprintln!("table: PostgreSQL throughput...");
        rows.extend(postgres_rows(reps, secs));
    }
    if wanted("routing") && !routing.is_empty() {
        eprintln!("table: routing...");
        rows.extend(routing_rows(&dir, &routing, reps, sends));
    }
    if wanted("recover") {
        eprintln!("table: start-up...");
        rows.extend(recover_rows(&dir, recover, reps));
    }
    if wanted("timers") {
        eprintln!("table: timers...");
        rows.extend(timer_rows(reps, timers));
    }
    if wanted("queues") {
        eprintln!("table: flow-control queues...");
        rows.extend(queue_rows(&dir, reps, iters));
        let slot_tasks = env_or("TABLE_PG_SLOTS", 200usize);
        if slot_tasks > 0 {
            rows.extend(pg_slot_rows(reps, slot_tasks));
        }
    }
    if wanted("macro") && env_or("TABLE_MACRO", 1u32) != 0 {
        eprintln!("table: macro cost...");
        rows.extend(macro_rows(&dir, reps));
    }
    print_table(&rows, reps);
    println!(
        "files in {}; {} in-memory iterations per repetition; {secs} s per SQLite row; {sends} sends per routing repetition.",
        dir.display(),
        iters
    );
    println!("whole run: {:.0} s", started.elapsed().as_secs_f64());
}
