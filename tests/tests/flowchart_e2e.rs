//! Flowcharts declared with `workflow!` run end to end through the `Runtime`: the
//! expense approval on each of its paths, the manual one resumed by an `expense.decision`
//! event whose payload chooses the outcome (ACT-19, FC-4); a decision with an implicit join
//! (FC-12, FC-13); a loop that waits on each round (FC-15, FC-16); the sequence form (ACT-12).
//! And the JSON twin: the same expense flowchart loaded from `workflow-model/docs/expense.json`
//! with a registry built by hand runs the same way, and is refused at build without the
//! payload's outcome mapping (ACT-V8, ENG-47).

mod common;

use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow_runtime::{
    BuildError, ChooseOutcome, Completion, Outcome, Registry, Runtime, Stimulus, SubStatus,
    TaskContext, TaskError, Workflow, WorkflowStatus, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpenseData {
    expense_id: String,
    amount: u64,
    rounds: u32,
    log: Vec<String>,
}

/// A manager's decision: `approved` or `rejected` (any other verdict is not a declared port).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decision {
    verdict: String,
}

impl ChooseOutcome for Decision {
    fn outcome(&self) -> &str {
        &self.verdict
    }
}

fn log(ctx: &mut TaskContext<ExpenseData>, step: &str) {
    ctx.data_mut().log.push(step.to_owned());
}

async fn submit_expense(ctx: &mut TaskContext<ExpenseData>) {
    log(ctx, "submit");
}
async fn auto_review(ctx: &mut TaskContext<ExpenseData>) -> Result<Outcome, TaskError> {
    log(ctx, "review");
    let amount = ctx.data().amount;
    Ok(Outcome::named(match amount {
        0..100 => "approved",
        100..10_000 => "manual",
        _ => "rejected",
    }))
}
async fn pay_out(ctx: &mut TaskContext<ExpenseData>) {
    log(ctx, "pay");
}
async fn notify_rejected(ctx: &mut TaskContext<ExpenseData>) {
    log(ctx, "reject");
}

workflow! {
    /// Expense approval.
    pub workflow Expense(ExpenseData) {
        submit  = task(submit_expense);
        review  = task(auto_review) -> [approved, rejected, manual];
        manager = event::<Decision>("expense.decision").key(expense_id) -> [approved, rejected];
        pay     = task(pay_out);
        reject  = task(notify_rejected);

        start -> submit -> review;
        review.approved -> pay;   review.rejected -> reject;   review.manual -> manager;
        manager.approved -> pay;  manager.rejected -> reject;
    }
}

const EXPENSE_JSON: &str = include_str!("../../workflow-model/docs/expense.json");

fn expense(id: &str, amount: u64) -> ExpenseData {
    ExpenseData {
        expense_id: id.to_owned(),
        amount,
        ..ExpenseData::default()
    }
}

fn macro_runtime() -> Runtime {
    Runtime::builder().register::<Expense>().build().unwrap()
}

/// The expense registry by hand, for the JSON twin: the same fns under the names the JSON uses,
/// and the outcome mapping of its event's `payload` (ACT-19).
fn hand_registry() -> Registry<ExpenseData> {
    Registry::new()
        .task("submit_expense", |ctx| {
            Box::pin(async {
                submit_expense(ctx).await;
                Ok(Outcome::done())
            })
        })
        .task("auto_review", |ctx| Box::pin(auto_review(ctx)))
        .task("pay_out", |ctx| {
            Box::pin(async {
                pay_out(ctx).await;
                Ok(Outcome::done())
            })
        })
        .task("notify_rejected", |ctx| {
            Box::pin(async {
                notify_rejected(ctx).await;
                Ok(Outcome::done())
            })
        })
        .outcome::<Decision>("Decision")
}

fn json_runtime() -> Runtime {
    Runtime::builder()
        .register_json(EXPENSE_JSON, hand_registry())
        .build()
        .unwrap()
}

async fn start(rt: &Runtime, data: ExpenseData) -> workflow_runtime::Started {
    rt.start_by_name(
        "Expense",
        serde_json::to_value(data).unwrap(),
        Default::default(),
    )
    .await
    .unwrap()
}

async fn finished_log(rt: &Runtime, id: &str) -> Vec<String> {
    let completion = rt
        .await_completion(id, Duration::from_secs(1))
        .await
        .unwrap();
    let Completion::Finished(output) = completion else {
        panic!("not finished: {completion:?}")
    };
    serde_json::from_value::<ExpenseData>(output).unwrap().log
}

fn decide(id: &str, verdict: &str) -> Stimulus {
    Stimulus::new("expense.decision")
        .key(id)
        .payload(json!({ "verdict": verdict }))
}

/// Every expense path on a runtime, macro-declared or JSON: the same results.
fn expense_paths(rt: &Runtime) {
    block_on(async {
        // FC-6 (the explicit start), FC-4: `review` completes with `approved` and only that
        // port is followed.
        let started = start(rt, expense("e-1", 50)).await;
        assert_eq!(started.status, WorkflowStatus::Finished);
        assert_eq!(
            finished_log(rt, &started.instance_id).await,
            ["submit", "review", "pay"]
        );

        // FC-4: `rejected` leads to `reject`; `pay` is never reached (FC-13 skips it).
        let started = start(rt, expense("e-2", 50_000)).await;
        assert_eq!(
            finished_log(rt, &started.instance_id).await,
            ["submit", "review", "reject"]
        );

        // ACT-19: `manual` waits on `expense.decision` keyed by the expense id (RT-3); the
        // payload chooses `approved` through `ChooseOutcome`, and routing follows it (FC-4).
        let approved = start(rt, expense("e-3", 500)).await;
        assert_eq!(approved.status, WorkflowStatus::Suspended);
        assert_eq!(approved.sub_status, Some(SubStatus::Waiting));
        let rejected = start(rt, expense("e-4", 500)).await;
        rt.send(decide("e-3", "approved")).await.unwrap();
        assert_eq!(
            finished_log(rt, &approved.instance_id).await,
            ["submit", "review", "pay"]
        );
        // The other instance's key did not match: it still waits, then is rejected.
        let snapshot = rt.get_state(&rejected.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.sub_status(), Some(SubStatus::Waiting));
        rt.send(decide("e-4", "rejected")).await.unwrap();
        assert_eq!(
            finished_log(rt, &rejected.instance_id).await,
            ["submit", "review", "reject"]
        );

        // FC-4, FLT-5: a payload choosing an outcome the event does not declare fails it for
        // good; the instance faults with the rule's message and the data is untouched.
        let maybe = start(rt, expense("e-5", 500)).await;
        rt.send(decide("e-5", "maybe")).await.unwrap();
        let snapshot = rt.get_state(&maybe.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Faulted);
        let incident = snapshot.state.incidents().last().unwrap();
        assert_eq!(
            incident.fault.message,
            "node `manager` completed with undeclared outcome `maybe`"
        );
        assert_eq!(
            snapshot.data::<ExpenseData>().unwrap().log,
            ["submit", "review"]
        );
    });
}

#[test]
fn the_macro_expense_runs_every_path() {
    let registry = Expense::registry();
    assert!(registry.has_outcome("Decision"));
    expense_paths(&macro_runtime());
}

#[test]
fn the_json_expense_with_a_hand_built_registry_runs_the_same_way() {
    expense_paths(&json_runtime());
}

#[test]
fn the_json_expense_without_the_outcome_mapping_is_refused_at_build() {
    let registry = Registry::<ExpenseData>::new()
        .task("submit_expense", |ctx| {
            Box::pin(async {
                submit_expense(ctx).await;
                Ok(Outcome::done())
            })
        })
        .task("auto_review", |ctx| Box::pin(auto_review(ctx)))
        .task("pay_out", |ctx| {
            Box::pin(async {
                pay_out(ctx).await;
                Ok(Outcome::done())
            })
        })
        .task("notify_rejected", |ctx| {
            Box::pin(async {
                notify_rejected(ctx).await;
                Ok(Outcome::done())
            })
        });
    let error = Runtime::builder()
        .register_json(EXPENSE_JSON, registry)
        .build()
        .unwrap_err();
    // ENG-47 with ACT-V8's message.
    assert_eq!(
        error,
        BuildError::EventWithoutOutcome {
            workflow: "Expense".into(),
            node: "manager".into(),
            payload: "Decision".into(),
        }
    );
    assert!(
        error.to_string().contains(
            "event `manager` declares outcomes but its payload type `Decision` does not choose one"
        ),
        "{error}"
    );
}

// ---- a decision with an implicit join (FC-12, FC-13) ------------------------------------

fn is_large(data: &ExpenseData) -> bool {
    data.amount >= 1_000
}
async fn audit(ctx: &mut TaskContext<ExpenseData>) {
    log(ctx, "audit");
}
async fn archive(ctx: &mut TaskContext<ExpenseData>) {
    log(ctx, "archive");
}

workflow! {
    /// Audits large expenses, then archives every one.
    pub workflow Audit(ExpenseData) {
        submit  = task(submit_expense);
        check   = decide(is_large);
        audit   = task(audit);
        archive = task(archive);

        start -> submit -> check;
        check.true -> audit -> archive;
        check.false -> archive;
    }
}

// FC-12: `archive` has two inbound connections, an implicit join waiting for every active
// one; FC-13: the branch not taken is skipped, so the join runs `archive` once either way.
#[test]
fn a_decision_with_an_implicit_join_runs_the_join_once() {
    block_on(async {
        let rt = Runtime::builder().register::<Audit>().build().unwrap();
        let large = rt.start::<Audit>(expense("a-1", 5_000)).await.unwrap();
        assert_eq!(large.status, WorkflowStatus::Finished);
        assert_eq!(
            finished_log(&rt, &large.instance_id).await,
            ["submit", "audit", "archive"]
        );
        let small = rt.start::<Audit>(expense("a-2", 5)).await.unwrap();
        assert_eq!(
            finished_log(&rt, &small.instance_id).await,
            ["submit", "archive"]
        );
    });
}

// ---- a loop (FC-15, FC-16) ---------------------------------------------------------------

async fn rework(ctx: &mut TaskContext<ExpenseData>) -> Result<Outcome, TaskError> {
    ctx.data_mut().rounds += 1;
    log(ctx, "rework");
    Ok(Outcome::named(if ctx.data().rounds < 3 {
        "again"
    } else {
        "approved"
    }))
}

workflow! {
    /// Sends the expense back until it is right.
    pub workflow Rework(ExpenseData) {
        check = task(rework) -> [again, approved];
        fixed = event("expense.fixed").key(expense_id);
        pay   = task(pay_out);

        start -> check;
        check.again -> fixed -> check;
        check.approved -> pay;
    }
}

// FC-15: `fixed -> check` is a valid backward connection (the loop waits on each round);
// FC-16: re-entering `check` runs it afresh, and the run state survives each commit.
#[test]
fn a_loop_waits_on_each_round_and_exits_on_its_port() {
    block_on(async {
        let rt = Runtime::builder().register::<Rework>().build().unwrap();
        let started = rt.start::<Rework>(expense("r-1", 10)).await.unwrap();
        let id = started.instance_id;
        for round in 1..=2 {
            let snapshot = rt.get_state(&id).await.unwrap().unwrap();
            assert_eq!(
                snapshot.sub_status(),
                Some(SubStatus::Waiting),
                "round {round}"
            );
            rt.send(Stimulus::new("expense.fixed").key("r-1"))
                .await
                .unwrap();
        }
        assert_eq!(
            finished_log(&rt, &id).await,
            ["rework", "rework", "rework", "pay"]
        );
    });
}

// ---- the sequence form (ACT-12) ----------------------------------------------------------

workflow! {
    /// Archives an expense after a grace period.
    pub workflow Archive(ExpenseData) = sequence [
        task(audit),
        grace = after(secs(5)),
        task(archive),
    ];
}

// ACT-12: the steps run in order; the delay waits on a `wf.delay` bookmark (ACT-20; resumed
// here by id, as timers do not fire yet).
#[test]
fn the_sequence_form_runs_its_steps_in_order() {
    block_on(async {
        let rt = Runtime::builder().register::<Archive>().build().unwrap();
        let started = rt.start::<Archive>(expense("s-1", 10)).await.unwrap();
        assert_eq!(started.sub_status, Some(SubStatus::Waiting));
        let id = started.instance_id;
        let snapshot = rt.get_state(&id).await.unwrap().unwrap();
        assert_eq!(snapshot.data::<ExpenseData>().unwrap().log, ["audit"]);
        let delay = snapshot.state.bookmarks()[0].clone();
        assert_eq!(delay.name, "wf.delay");
        rt.resume_bookmark(&id, &delay.id, json!(null))
            .await
            .unwrap();
        assert_eq!(finished_log(&rt, &id).await, ["audit", "archive"]);
    });
}

// ACT-V8 for JSON: an event that declares its ports but names no payload type cannot have a
// mapping; it is refused at build too.
#[test]
fn a_json_event_with_ports_and_no_payload_is_refused_at_build() {
    let json = EXPENSE_JSON.replace(r#""payload": "Decision", "#, "");
    assert_ne!(json, EXPENSE_JSON);
    let error = Runtime::builder()
        .register_json(json, hand_registry())
        .build()
        .unwrap_err();
    assert!(
        matches!(&error, BuildError::EventWithoutOutcome { node, payload, .. } if node == "manager" && payload.is_empty()),
        "{error}"
    );
}

// RT-22, ACT-19: a payload that does not decode into the mapping's type
// cannot choose: the stimulus is rejected for the instance (reported with the instance, the
// node and the type, and dead-lettered `Rejected`); nothing is committed, so the instance is
// still waiting and keeps its bookmark.
#[test]
fn a_payload_that_does_not_decode_is_rejected_and_the_event_keeps_its_bookmark() {
    block_on(async {
        let rt = macro_runtime();
        let started = start(&rt, expense("e-9", 500)).await;
        let before = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        let report = rt
            .send(
                Stimulus::new("expense.decision")
                    .key("e-9")
                    .payload(json!({ "approved": true })),
            )
            .await
            .unwrap();
        assert!(report.resumed.is_empty(), "{report:?}");
        let [
            workflow_runtime::Rejection::PayloadDecode {
                instance,
                node,
                payload_type,
                message,
                ..
            },
        ] = report.rejected.as_slice()
        else {
            panic!("{report:?}");
        };
        assert_eq!(instance, &started.instance_id);
        assert!(node.ends_with("manager"), "{node}");
        assert!(payload_type.ends_with("Decision"), "{payload_type}");
        assert!(message.contains("does not decode into"), "{message}");
        let snapshot = rt.get_state(&started.instance_id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Suspended);
        assert!(snapshot.state.incidents().is_empty());
        assert_eq!(snapshot.state.bookmarks(), before.state.bookmarks());
        assert_eq!(snapshot.journal.len(), before.journal.len());
    });
}
