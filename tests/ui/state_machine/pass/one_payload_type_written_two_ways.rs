//! One event name with its payload type written two ways (`Reply`, `crate::Reply`): the same
//! type, so no error, and the typed constructor takes it.

use workflow_runtime::state_machine;

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Ticket {
    pub ticket_id: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub text: String,
}

#[state_machine(data = Ticket, initial = Open)]
pub enum TicketFlow {
    #[on(answer: event::<Reply>("ticket.reply").key(ticket_id) => Waiting)]
    Open,
    #[on(again: event::<crate::Reply>("ticket.reply").key(ticket_id) => Open)]
    Waiting,
}

fn main() {
    let stimulus = TicketFlow::ticket_reply("T-1", Reply { text: "hi".into() });
    assert_eq!(stimulus.name, "ticket.reply");
}
