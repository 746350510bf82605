//! Retry policies and attempt timeouts on entry, exit, action and task-trigger tasks, and the
//! machine's default policy (FLT-2, FLT-17, ENG-32).

use workflow_runtime::__private::model::{Activity, Decimal, NodeCommit, RetryPolicy};
use workflow_runtime::{state_machine, TaskContext, Workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: String,
}

async fn confirm(_ctx: &mut TaskContext<Order>) {}
async fn log_exit(_ctx: &mut TaskContext<Order>) {}
async fn audit(_ctx: &mut TaskContext<Order>) {}
async fn record(_ctx: &mut TaskContext<Order>) {}

#[state_machine(data = Order, initial = New, retry(attempts = 5, backoff = secs(2)..mins(2)))]
pub enum Flow {
    #[entry(confirm.retry(attempts = 3, jitter = 0.5).timeout(secs(30)))]
    #[exit(log_exit.commit(after))]
    #[on(check: task(audit).retry(attempts = 2) => Done, action = record.timeout(secs(5)))]
    New,
    Done,
}

fn main() {
    let definition = Flow::definition();
    assert_eq!(
        definition.retry,
        Some(RetryPolicy {
            max_attempts: Some(5),
            initial_delay_ms: Some(2_000),
            max_delay_ms: Some(120_000),
            ..RetryPolicy::default()
        })
    );
    let Activity::StateMachine(machine) = &definition.root else { panic!() };
    let Some(Activity::Task(entry)) = &machine.states[0].entry else { panic!() };
    assert_eq!(entry.retry.as_ref().and_then(|r| r.jitter), Some(Decimal::from_millis(500)));
    assert_eq!(entry.attempt_timeout_ms, Some(30_000));
    let Some(Activity::Task(exit)) = &machine.states[0].exit else { panic!() };
    assert_eq!(exit.commit, Some(NodeCommit::After));
    let Some(Activity::Task(trigger)) = &machine.transitions[0].trigger else { panic!() };
    assert_eq!(trigger.retry.as_ref().and_then(|r| r.max_attempts), Some(2));
    let Some(Activity::Task(action)) = &machine.transitions[0].action else { panic!() };
    assert_eq!(action.attempt_timeout_ms, Some(5_000));
    assert_eq!(Flow::version(), definition.fingerprint());
}
