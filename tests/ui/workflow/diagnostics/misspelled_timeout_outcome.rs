#![allow(dead_code)]

// `ack.timout` for `ack.timeout`: one error, on the misspelled outcome, with its did-you-mean;
// the deadline is not also reported as having no `timeout` connection.

use workflow_runtime::{workflow, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

async fn escalate(_ctx: &mut TaskContext<Ticket>) {}
async fn close(_ctx: &mut TaskContext<Ticket>) {}

workflow! {
    pub workflow Escalation(Ticket) {
        ack = event("ticket.ack").key(ticket_id).timeout(mins(30));
        escalate = task(escalate);
        close = task(close);

        start -> ack -> close;
        ack.timout -> escalate;
    }
}

fn main() {}
