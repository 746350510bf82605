//! Engine behaviour found by acceptance tests of the DSL: FC-16 for an exit leaving from a
//! loop's head; saga compensations inside a loop see the failed scope's variables, each with
//! its own idempotency key (FLT-11); an operator retry of a compensated failure restarts the
//! saga scope (FLT-8).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{Completion, Runtime, TaskContext, TaskError, WorkflowStatus, workflow};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counter {
    count: u32,
    log: Vec<String>,
}

fn below_3(data: &Counter) -> bool {
    data.count < 3
}
async fn increment(ctx: &mut TaskContext<Counter>) {
    ctx.data_mut().count += 1;
    let line = format!("inc {}", ctx.data().count);
    ctx.data_mut().log.push(line);
}
async fn side(ctx: &mut TaskContext<Counter>) {
    ctx.data_mut().log.push("side".to_owned());
}
async fn after_loop(ctx: &mut TaskContext<Counter>) {
    let line = format!("after {}", ctx.data().count);
    ctx.data_mut().log.push(line);
}

// The decision `check` is the loop's head: its `false` port leaves the loop. While the loop
// runs, that exit must wait (FC-16), so the join fires once, after the loop ended.
workflow! {
    pub workflow HeadExit(Counter) {
        split = fork [a, b];
        check = decide(below_3);
        body  = task(increment);
        other = task(side);
        merge = join(all);
        done  = task(after_loop);

        start -> split;
        split.a -> check;
        check.true -> body -> check;
        check.false -> merge;
        split.b -> other -> merge;
        merge -> done;
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn fc16_an_exit_from_the_loop_head_waits_for_the_loop() {
    let data = block_on(async {
        let rt = Runtime::builder().register::<HeadExit>().build().unwrap();
        let started = rt.start::<HeadExit>(Counter::default()).await.unwrap();
        let completion = rt
            .await_completion(&started.instance_id, Duration::from_secs(5))
            .await
            .unwrap();
        let Completion::Finished(output) = completion else {
            panic!("{completion:?}");
        };
        serde_json::from_value::<Counter>(output).unwrap()
    });
    assert_eq!(data.count, 3);
    assert_eq!(
        data.log.last().map(String::as_str),
        Some("after 3"),
        "{:?}",
        data.log
    );
    assert_eq!(
        data.log.iter().filter(|l| l.starts_with("after")).count(),
        1,
        "{:?}",
        data.log
    );
}

// ---- FLT-11: compensations inside a loop see the loop's variables, each with its own key ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ledger {
    lines: Vec<u32>,
    log: Vec<String>,
    keys: Vec<String>,
}

fn lines(data: &Ledger) -> Vec<u32> {
    data.lines.clone()
}
async fn reserve_line(ctx: &mut TaskContext<Ledger>) -> Result<(), TaskError> {
    let item: u32 = ctx.variable("item")?;
    let key = ctx.idempotency_key();
    ctx.data_mut().log.push(format!("reserve {item}"));
    ctx.data_mut().keys.push(key);
    Ok(())
}
async fn release_line(ctx: &mut TaskContext<Ledger>) -> Result<(), TaskError> {
    let item: u32 = ctx.variable("item")?;
    let key = ctx.idempotency_key();
    ctx.data_mut().log.push(format!("release {item}"));
    ctx.data_mut().keys.push(key);
    Ok(())
}
async fn refuse(_ctx: &mut TaskContext<Ledger>) -> Result<(), TaskError> {
    Err(TaskError::permanent("no stock"))
}

workflow! {
    pub workflow Reserve(Ledger) = sequence [
        saga(fault) [
            for_each(lines) [task(reserve_line).compensate(release_line)],
            task(refuse),
        ],
    ];
}

#[test]
fn flt11_compensations_in_a_loop_read_the_item_and_have_their_own_keys() {
    let data = block_on(async {
        let rt = Runtime::builder().register::<Reserve>().build().unwrap();
        let started = rt
            .start::<Reserve>(Ledger {
                lines: vec![1, 2, 3],
                ..Ledger::default()
            })
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Faulted);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        serde_json::from_value::<Ledger>(snapshot.state.data().clone()).unwrap()
    });
    assert_eq!(
        data.log,
        [
            "reserve 1",
            "reserve 2",
            "reserve 3",
            "release 3",
            "release 2",
            "release 1"
        ]
    );
    // Each compensation's key is its task's key with `:compensate` (FLT-11).
    let (reserved, released) = data.keys.split_at(3);
    let expected: Vec<String> = reserved
        .iter()
        .rev()
        .map(|k| format!("{k}:compensate"))
        .collect();
    assert_eq!(released, expected.as_slice());
}

// ---- FLT-8: the operator's retry of a compensated failure restarts the saga scope -----------

static FLAKY_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

async fn book(ctx: &mut TaskContext<Counter>) {
    ctx.data_mut().log.push("book".to_owned());
}
async fn unbook(ctx: &mut TaskContext<Counter>) {
    ctx.data_mut().log.push("unbook".to_owned());
}
async fn flaky(ctx: &mut TaskContext<Counter>) -> Result<(), TaskError> {
    if FLAKY_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        return Err(TaskError::permanent("down"));
    }
    ctx.data_mut().log.push("flaky".to_owned());
    Ok(())
}

workflow! {
    pub workflow Booking(Counter) = sequence [
        saga(fault) [task(book).compensate(unbook), task(flaky)],
        task(after_loop),
    ];
}

#[test]
fn flt8_retry_of_a_compensated_failure_restarts_the_scope() {
    let data = block_on(async {
        let rt = Runtime::builder().register::<Booking>().build().unwrap();
        let started = rt.start::<Booking>(Counter::default()).await.unwrap();
        assert_eq!(started.status, WorkflowStatus::Faulted);
        let retried = rt.retry(&started.instance_id).await.unwrap();
        assert_eq!(
            retried.applied().map(|s| s.status),
            Some(WorkflowStatus::Finished)
        );
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        serde_json::from_value::<Counter>(snapshot.state.data().clone()).unwrap()
    });
    assert_eq!(data.log, ["book", "unbook", "book", "flaky", "after 0"]);
}
