//! A valid loop (its head dominates the body and the body waits), a fork into an explicit
//! `any` join, and a sub-workflow started by type.
use std::time::Duration;

use workflow_runtime::{workflow, Outcome, TaskContext, TaskError, Workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Data {
    pub tries: u32,
}

async fn attempt(ctx: &mut TaskContext<Data>) -> Result<Outcome, TaskError> {
    ctx.data_mut().tries += 1;
    Ok(Outcome::named(if ctx.data().tries < 3 { "again" } else { "ok" }))
}
async fn notify(_ctx: &mut TaskContext<Data>) {}

mod steps {
    pub(crate) async fn finish(_ctx: &mut workflow_runtime::TaskContext<super::Data>) {}
}

workflow! {
    pub workflow Child(Data) = sequence [task(notify)];
}

workflow! {
    /// Retries, then races a reminder against a reply.
    pub workflow Retry(Data) {
        head = task(attempt) -> [again, ok];
        pause = after(Duration::from_secs(10));
        split = fork [reply, reminder];
        reply = event("reply");
        reminder = after(hours(1));
        first = join(any);
        child = workflow(Child);
        closing = task(steps::finish);

        start -> head;
        head.again -> pause -> head;
        head.ok -> split;
        split.reply -> reply -> first;
        split.reminder -> reminder -> first;
        first -> child -> closing;
    }
}

fn main() {
    assert_eq!(Retry::NODES.len(), 8);
    assert!(Retry::registry().has_task("steps::finish"));
    assert_eq!(Retry::version(), Retry::definition().fingerprint());
    assert_eq!(Child::NODES, ["notify"]);
}
