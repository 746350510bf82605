//! The small things a program reaches for: one import, a report that reads as a sentence, a
//! wait that hands back the workflow's own data type.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use workflow_runtime::AwaitError;
use workflow_runtime::prelude::*;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Parcel {
    id: String,
    scans: u32,
}

async fn scan(ctx: &mut TaskContext<Parcel>) {
    ctx.data_mut().scans += 1;
}

#[state_machine(data = Parcel, initial = InTransit)]
pub enum Delivery {
    #[on(arrive: event("arrived").key(id) => Delivered, action = scan)]
    InTransit,
    Delivered,
}

fn runtime() -> Runtime {
    Runtime::builder().register::<Delivery>().build().unwrap()
}

fn parcel(id: &str) -> Parcel {
    Parcel {
        id: id.to_owned(),
        scans: 0,
    }
}

#[tokio::test]
async fn a_send_report_reads_as_one_line_saying_what_happened() {
    let rt = runtime();
    let id = rt
        .start::<Delivery>(parcel("p-1"))
        .await
        .unwrap()
        .instance_id;
    let report = rt.send(Stimulus::new("arrived").key("p-1")).await.unwrap();
    let line = report.to_string();
    assert!(line.contains(&format!("resumed 1 ({id})")), "{line}");
    assert!(!line.contains('\n'), "{line}");

    let report = rt
        .send(Stimulus::new("arrived").key("p-nobody"))
        .await
        .unwrap();
    let line = report.to_string();
    assert!(line.contains("kept in the inbox as"), "{line}");
    assert!(line.contains("no instance waits for it now"), "{line}");
}

#[tokio::test]
async fn await_data_hands_back_the_workflows_own_data_type() {
    let rt = runtime();
    let id = rt
        .start::<Delivery>(parcel("p-2"))
        .await
        .unwrap()
        .instance_id;
    rt.send(Stimulus::new("arrived").key("p-2")).await.unwrap();
    let done: Parcel = rt
        .await_data::<Delivery>(&id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        done,
        Parcel {
            id: "p-2".into(),
            scans: 1
        }
    );

    let other = rt
        .start::<Delivery>(parcel("p-3"))
        .await
        .unwrap()
        .instance_id;
    rt.cancel(&other, Some("lost in transit".into()))
        .await
        .unwrap();
    let error = rt
        .await_data::<Delivery>(&other, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(error, AwaitError::Cancelled { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .ends_with("was cancelled: lost in transit"),
        "{error}"
    );
}

#[tokio::test]
async fn a_send_to_a_finished_instance_says_so_instead_of_queueing() {
    let rt = runtime();
    let options = StartOptions {
        correlation_id: Some("truck-9".to_owned()),
        ..StartOptions::default()
    };
    let id = rt
        .start_with::<Delivery>(parcel("p-3"), options)
        .await
        .unwrap()
        .instance_id;
    rt.send(Stimulus::new("arrived").key("p-3").correlation("truck-9"))
        .await
        .unwrap();

    // The same event again, for the same conversation: too late, and said so.
    let late = rt
        .send(Stimulus::new("arrived").key("p-3").correlation("truck-9"))
        .await
        .unwrap();
    assert_eq!(late.inbox_item, None, "{late}");
    assert_eq!(
        late.finished
            .iter()
            .map(|s| (s.instance_id.as_str(), s.status))
            .collect::<Vec<_>>(),
        [(id.as_str(), WorkflowStatus::Finished)]
    );
    assert!(
        late.to_string()
            .contains(&format!("too late: {id} is Finished")),
        "{late}"
    );

    // Sent to the instance itself, queued or inline: refused with its status.
    for stimulus in [
        Stimulus::new("arrived").instance(id.clone()),
        Stimulus::new("arrived").instance(id.clone()).via_inbox(),
    ] {
        let refused = rt.send(stimulus).await.unwrap_err();
        assert!(
            matches!(
                refused,
                workflow_runtime::SendError::InstanceTerminal {
                    status: WorkflowStatus::Finished,
                    ..
                }
            ),
            "{refused:?}"
        );
    }
}
