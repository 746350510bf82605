#![allow(dead_code)]

// A transition copied into a second state with its name: one error, on the name the user
// repeated, and none about the action id the macro derives from it (`reply_action`).

use workflow_runtime::{state_machine, TaskContext};

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

async fn note_reply(_ctx: &mut TaskContext<Ticket>) {}

#[state_machine(data = Ticket, initial = Assigned)]
pub enum TicketFlow {
    #[on(reply: event("ticket.reply").key(ticket_id) => WaitingOnCustomer, action = note_reply)]
    Assigned,
    #[on(reply: event("ticket.customer_reply").key(ticket_id) => Assigned, action = note_reply)]
    WaitingOnCustomer,
}

fn main() {}
