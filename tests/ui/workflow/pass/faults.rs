//! Retry policies, attempt timeouts, compensations, saga scopes, commit strategies, cron,
//! repeating timers with their missed policy and `start_at` with a zone (TM-11, TM-16,
//! TM-19, FLT-2, ENG-32) lower into the definition.

use workflow_runtime::__private::model::{
    Activity, CommitStrategy, Decimal, Missed, NodeCommit, RetryPolicy, SagaOnFailure,
};
use workflow_runtime::{workflow, TaskContext, Workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn reserve(_ctx: &mut TaskContext<Order>) {}
async fn release(_ctx: &mut TaskContext<Order>) {}
async fn charge(_ctx: &mut TaskContext<Order>) {}
async fn refund(_ctx: &mut TaskContext<Order>) {}
async fn ship(_ctx: &mut TaskContext<Order>) {}
async fn apologize(_ctx: &mut TaskContext<Order>) {}
async fn report(_ctx: &mut TaskContext<Order>) {}

workflow! {
    #[workflow(retry(attempts = 5, backoff = secs(1)..mins(5)), commit = after_each_activity)]
    pub workflow Checkout(Order) {
        booking = saga(continue) [
            task(reserve).compensate(release),
            task(charge)
                .retry(attempts = 5, backoff = secs(1)..mins(1), multiplier = 2, jitter = 0.2, on = [unavailable])
                .timeout(secs(30))
                .compensate(refund)
                .commit(before),
        ];
        send = task(ship);
        sorry = task(apologize);

        start -> booking -> send;
        booking.compensated -> sorry;
    }
}

workflow! {
    #[workflow(saga = fault, commit = periodic(secs(5)))]
    pub workflow Nightly(Order) = sequence [
        cron("0 2 * * MON-FRI", tz = "+02:00"),
        task(reserve).compensate(release),
        task(report),
    ];
}

workflow! {
    pub workflow Berlin(Order) {
        tick = cron("0 9 * * MON-FRI", tz = "Europe/Berlin", missed = backfill(3)).trigger();
        run = task(report);

        tick -> run;
    }
}

workflow! {
    pub workflow Ticker(Order) {
        tick = every(mins(5)).trigger();
        run = task(report);

        tick -> run;
    }
}

workflow! {
    pub workflow Skipping(Order) {
        tick = every(mins(5), missed = skip).trigger();
        run = task(report);

        tick -> run;
    }
}

workflow! {
    pub workflow Opening(Order) {
        open = start_at("2026-10-25T02:30:00", tz = "Europe/Berlin").trigger();
        run = task(report);

        open -> run;
    }
}

workflow! {
    pub workflow Later(Order) = sequence [
        start_at("2026-03-29T09:00:00Z"),
        task(report),
    ];
}

workflow! {
    pub workflow Parent(Order) {
        child = workflow(Ticker).timeout(hours(1));
        send = task(ship);
        late = task(apologize);

        start -> child -> send;
        child.timeout -> late;
    }
}

fn main() {
    let Activity::Flowchart(parent) = &Parent::definition().root else { panic!() };
    let Activity::SubWorkflow(child) = &parent.nodes[0] else { panic!() };
    assert_eq!(child.deadline_ms, Some(3_600_000));

    let definition = Checkout::definition();
    assert_eq!(
        definition.retry,
        Some(RetryPolicy {
            max_attempts: Some(5),
            initial_delay_ms: Some(1_000),
            max_delay_ms: Some(300_000),
            ..RetryPolicy::default()
        })
    );
    assert_eq!(definition.commit_strategy, Some(CommitStrategy::AfterEachActivity));
    let Activity::Flowchart(chart) = &definition.root else { panic!() };
    let Activity::Saga(saga) = &chart.nodes[0] else { panic!() };
    assert_eq!(saga.on_failure, SagaOnFailure::CompensateThenContinue);
    let Activity::Sequence(body) = &*saga.body else { panic!() };
    let Activity::Task(charge) = &body.steps[1] else { panic!() };
    assert_eq!(
        charge.retry,
        Some(RetryPolicy {
            max_attempts: Some(5),
            initial_delay_ms: Some(1_000),
            max_delay_ms: Some(60_000),
            multiplier: Some(Decimal::from_millis(2_000)),
            jitter: Some(Decimal::from_millis(200)),
            retry_on: Some(vec!["unavailable".to_owned()]),
        })
    );
    assert_eq!(charge.attempt_timeout_ms, Some(30_000));
    assert_eq!(charge.compensation.as_deref(), Some("refund"));
    assert_eq!(charge.commit, Some(NodeCommit::Before));
    let registry = Checkout::registry();
    assert!(registry.has_task("refund") && registry.has_task("release"));

    let nightly = Nightly::definition();
    assert_eq!(nightly.commit_strategy, Some(CommitStrategy::Periodic { interval_ms: 5_000 }));
    let Activity::Saga(root) = &nightly.root else { panic!() };
    assert_eq!(root.on_failure, SagaOnFailure::CompensateThenFault);
    assert_eq!(root.body.id(), "body");
    let Activity::Sequence(steps) = &*root.body else { panic!() };
    let Activity::Cron(cron) = &steps.steps[0] else { panic!() };
    assert_eq!(cron.expression, "0 2 * * MON-FRI");
    assert_eq!(cron.time_zone.as_deref(), Some("+02:00"));

    let Activity::Flowchart(berlin) = &Berlin::definition().root else { panic!() };
    let Activity::Cron(cron) = &berlin.nodes[0] else { panic!() };
    assert_eq!(cron.time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!((cron.missed, cron.trigger), (Missed::Backfill(3), true));

    let Activity::Flowchart(ticker) = &Ticker::definition().root else { panic!() };
    let Activity::Timer(timer) = &ticker.nodes[0] else { panic!() };
    assert_eq!((timer.interval_ms, timer.trigger), (300_000, true));
    assert_eq!(timer.missed, Missed::Once);

    let Activity::Flowchart(skipping) = &Skipping::definition().root else { panic!() };
    let Activity::Timer(timer) = &skipping.nodes[0] else { panic!() };
    assert_eq!((timer.missed, timer.trigger), (Missed::Skip, true));

    let Activity::Flowchart(opening) = &Opening::definition().root else { panic!() };
    let Activity::StartAt(open) = &opening.nodes[0] else { panic!() };
    assert_eq!(open.at.as_deref(), Some("2026-10-25T02:30:00"));
    assert_eq!(open.time_zone.as_deref(), Some("Europe/Berlin"));
    assert!(open.trigger);

    let Activity::Sequence(later) = &Later::definition().root else { panic!() };
    let Activity::StartAt(wait) = &later.steps[0] else { panic!() };
    assert_eq!((wait.at.as_deref(), wait.time_zone.as_deref()), (Some("2026-03-29T09:00:00Z"), None));
    assert!(!wait.trigger);
}
