//! Flow-control queues declared through the macros (QU-10, QU-14): a `Queue` item named by
//! path in `workflow!` and `#[state_machine]` is declared by `register`, its limits hold on
//! the memory, SQLite and PostgreSQL stores, a partition key read from the data is served
//! round robin, a priority written in the macro orders the line, and a definition-level queue
//! limits whole runs.
#![allow(clippy::unwrap_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use workflow_runtime::store::Storage;
use workflow_runtime::{
    BuildError, MemoryStore, Queue, Runtime, SqliteStore, TaskContext, TaskResult, Workflow,
    state_machine, workflow,
};

/// Wall-clock now, µs (slot leases are on the wall clock).
fn wall_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// A charge of a customer; `label` names it in the order of runs.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    customer: String,
    label: String,
}

/// The payment API takes 3 calls at once.
const PAYMENTS: Queue = Queue::new("payments").concurrency(3);
/// One at a time, one per customer: the line decides who is next.
const SINGLE: Queue = Queue::new("single").concurrency(1).per_key(1);
/// At most 2 imports run at once.
const IMPORTS: Queue = Queue::new("imports").concurrency(2);

/// What ran, how many overlap now and at most; `hold` keeps the `blocker` task waiting.
#[derive(Default)]
struct Probe {
    now: AtomicUsize,
    max: AtomicUsize,
    order: Mutex<Vec<String>>,
    hold: Option<Arc<tokio::sync::Semaphore>>,
}

/// The probe of the test running now (tests of this file share it one at a time).
fn probe() -> &'static Mutex<Arc<Probe>> {
    static PROBE: OnceLock<Mutex<Arc<Probe>>> = OnceLock::new();
    PROBE.get_or_init(Mutex::default)
}

/// The tests of this file one at a time: they share the probe.
fn serial() -> &'static tokio::sync::Mutex<()> {
    static SERIAL: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    SERIAL.get_or_init(tokio::sync::Mutex::default)
}

fn install(probe_value: Probe) -> Arc<Probe> {
    let probe_value = Arc::new(probe_value);
    *probe().lock().unwrap() = Arc::clone(&probe_value);
    probe_value
}

async fn work(cx: &mut TaskContext<Charge>) -> TaskResult {
    let probe = Arc::clone(&probe().lock().unwrap());
    let running = probe.now.fetch_add(1, Ordering::SeqCst) + 1;
    probe.max.fetch_max(running, Ordering::SeqCst);
    if cx.data().label == "blocker"
        && let Some(hold) = &probe.hold
    {
        hold.acquire().await.unwrap().forget();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    probe.order.lock().unwrap().push(cx.data().label.clone());
    probe.now.fetch_sub(1, Ordering::SeqCst);
    Ok(workflow_runtime::Outcome::done())
}

workflow! {
    /// Charges a customer through the payment API's queue.
    pub workflow Pay(Charge) = sequence [task(work).queue(PAYMENTS)];
}

workflow! {
    /// One task of the single queue, its partition key the customer.
    pub workflow PerCustomer(Charge) = sequence [task(work).queue(SINGLE).key(customer)];
}

/// The same task at the highest priority, from the state machine's task trigger.
#[state_machine(data = Charge, initial = Working)]
pub enum Urgent {
    /// The task runs.
    #[on(finish: task(work).queue(SINGLE).key(customer).priority(9) => Done)]
    Working,
    /// It ran.
    Done,
}

/// Every run of an import takes a slot of `IMPORTS`.
#[state_machine(data = Charge, initial = Working, queue = IMPORTS)]
pub enum Import {
    /// The task runs.
    #[on(finish: task(work) => Done)]
    Working,
    /// It ran.
    Done,
}

fn charge(customer: &str, label: &str) -> Charge {
    Charge {
        customer: customer.to_owned(),
        label: label.to_owned(),
    }
}

async fn start_all<W: Workflow<Data = Charge>>(runtime: &Arc<Runtime>, n: usize) {
    let starts: Vec<_> = (0..n)
        .map(|i| {
            let runtime = Arc::clone(runtime);
            tokio::spawn(async move {
                runtime
                    .start::<W>(charge("c", &format!("{i}")))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut ids = Vec::new();
    for start in starts {
        ids.push(start.await.unwrap().instance_id);
    }
    complete(runtime, ids).await;
}

/// Waits until every instance of `ids` finished (QU-11: a start whose task waits for a slot
/// returns with its instance suspended).
async fn complete(runtime: &Runtime, ids: impl IntoIterator<Item = String>) {
    for id in ids {
        runtime
            .await_completion(&id, Duration::from_secs(60))
            .await
            .unwrap();
    }
}

/// 60 instances of `Pay` at once: every task ran, never more than 3 at once, every slot came
/// back; the queue was declared by `register` alone.
async fn macro_queue_limit_holds(store: Storage) {
    let _serial = serial().lock().await;
    let probe = install(Probe::default());
    let runtime = Arc::new(
        Runtime::builder()
            .store(store.clone())
            .register::<Pay>()
            .build()
            .unwrap(),
    );
    start_all::<Pay>(&runtime, 60).await;
    assert_eq!(probe.order.lock().unwrap().len(), 60);
    let max = probe.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} tasks of a queue of 3 overlapped");
    assert!(max >= 2, "the queue never ran two at once ({max})");
    let usage = store.queue_usage(wall_now()).await.unwrap();
    let payments = usage.iter().find(|u| u.queue == "payments").unwrap();
    assert_eq!((payments.running, payments.waiting), (0, 0));
    runtime.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macro_declared_queue_limit_holds_on_memory() {
    macro_queue_limit_holds(Storage::new(Arc::new(MemoryStore::new()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macro_declared_queue_limit_holds_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("flow.db")).unwrap();
    macro_queue_limit_holds(Storage::new(Arc::new(store))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macro_declared_queue_limit_holds_on_postgres() {
    let Some((store, _guard)) = workflow_runtime::store::conformance::postgres::fresh_store().await
    else {
        return;
    };
    macro_queue_limit_holds(Storage::new(store)).await;
}

/// Waits until `n` are in line in `queue`.
async fn waiting(store: &Storage, queue: &str, n: u32) {
    for _ in 0..1_000 {
        let usage = store.queue_usage(wall_now()).await.unwrap();
        if usage.iter().any(|u| u.queue == queue && u.waiting == n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {n} waiting in `{queue}`");
}

fn single_runtime(store: &Storage) -> Arc<Runtime> {
    Arc::new(
        Runtime::builder()
            .store(store.clone())
            .register::<PerCustomer>()
            .register::<Urgent>()
            .build()
            .unwrap(),
    )
}

fn spawn_start<W: Workflow<Data = Charge>>(
    runtime: &Arc<Runtime>,
    data: Charge,
) -> tokio::task::JoinHandle<String> {
    let runtime = Arc::clone(runtime);
    tokio::spawn(async move { runtime.start::<W>(data).await.unwrap().instance_id })
}

/// A blocker holds the single slot while customer `a` queues 100 tasks, then `b` and `c` one
/// each: with the key from `.key(customer)`, `b` and `c` run in the first round after the
/// blocker, not after `a`'s 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_the_macro_are_served_round_robin() {
    let _serial = serial().lock().await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let probe = install(Probe {
        hold: Some(Arc::clone(&hold)),
        ..Probe::default()
    });
    let store = Storage::new(Arc::new(MemoryStore::new()));
    let runtime = single_runtime(&store);
    let mut runs = vec![spawn_start::<PerCustomer>(&runtime, charge("z", "blocker"))];
    waiting(&store, "single", 0).await;
    while probe.now.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in 0..100 {
        runs.push(spawn_start::<PerCustomer>(
            &runtime,
            charge("a", &format!("a-{i}")),
        ));
    }
    waiting(&store, "single", 100).await;
    runs.push(spawn_start::<PerCustomer>(&runtime, charge("b", "b")));
    waiting(&store, "single", 101).await;
    runs.push(spawn_start::<PerCustomer>(&runtime, charge("c", "c")));
    waiting(&store, "single", 102).await;
    hold.add_permits(1);
    let mut ids = Vec::new();
    for run in runs {
        ids.push(run.await.unwrap());
    }
    complete(&runtime, ids).await;
    let order = probe.order.lock().unwrap().clone();
    assert_eq!(order.len(), 103);
    assert_eq!(order[0], "blocker");
    let position = |label: &str| order.iter().position(|l| l == label).unwrap();
    assert!(
        position("b") <= 3 && position("c") <= 3,
        "b and c waited behind a's line: {:?}",
        &order[..6]
    );
    runtime.shutdown(Duration::from_secs(5)).await;
}

/// With the slot held, three tasks of priority 0 queue, then one of `.priority(9)` from the
/// state machine: it runs first, the others in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_written_in_the_macro_runs_first() {
    let _serial = serial().lock().await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let probe = install(Probe {
        hold: Some(Arc::clone(&hold)),
        ..Probe::default()
    });
    let store = Storage::new(Arc::new(MemoryStore::new()));
    let runtime = single_runtime(&store);
    let mut runs = vec![spawn_start::<PerCustomer>(&runtime, charge("z", "blocker"))];
    waiting(&store, "single", 0).await;
    while probe.now.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (i, label) in ["low-1", "low-2", "low-3"].into_iter().enumerate() {
        runs.push(spawn_start::<PerCustomer>(&runtime, charge("a", label)));
        waiting(&store, "single", u32::try_from(i).unwrap() + 1).await;
    }
    runs.push(spawn_start::<Urgent>(&runtime, charge("a", "high")));
    waiting(&store, "single", 4).await;
    hold.add_permits(1);
    let mut ids = Vec::new();
    for run in runs {
        ids.push(run.await.unwrap());
    }
    complete(&runtime, ids).await;
    assert_eq!(
        *probe.order.lock().unwrap(),
        ["blocker", "high", "low-1", "low-2", "low-3"]
    );
    runtime.shutdown(Duration::from_secs(5)).await;
}

/// `#[state_machine(queue = IMPORTS)]`: 30 runs started at once, never more than 2 running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_queue_limits_whole_runs() {
    let _serial = serial().lock().await;
    let probe = install(Probe::default());
    let store = Storage::new(Arc::new(MemoryStore::new()));
    let runtime = Arc::new(
        Runtime::builder()
            .store(store.clone())
            .register::<Import>()
            .build()
            .unwrap(),
    );
    start_all::<Import>(&runtime, 30).await;
    assert_eq!(probe.order.lock().unwrap().len(), 30);
    let max = probe.max.load(Ordering::SeqCst);
    assert!(max <= 2, "{max} runs of a queue of 2 overlapped");
    assert!(max >= 2, "the queue never ran two at once ({max})");
    let usage = store.queue_usage(wall_now()).await.unwrap();
    let imports = usage.iter().find(|u| u.queue == "imports").unwrap();
    assert_eq!((imports.running, imports.waiting), (0, 0));
    runtime.shutdown(Duration::from_secs(5)).await;
}

#[test]
fn the_macros_list_their_queues_and_name_them_in_the_definition() {
    assert_eq!(Pay::queues(), vec![PAYMENTS]);
    assert_eq!(Import::queues(), vec![IMPORTS]);
    assert_eq!(Import::definition().queue.as_deref(), Some("imports"));
    let json = PerCustomer::definition().to_json_pretty();
    assert!(json.contains("\"queue\": \"single\""), "{json}");
    assert!(json.contains("\"queue_key\": \"customer\""), "{json}");
    assert!(!json.contains("__queue"), "{json}");
    assert_eq!(Pay::version(), Pay::definition().fingerprint());
}

#[test]
fn a_conflicting_declaration_of_a_macro_queue_is_refused() {
    let err = Runtime::builder()
        .queue(Queue::new("payments").concurrency(5))
        .register::<Pay>()
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, BuildError::ConflictingQueue { name, .. } if name == "payments"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "queue `payments` is declared twice with different limits: `payments` (concurrency 5) and `payments` (concurrency 3)"
    );
    // The same limits twice are one declaration.
    assert!(
        Runtime::builder()
            .queue(PAYMENTS)
            .register::<Pay>()
            .build()
            .is_ok()
    );
}
