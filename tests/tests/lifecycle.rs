//! The runtime's lifecycle on real SQLite files: a process killed with SIGKILL mid-task is
//! finished by the next one with no call beyond building the runtime (ENG-25, ENG-26,
//! ST-14); a task longer than the lease TTL keeps its lease by renewal while another runtime
//! sends to its instance (ST-14, ENG-36); starts racing the recovery sweep all succeed; and
//! after `shutdown` and drop the file reopens at once (ST-26).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{InstanceStatus, LeaseKey, SqliteStore, Storage};
use workflow_runtime::{
    Clock, CommitStrategy, Completion, Runtime, StartOptions, Stimulus, TaskContext,
    WorkflowStatus, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    done: Vec<u32>,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

fn sqlite(path: &Path) -> Storage {
    Arc::new(SqliteStore::open(path).unwrap()).into()
}

fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

// ---- SIGKILL mid-task, restart at once ---------------------------------------------------

const CHILD_DB: &str = "LIFECYCLE_CHILD_DB";
const CHILD_ROLE: &str = "LIFECYCLE_CHILD_ROLE";

async fn first_step(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(1);
}

/// Stalls in the first process (which is killed meanwhile); quick in the next one.
async fn long_step(ctx: &mut TaskContext<Job>) {
    let stall = std::env::var(CHILD_ROLE).is_ok_and(|role| role == "start");
    let pause = if stall { 60_000 } else { 100 };
    tokio::time::sleep(Duration::from_millis(pause)).await;
    ctx.data_mut().done.push(2);
}

async fn last_step(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(3);
}

workflow! {
    pub workflow Killed(Job) = sequence [task(first_step), task(long_step), task(last_step)];
}

/// The runtime of both child processes: the default lease settings (30 s TTL).
fn killed_runtime(path: &Path) -> Runtime {
    Runtime::builder()
        .store(sqlite(path))
        .register::<Killed>()
        .commit_strategy(CommitStrategy::BeforeEachActivity)
        .build()
        .unwrap()
}

/// The child processes: `start` starts the instance and stalls in its second task until it
/// is killed; `restart` only builds the runtime and waits. A no-op in a normal test run.
#[test]
fn lifecycle_child_process() {
    let Some(path) = std::env::var_os(CHILD_DB).map(PathBuf::from) else {
        return;
    };
    let role = std::env::var(CHILD_ROLE).unwrap_or_default();
    block_on(async move {
        let runtime = killed_runtime(&path);
        if role == "start" {
            let _ = runtime
                .start_with::<Killed>(Job::default(), with_id("killed-1"))
                .await;
        }
        // Nothing else: the background work of the runtime does the rest.
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
}

fn child(path: &Path, role: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["lifecycle_child_process", "--exact", "--nocapture"])
        .env(CHILD_DB, path)
        .env(CHILD_ROLE, role)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The instance as the file holds it now, read while another process owns the file.
fn peek(path: &Path) -> Option<(InstanceStatus, Job)> {
    let store = Storage::new(Arc::new(SqliteStore::open_read_only(path).ok()?));
    block_on(async {
        let record = store.load_instance("killed-1").await.ok()?;
        let job = serde_json::from_value(record.state["data"].clone()).ok()?;
        Some((record.status, job))
    })
}

#[test]
fn an_instance_killed_mid_task_finishes_after_an_immediate_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let mut first = child(&path, "start");
    let deadline = Instant::now() + Duration::from_secs(30);
    // Wait until the second task runs (the first one's step is committed).
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if peek(&path).is_some_and(|(_, job)| job.done == [1]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first process made no progress"
        );
    }
    std::thread::sleep(Duration::from_millis(100));
    first.kill().unwrap(); // SIGKILL on Unix
    first.wait().unwrap();
    let (status, _) = peek(&path).unwrap();
    assert_eq!(status, InstanceStatus::Running, "killed mid-task");

    // Restarted at once: its lease (30 s) is still live, but the file has one owner at a
    // time, so the new one takes it over and its recovery sweep runs the instance.
    let restarted_at = Instant::now();
    let mut second = child(&path, "restart");
    let finished = loop {
        std::thread::sleep(Duration::from_millis(50));
        if let Some((InstanceStatus::Finished, job)) = peek(&path) {
            break Some(job);
        }
        if restarted_at.elapsed() > Duration::from_secs(30 + 5) {
            break None;
        }
    };
    let elapsed = restarted_at.elapsed();
    second.kill().unwrap();
    second.wait().unwrap();
    let job = finished.expect("the interrupted instance never finished");
    assert_eq!(
        job.done,
        [1, 2, 3],
        "each step once, the committed one kept"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "took {elapsed:?}: the dead owner's lease was not taken over at open"
    );
}

// ---- a task longer than the lease TTL, while another runtime sends -----------------------

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST_RUNNING: AtomicUsize = AtomicUsize::new(0);
static RUNS: AtomicUsize = AtomicUsize::new(0);

async fn long_task(ctx: &mut TaskContext<Job>) {
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_RUNNING.fetch_max(now, Ordering::SeqCst);
    RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    ctx.data_mut().done.push(1);
}

async fn long_task_again(ctx: &mut TaskContext<Job>) {
    long_task(ctx).await;
}

workflow! {
    pub workflow Renewed(Job) = sequence [
        event("tick"), task(long_task), event("tick"), task(long_task_again)
    ];
}

fn renewed_runtime(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register::<Renewed>()
        // Committed before each task: the store shows the instance `Running` meanwhile, as
        // the recovery sweep of another process looks for.
        .commit_strategy(CommitStrategy::BeforeEachActivity)
        .lease_ttl(Duration::from_millis(300))
        .lease_renewal(Duration::from_millis(100))
        .recovery_sweep(Some(Duration::from_millis(50)))
        .inbox_sweep(Duration::from_millis(200))
        .build()
        .unwrap()
}

#[test]
fn a_task_longer_than_the_lease_keeps_it_while_another_runtime_sends() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("renewed.db"));
    block_on(async {
        let a = renewed_runtime(&store);
        // Another process, in effect: its recovery sweep looks for expired leases every
        // 50 ms, and it sends the second tick while the first one's task runs.
        let b = renewed_runtime(&store);
        let id = a
            .start_with::<Renewed>(Job::default(), with_id("renewed-1"))
            .await
            .unwrap()
            .instance_id;
        let run = tokio::spawn({
            let a = a.clone();
            async move { a.send(Stimulus::new("tick")).await }
        });
        // Past the TTL: the lease lives only by renewal.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(RUNNING.load(Ordering::SeqCst), 1);
        let sent = b.send(Stimulus::new("tick").instance(&id)).await.unwrap();
        // Not run by B: queued for the busy instance (its next bookmark does not exist yet).
        assert!(sent.resumed.is_empty(), "the instance was busy: {sent:?}");
        assert!(
            sent.inbox_item.is_some() || sent.deferred == [id.clone()],
            "{sent:?}"
        );
        let report = run.await.unwrap().unwrap();
        assert_eq!(report.resumed.len(), 1, "{report:?}");
        let done = b.await_completion(&id, Duration::from_secs(10)).await;
        assert_eq!(
            done.unwrap(),
            Completion::Finished(serde_json::json!({ "done": [1, 1] })),
            "the second tick was delivered"
        );
        assert_eq!(RUNS.load(Ordering::SeqCst), 2, "each tick's task ran once");
        assert_eq!(MOST_RUNNING.load(Ordering::SeqCst), 1, "no overlap");
        a.shutdown(Duration::from_secs(1)).await;
        b.shutdown(Duration::from_secs(1)).await;
    });
}

// ---- starts racing the recovery sweep ----------------------------------------------------

async fn quick(ctx: &mut TaskContext<Job>) {
    tokio::task::yield_now().await;
    ctx.data_mut().done.push(1);
}

workflow! {
    pub workflow Quick(Job) = sequence [task(quick)];
}

/// 1,000 concurrent starts, half on each of two runtimes (two processes, in effect) on one
/// file, each with a recovery sweep every millisecond: a sweep hands a new instance back to
/// the start that created it, so every start succeeds.
#[test]
fn a_thousand_starts_racing_the_recovery_sweep_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("starts.db"));
    block_on(async {
        let build = || {
            Runtime::builder()
                .store(store.clone())
                .register::<Quick>()
                .recovery_sweep(Some(Duration::from_millis(1)))
                .build()
                .unwrap()
        };
        let runtimes = [build(), build()];
        let mut starts = tokio::task::JoinSet::new();
        for i in 0..1000 {
            let runtime = runtimes[i % 2].clone();
            starts.spawn(async move {
                runtime
                    .start_with::<Quick>(Job::default(), with_id(&format!("quick-{i}")))
                    .await
            });
        }
        let mut failed = Vec::new();
        while let Some(started) = starts.join_next().await {
            match started.unwrap() {
                Ok(started) => assert_eq!(started.status, WorkflowStatus::Finished),
                Err(error) => failed.push(error.to_string()),
            }
        }
        assert!(
            failed.is_empty(),
            "{} of 1000 failed: {:?}",
            failed.len(),
            failed.first()
        );
        for runtime in runtimes {
            runtime.shutdown(Duration::from_secs(1)).await;
        }
    });
}

// ---- reopening the file after shutdown ---------------------------------------------------

#[test]
fn the_file_reopens_at_once_after_shutdown_and_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reopen.db");
    block_on(async {
        let mut reopened = 0;
        for i in 0..100 {
            let runtime = Runtime::builder()
                .store(sqlite(&path))
                .register::<Quick>()
                .build()
                .unwrap();
            runtime
                .start_with::<Quick>(Job::default(), with_id(&format!("reopen-{i}")))
                .await
                .unwrap();
            runtime.shutdown(Duration::from_secs(1)).await;
            drop(runtime);
            match SqliteStore::open(&path) {
                Ok(_) => reopened += 1,
                Err(error) => eprintln!("reopen {i}: {error}"),
            }
        }
        assert_eq!(reopened, 100);
    });
}

// ---- background work that stays quiet and reliable ---------------------------------------

/// RT-27: a stimulus waiting in the queue for a bookmark that does not exist yet costs the
/// idle worker nothing: no pass is started by the hints of its own put-backs.
#[test]
fn an_early_stimulus_in_the_queue_does_not_make_the_idle_worker_spin() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("quiet.db"));
    block_on(async {
        let runtime = Runtime::builder()
            .store(store.clone())
            .register::<Quick>()
            .build()
            .unwrap();
        let early = runtime
            .send(Stimulus::new("not-yet").key("k-1"))
            .await
            .unwrap();
        assert!(early.inbox_item.is_some());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = store.stats().await.unwrap().transactions;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = store.stats().await.unwrap().transactions - before;
        assert!(idle <= 4, "{idle} write transactions in 1 s while idle");
        runtime.shutdown(Duration::from_secs(1)).await;
    });
}

async fn after_wait(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(1);
}

workflow! {
    pub workflow Waits(Job) = sequence [wait = after(millis(100)), task(after_wait)];
}

/// TM-5, TM-6: a due timer claimed by a process that died is fired by the fallback sweep
/// once the claim expired, even while hints keep waking the driver up.
#[test]
fn a_dead_process_timer_claim_fires_despite_a_stream_of_hints() {
    block_on(async {
        let runtime = Runtime::builder()
            .register::<Waits>()
            .timer_driver(false)
            .inbox_worker(false)
            .sweep_interval(Some(Duration::from_millis(300)))
            .build()
            .unwrap();
        let id = runtime
            .start::<Waits>(Job::default())
            .await
            .unwrap()
            .instance_id;
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The timer is due: a process claims it for 200 ms and dies.
        let now = workflow_runtime::SystemClock.now();
        let claimed = runtime
            .store()
            .claim_due_timers("dead-process", now, 200_000, 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert!(runtime.start_timer_driver());
        // A send every 50 ms: each queues a stimulus and hints the driver.
        let noise = tokio::spawn({
            let runtime = runtime.clone();
            async move {
                for i in 0.. {
                    let _ = runtime.send(Stimulus::new("noise").key(i)).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        let done = runtime.await_completion(&id, Duration::from_secs(3)).await;
        noise.abort();
        assert!(matches!(done, Ok(Completion::Finished(_))), "{done:?}");
    });
}

/// A fork: one branch waits for `paid`, the other fails for good, so the instance faults
/// with the wait still open.
const HALF_FAULTED: &str = r#"{
  "name": "HalfFaulted",
  "root": {
    "kind": "flowchart",
    "id": "root",
    "nodes": [
      { "kind": "fork", "id": "split", "branches": ["wait", "fail"] },
      { "kind": "event", "id": "paid", "event": "paid" },
      { "kind": "task", "id": "boom", "function": "boom" }
    ],
    "connections": [
      { "source": "split", "port": "wait", "target": "paid" },
      { "source": "split", "port": "fail", "target": "boom" }
    ]
  }
}"#;

/// RT-18, RT-27: a stimulus held for a Faulted instance waits in the queue until the
/// instance runs again, and costs the idle worker nothing meanwhile (no pass started by the
/// hints of its own put-backs, no expiry either).
#[test]
fn a_held_item_for_a_faulted_instance_does_not_make_the_idle_worker_spin() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("held.db"));
    block_on(async {
        let registry = workflow_runtime::Registry::<Job>::new().task("boom", |_cx| {
            Box::pin(async { Err(workflow_runtime::TaskError::permanent("boom")) })
        });
        let runtime = Runtime::builder()
            .store(store.clone())
            .register_json(HALF_FAULTED, registry)
            .build()
            .unwrap();
        let started = runtime
            .start_by_name(
                "HalfFaulted",
                serde_json::json!({"done": []}),
                StartOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Faulted);
        let held = runtime.send(Stimulus::new("paid")).await.unwrap();
        assert_eq!(
            held.deferred,
            std::slice::from_ref(&started.instance_id),
            "{held:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = store.stats().await.unwrap().transactions;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = store.stats().await.unwrap().transactions - before;
        // Only the periodic sweep (every 10 s) looks at the held item again.
        assert!(idle <= 4, "{idle} write transactions in 1 s while idle");
        let dead = runtime
            .dead_letters(workflow_runtime::store::DeadLetterFilter::all(10))
            .await
            .unwrap();
        assert!(dead.is_empty(), "the held item is kept: {dead:?}");
        runtime.shutdown(Duration::from_secs(1)).await;
    });
}

/// TM-6: a timer claim lasts as long as the runtime's lease TTL, not a fixed 30 s: a claim
/// whose resume failed (the instance was busy) is live for that TTL, then the timer fires.
#[test]
fn a_timer_claim_follows_the_lease_ttl() {
    block_on(async {
        let runtime = Runtime::builder()
            .register::<Waits>()
            .lease_ttl(Duration::from_millis(400))
            .lease_renewal(Duration::from_millis(100))
            .recovery_sweep(None)
            .timer_driver(false)
            .inbox_worker(false)
            .build()
            .unwrap();
        let id = runtime
            .start::<Waits>(Job::default())
            .await
            .unwrap()
            .instance_id;
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The timer is due, but another process holds the instance for a moment.
        let now = workflow_runtime::SystemClock.now();
        let lease = runtime
            .store()
            .acquire_lease(
                &LeaseKey::instance(id.as_str()),
                "another-process",
                now,
                // Longer than the firing waits for it (half the claim, TM-6).
                1_000_000,
            )
            .await
            .unwrap();
        let fired = runtime.fire_due_timers().await.unwrap();
        assert!(fired.fired.is_empty(), "{fired:?}");
        assert_eq!(fired.failed.len(), 1, "claimed, not fired: {fired:?}");
        runtime
            .store()
            .release_lease(&LeaseKey::instance(id.as_str()), lease.token)
            .await
            .unwrap();
        // The claim is live for the lease TTL: nothing to fire yet...
        let again = runtime.fire_due_timers().await.unwrap();
        assert!(
            again.fired.is_empty() && again.failed.is_empty(),
            "{again:?}"
        );
        // ...and expired after it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = runtime.fire_due_timers().await.unwrap();
        assert_eq!(later.fired.len(), 1, "{later:?}");
        let done = runtime.await_completion(&id, Duration::from_secs(2)).await;
        assert!(matches!(done, Ok(Completion::Finished(_))), "{done:?}");
    });
}

// ---- retention ---------------------------------------------------------------------------

workflow! {
    pub workflow PingPong(Job) = sequence [event("ping"), event("pong")];
}

/// ST-30: the background purge removes, past their ages, finished instances, receipts,
/// idempotency records and dead letters; a live instance stays.
#[test]
fn retention_purges_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("retention.db"));
    let ms = Duration::from_millis;
    block_on(async {
        let runtime = Runtime::builder()
            .store(store.clone())
            .register::<Quick>()
            .register::<PingPong>()
            .inbox_ttl(ms(1))
            .inbox_sweep(ms(50))
            .retention(workflow_runtime::Retention {
                finished: Some(ms(1)),
                receipts: ms(2),
                idempotency_records: ms(1),
                dead_letters: ms(1),
                every: Some(ms(100)),
            })
            .build()
            .unwrap();
        let done = runtime.start::<Quick>(Job::default()).await.unwrap();
        assert_eq!(done.status, WorkflowStatus::Finished);
        let live = runtime.start::<PingPong>(Job::default()).await.unwrap();
        // With an idempotency key, so its delivery writes a receipt (RT-19).
        let ping = runtime
            .send(
                Stimulus::new("ping")
                    .instance(&live.instance_id)
                    .idempotency_key("ping-1"),
            )
            .await
            .unwrap();
        assert!(
            store
                .has_receipt(&live.instance_id, &ping.stimulus_id)
                .await
                .unwrap()
        );
        // Matches nothing: queued, expires into the dead letters.
        let lost = runtime
            .send(Stimulus::new("nobody").idempotency_key("lost-1"))
            .await
            .unwrap();
        assert!(lost.inbox_item.is_some());
        // The purge runs every 100 ms; on a loaded machine a pass can come late, so wait
        // for everything it must remove (at most 20 s) rather than for a fixed time.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let finished_gone = runtime
                .get_state(&done.instance_id)
                .await
                .unwrap()
                .is_none();
            let receipt_gone = !store
                .has_receipt(&live.instance_id, &ping.stimulus_id)
                .await
                .unwrap();
            let record_gone = store
                .find_idempotency_record("lost-1")
                .await
                .unwrap()
                .is_none();
            let dead = runtime
                .dead_letters(workflow_runtime::store::DeadLetterFilter::all(10))
                .await
                .unwrap();
            // The unmatched stimulus must first expire out of the queue into the dead
            // letters, and then be purged from them.
            let queue_empty = store.census().await.unwrap().queued == Some(0);
            let purged =
                finished_gone && receipt_gone && record_gone && queue_empty && dead.is_empty();
            if purged || std::time::Instant::now() > deadline {
                assert!(finished_gone, "the finished instance was not purged");
                assert!(receipt_gone, "the receipt was not purged");
                assert!(record_gone, "the idempotency record was not purged");
                assert!(queue_empty, "the unmatched stimulus is still queued");
                assert!(dead.is_empty(), "{dead:?}");
                break;
            }
            tokio::time::sleep(ms(50)).await;
        }
        // The live instance stays.
        assert!(
            runtime
                .get_state(&live.instance_id)
                .await
                .unwrap()
                .is_some()
        );
        runtime.shutdown(Duration::from_secs(1)).await;
    });
}

/// ST-30: receipts kept shorter than a stimulus can wait and lie in the dead letters are
/// refused at build.
#[test]
fn a_receipt_retention_shorter_than_the_dead_letters_is_refused() {
    let built = Runtime::builder()
        .register::<Quick>()
        .retention(workflow_runtime::Retention {
            receipts: Duration::from_secs(3600),
            ..workflow_runtime::Retention::default()
        })
        .build();
    assert!(
        matches!(
            built,
            Err(workflow_runtime::BuildError::ReceiptRetentionTooShort { .. })
        ),
        "{built:?}"
    );
}

// ---- a child's result survives a busy parent ---------------------------------------------

async fn child_step(_ctx: &mut TaskContext<()>) {}

workflow! {
    pub workflow Child(()) = sequence [task(child_step), event("shipped")];
}

async fn after_child(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(2);
}

workflow! {
    pub workflow Parent(Job) = sequence [workflow(Child), task(after_child)];
}

/// ACT-24: a child's final commit queues its result for the parent, so a parent that cannot
/// be resumed at once (its lease held by another process, or this process dying after the
/// child's commit) is resumed by the queue worker later, with no recovery call.
#[test]
fn a_childs_result_reaches_a_parent_busy_when_the_child_finished() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("family.db"));
    block_on(async {
        let runtime = Runtime::builder()
            .store(store.clone())
            .register::<Parent>()
            .register::<Child>()
            .recovery_sweep(None)
            .inbox_sweep(Duration::from_millis(100))
            .build()
            .unwrap();
        let parent = runtime
            .start_with::<Parent>(Job::default(), with_id("parent-1"))
            .await
            .unwrap();
        assert_eq!(parent.status, WorkflowStatus::Suspended);
        // Another process holds the parent's lease when the child finishes.
        let now = workflow_runtime::SystemClock.now();
        let lease = store
            .acquire_lease(
                &LeaseKey::instance("parent-1"),
                "other-process",
                now,
                60_000_000,
            )
            .await
            .unwrap();
        let report = runtime.send(Stimulus::new("shipped")).await.unwrap();
        assert_eq!(report.resumed.len(), 1, "the child: {report:?}");
        assert_eq!(report.resumed[0].status, WorkflowStatus::Finished);
        let waiting = runtime.get_state("parent-1").await.unwrap().unwrap();
        assert_eq!(waiting.status(), WorkflowStatus::Suspended);
        store
            .release_lease(&LeaseKey::instance("parent-1"), lease.token)
            .await
            .unwrap();
        let done = runtime
            .await_completion("parent-1", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            done,
            Completion::Finished(serde_json::json!({ "done": [2] }))
        );
        runtime.shutdown(Duration::from_secs(1)).await;
    });
}
