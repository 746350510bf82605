//! Durable instances on SQLite (SM-8, ENG-5): a runtime dropped with its store handle and a new
//! one opened on the same file resumes suspended instances (SM-8);
//! a process killed with SIGKILL while it runs activities is recovered by the next one
//! (ENG-5, ENG-25, ENG-26, ENG-32); a version that is not registered is reported and left
//! untouched (ENG-46); renaming the Rust data type does not break stored instances (ST-20).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{InstanceStatus, InstanceSubStatus, LeaseKey, SqliteStore, Storage};
use workflow_runtime::{
    CommitStrategy, Completion, JournalKind, Runtime, StartOptions, Stimulus, SubStatus,
    TaskContext, TaskError, Workflow, WorkflowStatus, state_machine, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Order {
    order_id: String,
    total: u64,
    paid: u64,
    confirmations: u32,
    tracking: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    amount: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Shipment {
    tracking: String,
}

async fn confirm(ctx: &mut TaskContext<Order>) {
    ctx.data_mut().confirmations += 1;
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(())
}

async fn record_shipment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let shipment: Shipment = ctx.payload()?;
    ctx.data_mut().tracking = Some(shipment.tracking);
    Ok(())
}

#[state_machine(data = Order, initial = New, name = "DurableOrder")]
pub enum DurableOrder {
    #[entry(confirm)]
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    New,
    #[on(ship: event::<Shipment>("shipped").key(order_id) => Shipped, action = record_shipment)]
    Paid,
    Shipped,
    Cancelled,
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

fn order_runtime(path: &Path) -> Runtime {
    Runtime::builder()
        .store(sqlite(path))
        .register::<DurableOrder>()
        .build()
        .unwrap()
}

fn order(id: &str, total: u64) -> Order {
    Order {
        order_id: id.into(),
        total,
        ..Order::default()
    }
}

fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

/// Scenario 18: suspended on triggers, the runtime and its store dropped, a new runtime on the
/// same file; the stimuli finish the orders, with the payloads, the right state and journal,
/// and the entry action ran once.
#[test]
fn instances_survive_a_dropped_runtime_and_finish_on_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.db");
    block_on(async {
        let runtime = order_runtime(&path);
        for i in 0..3 {
            let id = format!("order-{i}");
            let started = runtime
                .start_with::<DurableOrder>(order(&id, 100), with_id(&id))
                .await
                .unwrap();
            assert_eq!(started.status, WorkflowStatus::Suspended);
            assert_eq!(started.sub_status, Some(SubStatus::Waiting));
        }
        // One is paid before the restart.
        runtime
            .send(
                Stimulus::new("payment")
                    .key("order-0")
                    .payload(Payment { amount: 100 }),
            )
            .await
            .unwrap();
    });
    // The runtime and the store handle are gone: a new process, in effect.

    block_on(async {
        let runtime = order_runtime(&path);
        let recovered = runtime.recover().await.unwrap();
        assert!(recovered.recovered.is_empty() && recovered.failed.is_empty());
        assert_eq!(
            runtime
                .current_state::<DurableOrder>("order-0")
                .await
                .unwrap(),
            Some(DurableOrder::Paid)
        );
        let report = runtime
            .send(
                Stimulus::new("payment")
                    .key("order-1")
                    .payload(Payment { amount: 100 }),
            )
            .await
            .unwrap();
        assert_eq!(report.resumed.len(), 1);
        for id in ["order-0", "order-1"] {
            runtime
                .send(Stimulus::new("shipped").key(id).payload(Shipment {
                    tracking: format!("T-{id}"),
                }))
                .await
                .unwrap();
        }
        runtime
            .send(Stimulus::new("cancel").key("order-2"))
            .await
            .unwrap();
        // A stimulus for an order that moved on finds no bookmark in the store's index.
        let late = runtime
            .send(
                Stimulus::new("payment")
                    .key("order-2")
                    .payload(Payment { amount: 1 })
                    .inbox(false),
            )
            .await
            .unwrap();
        assert!(late.unmatched && late.resumed.is_empty());

        for id in ["order-0", "order-1"] {
            let done = runtime
                .await_completion(id, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(matches!(done, Completion::Finished(_)));
            let snapshot = runtime.get_state(id).await.unwrap().unwrap();
            assert_eq!(snapshot.current_state(), Some("Shipped"));
            let data: Order = snapshot.data().unwrap();
            assert_eq!(data.paid, 100);
            assert_eq!(data.confirmations, 1, "the entry action ran once");
            assert_eq!(data.tracking, Some(format!("T-{id}")));
            let changes: Vec<(String, String)> = snapshot
                .journal()
                .iter()
                .filter(|e| e.kind == JournalKind::StateChanged)
                .map(|e| {
                    (
                        e.detail["from"].as_str().unwrap_or("").to_owned(),
                        e.detail["to"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
            assert_eq!(
                changes,
                [
                    (String::new(), "New".to_owned()),
                    ("New".to_owned(), "Paid".to_owned()),
                    ("Paid".to_owned(), "Shipped".to_owned()),
                ],
                "{id}: each transition journaled once"
            );
            let seqs: Vec<u64> = snapshot.journal().iter().map(|e| e.seq).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(
            runtime
                .current_state::<DurableOrder>("order-2")
                .await
                .unwrap(),
            Some(DurableOrder::Cancelled)
        );
        // Nothing waits any more: the bookmark index is empty.
        for id in ["order-0", "order-1", "order-2"] {
            assert!(runtime.store().list_bookmarks(id).await.unwrap().is_empty());
        }
        // Retention (ST-31): nothing is an hour old; then the three final ones go.
        assert_eq!(
            runtime
                .purge_finished(Duration::from_secs(3600))
                .await
                .unwrap(),
            0
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            runtime
                .purge_finished(Duration::from_millis(1))
                .await
                .unwrap(),
            3
        );
        assert!(runtime.get_state("order-0").await.unwrap().is_none());
        assert_eq!(
            runtime
                .current_state::<DurableOrder>("order-2")
                .await
                .unwrap(),
            None,
            "cancelled is final: purged too"
        );
    });
}

// ---- version not registered (ENG-46) -----------------------------------------------------

async fn noop(_ctx: &mut TaskContext<Order>) {}

mod version_two {
    use super::{Order, TaskContext};
    use workflow_runtime::state_machine;

    pub(crate) async fn noop(_ctx: &mut TaskContext<Order>) {}

    /// The same name as [`super::Versioned`], a different graph: another fingerprint.
    #[state_machine(data = Order, initial = Open, name = "Versioned")]
    pub enum VersionedTwo {
        #[entry(noop)]
        #[on(close: event("close").key(order_id) => Closed)]
        #[on(reopen: event("reopen").key(order_id) => Open)]
        Open,
        Closed,
    }
}

#[state_machine(data = Order, initial = Open, name = "Versioned")]
pub enum Versioned {
    #[entry(noop)]
    #[on(close: event("close").key(order_id) => Closed)]
    Open,
    Closed,
}

#[test]
fn an_instance_of_an_unregistered_version_is_reported_and_left_untouched() {
    use version_two::VersionedTwo;
    assert_ne!(Versioned::version(), VersionedTwo::version());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("versions.db");
    block_on(async {
        let runtime = Runtime::builder()
            .store(sqlite(&path))
            .register::<Versioned>()
            .build()
            .unwrap();
        runtime
            .start_with::<Versioned>(order("v-1", 0), with_id("v-1"))
            .await
            .unwrap();
    });
    block_on(async {
        let runtime = Runtime::builder()
            .store(sqlite(&path))
            .register::<VersionedTwo>()
            .inbox_worker(false)
            .build()
            .unwrap();
        let before = runtime.store().load_instance("v-1").await.unwrap();
        assert_eq!(
            runtime.unregistered_versions().await.unwrap(),
            [("Versioned".to_owned(), Versioned::version().to_owned(), 1)]
        );
        // RT-24: a stimulus for it is not resumed here, nor dropped: it is queued for the
        // instance, for a process that runs its version.
        let report = runtime
            .send(Stimulus::new("close").key("v-1"))
            .await
            .unwrap();
        assert_eq!(report.deferred, ["v-1"], "{report:?}");
        assert!(
            report.resumed.is_empty() && report.inbox_item.is_none(),
            "{report:?}"
        );
        // Its worker keeps it (not an attempt, not a dead letter, its claim released),
        // however often it passes.
        for _ in 0..3 {
            assert_eq!(runtime.deliver_inbox().await.unwrap(), 0);
        }
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros(),
        )
        .unwrap();
        let kept = runtime
            .store()
            .claim_queue_page("probe", now, 1, 10)
            .await
            .unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].attempts, 0, "{kept:?}");
        assert_eq!(kept[0].stimulus_id, report.stimulus_id);
        runtime
            .store()
            .release_queue_item(&kept[0].item_id, "probe")
            .await
            .unwrap();
        let after = runtime.store().load_instance("v-1").await.unwrap();
        assert_eq!(after.version, before.version);
        assert_eq!(after.state, before.state);
        assert_eq!(after.status, InstanceStatus::Suspended);
        assert!(after.lease.is_none() || after.lease.as_ref().is_some_and(|l| l.expires_at > 0));
        // The bookmark is still indexed: the right version can finish it later.
        assert_eq!(
            runtime.store().list_bookmarks("v-1").await.unwrap().len(),
            1
        );
    });
    block_on(async {
        // A process that runs the instance's version delivers the queued stimulus.
        let runtime = Runtime::builder()
            .store(sqlite(&path))
            .register::<Versioned>()
            .inbox_worker(false)
            .build()
            .unwrap();
        assert_eq!(runtime.deliver_inbox().await.unwrap(), 1);
        assert_eq!(
            runtime.current_state::<Versioned>("v-1").await.unwrap(),
            Some(Versioned::Closed)
        );
    });
}

// ---- renaming the Rust data type (ST-20) -------------------------------------------------

mod before_rename {
    use serde::{Deserialize, Serialize};
    use workflow_runtime::{TaskContext, state_machine};

    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct CustomerRecordV1 {
        pub name: String,
        pub greeted: u32,
    }

    pub(crate) async fn greet(ctx: &mut TaskContext<CustomerRecordV1>) {
        ctx.data_mut().greeted += 1;
    }

    #[state_machine(data = CustomerRecordV1, initial = Waiting, name = "Greeter")]
    pub enum GreeterV1 {
        #[entry(greet)]
        #[on(go: event("go") => Done)]
        Waiting,
        Done,
    }
}

mod after_rename {
    use serde::{Deserialize, Serialize};
    use workflow_runtime::{TaskContext, state_machine};

    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct Customer {
        pub name: String,
        pub greeted: u32,
    }

    pub(crate) async fn greet(ctx: &mut TaskContext<Customer>) {
        ctx.data_mut().greeted += 1;
    }

    #[state_machine(data = Customer, initial = Waiting, name = "Greeter")]
    pub enum RenamedGreeter {
        #[entry(greet)]
        #[on(go: event("go") => Done)]
        Waiting,
        Done,
    }
}

#[test]
fn renaming_the_rust_types_does_not_break_stored_instances() {
    use after_rename::{Customer, RenamedGreeter};
    use before_rename::{CustomerRecordV1, GreeterV1};
    assert_eq!(GreeterV1::version(), RenamedGreeter::version());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rename.db");
    block_on(async {
        let runtime = Runtime::builder()
            .store(sqlite(&path))
            .register::<GreeterV1>()
            .build()
            .unwrap();
        let data = CustomerRecordV1 {
            name: "Ada".into(),
            greeted: 0,
        };
        runtime
            .start_with::<GreeterV1>(data, with_id("greet-1"))
            .await
            .unwrap();
        let record = runtime.store().load_instance("greet-1").await.unwrap();
        let text = record.state.to_string();
        assert_eq!(record.state["format"], 2, "ST-19: a top-level format");
        for rust_name in ["CustomerRecordV1", "GreeterV1", "before_rename", "Some("] {
            assert!(!text.contains(rust_name), "{rust_name} stored in {text}");
        }
        for entry in runtime
            .store()
            .read_journal("greet-1", 1, 100)
            .await
            .unwrap()
        {
            let detail = entry.detail.to_string();
            assert!(!detail.contains("Some("), "ST-20: {detail}");
        }
    });
    block_on(async {
        let runtime = Runtime::builder()
            .store(sqlite(&path))
            .register::<RenamedGreeter>()
            .build()
            .unwrap();
        runtime.send(Stimulus::new("go")).await.unwrap();
        let snapshot = runtime.get_state("greet-1").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        let customer: Customer = snapshot.data().unwrap();
        assert_eq!(customer.name, "Ada");
        assert_eq!(customer.greeted, 1);
    });
}

// ---- SIGKILL while activities run (ENG-5, ENG-25, ENG-26, ENG-32) ------------------------

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    done: Vec<u32>,
}

macro_rules! steps {
    ($($name:ident = $n:expr),*) => {$(
        async fn $name(ctx: &mut TaskContext<Job>) {
            tokio::time::sleep(Duration::from_millis(40)).await;
            ctx.data_mut().done.push($n);
        }
    )*};
}

steps!(
    step1 = 1,
    step2 = 2,
    step3 = 3,
    step4 = 4,
    step5 = 5,
    step6 = 6,
    step7 = 7,
    step8 = 8
);

workflow! {
    pub workflow Steps(Job) = sequence [
        task(step1), task(step2), task(step3), task(step4),
        task(step5), task(step6), task(step7), task(step8)
    ];
}

const JOBS: usize = 4;
const CHILD_ENV: &str = "DURABLE_SQLITE_CHILD_DB";

fn steps_runtime(path: &Path) -> Runtime {
    Runtime::builder()
        .store(sqlite(path))
        .register::<Steps>()
        .commit_strategy(CommitStrategy::BeforeEachActivity)
        .lease_ttl(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// The child process: starts the jobs and runs them until it is killed. A no-op in a normal
/// test run.
#[test]
fn sigkill_child_process() {
    let Some(path) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        return;
    };
    let runtime = steps_runtime(&path);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async move {
            let mut jobs = tokio::task::JoinSet::new();
            for i in 0..JOBS {
                let runtime = runtime.clone();
                jobs.spawn(async move {
                    runtime
                        .start_with::<Steps>(Job::default(), with_id(&format!("job-{i}")))
                        .await
                });
            }
            while jobs.join_next().await.is_some() {}
        });
}

#[test]
fn a_process_killed_mid_activity_is_recovered_and_loses_no_committed_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["sigkill_child_process", "--exact", "--nocapture"])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let it commit a few steps of every job, then kill it mid-activity.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let progressed = SqliteStore::open_read_only(&path)
            .ok()
            .map(|store| Storage::new(Arc::new(store)))
            .is_some_and(|store| {
                block_on(async {
                    let mut all = true;
                    for i in 0..JOBS {
                        let done = match store.load_instance(&format!("job-{i}")).await {
                            Ok(record) => {
                                record.state["data"]["done"].as_array().map_or(0, Vec::len)
                            }
                            Err(_) => 0,
                        };
                        all &= done >= 2;
                    }
                    all
                })
            });
        if progressed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "child made no progress"
        );
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();

    // What the dead process committed.
    let committed: Vec<(Vec<u32>, InstanceStatus, Option<InstanceSubStatus>)> = block_on(async {
        let store = sqlite(&path);
        let mut committed = Vec::new();
        for i in 0..JOBS {
            let record = store.load_instance(&format!("job-{i}")).await.unwrap();
            let done: Job = serde_json::from_value(record.state["data"].clone()).unwrap();
            committed.push((done.done, record.status, record.sub_status));
        }
        committed
    });
    assert!(
        committed
            .iter()
            .any(|(_, status, sub)| *status == InstanceStatus::Running
                && *sub == Some(InstanceSubStatus::Executing)),
        "killed mid-run: {committed:?}"
    );
    // The dead process's leases expire; a new runtime recovers every job.
    std::thread::sleep(Duration::from_millis(600));
    block_on(async {
        let runtime = steps_runtime(&path);
        let report = runtime.recover().await.unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        let interrupted = committed
            .iter()
            .filter(|(_, status, _)| *status == InstanceStatus::Running)
            .count();
        assert_eq!(report.recovered.len(), interrupted);
        for (i, (before, _, _)) in committed.iter().enumerate() {
            let id = format!("job-{i}");
            let snapshot = runtime.get_state(&id).await.unwrap().unwrap();
            assert_eq!(snapshot.status(), WorkflowStatus::Finished, "{id}");
            let job: Job = snapshot.data().unwrap();
            assert_eq!(
                job.done,
                (1..=8).collect::<Vec<_>>(),
                "{id}: every step once"
            );
            assert!(job.done.starts_with(before), "{id}: committed steps kept");
        }
    });
}

// ---- a stale run is fenced (ENG-29) -------------------------------------------------------

/// Set for the first attempt of [`slow`] only: it blocks its thread, as a process that
/// stalls (a long pause, a stopped VM) and so cannot renew its lease.
static STALL_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn slow(ctx: &mut TaskContext<Job>) {
    if STALL_ONCE.swap(false, std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(300));
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    ctx.data_mut().done.push(1);
}

workflow! {
    pub workflow Slow(Job) = sequence [task(slow)];
}

/// Runtime A stalls while its task runs, so its lease is not renewed and expires; runtime B
/// (another process, in effect, on the same store) recovers the instance and runs it. A's
/// commit is refused as `Fenced`: A gets the typed error, nothing of its run is written, B's
/// result stands.
#[test]
fn a_run_whose_lease_was_taken_over_is_fenced_and_discarded() {
    let store: Storage = Arc::new(workflow_runtime::MemoryStore::new()).into();
    let build = |ttl: Duration| {
        Runtime::builder()
            .store(store.clone())
            .register::<Slow>()
            .commit_strategy(CommitStrategy::BeforeEachActivity)
            .lease_ttl(ttl)
            .recovery_sweep(None)
            .build()
            .unwrap()
    };
    let a = build(Duration::from_millis(100));
    let b = build(Duration::from_secs(60));
    STALL_ONCE.store(true, std::sync::atomic::Ordering::SeqCst);
    let first = std::thread::spawn(move || {
        block_on(a.start_with::<Slow>(Job::default(), with_id("slow-1")))
    });
    block_on(async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        // A's lease has expired: B takes the instance over.
        let report = b.recover().await.unwrap();
        assert_eq!(report.recovered.len(), 1);
        assert_eq!(report.recovered[0].status, WorkflowStatus::Finished);
        let error = first.join().unwrap().unwrap_err();
        let workflow_runtime::StartError::Run(error) = error else {
            panic!("expected a run error, got {error:?}");
        };
        assert!(error.is_conflict(), "{error:?}");
        let snapshot = b.get_state("slow-1").await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished);
        assert_eq!(snapshot.data::<Job>().unwrap().done, [1]);
    });
}

// ---- a crash during a child's first run (ACT-24, ENG-25) ---------------------------------

async fn slow_child(_ctx: &mut TaskContext<()>) {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn after_child(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(2);
}

workflow! {
    pub workflow SlowChild(()) = sequence [task(slow_child), event("shipped")];
}

workflow! {
    pub workflow Family(Job) = sequence [workflow(SlowChild), task(after_child)];
}

/// The process dies while the child started by a SubWorkflow runs its first activity: the
/// parent's commit created the child, so the next runtime recovers it, and the child's end
/// resumes the parent.
#[test]
fn a_child_interrupted_in_its_first_run_is_recovered_and_resumes_its_parent() {
    let store: Storage = Arc::new(workflow_runtime::MemoryStore::new()).into();
    let build = |ttl: Duration| {
        Runtime::builder()
            .store(store.clone())
            .register::<Family>()
            .register::<SlowChild>()
            .lease_ttl(ttl)
            .build()
            .unwrap()
    };
    let a = build(Duration::from_millis(100));
    block_on(async {
        let start = a.start_with::<Family>(Job::default(), with_id("family-1"));
        // "Crash": the start is dropped while the child's first activity runs.
        let cut = tokio::time::timeout(Duration::from_millis(100), start).await;
        assert!(cut.is_err(), "the child's first run was interrupted");
    });
    drop(a);
    std::thread::sleep(Duration::from_millis(150));
    let b = build(Duration::from_secs(60));
    block_on(async {
        let parent = b.get_state("family-1").await.unwrap().unwrap();
        assert_eq!(parent.status(), WorkflowStatus::Suspended);
        let report = b.recover().await.unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        assert_eq!(report.recovered.len(), 1, "the child");
        assert_eq!(report.recovered[0].sub_status, Some(SubStatus::Waiting));
        b.send(Stimulus::new("shipped")).await.unwrap();
        let parent = b.get_state("family-1").await.unwrap().unwrap();
        assert_eq!(parent.status(), WorkflowStatus::Finished);
        assert_eq!(parent.data::<Job>().unwrap().done, [2]);
    });
}

/// The process dies between a child's final commit and its parent's resume (which follows
/// the commit in process): `recover` finds the waiting parent and resumes it.
#[test]
fn a_parent_whose_child_finished_before_the_crash_is_resumed_by_recovery() {
    use workflow_runtime::store::Commit;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("family.db");
    let build = || {
        Runtime::builder()
            .store(sqlite(&path))
            .register::<Family>()
            .register::<SlowChild>()
            .build()
            .unwrap()
    };
    let child_id = block_on(async {
        let runtime = build();
        runtime
            .start_with::<Family>(Job::default(), with_id("family-2"))
            .await
            .unwrap();
        let parent = runtime.get_state("family-2").await.unwrap().unwrap();
        let bookmark = parent
            .state
            .bookmarks()
            .iter()
            .find(|b| b.name == "wf.sub_workflow")
            .unwrap();
        let child_id = bookmark.payload["child_instance_id"]
            .as_str()
            .unwrap()
            .to_owned();
        // The child's final commit, written as a dying process would: the parent never hears.
        let store = runtime.store();
        let lease = store
            .acquire_lease(&LeaseKey::instance(&child_id), "dying", 0, i64::MAX / 2)
            .await
            .unwrap();
        let record = store.load_instance(&child_id).await.unwrap();
        let mut state = record.state.clone();
        state["status"] = serde_json::json!("Finished");
        state.as_object_mut().unwrap().remove("sub_status");
        state["bookmarks"] = serde_json::json!([]);
        let mut commit = Commit::new(
            &child_id,
            record.version,
            lease.token,
            1,
            state,
            InstanceStatus::Finished,
            None,
        );
        commit.bookmarks_removed = store
            .list_bookmarks(&child_id)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.bookmark_id)
            .collect();
        commit.release_lease = true;
        store.commit(commit).await.unwrap();
        child_id
    });
    block_on(async {
        let runtime = build();
        let report = runtime.recover().await.unwrap();
        assert_eq!(report.parents_resumed, ["family-2"]);
        let parent = runtime.get_state("family-2").await.unwrap().unwrap();
        assert_eq!(parent.status(), WorkflowStatus::Finished);
        assert_eq!(parent.data::<Job>().unwrap().done, [2]);
        let child = runtime.get_state(&child_id).await.unwrap().unwrap();
        assert_eq!(child.status(), WorkflowStatus::Finished);
        // Nothing left to do: a second recovery resumes nothing.
        assert!(runtime.recover().await.unwrap().parents_resumed.is_empty());
    });
}

/// ENG-31, ENG-32: by default a run that finishes costs exactly one commit; the activity
/// strategies add one commit per task.
#[test]
fn commit_strategies_commit_once_per_run_or_once_per_task() {
    for (strategy, commits) in [
        (CommitStrategy::RunEnd, 1),
        (CommitStrategy::BeforeEachActivity, 9),
        (CommitStrategy::AfterEachActivity, 9),
    ] {
        let runtime = Runtime::builder()
            .register::<Steps>()
            .commit_strategy(strategy)
            .build()
            .unwrap();
        block_on(async {
            let started = runtime
                .start_with::<Steps>(Job::default(), with_id("steps"))
                .await
                .unwrap();
            assert_eq!(started.status, WorkflowStatus::Finished);
            let record = runtime.store().load_instance("steps").await.unwrap();
            assert_eq!(record.version, 1 + commits, "{strategy:?}");
            let job: Job = serde_json::from_value(record.state["data"].clone()).unwrap();
            assert_eq!(job.done, (1..=8).collect::<Vec<_>>());
        });
    }
}
