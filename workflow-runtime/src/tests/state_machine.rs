//! The unit scenarios of the state machine (SM-1 to SM-8), driving the machine through
//! the executor one work item at a time. Rule ids are in each test's name and comment.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use workflow_model::Definition;

use super::{Harness, Log, event, log_task, logging_registry, machine, state, transition};
use crate::Registry;
use crate::engine::executor::RunEnd;
use crate::engine::state::{ActivityStatus, JournalKind, SubStatus};

const LOGS: &[&str] = &[
    "New.entry",
    "New.exit",
    "Pay.action",
    "Paid.entry",
    "A.entry",
    "A.exit",
    "B.entry",
    "go",
    "s1",
    "s2",
    "a",
    "b",
    "x",
];

fn registry() -> Registry<Log> {
    logging_registry(LOGS).condition_with_payload("big_enough", |_: &Log, p: &serde_json::Value| {
        p["amount"].as_u64().unwrap_or(0) >= 10
    })
}

/// The fixture of section 5: initial `New`; `New` (entry, exit), `Paid` (entry), `Closed`;
/// `Pay` New->Paid (trigger, condition true, action), `Cancel` New->Closed (trigger,
/// condition true), `Close` Paid->Closed (trigger, no condition).
fn fixture() -> Definition {
    machine(
        "New",
        vec![
            state(
                "New",
                Some(log_task("New_entry", "New.entry")),
                Some(log_task("New_exit", "New.exit")),
            ),
            state("Paid", Some(log_task("Paid_entry", "Paid.entry")), None),
            state("Closed", None, None),
        ],
        vec![
            transition(
                Some("Pay"),
                "New",
                "Paid",
                Some(event("pay", "pay")),
                Some("yes"),
                Some(log_task("pay_action", "Pay.action")),
            ),
            transition(
                Some("Cancel"),
                "New",
                "Closed",
                Some(event("cancel", "cancel")),
                Some("yes"),
                None,
            ),
            transition(
                Some("Close"),
                "Paid",
                "Closed",
                Some(event("close", "close")),
                None,
                None,
            ),
        ],
    )
}

fn q(items: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    items
        .iter()
        .map(|(n, t)| ((*n).to_owned(), Some((*t).to_owned())))
        .collect()
}

/// Starts the fixture and runs until both of `New`'s triggers wait on their bookmarks.
fn armed_fixture() -> Harness {
    let mut h = Harness::new(&fixture(), registry());
    h.begin();
    h.drain();
    assert_eq!(h.bookmark_nodes(), ["root:pay", "root:cancel"]);
    h
}

// Scenario 1 (SM-1, SM-2): execute schedules the initial state's entry and no trigger.
#[test]
fn s01_sm1_sm2_execute_schedules_entry_of_initial_state_and_no_trigger() {
    let mut h = Harness::new(&fixture(), registry());
    h.begin();
    h.step();
    assert_eq!(h.queue(), q(&[("root:New_entry", "entering")]));
    assert_eq!(h.current().as_deref(), Some("New"));
    assert!(h.live("root:pay").is_empty() && h.live("root:cancel").is_empty());
}

// Scenario 2 (SM-3.3): when the entry completes, every trigger is armed with its key as tag.
#[test]
fn s02_sm3_entry_completion_arms_every_trigger_with_its_transition_key() {
    let mut h = Harness::new(&fixture(), registry());
    h.begin();
    h.step();
    h.step();
    assert_eq!(
        h.queue(),
        q(&[("root:pay", "0:Pay"), ("root:cancel", "1:Cancel")])
    );
    assert_eq!(h.root_status(), ActivityStatus::Running);
    h.drain();
    assert_eq!(h.bookmark_nodes(), ["root:pay", "root:cancel"]);
    assert_eq!(h.root_status(), ActivityStatus::Running);
}

// Scenario 3 (SM-4, SM-5 order): trigger -> source exit -> action -> set state -> target entry.
#[test]
fn s03_sm5_order_is_entry_trigger_exit_action_then_target_entry() {
    let mut h = armed_fixture();
    h.fire("root:pay", json!({}));
    assert_eq!(
        h.queue(),
        q(&[("root:New_exit", "0:Pay")]),
        "exit, not the action"
    );
    assert!(h.live("root:pay_action").is_empty());
    h.step();
    assert_eq!(h.queue(), q(&[("root:pay_action", "0:Pay")]));
    assert_eq!(
        h.current().as_deref(),
        Some("New"),
        "SM-5.4: not yet changed"
    );
    h.step();
    assert_eq!(h.current().as_deref(), Some("Paid"));
    assert_eq!(h.queue(), q(&[("root:Paid_entry", "entering")]));
    h.step();
    assert_eq!(h.queue(), q(&[("root:close", "2:Close")]));
    assert_eq!(
        h.log(),
        ["New.entry", "New.exit", "Pay.action", "Paid.entry"]
    );
    assert_eq!(
        h.completed(),
        [
            "root:New_entry",
            "root:pay",
            "root:New_exit",
            "root:pay_action",
            "root:Paid_entry"
        ]
    );
}

// Scenario 4 (SM-3, SM-4): an absent condition is true and empty slots advance synchronously.
#[test]
fn s04_sm4_absent_condition_is_true_and_empty_slots_advance_synchronously() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", None, None),
            state("C", None, None),
        ],
        vec![
            transition(None, "A", "B", None, None, None),
            transition(Some("go"), "B", "C", Some(event("go", "go")), None, None),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.step();
    assert_eq!(h.current().as_deref(), Some("B"), "A->B in the same step");
    assert_eq!(h.queue(), q(&[("root:go", "1:go")]));
    h.step();
    h.fire("root:go", json!(null));
    assert_eq!(
        h.current().as_deref(),
        Some("C"),
        "no exit, action or entry: same step"
    );
    assert_eq!(h.root_status(), ActivityStatus::Completed);
}

// Scenario 5 (SM-3.2): a true triggerless transition is taken right after the entry, and no
// trigger is scheduled.
#[test]
fn s05_sm3_triggerless_transition_taken_after_entry_without_arming_triggers() {
    let def = machine(
        "A",
        vec![
            state("A", Some(log_task("A_entry", "A.entry")), None),
            state("B", None, None),
            state("C", None, None),
        ],
        vec![
            transition(Some("go"), "A", "C", Some(event("go", "go")), None, None),
            transition(None, "A", "B", None, Some("yes"), None),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.step();
    h.step();
    assert_eq!(h.current().as_deref(), Some("B"));
    assert!(h.live("root:go").is_empty() && h.queue().is_empty());
    assert!(h.exec.state.bookmarks.is_empty());
}

// Scenario 6 (SM-3.3): a false triggerless condition lets the triggered transitions arm.
#[test]
fn s06_sm3_false_triggerless_condition_lets_triggers_be_scheduled() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", None, None),
            state("C", None, None),
        ],
        vec![
            transition(None, "A", "B", None, Some("no"), None),
            transition(Some("go"), "A", "C", Some(event("go", "go")), None, None),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.step();
    assert_eq!(h.current().as_deref(), Some("A"));
    assert_eq!(h.queue(), q(&[("root:go", "1:go")]));
}

// Scenario 7 (SM-3.4): all-false triggerless transitions leave the machine Running with
// nothing scheduled and no callbacks; the instance is stalled, never spinning.
#[test]
fn s07_sm3_all_false_triggerless_leaves_machine_running_with_nothing_pending() {
    let def = machine(
        "A",
        vec![state("A", None, None), state("B", None, None)],
        vec![
            transition(None, "A", "B", None, Some("no"), None),
            transition(None, "A", "B", None, Some("no"), None),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Suspended(SubStatus::Stalled));
    assert_eq!(h.current().as_deref(), Some("A"));
    assert_eq!(h.root_status(), ActivityStatus::Running);
    assert!(h.queue().is_empty() && h.root_callbacks().is_empty());
}

// Scenario 8 (SM-3.1, SM-7): a terminal state completes the machine (and the instance).
#[test]
fn s08_sm7_terminal_state_completes_the_machine() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", Some(log_task("B_entry", "B.entry")), None),
        ],
        vec![transition(None, "A", "B", None, None, None)],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.current().as_deref(), Some("B"));
    assert_eq!(h.root_status(), ActivityStatus::Completed);
    assert_eq!(h.log(), ["B.entry"]);
}

// Scenario 9 (SM-3.2): among several true triggerless transitions the first declared wins.
#[test]
fn s09_sm3_first_declared_true_triggerless_transition_wins() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", None, None),
            state("C", None, None),
        ],
        vec![
            transition(None, "A", "C", None, Some("no"), None),
            transition(None, "A", "B", None, Some("yes"), Some(log_task("ab", "a"))),
            transition(None, "A", "C", None, None, Some(log_task("ac", "b"))),
        ],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.current().as_deref(), Some("B"));
    assert_eq!(h.log(), ["a"]);
}

/// A registry whose condition `rounds` is true `n` times, then false.
fn counting_registry(n: u64) -> (Registry<Log>, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let registry = registry().condition("rounds", move |_: &Log| {
        seen.fetch_add(1, Ordering::SeqCst) < n
    });
    (registry, calls)
}

// Scenario 10 (SM-6, SM-8): an empty triggerless self-cycle yields one continuation per round,
// never recursing, and the continuation survives a persistence round trip.
#[test]
fn s10_sm6_empty_self_cycle_yields_one_continuation_per_round_and_survives_persistence() {
    let def = machine(
        "A",
        vec![state("A", None, None), state("Done", None, None)],
        vec![
            transition(None, "A", "A", None, Some("rounds"), None),
            transition(None, "A", "Done", None, None, None),
        ],
    );
    let (reg, calls) = counting_registry(3);
    let mut h = Harness::new(&def, reg);
    h.begin();
    h.step();
    assert_eq!(h.queue(), q(&[("root", "continuing")]), "round 1 yields");
    h.step();
    assert_eq!(h.queue(), q(&[("root", "continuing")]), "round 2 yields");
    // Persist mid-cycle and continue from the document (SM-8).
    let (reg2, _) = counting_registry(0);
    let mut h = h.round_trip(
        &def,
        reg2.condition("rounds", {
            let calls = calls.clone();
            move |_: &Log| calls.fetch_add(1, Ordering::SeqCst) < 3
        }),
    );
    assert_eq!(h.queue(), q(&[("root", "continuing")]));
    h.step();
    assert_eq!(h.queue(), q(&[("root", "continuing")]), "round 3 yields");
    h.step();
    assert!(h.queue().is_empty());
    assert_eq!(h.current().as_deref(), Some("Done"));
    assert_eq!(h.root_status(), ActivityStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// Scenario 10, second half (SM-6): a two-state automatic cycle also yields once per round.
#[test]
fn s10_sm6_two_state_cycle_yields_one_continuation_per_round() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", None, None),
            state("Done", None, None),
        ],
        vec![
            transition(None, "A", "B", None, None, None),
            transition(None, "B", "A", None, Some("rounds"), None),
            transition(None, "B", "Done", None, None, None),
        ],
    );
    let (reg, _) = counting_registry(2);
    let mut h = Harness::new(&def, reg);
    h.begin();
    let mut rounds = 0;
    while !h.queue().is_empty() {
        assert!(h.queue().len() <= 1, "never more than one continuation");
        h.step();
        if h.queue() == q(&[("root", "continuing")]) {
            rounds += 1;
        }
    }
    // Entering B from A yields (B reaches itself), entering A from B yields too.
    assert_eq!(rounds, 5);
    assert_eq!(h.current().as_deref(), Some("Done"));
}

// Scenario 11 (SM-5.3, ACT-12): a triggerless transition whose action is a two-step sequence.
#[test]
fn s11_sm5_triggerless_transition_with_sequence_action_completes() {
    let action = workflow_model::Sequence {
        id: "act".into(),
        steps: vec![log_task("s1", "s1"), log_task("s2", "s2")],
    };
    let def = machine(
        "A",
        vec![state("A", None, None), state("B", None, None)],
        vec![transition(None, "A", "B", None, None, Some(action.into()))],
    );
    let mut h = Harness::new(&def, registry());
    assert_eq!(h.run(), RunEnd::Finished);
    assert_eq!(h.log(), ["s1", "s2"]);
    assert_eq!(h.current().as_deref(), Some("B"));
}

// Scenario 12 (SM-5.5): a self-transition runs exit, action and entry, in that order.
#[test]
fn s12_sm5_self_transition_runs_exit_action_entry_in_order() {
    let def = machine(
        "A",
        vec![state(
            "A",
            Some(log_task("A_entry", "A.entry")),
            Some(log_task("A_exit", "A.exit")),
        )],
        vec![transition(
            Some("again"),
            "A",
            "A",
            Some(event("go", "go")),
            None,
            Some(log_task("act", "go")),
        )],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.drain();
    h.fire("root:go", json!(null));
    h.drain();
    assert_eq!(h.log(), ["A.entry", "A.exit", "go", "A.entry"]);
    assert_eq!(h.bookmark_nodes(), ["root:go"], "re-entered and re-armed");
}

// Scenario 13 (SM-4): a false condition re-arms the same trigger and leaves competitors and
// their bookmarks alone.
#[test]
fn s13_sm4_false_condition_rearms_same_trigger_and_leaves_competitors() {
    let def = machine(
        "New",
        vec![
            state("New", None, None),
            state("Paid", None, None),
            state("Closed", None, None),
        ],
        vec![
            transition(
                Some("Pay"),
                "New",
                "Paid",
                Some(event("pay", "pay")),
                Some("big_enough"),
                None,
            ),
            transition(
                Some("Cancel"),
                "New",
                "Closed",
                Some(event("cancel", "cancel")),
                None,
                None,
            ),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.drain();
    let cancel_bookmark = h.exec.state.bookmarks[1].clone();
    h.fire("root:pay", json!({"amount": 5}));
    assert_eq!(h.current().as_deref(), Some("New"));
    assert_eq!(
        h.queue(),
        q(&[("root:pay", "0:Pay")]),
        "the same trigger, same tag"
    );
    assert_eq!(
        h.exec.state.bookmarks,
        vec![cancel_bookmark.clone()],
        "competitor untouched"
    );
    h.drain();
    assert_eq!(h.bookmark_nodes(), ["root:cancel", "root:pay"]);
    h.fire("root:pay", json!({"amount": 12}));
    assert_eq!(h.current().as_deref(), Some("Paid"));
}

// Scenario 14 (SM-5.1): an accepted transition cancels every competing trigger, removes its
// bookmarks, and withdraws a re-armed competitor's work item and callback.
#[test]
fn s14_sm5_accepted_transition_cancels_competitors_and_withdraws_rearmed_work() {
    let def = machine(
        "New",
        vec![
            state("New", None, None),
            state("X", None, None),
            state("Y", None, None),
        ],
        vec![
            transition(
                Some("a"),
                "New",
                "X",
                Some(event("a", "a")),
                Some("big_enough"),
                None,
            ),
            transition(Some("b"), "New", "Y", Some(event("b", "b")), None, None),
            transition(Some("c"), "New", "X", Some(event("c", "c")), None, None),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.drain();
    h.fire("root:a", json!({"amount": 1}));
    assert_eq!(
        h.queue(),
        q(&[("root:a", "0:a")]),
        "a re-armed, not yet run"
    );
    let rearmed = h.live("root:a");
    let c = h.live("root:c");
    h.fire("root:b", json!(null));
    assert_eq!(h.current().as_deref(), Some("Y"));
    assert!(h.queue().is_empty(), "the re-armed work item is withdrawn");
    assert!(h.exec.state.bookmarks.is_empty(), "c's bookmark removed");
    assert!(h.root_callbacks().is_empty() || h.exec.state.contexts.is_empty());
    assert!(h.live("root:a").is_empty() && h.live("root:c").is_empty());
    for id in rearmed.into_iter().chain(c) {
        assert_eq!(
            h.exec.state.context(id).unwrap().status,
            ActivityStatus::Canceled
        );
    }
}

// Scenario 15 (section 1, SM-4): two unnamed transitions with the same endpoints are told
// apart by their keys `0:New->Paid` and `1:New->Paid`.
#[test]
fn s15_sm4_unnamed_transitions_with_same_endpoints_are_told_apart_by_keys() {
    let def = machine(
        "New",
        vec![state("New", None, None), state("Paid", None, None)],
        vec![
            transition(
                None,
                "New",
                "Paid",
                Some(event("ta", "a")),
                None,
                Some(log_task("act_a", "a")),
            ),
            transition(
                None,
                "New",
                "Paid",
                Some(event("tb", "b")),
                None,
                Some(log_task("act_b", "b")),
            ),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.step();
    assert_eq!(
        h.queue(),
        q(&[("root:ta", "0:New->Paid"), ("root:tb", "1:New->Paid")])
    );
    h.drain();
    h.fire("root:tb", json!(null));
    h.drain();
    assert_eq!(h.log(), ["b"]);
    let changed = h
        .exec
        .state
        .journal
        .entries
        .iter()
        .rev()
        .find(|e| e.kind == JournalKind::StateChanged)
        .unwrap();
    assert_eq!(changed.detail.to_value()["transition"], "1:New->Paid");
}

// Scenario 16 (SM-4): transitions sharing a name are resolved against the current state first.
#[test]
fn s16_sm4_duplicate_names_resolve_against_current_state_first() {
    let def = machine(
        "A",
        vec![
            state("A", None, None),
            state("B", None, None),
            state("C", None, None),
        ],
        vec![
            transition(
                Some("go"),
                "A",
                "B",
                Some(event("go_a", "go")),
                None,
                Some(log_task("x1", "a")),
            ),
            transition(
                Some("go"),
                "B",
                "C",
                Some(event("go_b", "go")),
                None,
                Some(log_task("x2", "b")),
            ),
        ],
    );
    let mut h = Harness::new(&def, registry());
    h.begin();
    h.drain();
    h.fire("root:go_a", json!(null));
    h.drain();
    assert_eq!(h.current().as_deref(), Some("B"));
    h.fire("root:go_b", json!(null));
    h.drain();
    assert_eq!(h.current().as_deref(), Some("C"));
    assert_eq!(h.log(), ["a", "b"]);
    let keys: Vec<String> = h
        .exec
        .state
        .journal
        .entries
        .iter()
        .filter(|e| e.kind == JournalKind::StateChanged)
        .filter_map(|e| {
            e.detail
                .to_value()
                .get("transition")
                .map(|t| t.as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(keys, ["0:go", "1:go"]);
    // The resolver itself: a tag is looked up among the current state's transitions first.
    let graph = crate::engine::graph::Graph::build(&def).unwrap();
    let crate::engine::graph::NodeKind::StateMachine(m) = &graph.nodes[0].kind else {
        unreachable!()
    };
    use crate::engine::activities::state_machine::resolve;
    assert_eq!(
        resolve(m, "B", Some("1:go")).map(|t| t.from.as_str()),
        Some("B")
    );
    assert_eq!(
        resolve(m, "C", Some("0:go")).map(|t| t.from.as_str()),
        Some("A")
    );
}

// Scenario 17 (SM-5.3): exit and action completions that arrive after the state moved on are
// ignored (stale).
#[test]
fn s17_sm5_stale_exit_and_action_completions_are_ignored() {
    // Stale exit: the state moved to `Closed` while New's exit was queued.
    let mut h = armed_fixture();
    h.fire("root:pay", json!({}));
    assert_eq!(h.queue(), q(&[("root:New_exit", "0:Pay")]));
    h.set_current("Closed");
    h.step();
    assert!(h.queue().is_empty(), "no action after a stale exit");
    assert!(h.live("root:pay_action").is_empty());
    assert_eq!(h.current().as_deref(), Some("Closed"));

    // Stale action: the state moved on after the exit completed.
    let mut h = armed_fixture();
    h.fire("root:pay", json!({}));
    h.step();
    assert_eq!(h.queue(), q(&[("root:pay_action", "0:Pay")]));
    h.set_current("Closed");
    h.step();
    assert!(h.queue().is_empty(), "no target entry after a stale action");
    assert_eq!(h.current().as_deref(), Some("Closed"));
    assert!(h.live("root:Paid_entry").is_empty());
    assert!(
        h.journal_nodes(JournalKind::Declined)
            .iter()
            .any(|n| n == "root")
    );
}
