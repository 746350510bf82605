#![allow(dead_code)]

// One event name waited for with two payload types: one error, on the second type.

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub text: String,
}

async fn answer(_ctx: &mut TaskContext<Ticket>) {}

workflow! {
    pub workflow Support(Ticket) {
        first = event::<Reply>("ticket.reply").key(ticket_id);
        work = task(answer);
        second = event::<String>("ticket.reply").key(ticket_id);

        start -> first -> work -> second;
    }
}

fn main() {}
