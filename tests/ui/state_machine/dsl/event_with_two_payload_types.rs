#![allow(dead_code)]

// One event name waited for with two payload types: a stimulus carries one payload, so one
// of the waits would reject it. One error, on the second type.

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub text: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Rating {
    pub stars: u8,
}

#[state_machine(data = Ticket, initial = Open)]
pub enum TicketFlow {
    #[on(answer: event::<Reply>("ticket.reply").key(ticket_id) => Waiting)]
    Open,
    #[on(again: event::<Rating>("ticket.reply").key(ticket_id) => Open)]
    Waiting,
}

fn main() {}
