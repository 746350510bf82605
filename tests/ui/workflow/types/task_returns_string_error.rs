use workflow_runtime::{TaskContext, workflow};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Job {
    done: bool,
}

async fn print(ctx: &mut TaskContext<Job>) -> Result<(), String> {
    ctx.data_mut().done = true;
    Err("the printer is on fire".to_owned())
}

workflow! {
    pub workflow Printing(Job) = sequence [task(print)];
}

fn main() {}
