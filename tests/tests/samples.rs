//! workflow-core's control-flow samples, ported with nothing but the macros: If (Sample 11),
//! While (Sample 10), ForEach in parallel (Sample 9) and in sequence (Sample 9s), Parallel
//! (Sample 13), Saga (Sample 17) and the EndStep scenario (a `finish` inside an endless loop).
//! No JSON and no hand-built registry: each definition and its registry come from `workflow!`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, Runtime, TaskContext, TaskError, Workflow, WorkflowStatus, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MyData {
    counter: u32,
    log: Vec<String>,
}

fn say(ctx: &mut TaskContext<MyData>, line: impl Into<String>) {
    ctx.data_mut().log.push(line.into());
}

async fn say_hello(ctx: &mut TaskContext<MyData>) {
    say(ctx, "Hello");
}
async fn say_goodbye(ctx: &mut TaskContext<MyData>) {
    say(ctx, "Goodbye");
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

/// Runs `W` from `data` to its end and returns the final data.
fn run<W: Workflow<Data = MyData>>(data: MyData) -> MyData {
    block_on(async {
        let rt = Runtime::builder().register::<W>().build().unwrap();
        let started = rt.start::<W>(data).await.unwrap();
        let completion = rt
            .await_completion(&started.instance_id, Duration::from_secs(5))
            .await
            .unwrap();
        let Completion::Finished(output) = completion else {
            panic!("`{}` did not finish: {completion:?}", W::name());
        };
        serde_json::from_value(output).unwrap()
    })
}

fn log(data: &MyData) -> Vec<&str> {
    data.log.iter().map(String::as_str).collect()
}

// ---- Sample 11: If ------------------------------------------------------------------------

fn less_than_3(data: &MyData) -> bool {
    data.counter < 3
}
fn less_than_5(data: &MyData) -> bool {
    data.counter < 5
}
async fn print_less_than_3(ctx: &mut TaskContext<MyData>) {
    say(ctx, "Value is less than 3");
}
async fn print_less_than_5(ctx: &mut TaskContext<MyData>) {
    say(ctx, "Value is less than 5");
}

workflow! {
    /// workflow-core Sample 11.
    pub workflow IfSample(MyData) = sequence [
        task(say_hello),
        if(less_than_3) [task(print_less_than_3)],
        if(less_than_5) [task(print_less_than_5)],
        task(say_goodbye),
    ];
}

#[test]
fn if_sample_runs_each_branch_whose_condition_holds() {
    let two = run::<IfSample>(MyData {
        counter: 2,
        ..MyData::default()
    });
    assert_eq!(
        log(&two),
        [
            "Hello",
            "Value is less than 3",
            "Value is less than 5",
            "Goodbye"
        ]
    );
    let four = run::<IfSample>(MyData {
        counter: 4,
        ..MyData::default()
    });
    assert_eq!(log(&four), ["Hello", "Value is less than 5", "Goodbye"]);
    let nine = run::<IfSample>(MyData {
        counter: 9,
        ..MyData::default()
    });
    assert_eq!(log(&nine), ["Hello", "Goodbye"]);
}

fn is_large(data: &MyData) -> bool {
    data.counter > 100
}
async fn big(ctx: &mut TaskContext<MyData>) {
    say(ctx, "big");
}
async fn small(ctx: &mut TaskContext<MyData>) {
    say(ctx, "small");
}

// `if .. else` as a flowchart node: structured, with the single port `done`.
workflow! {
    pub workflow IfElseNode(MyData) {
        hello  = task(say_hello);
        choose = if(is_large) [task(big)] else [task(small)];
        bye    = task(say_goodbye);

        start -> hello -> choose -> bye;
    }
}

#[test]
fn if_else_as_a_flowchart_node_runs_one_branch_then_continues() {
    let small = run::<IfElseNode>(MyData::default());
    assert_eq!(log(&small), ["Hello", "small", "Goodbye"]);
    let large = run::<IfElseNode>(MyData {
        counter: 101,
        ..MyData::default()
    });
    assert_eq!(log(&large), ["Hello", "big", "Goodbye"]);
}

// ---- Sample 10: While ---------------------------------------------------------------------

fn below_3(data: &MyData) -> bool {
    data.counter < 3
}
async fn do_something(ctx: &mut TaskContext<MyData>) {
    let n = ctx.data().counter;
    say(ctx, format!("Doing something {n}"));
}
async fn increment(ctx: &mut TaskContext<MyData>) {
    ctx.data_mut().counter += 1;
}

workflow! {
    /// workflow-core Sample 10.
    pub workflow WhileSample(MyData) = sequence [
        task(say_hello),
        while(below_3) [task(do_something), task(increment)],
        task(say_goodbye),
    ];
}

// The same loop as a flowchart node: no back-edge needed.
workflow! {
    pub workflow WhileNode(MyData) {
        hello = task(say_hello);
        count = while(below_3) [task(do_something), task(increment)];
        bye   = task(say_goodbye);

        start -> hello -> count -> bye;
    }
}

#[test]
fn while_sample_loops_until_the_condition_fails() {
    for data in [
        run::<WhileSample>(MyData::default()),
        run::<WhileNode>(MyData::default()),
    ] {
        assert_eq!(data.counter, 3);
        assert_eq!(
            log(&data),
            [
                "Hello",
                "Doing something 0",
                "Doing something 1",
                "Doing something 2",
                "Goodbye"
            ]
        );
    }
    // Checked before each iteration: a false condition runs no body at all.
    let done = run::<WhileSample>(MyData {
        counter: 7,
        ..MyData::default()
    });
    assert_eq!(log(&done), ["Hello", "Goodbye"]);
}

// ---- Samples 9 and 9s: ForEach, in parallel and in sequence ----------------------------------

fn one_to_four(_: &MyData) -> Vec<u32> {
    vec![1, 2, 3, 4]
}
async fn display_context(ctx: &mut TaskContext<MyData>) -> Result<(), TaskError> {
    let item: u32 = ctx.variable("item")?;
    say(ctx, format!("Working on item {item}"));
    Ok(())
}
async fn do_something_else(ctx: &mut TaskContext<MyData>) -> Result<(), TaskError> {
    let index: u32 = ctx.variable("index")?;
    say(ctx, format!("Did something for index {index}"));
    Ok(())
}

workflow! {
    /// workflow-core Sample 9 (its ForEach runs the bodies in parallel).
    pub workflow ForEachSample(MyData) = sequence [
        task(say_hello),
        parallel_for_each(one_to_four).max_in_flight(2) [task(display_context), task(do_something_else)],
        task(say_goodbye),
    ];
}

workflow! {
    /// workflow-core Sample 9s (`ForEach(.., runParallel: false)`).
    pub workflow ForEachSyncSample(MyData) = sequence [
        task(say_hello),
        for_each(one_to_four) [task(display_context), task(do_something_else)],
        task(say_goodbye),
    ];
}

#[test]
fn for_each_sync_sample_runs_the_body_per_item_in_order() {
    let data = run::<ForEachSyncSample>(MyData::default());
    let mut expected = vec!["Hello".to_owned()];
    for (index, item) in [1, 2, 3, 4].into_iter().enumerate() {
        expected.push(format!("Working on item {item}"));
        expected.push(format!("Did something for index {index}"));
    }
    expected.push("Goodbye".to_owned());
    assert_eq!(data.log, expected);
}

#[test]
fn for_each_parallel_sample_runs_every_body_before_going_on() {
    let data = run::<ForEachSample>(MyData::default());
    assert_eq!(data.log.first().map(String::as_str), Some("Hello"));
    assert_eq!(data.log.last().map(String::as_str), Some("Goodbye"));
    let mut middle: Vec<&str> = log(&data)[1..data.log.len() - 1].to_vec();
    assert_eq!(middle.len(), 8, "{:?}", data.log);
    // Each body runs its steps in order; the bodies interleave.
    for (index, item) in [1, 2, 3, 4].into_iter().enumerate() {
        let work = format!("Working on item {item}");
        let did = format!("Did something for index {index}");
        let w = middle.iter().position(|l| *l == work).unwrap();
        let d = middle.iter().position(|l| *l == did).unwrap();
        assert!(w < d, "{:?}", data.log);
    }
    middle.sort_unstable();
    middle.dedup();
    assert_eq!(middle.len(), 8);
}

// ---- Sample 13: Parallel ------------------------------------------------------------------

macro_rules! printers {
    ($($name:ident => $text:literal),* $(,)?) => {$(
        async fn $name(ctx: &mut TaskContext<MyData>) {
            say(ctx, $text);
        }
    )*};
}

printers! {
    item_1_1 => "Item 1.1", item_1_2 => "Item 1.2",
    item_2_1 => "Item 2.1", item_2_2 => "Item 2.2", item_2_3 => "Item 2.3",
    item_3_1 => "Item 3.1", item_3_2 => "Item 3.2",
}

workflow! {
    /// workflow-core Sample 13.
    pub workflow ParallelSample(MyData) = sequence [
        task(say_hello),
        parallel [
            sequence [task(item_1_1), task(item_1_2)],
            sequence [task(item_2_1), task(item_2_2), task(item_2_3)],
            sequence [task(item_3_1), task(item_3_2)],
        ],
        task(say_goodbye),
    ];
}

#[test]
fn parallel_sample_joins_every_branch_before_goodbye() {
    let data = run::<ParallelSample>(MyData::default());
    let lines = log(&data);
    assert_eq!(lines.len(), 9, "{lines:?}");
    assert_eq!(lines[0], "Hello");
    assert_eq!(lines[8], "Goodbye");
    let at = |text: &str| lines.iter().position(|l| *l == text).unwrap();
    assert!(at("Item 1.1") < at("Item 1.2"));
    assert!(at("Item 2.1") < at("Item 2.2") && at("Item 2.2") < at("Item 2.3"));
    assert!(at("Item 3.1") < at("Item 3.2"));
}

async fn slow_branch(ctx: &mut TaskContext<MyData>) {
    say(ctx, "slow");
}
async fn fast_branch(ctx: &mut TaskContext<MyData>) {
    say(ctx, "fast");
}

// `parallel(any)`: the first branch to complete wins and the others are cancelled (ACT-18).
workflow! {
    pub workflow FirstWins(MyData) = sequence [
        parallel(any) [
            sequence [after(secs(3600)), task(slow_branch)],
            task(fast_branch),
        ],
        task(say_goodbye),
    ];
}

#[test]
fn parallel_any_cancels_the_slower_branch() {
    let data = run::<FirstWins>(MyData::default());
    assert_eq!(log(&data), ["fast", "Goodbye"]);
}

// ---- Sample 17: Saga ----------------------------------------------------------------------

async fn step_1(ctx: &mut TaskContext<MyData>) {
    say(ctx, "1");
}
async fn undo_1(ctx: &mut TaskContext<MyData>) {
    say(ctx, "undo 1");
}
async fn step_2(ctx: &mut TaskContext<MyData>) -> Result<(), TaskError> {
    say(ctx, "2");
    Err(TaskError::permanent("boo"))
}
async fn undo_2(ctx: &mut TaskContext<MyData>) {
    say(ctx, "undo 2");
}
async fn step_3(ctx: &mut TaskContext<MyData>) {
    say(ctx, "3");
}
async fn end_step(ctx: &mut TaskContext<MyData>) {
    say(ctx, "end");
}

workflow! {
    /// workflow-core Sample 17: `2` throws, `2` and then `1` are undone and the workflow goes
    /// on (`saga(continue)`), so `end` still runs; `3` never does.
    pub workflow SagaSample(MyData) = sequence [
        task(say_hello),
        saga(continue) [
            task(step_1).compensate(undo_1),
            task(step_2).compensate(undo_2),
            task(step_3),
        ],
        task(end_step),
    ];
}

workflow! {
    /// The same saga with `fault`: compensated, then the instance faults.
    pub workflow SagaFaults(MyData) = sequence [
        task(say_hello),
        saga(fault) [
            task(step_1).compensate(undo_1),
            task(step_2).compensate(undo_2),
            task(step_3),
        ],
        task(end_step),
    ];
}

#[test]
fn saga_sample_compensates_completed_steps_and_continues() {
    let data = run::<SagaSample>(MyData::default());
    // The failed attempt's own changes are dropped (FLT-4), so `2` is not in the log; the
    // failed task is compensated first, its effects may be partial, then the completed ones
    // newest first (FLT-11), as workflow-core prints `undo 2` before `undo 1`.
    assert_eq!(log(&data), ["Hello", "1", "undo 2", "undo 1", "end"]);
}

#[test]
fn saga_with_fault_compensates_then_faults() {
    block_on(async {
        let rt = Runtime::builder().register::<SagaFaults>().build().unwrap();
        let started = rt.start::<SagaFaults>(MyData::default()).await.unwrap();
        assert_eq!(started.status, WorkflowStatus::Faulted);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        let data: MyData = serde_json::from_value(snapshot.state.data().clone()).unwrap();
        assert_eq!(log(&data), ["Hello", "1", "undo 2", "undo 1"]);
    });
}

// ---- EndStep: `finish` inside an endless loop ends the instance -------------------------------

fn always(_: &MyData) -> bool {
    true
}
async fn start_step(ctx: &mut TaskContext<MyData>) {
    say(ctx, "start");
}
async fn mid_step(ctx: &mut TaskContext<MyData>) {
    ctx.data_mut().counter += 1;
    say(ctx, "mid");
}

workflow! {
    /// workflow-core's EndStep scenario: `EndWorkflow()` inside `While(true)`.
    pub workflow EndStepSample(MyData) = sequence [
        task(start_step),
        while(always) [task(mid_step), finish],
        task(end_step),
    ];
}

#[test]
fn end_step_sample_finishes_the_instance_from_inside_a_loop() {
    let data = run::<EndStepSample>(MyData::default());
    assert_eq!(data.counter, 1);
    assert_eq!(log(&data), ["start", "mid"]);
}

// `break` leaves the nearest loop only (ACT-29).
fn is_third(data: &MyData) -> bool {
    data.counter == 3
}

workflow! {
    pub workflow BreakSample(MyData) = sequence [
        while(always) [task(mid_step), if(is_third) [break]],
        task(end_step),
    ];
}

#[test]
fn break_leaves_the_loop_and_the_sequence_goes_on() {
    let data = run::<BreakSample>(MyData::default());
    assert_eq!(data.counter, 3);
    assert_eq!(log(&data), ["mid", "mid", "mid", "end"]);
}

// A structured switch (ACT-14) with `first` and `any`.
fn over_1(data: &MyData) -> bool {
    data.counter > 1
}
fn over_2(data: &MyData) -> bool {
    data.counter > 2
}
async fn one(ctx: &mut TaskContext<MyData>) {
    say(ctx, "over 1");
}
async fn two(ctx: &mut TaskContext<MyData>) {
    say(ctx, "over 2");
}
async fn neither(ctx: &mut TaskContext<MyData>) {
    say(ctx, "neither");
}

workflow! {
    pub workflow SwitchFirst(MyData) = sequence [
        switch { a: over_1 => [task(one)], b: over_2 => [task(two)], default => [task(neither)] },
    ];
}

workflow! {
    pub workflow SwitchAny(MyData) = sequence [
        switch(any) { a: over_1 => [task(one)], b: over_2 => [task(two)], default => [task(neither)] },
    ];
}

#[test]
fn switch_runs_the_first_or_every_matching_case() {
    let three = MyData {
        counter: 3,
        ..MyData::default()
    };
    assert_eq!(log(&run::<SwitchFirst>(three.clone())), ["over 1"]);
    assert_eq!(log(&run::<SwitchAny>(three)), ["over 1", "over 2"]);
    assert_eq!(log(&run::<SwitchFirst>(MyData::default())), ["neither"]);
    assert_eq!(log(&run::<SwitchAny>(MyData::default())), ["neither"]);
}

// `set` (ACT-28) and `correlate` (ACT-27).
fn doubled(data: &MyData) -> u32 {
    data.counter * 2
}
fn order_key(data: &MyData) -> String {
    format!("order-{}", data.counter)
}
async fn read_variable(ctx: &mut TaskContext<MyData>) -> Result<(), TaskError> {
    let value: u32 = ctx.variable("twice")?;
    say(ctx, format!("twice = {value}"));
    Ok(())
}

workflow! {
    pub workflow Variables(MyData) = sequence [
        set(twice = doubled),
        correlate(order_key),
        task(read_variable),
    ];
}

#[test]
fn set_and_correlate_are_steps() {
    block_on(async {
        let rt = Runtime::builder().register::<Variables>().build().unwrap();
        let started = rt
            .start::<Variables>(MyData {
                counter: 21,
                ..MyData::default()
            })
            .await
            .unwrap();
        assert_eq!(started.status, WorkflowStatus::Finished);
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.state.correlation_id(), Some("order-21"));
        let data: MyData = serde_json::from_value(snapshot.state.data().clone()).unwrap();
        assert_eq!(log(&data), ["twice = 42"]);
    });
}

// ---- Sub-workflows with input and assign (ACT-24), written in the macro -----------------------

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shipping {
    lines: u32,
    tracking: Option<String>,
}

async fn label(ctx: &mut TaskContext<Shipping>) {
    let lines = ctx.data().lines;
    ctx.data_mut().tracking = Some(format!("TRK-{lines}"));
}

workflow! {
    pub workflow ShipChild(Shipping) = sequence [task(label)];
}

fn shipping_input(data: &MyData) -> Shipping {
    Shipping {
        lines: data.counter,
        tracking: None,
    }
}
fn take_tracking(data: &mut MyData, shipping: Shipping) {
    data.log.push(shipping.tracking.unwrap_or_default());
}

workflow! {
    pub workflow ShipParent(MyData) = sequence [
        workflow(ShipChild).input(shipping_input).assign_with(take_tracking),
        task(say_goodbye),
    ];
}

#[test]
fn sub_workflow_input_and_assign_are_written_in_the_macro() {
    let data = block_on(async {
        let rt = Runtime::builder()
            .register::<ShipChild>()
            .register::<ShipParent>()
            .build()
            .unwrap();
        let started = rt
            .start::<ShipParent>(MyData {
                counter: 7,
                ..MyData::default()
            })
            .await
            .unwrap();
        let completion = rt
            .await_completion(&started.instance_id, Duration::from_secs(5))
            .await
            .unwrap();
        let Completion::Finished(output) = completion else {
            panic!("{completion:?}");
        };
        serde_json::from_value::<MyData>(output).unwrap()
    });
    assert_eq!(log(&data), ["TRK-7", "Goodbye"]);
}
