use workflow_runtime::{workflow, TaskContext, Workflow};

async fn only(_ctx: &mut TaskContext<()>) {}

workflow! {
    workflow Single(()) {
        only = task(only);
    }
}

workflow! {
    pub(crate) workflow Deferred(()) = sequence [
        task(only),
        after(secs(5)),
        again = task(only),
    ];
}

fn main() {
    // FC-6 step 5: the one node without an inbound connection starts.
    assert_eq!(Single::name(), "Single");
    assert_eq!(Single::NODE_ONLY, "only");
    assert_eq!(Deferred::NODES, ["only", "after_1", "again"]);
}
