//! The lease kept across transitions on PostgreSQL (ST-38), between processes: another
//! process's send to an instance this process holds is delivered within 2 s; three processes
//! sending to the same instances and killed with SIGKILL apply no transition twice and lose
//! none they acknowledged; and the instances whose leases a killed process kept are taken
//! over within the liveness bound (ST-36), not the 30 s TTL; a timer another process fires
//! while this one keeps the instance's lease resumes it within 5 s, not once its claim of the
//! timer expired (30 s). Each "process" other than the
//! killed children is a runtime with a store of its own (its own pool, origin and owner), as
//! another process holds one. Skipped, saying why, without a reachable server
//! (`WORKFLOW_PG_URL`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout,
    clippy::panic
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use workflow_runtime::store::conformance::postgres::{
    SchemaGuard, database_url, fresh_schema_name,
};
use workflow_runtime::store::{PostgresOptions, PostgresStore, Storage};
use workflow_runtime::{
    JournalLevel, Runtime, StartOptions, Stimulus, TaskContext, TaskError, state_machine,
};

/// The data of an instance: its key, and the ticks it took, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tally {
    id: String,
    seen: Vec<String>,
}

/// A tick's payload: its unique name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tick {
    n: String,
}

async fn note(ctx: &mut TaskContext<Tally>) -> Result<(), TaskError> {
    let tick: Tick = ctx.payload()?;
    ctx.data_mut().seen.push(tick.n);
    Ok(())
}

/// Waits for `tick` keyed by its id, for ever, flipping between two states.
#[state_machine(data = Tally, initial = Even)]
pub enum Flip {
    /// An even number of ticks taken.
    #[on(tick: event::<Tick>("tick").key(id) => Odd, action = note)]
    Even,
    /// An odd number.
    #[on(tock: event::<Tick>("tick").key(id) => Even, action = note)]
    Odd,
}

/// Naps 300 ms once started, then ends.
#[state_machine(data = Tally, initial = Napping)]
pub enum Nap {
    /// Waits for its timer.
    #[on(after(Duration::from_millis(300)) => Woke)]
    Napping,
    /// Done.
    Woke,
}

async fn server() -> Option<PgConnection> {
    let url = database_url();
    match PgConnection::connect(&url).await {
        Ok(conn) => Some(conn),
        Err(error) => {
            eprintln!("skipped: no PostgreSQL server reachable at {url}: {error}");
            None
        }
    }
}

/// A store of its own on `schema`, as each process opens one.
async fn open(schema: &str) -> PostgresStore {
    PostgresStore::connect_with(&database_url(), &PostgresOptions::default().schema(schema))
        .await
        .unwrap()
}

/// A process: its own store on `schema`, the default lease TTL (30 s), a journal that keeps
/// every entry the tests count.
async fn process(schema: &str, owner: &str) -> Runtime {
    let store = open(schema).await;
    let runtime = Runtime::builder()
        .store(Arc::new(store))
        .owner(owner)
        .journal(JournalLevel::Activities, 1_000_000)
        .register::<Flip>()
        .build()
        .unwrap();
    runtime.run_background().unwrap();
    runtime
}

/// Whether a send delivered its tick, or queued it for the instance (kept for a busy one, or
/// put in the inbox).
fn accepted(report: &workflow_runtime::SendReport) -> bool {
    report.resumed.len() + report.deferred.len() == 1 || report.inbox_item.is_some()
}

/// How a send that was accepted took its tick: `resumed` or `queued`.
fn how(report: &workflow_runtime::SendReport) -> &'static str {
    if report.resumed.is_empty() {
        "queued"
    } else {
        "resumed"
    }
}

fn tick(key: &str, n: &str) -> Stimulus {
    Stimulus::new("tick")
        .key(key)
        .payload(Tick { n: n.to_owned() })
}

async fn start(runtime: &Runtime, key: &str) {
    let options = StartOptions {
        instance_id: Some(key.to_owned()),
        ..StartOptions::default()
    };
    let data = Tally {
        id: key.to_owned(),
        seen: Vec::new(),
    };
    runtime.start_with::<Flip>(data, options).await.unwrap();
}

async fn seen(runtime: &Runtime, key: &str) -> Vec<String> {
    runtime
        .get_state(key)
        .await
        .unwrap()
        .unwrap()
        .data::<Tally>()
        .unwrap()
        .seen
}

/// The owner of an instance's live lease as its row says (`None`: free or expired).
async fn lease_owner(admin: &mut PgConnection, schema: &str, id: &str) -> Option<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    sqlx::query_scalar(&format!(
        "SELECT lease_owner FROM \"{schema}\".wf_instances
         WHERE instance_id = $1 AND lease_expires_at > $2"
    ))
    .bind(id)
    .bind(i64::try_from(now).unwrap())
    .fetch_optional(admin)
    .await
    .unwrap()
    .flatten()
}

/// Waits until `key` has taken the tick `n`, failing after `bound`; how long it took.
async fn delivered(runtime: &Runtime, key: &str, n: &str, since: Instant, bound: Duration) {
    loop {
        if seen(runtime, key).await.iter().any(|s| s == n) {
            return;
        }
        assert!(
            since.elapsed() < bound,
            "{n} was not delivered to {key} within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_send_to_an_instance_this_one_holds_is_delivered_within_2_s() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let holder = process(&schema, "holder").await;
    let other = process(&schema, "other").await;
    start(&holder, "k-1").await;
    let mut slowest = Duration::ZERO;
    let mut met_kept = 0;
    for round in 0..5 {
        // The holder's tick: the lease is then kept by whichever process applied it (the
        // holder, or the other one whose queue worker delivered it).
        let sent = Instant::now();
        let n = format!("h{round}");
        let report = holder.send(tick("k-1", &n)).await.unwrap();
        assert!(accepted(&report), "{report:?}");
        delivered(&holder, "k-1", &n, sent, Duration::from_secs(2)).await;
        if round == 0 {
            assert_eq!(
                lease_owner(&mut admin, &schema, "k-1").await.as_deref(),
                Some("holder"),
                "the holder keeps the lease after its transition"
            );
        }
        let kept_by_holder =
            lease_owner(&mut admin, &schema, "k-1").await.as_deref() == Some("holder");
        let sent = Instant::now();
        let n = format!("o{round}");
        let report = other.send(tick("k-1", &n)).await.unwrap();
        assert!(accepted(&report), "delivered or queued: {report:?}");
        if kept_by_holder && report.resumed.is_empty() {
            met_kept += 1;
        }
        delivered(&holder, "k-1", &n, sent, Duration::from_secs(2)).await;
        slowest = slowest.max(sent.elapsed());
    }
    assert!(
        met_kept > 0,
        "no send of the other process met the kept lease"
    );
    let all = seen(&holder, "k-1").await;
    let expected: Vec<String> = (0..5)
        .flat_map(|r| [format!("h{r}"), format!("o{r}")])
        .collect();
    assert_eq!(all, expected, "every tick once, in order");
    eprintln!(
        "kept lease: the other process's sends delivered within {slowest:?} ({met_kept} met the kept lease)"
    );
    holder.shutdown(Duration::from_secs(5)).await;
    other.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_another_process_fires_while_this_one_keeps_the_lease_resumes_within_5_s() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    // The holder fires no timer: it starts the instance and keeps its lease (ST-38).
    let store = open(&schema).await;
    let holder = Runtime::builder()
        .store(Arc::new(store))
        .owner("holder")
        .timer_driver(false)
        .register::<Nap>()
        .build()
        .unwrap();
    let store = open(&schema).await;
    let other = Runtime::builder()
        .store(Arc::new(store))
        .owner("other")
        .register::<Nap>()
        .build()
        .unwrap();
    other.run_background().unwrap();
    let started = Instant::now();
    let options = StartOptions {
        instance_id: Some("nap-1".to_owned()),
        ..StartOptions::default()
    };
    holder
        .start_with::<Nap>(Tally::default(), options)
        .await
        .unwrap();
    assert_eq!(
        lease_owner(&mut admin, &schema, "nap-1").await.as_deref(),
        Some("holder"),
        "the holder keeps the lease of the napping instance"
    );
    // The other process's timer driver fires the timer: its run meets the kept lease, which
    // the holder gives back when it hears it is wanted; the run is handed the instance then.
    let completion = other
        .await_completion("nap-1", Duration::from_secs(5))
        .await;
    assert!(
        completion.is_ok(),
        "the timer did not resume the instance within 5 s of its start: {completion:?}"
    );
    eprintln!(
        "kept lease: the other process's timer ended the instance {:?} after its start",
        started.elapsed()
    );
    holder.shutdown(Duration::from_secs(5)).await;
    other.shutdown(Duration::from_secs(5)).await;
}

/// The keys the sending children and the parent tick.
const KEYS: [&str; 4] = ["k-0", "k-1", "k-2", "k-3"];

/// A child: a process sending ticks named `<name>-<seq>` to the instances in turn, printing
/// `acked <key> <n> <how>` once each send returned (`resumed`: delivered; `queued`: kept for
/// the instance, busy in another process), until it is killed. Does nothing unless run by a
/// test below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_lease_child() {
    let (Ok(schema), Ok(name)) = (
        std::env::var("KEPT_LEASE_SCHEMA"),
        std::env::var("KEPT_LEASE_NAME"),
    ) else {
        return;
    };
    let runtime = process(&schema, &name).await;
    println!("ready");
    for seq in 0u64.. {
        let key = KEYS[usize::try_from(seq).unwrap() % KEYS.len()];
        let n = format!("{name}-{seq}");
        match runtime.send(tick(key, &n)).await {
            Ok(report) if accepted(&report) => {
                println!("acked {key} {n} {}", how(&report));
            }
            Ok(report) => panic!("{report:?}"),
            // Sends that fail are not acknowledged, and may or may not be applied.
            Err(error) => eprintln!("{n}: {error}"),
        }
    }
}

/// A tick a send acknowledged.
#[derive(Debug, Clone)]
struct Acked {
    key: String,
    n: String,
    /// Delivered by the send itself (else queued for the instance: delivered later, or, once
    /// the instance moved on to a wait created after the send, never: RT-30).
    resumed: bool,
}

/// Starts a child named `name` and collects what it acknowledged into `acked`; returns once
/// it is ready.
async fn child(schema: &str, name: &str, acked: &Arc<Mutex<Vec<Acked>>>) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kept_lease_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KEPT_LEASE_SCHEMA", schema)
        .env("KEPT_LEASE_NAME", name)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (ready, is_ready) = tokio::sync::oneshot::channel();
    let acked = Arc::clone(acked);
    std::thread::spawn(move || {
        let mut ready = Some(ready);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim_end().ends_with("ready") {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            } else if let Some(rest) = line.strip_prefix("acked ") {
                let mut words = rest.split(' ');
                let (Some(key), Some(n), Some(how)) = (words.next(), words.next(), words.next())
                else {
                    continue;
                };
                acked.lock().unwrap().push(Acked {
                    key: key.to_owned(),
                    n: n.to_owned(),
                    resumed: how == "resumed",
                });
            }
        }
    });
    if tokio::time::timeout(Duration::from_secs(60), is_ready)
        .await
        .is_err()
    {
        let _ = child.kill();
        panic!("the child {name} did not get ready");
    }
    child
}

fn kill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_killed_mid_load_apply_no_transition_twice() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let parent = process(&schema, "parent").await;
    for key in KEYS {
        start(&parent, key).await;
    }
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut children = Vec::new();
    for name in ["child-a", "child-b", "child-c"] {
        children.push(child(&schema, name, &acked).await);
    }
    // The parent sends too, while the children come and go.
    let mut parent_acked = Vec::new();
    let mut kept_seen = 0;
    let began = Instant::now();
    let mut seq = 0usize;
    let mut killed = 0;
    while killed < children.len() {
        let key = KEYS[seq % KEYS.len()];
        let n = format!("parent-{seq}");
        let report = parent.send(tick(key, &n)).await.unwrap();
        assert!(accepted(&report), "{report:?}");
        parent_acked.push(Acked {
            key: key.to_owned(),
            n,
            resumed: !report.resumed.is_empty(),
        });
        seq += 1;
        for key in KEYS {
            let owner = lease_owner(&mut admin, &schema, key).await;
            if owner.is_some_and(|owner| owner.starts_with("child-")) {
                kept_seen += 1;
            }
        }
        if began.elapsed() > Duration::from_millis(1500 * (killed as u64 + 1)) {
            kill(&mut children[killed]);
            killed += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The parent takes the killed children's leases over (ST-36) and delivers what it can of
    // what they left queued: then the instances stop moving.
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    let settled = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut now = BTreeMap::new();
        for key in KEYS {
            now.insert(key, seen(&parent, key).await.len());
        }
        if now == last {
            break;
        }
        assert!(
            settled.elapsed() < Duration::from_secs(20),
            "the instances still move 20 s after the last kill"
        );
        last = now;
    }
    for key in KEYS {
        assert_eq!(
            lease_owner(&mut admin, &schema, key)
                .await
                .filter(|o| o.starts_with("child-")),
            None,
            "{key}: a killed child's lease is still held"
        );
    }
    let acked: Vec<Acked> = acked
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .chain(parent_acked)
        .collect();
    let store = Storage::new(Arc::new(
        PostgresStore::connect_with(&database_url(), &PostgresOptions::default().schema(&schema))
            .await
            .unwrap(),
    ));
    let mut taken = BTreeMap::new();
    for key in KEYS {
        let seen = seen(&parent, key).await;
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(
            unique.len(),
            seen.len(),
            "{key}: a tick applied twice: {seen:?}"
        );
        // The journal: one resumed wait per tick the data holds.
        let journal = store.read_journal(key, 0, 1_000_000).await.unwrap();
        let consumed = journal
            .iter()
            .filter(|entry| entry.kind == "BookmarkResumed")
            .count();
        let kinds: BTreeSet<&str> = journal.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            consumed,
            seen.len(),
            "{key}: journal and data disagree: {kinds:?}"
        );
        taken.insert(key, seen);
    }
    let mut queued_taken = 0;
    for tick in &acked {
        let applied = taken[tick.key.as_str()].contains(&tick.n);
        assert!(
            applied || !tick.resumed,
            "{}, delivered to {} by its send, was lost",
            tick.n,
            tick.key
        );
        queued_taken += usize::from(applied && !tick.resumed);
    }
    let by_children = acked.iter().filter(|t| t.n.starts_with("child-")).count();
    let total: usize = taken.values().map(Vec::len).sum();
    eprintln!(
        "kept lease: {total} ticks applied once each; {} acknowledged ({by_children} by the killed children, {queued_taken} of the queued ones applied later); a child kept a lease in {kept_seen} samples",
        acked.len()
    );
    assert!(by_children > 0, "the children sent nothing");
    assert!(kept_seen > 0, "no child was seen keeping a lease");
    parent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_kept_leases_are_taken_over_within_the_liveness_bound() {
    let Some(mut admin) = server().await else {
        return;
    };
    let schema = fresh_schema_name();
    let _guard = SchemaGuard::new(database_url(), schema.clone());
    let survivor = process(&schema, "survivor").await;
    for key in KEYS {
        start(&survivor, key).await;
    }
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut holder = child(&schema, "child-holder", &acked).await;
    // Wait until the child keeps the leases of at least two instances, then kill it at once.
    let waited = Instant::now();
    let kept = loop {
        let mut kept = Vec::new();
        for key in KEYS {
            if lease_owner(&mut admin, &schema, key).await.as_deref() == Some("child-holder") {
                kept.push(key);
            }
        }
        if kept.len() >= 2 {
            break kept;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the child never kept two leases"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    kill(&mut holder);
    let killed = Instant::now();
    for (i, key) in kept.iter().enumerate() {
        let n = format!("after-{i}");
        let report = survivor.send(tick(key, &n)).await.unwrap();
        assert!(accepted(&report), "{report:?}");
        delivered(&survivor, key, &n, killed, Duration::from_secs(3)).await;
    }
    eprintln!(
        "kept lease: {} kept leases of a killed process taken over {:?} after the SIGKILL",
        kept.len(),
        killed.elapsed()
    );
    survivor.shutdown(Duration::from_secs(5)).await;
}
