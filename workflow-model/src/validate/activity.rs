//! Rules owned by activities: ACT-V1, ACT-V2, ACT-V3, ACT-V4 and
//! ACT-V9.
//!
//! ACT-V7 (the trigger flag on a kind that cannot start a workflow) cannot be broken: the model
//! only has a `trigger` field on the kinds that can. ACT-V5, ACT-V6, ACT-V8, ACT-V10 and ACT-V11
//! need variables, types or the registry, which the model does not carry.

use super::flowchart::report_duplicates;
use crate::definition::{Activity, Switch};
use crate::diagnostics::{Diagnostic, Diagnostics, Location};

/// The port a switch takes when no case matches; no case may use it as its label (ACT-V3).
const DEFAULT_PORT: &str = "default";

/// The longest stimulus name in bytes (RT-2).
const MAX_EVENT_NAME_BYTES: usize = 256;

/// Checks one activity located at `at` (not its children), adding every violation to `cx`.
/// `in_loop` says whether a While, ForEach, ParallelForEach or Timer encloses it (ACT-9).
pub(super) fn check(activity: &Activity, at: &Location, in_loop: bool, cx: &mut Diagnostics) {
    match activity {
        Activity::Break(_) if !in_loop => cx.push(Diagnostic::new(
            "ACT-V1",
            at.clone(),
            "`break` is not inside a loop; it must be within a `while`, `for_each`, \
             `parallel_for_each` or `timer`",
        )),
        Activity::Switch(switch) => check_switch(switch, at, cx),
        Activity::Event(event) => check_event_name(&event.event, &at.field("event"), cx),
        Activity::Timer(timer) if timer.interval_ms == 0 => cx.push(Diagnostic::new(
            "ACT-V9",
            at.field("interval_ms"),
            "timer interval must be greater than zero",
        )),
        Activity::Sequence(sequence) => check_sibling_ids(&sequence.steps, &at.field("steps"), cx),
        Activity::Parallel(parallel) => {
            check_sibling_ids(&parallel.branches, &at.field("branches"), cx);
        }
        _ => {}
    }
}

/// Sibling ids are unique in every composite, not only in flowcharts (FC-1): the engine names a
/// node by its ancestor path (ENG-3), so two steps of one sequence with the same id could not
/// be told apart. Reported under FC-V1 with its message.
fn check_sibling_ids(children: &[Activity], at: &Location, cx: &mut Diagnostics) {
    report_duplicates(
        "FC-V1",
        children.iter().map(|child| Some(child.id())),
        |i| at.index(i).field("id"),
        |i| {
            let id = children.get(i).map_or("", Activity::id);
            format!("duplicate node `{id}`")
        },
        cx,
    );
}

/// ACT-V2 (a repeated case label) and ACT-V3 (a case labelled `default`).
fn check_switch(switch: &Switch, at: &Location, cx: &mut Diagnostics) {
    let label_at = |i: usize| at.field("cases").index(i).field("label");
    for (i, case) in switch.cases.iter().enumerate() {
        if case.label == DEFAULT_PORT {
            cx.push(Diagnostic::new(
                "ACT-V3",
                label_at(i),
                format!("case label `{DEFAULT_PORT}` is reserved"),
            ));
        }
    }
    // A repeated `default` is already reported by ACT-V3 on each occurrence.
    report_duplicates(
        "ACT-V2",
        switch
            .cases
            .iter()
            .map(|case| (case.label != DEFAULT_PORT).then_some(case.label.as_str())),
        label_at,
        |i| {
            format!(
                "duplicate case `{}` in switch `{}`",
                switch
                    .cases
                    .get(i)
                    .map(|case| case.label.as_str())
                    .unwrap_or_default(),
                switch.id
            )
        },
        cx,
    );
}

/// ACT-V4: an event name must be a valid stimulus name (RT-2): 1 to 256 bytes of UTF-8 without
/// control characters, and not starting with the reserved prefix `wf.`. One diagnostic per name.
fn check_event_name(name: &str, at: &Location, cx: &mut Diagnostics) {
    let message = if name.is_empty() {
        format!("event name is empty; a stimulus name has 1 to {MAX_EVENT_NAME_BYTES} bytes")
    } else if name.chars().any(char::is_control) {
        format!(
            "invalid event name `{}`; names cannot contain control characters",
            name.escape_debug()
        )
    } else if name.len() > MAX_EVENT_NAME_BYTES {
        let shown: String = name.chars().take(32).collect();
        format!(
            "invalid event name `{shown}...`; names are at most {MAX_EVENT_NAME_BYTES} bytes, \
             this one has {}",
            name.len()
        )
    } else if name.starts_with("wf.") {
        format!("invalid event name `{name}`; names starting with `wf.` are reserved")
    } else {
        return;
    };
    cx.push(Diagnostic::new("ACT-V4", at.clone(), message));
}

#[cfg(test)]
mod tests {
    use crate::definition::{
        Break, Connection, DONE, Definition, Event, Flowchart, ForEach, Sequence, SwitchCase,
        SwitchMode, Task, Timer, While,
    };
    use crate::validate::validate;

    use super::*;

    /// Asserts exactly these diagnostics, and that the good flowchart of the docs validates
    /// cleanly.
    fn expect(definition: &Definition, expected: &[(&str, &str, &str)]) {
        let good = Definition::from_json(include_str!("../../docs/expense.json")).unwrap();
        assert_eq!(validate(&good), Ok(()));
        let found: Vec<(&str, String, String)> = match validate(definition) {
            Ok(()) => Vec::new(),
            Err(diagnostics) => diagnostics
                .iter()
                .map(|d| (d.rule, d.at.json_pointer(), d.message.clone()))
                .collect(),
        };
        let expected: Vec<(&str, String, String)> = expected
            .iter()
            .map(|&(rule, at, message)| (rule, at.to_owned(), message.to_owned()))
            .collect();
        assert_eq!(found, expected);
    }

    fn sequence(steps: Vec<Activity>) -> Definition {
        Definition::new(
            "Demo",
            Sequence {
                id: "root".into(),
                steps,
            },
        )
    }

    fn task(id: &str) -> Activity {
        Task::new(id, id).into()
    }

    fn switch(labels: &[&str]) -> Activity {
        Switch {
            id: "route".into(),
            cases: labels
                .iter()
                .map(|label| SwitchCase {
                    label: (*label).into(),
                    condition: format!("is_{label}"),
                    body: None,
                })
                .collect(),
            mode: SwitchMode::First,
            default: None,
        }
        .into()
    }

    fn timer(interval_ms: u64, body: Option<Activity>) -> Activity {
        Timer {
            id: "tick".into(),
            interval_ms,
            body: body.map(Box::new),
            until: None,
            max_ticks: None,
            trigger: false,
            missed: crate::definition::Missed::Once,
        }
        .into()
    }

    const NOT_IN_LOOP: &str = "`break` is not inside a loop; it must be within a `while`, \
                               `for_each`, `parallel_for_each` or `timer`";

    #[test]
    fn act_v1_break_outside_a_loop() {
        expect(
            &sequence(vec![task("a"), Break::new("stop").into()]),
            &[("ACT-V1", "/root/steps/1", NOT_IN_LOOP)],
        );
        // As a flowchart node.
        let chart = Flowchart {
            id: "root".into(),
            start: vec!["a".into()],
            nodes: vec![task("a"), Break::new("stop").into()],
            connections: vec![Connection::new("a", DONE, "stop")],
        };
        expect(
            &Definition::new("Demo", chart),
            &[("ACT-V1", "/root/nodes/1", NOT_IN_LOOP)],
        );
    }

    #[test]
    fn act_v1_break_inside_a_loop() {
        let body = Flowchart {
            id: "body".into(),
            start: vec!["a".into()],
            nodes: vec![task("a"), Break::new("stop").into()],
            connections: vec![Connection::new("a", DONE, "stop")],
        };
        let looped = While {
            id: "root".into(),
            condition: "more".into(),
            body: Box::new(body.into()),
        };
        expect(&Definition::new("Demo", looped), &[]);
        let for_each = ForEach {
            id: "each".into(),
            items: "lines".into(),
            body: Box::new(Break::new("stop").into()),
        };
        expect(&sequence(vec![for_each.into()]), &[]);
        expect(
            &sequence(vec![timer(1000, Some(Break::new("stop").into()))]),
            &[],
        );
    }

    #[test]
    fn act_v2_duplicate_case_on_both() {
        expect(
            &sequence(vec![switch(&["high", "low", "high"])]),
            &[
                (
                    "ACT-V2",
                    "/root/steps/0/cases/0/label",
                    "duplicate case `high` in switch `route`",
                ),
                (
                    "ACT-V2",
                    "/root/steps/0/cases/2/label",
                    "duplicate case `high` in switch `route`",
                ),
            ],
        );
    }

    #[test]
    fn act_v3_case_labelled_default() {
        expect(
            &sequence(vec![switch(&["high", "default"])]),
            &[(
                "ACT-V3",
                "/root/steps/0/cases/1/label",
                "case label `default` is reserved",
            )],
        );
    }

    #[test]
    fn act_v4_invalid_event_names() {
        let event = |name: &str| -> Activity { Event::new("wait", name).into() };
        expect(
            &sequence(vec![event("wf.paid")]),
            &[(
                "ACT-V4",
                "/root/steps/0/event",
                "invalid event name `wf.paid`; names starting with `wf.` are reserved",
            )],
        );
        expect(
            &sequence(vec![event("")]),
            &[(
                "ACT-V4",
                "/root/steps/0/event",
                "event name is empty; a stimulus name has 1 to 256 bytes",
            )],
        );
        expect(
            &sequence(vec![event("paid\n")]),
            &[(
                "ACT-V4",
                "/root/steps/0/event",
                "invalid event name `paid\\n`; names cannot contain control characters",
            )],
        );
        expect(
            &sequence(vec![event(&"a".repeat(257))]),
            &[(
                "ACT-V4",
                "/root/steps/0/event",
                "invalid event name `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...`; names are at most 256 \
                 bytes, this one has 257",
            )],
        );
        expect(&sequence(vec![event(&"a".repeat(256))]), &[]);
        expect(&sequence(vec![event("wf")]), &[]);
    }

    #[test]
    fn act_v9_timer_interval_of_zero() {
        expect(
            &sequence(vec![timer(0, None)]),
            &[(
                "ACT-V9",
                "/root/steps/0/interval_ms",
                "timer interval must be greater than zero",
            )],
        );
        expect(&sequence(vec![timer(1, None)]), &[]);
    }
}
