//! Commit settings written in the macros are honoured (ENG-32): a definition's strategy
//! (`#[workflow(commit = ..)]`, `#[state_machine(.., commit = ..)]`) and a node's `.commit(..)`,
//! which decides first. Each commit bumps the instance's version, so the version after a run
//! counts the commits: 1 for the creation, 1 for the run's end, plus one per extra commit.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    CommitStrategy, Runtime, StartOptions, TaskContext, Workflow, WorkflowStatus, state_machine,
    workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Job {
    done: Vec<u32>,
}

async fn one(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(1);
}
async fn two(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(2);
}
async fn three(ctx: &mut TaskContext<Job>) {
    ctx.data_mut().done.push(3);
}
async fn slow(ctx: &mut TaskContext<Job>) {
    tokio::time::sleep(Duration::from_millis(5)).await;
    ctx.data_mut().done.push(9);
}

workflow! {
    pub workflow Plain(Job) = sequence [task(one), task(two), task(three)];
}

workflow! {
    #[workflow(commit = after_each_activity)]
    pub workflow AfterEach(Job) = sequence [task(one), task(two), task(three)];
}

workflow! {
    #[workflow(commit = before_each_activity)]
    pub workflow BeforeEach(Job) = sequence [task(one), task(two), task(three)];
}

workflow! {
    pub workflow NodeBefore(Job) = sequence [task(one), task(two).commit(before_and_after), task(three).commit(after)];
}

workflow! {
    #[workflow(commit = after_each_activity)]
    pub workflow NodeNever(Job) = sequence [task(one).commit(never), task(two), task(three).commit(default)];
}

workflow! {
    #[workflow(commit = periodic(millis(1)))]
    pub workflow Periodic(Job) = sequence [a = task(slow), b = task(slow), c = task(slow)];
}

workflow! {
    #[workflow(commit = periodic(hours(1)))]
    pub workflow Rarely(Job) = sequence [task(one), task(two), task(three)];
}

/// Three states, each with an entry task, run through by automatic transitions in one run.
#[state_machine(data = Job, initial = First, name = "Machine")]
pub enum Machine {
    #[entry(one)]
    #[on(=> Second)]
    First,
    #[entry(two)]
    #[on(=> Third)]
    Second,
    #[entry(three)]
    Third,
}

/// The same machine, committing after each activity.
#[state_machine(data = Job, initial = First, name = "MachineAfterEach", commit = after_each_activity)]
pub enum MachineAfterEach {
    #[entry(one)]
    #[on(=> Second)]
    First,
    #[entry(two)]
    #[on(=> Third)]
    Second,
    #[entry(three)]
    Third,
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

/// The commits one finished run made, beyond the instance's creation.
fn commits<W: Workflow<Data = Job>>(runtime_strategy: CommitStrategy) -> u64 {
    let runtime = Runtime::builder()
        .register::<W>()
        .commit_strategy(runtime_strategy)
        .build()
        .unwrap();
    block_on(async {
        let started = runtime
            .start_with::<W>(
                Job::default(),
                StartOptions {
                    instance_id: Some("job".to_owned()),
                    ..StartOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished, "{}", W::name());
        let record = runtime.store().load_instance("job").await.unwrap();
        let job: Job = serde_json::from_value(record.state["data"].clone()).unwrap();
        assert_eq!(job.done.len(), 3);
        record.version - 1
    })
}

#[test]
fn eng32_a_definitions_strategy_adds_one_commit_per_task() {
    assert_eq!(commits::<Plain>(CommitStrategy::RunEnd), 1);
    assert_eq!(commits::<AfterEach>(CommitStrategy::RunEnd), 4);
    assert_eq!(commits::<BeforeEach>(CommitStrategy::RunEnd), 4);
    // The definition's strategy wins over the runtime's default.
    assert_eq!(commits::<Plain>(CommitStrategy::AfterEachActivity), 4);
    assert_eq!(commits::<AfterEach>(CommitStrategy::BeforeEachActivity), 4);
}

#[test]
fn eng32_a_nodes_commit_decides_first() {
    // `before_and_after` is two commits, `after` one, the untouched task none.
    assert_eq!(commits::<NodeBefore>(CommitStrategy::RunEnd), 4);
    // `never` suppresses the workflow's strategy for that node only; `default` defers to it.
    assert_eq!(commits::<NodeNever>(CommitStrategy::RunEnd), 3);
}

#[test]
fn eng32_periodic_commits_once_the_interval_has_passed() {
    // Each task takes longer than the interval: one commit after each.
    assert_eq!(commits::<Periodic>(CommitStrategy::RunEnd), 4);
    // An hour never passes within the run: only the run's end.
    assert_eq!(commits::<Rarely>(CommitStrategy::RunEnd), 1);
}

#[test]
fn eng32_a_state_machines_strategy_is_honoured() {
    assert_eq!(
        MachineAfterEach::definition().commit_strategy,
        Some(workflow_runtime::model::CommitStrategy::AfterEachActivity)
    );
    assert_eq!(commits::<Machine>(CommitStrategy::RunEnd), 1);
    // One commit after each of the three entries, then the run's end.
    assert_eq!(commits::<MachineAfterEach>(CommitStrategy::RunEnd), 4);
}
