//! What a send reports (RT-23): a stimulus a state machine's guard declines is listed as
//! declined, with the instance, the transition and the condition (SM-4), besides the instance
//! being resumed; a stimulus that no instance waits for says it was queued and why, and a send
//! by key alone names the instances with its key, finished ones included (RT-36). Every
//! scenario runs on the `MemoryStore` and on a `SqliteStore` in a temporary file.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{MemoryStore, SqliteStore, Storage};
use workflow_runtime::{
    AddressedInstance, Declined, Runtime, Stimulus, WorkflowStatus, state_machine,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    id: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Assignment {
    agent: String,
}

fn names_an_agent(_ticket: &Ticket, assignment: &Assignment) -> bool {
    !assignment.agent.is_empty()
}

#[state_machine(data = Ticket, initial = Open, name = "ReportedTicket")]
pub enum TicketFlow {
    #[on(assign: event::<Assignment>("ticket.assign").key(id) => Assigned, when = names_an_agent)]
    Open,
    #[on(close: event("ticket.close").key(id) => Closed)]
    Assigned,
    Closed,
}

fn stores() -> Vec<(&'static str, Storage, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("reports.db")).unwrap();
    vec![
        ("memory", Arc::new(MemoryStore::new()).into(), None),
        ("sqlite", Arc::new(sqlite).into(), Some(dir)),
    ]
}

fn runtime(store: &Storage) -> Runtime {
    Runtime::builder()
        .store(store.clone())
        .register::<TicketFlow>()
        .inbox_worker(false)
        .build()
        .unwrap()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

fn assign(key: &str, agent: &str) -> Stimulus {
    TicketFlow::ticket_assign(
        key,
        Assignment {
            agent: agent.to_owned(),
        },
    )
}

#[test]
fn a_stimulus_the_guard_declines_is_reported_as_declined() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let id = rt
                .start::<TicketFlow>(Ticket { id: "T-2".into() })
                .await
                .unwrap()
                .instance_id;
            let report = rt.send(assign("T-2", "")).await.unwrap();
            // It ran (the stimulus is consumed), and it says its transition declined.
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            assert_eq!(
                report.declined,
                vec![Declined {
                    instance_id: id.clone(),
                    state: "Open".into(),
                    transition: "assign".into(),
                    condition: Some("names_an_agent".into()),
                }],
                "{label}"
            );
            let text = report.to_string();
            assert!(
                text.contains(&format!(
                    "declined: {id} stayed in `Open`: transition `assign` declined by its condition `names_an_agent`"
                )),
                "{label}: {text}"
            );
            // A stimulus the guard accepts is not declined.
            let report = rt.send(assign("T-2", "ada")).await.unwrap();
            assert_eq!(report.resumed.len(), 1, "{label}: {report:?}");
            assert!(report.declined.is_empty(), "{label}: {report:?}");
            let state = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(state.current_state(), Some("Assigned"), "{label}");
        });
    }
}

#[test]
fn a_stimulus_no_instance_waits_for_says_why_it_was_queued() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let id = rt
                .start::<TicketFlow>(Ticket { id: "T-3".into() })
                .await
                .unwrap()
                .instance_id;
            assert_eq!(
                rt.send(assign("T-3", "ada")).await.unwrap().resumed.len(),
                1
            );
            // Addressed to the instance, which is `Assigned` and waits for `ticket.close`.
            let report = rt
                .send(assign("T-3", "bob").instance(id.clone()))
                .await
                .unwrap();
            let item = report.inbox_item.clone().expect("queued");
            let because = report.inbox_because.clone().expect("why it was queued");
            assert_eq!(
                because.addressed,
                vec![AddressedInstance {
                    instance_id: id.clone(),
                    status: WorkflowStatus::Suspended,
                    at: vec!["Assigned".into()],
                    waiting_for: vec!["ticket.close".into()],
                }],
                "{label}"
            );
            assert!(because.expires_at > 0, "{label}");
            assert_eq!(
                report.to_string(),
                format!(
                    "stimulus {}: kept in the inbox as {item}: no instance waits for it now ({id} is Suspended at `Assigned`, waiting for `ticket.close`); delivered if one comes to wait for it before it expires, else dead-lettered",
                    report.stimulus_id
                ),
                "{label}"
            );
            // Finished: a send by key finds nothing waiting, and says so.
            let closed = rt.send(TicketFlow::ticket_close("T-3")).await.unwrap();
            assert_eq!(closed.resumed.len(), 1, "{label}: {closed:?}");
            let late = rt.send(TicketFlow::ticket_close("T-3")).await.unwrap();
            assert!(late.inbox_item.is_some(), "{label}: {late:?}");
            let because = late.inbox_because.clone().expect("why it was queued");
            assert!(because.by_key, "{label}: {because:?}");
            assert!(
                late.to_string().contains("no instance waits for it now"),
                "{label}: {late}"
            );
        });
    }
}

#[test]
fn a_send_by_key_to_a_finished_instance_says_the_instance_with_that_key_finished() {
    for (label, store, _dir) in stores() {
        block_on(async {
            let rt = runtime(&store);
            let id = rt
                .start::<TicketFlow>(Ticket { id: "T-2".into() })
                .await
                .unwrap()
                .instance_id;
            // Another ticket, live, whose key differs: not named.
            rt.start::<TicketFlow>(Ticket { id: "T-9".into() })
                .await
                .unwrap();
            assert_eq!(
                rt.send(assign("T-2", "ada")).await.unwrap().resumed.len(),
                1
            );
            let closed = rt.send(TicketFlow::ticket_close("T-2")).await.unwrap();
            assert_eq!(closed.resumed.len(), 1, "{label}: {closed:?}");
            let state = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(state.status(), WorkflowStatus::Finished, "{label}");

            let late = rt.send(TicketFlow::ticket_close("T-2")).await.unwrap();
            let item = late.inbox_item.clone().expect("queued");
            let because = late.inbox_because.clone().expect("why it was queued");
            assert!(because.by_key, "{label}: {because:?}");
            assert_eq!(
                because.addressed,
                vec![AddressedInstance {
                    instance_id: id.clone(),
                    status: WorkflowStatus::Finished,
                    at: vec!["Closed".into()],
                    waiting_for: Vec::new(),
                }],
                "{label}"
            );
            assert_eq!(
                late.to_string(),
                format!(
                    "stimulus {}: kept in the inbox as {item}: no instance waits for it now (with its key: {id} is Finished at `Closed`); delivered if one comes to wait for it before it expires, else dead-lettered",
                    late.stimulus_id
                ),
                "{label}"
            );

            // A key no instance ever waited with names none.
            let unknown = rt.send(TicketFlow::ticket_close("T-404")).await.unwrap();
            let because = unknown.inbox_because.clone().expect("why it was queued");
            assert!(because.addressed.is_empty(), "{label}: {because:?}");
        });
    }
}
