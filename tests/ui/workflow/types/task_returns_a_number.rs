use workflow_runtime::{TaskContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pages: u32,
}

async fn count_pages(ctx: &mut TaskContext<Job>) -> u32 {
    ctx.data().pages
}

workflow! {
    pub workflow Counting(Job) = sequence [task(count_pages)];
}

fn main() {}
