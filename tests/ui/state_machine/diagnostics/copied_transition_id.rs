#![allow(dead_code)]

// The same with an explicit `id = ".."` copied: one error, on the id, and none about the
// action id derived from it (`reply_action`).

use workflow_runtime::{state_machine, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

async fn note_reply(_ctx: &mut TaskContext<Ticket>) {}

#[state_machine(data = Ticket, initial = Assigned)]
pub enum TicketFlow {
    #[on(answer: event("ticket.reply") => WaitingOnCustomer, id = "reply", action = note_reply)]
    Assigned,
    #[on(customer_answer: event("ticket.customer_reply") => Assigned, id = "reply", action = note_reply)]
    WaitingOnCustomer,
}

fn main() {}
