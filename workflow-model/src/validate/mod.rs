//! The one validator: every state machine rule (SM-C) and flowchart rule (FC-V).
//!
//! [`validate`] walks the activity tree once and collects every diagnostic; it never stops at
//! the first. The macros call it on the definition they lowered from the DSL, the runtime on
//! definitions loaded from JSON and again at `build()` (FC-24).

mod activity;
mod faults;
mod flowchart;
pub mod limits;
mod state_machine;

pub use crate::cron::{KNOWN_TIME_ZONES, is_known_time_zone};
pub use flowchart::{FlowchartAnalysis, FlowchartLoop, analyze_flowchart};

use crate::definition::{Activity, Definition};
use crate::diagnostics::{Diagnostic, Diagnostics, Location};

/// Checks `definition` against every compile-time and load-time rule, reporting all violations.
///
/// ```
/// use workflow_model::{Definition, StateMachine, State, Transition, validate};
///
/// let machine = StateMachine {
///     id: "root".into(),
///     initial: "Nwe".into(),
///     states: vec![State::new("New"), State::new("Done")],
///     transitions: vec![Transition::new("New", "Done")],
/// };
/// let problems = validate(&Definition::new("Demo", machine)).unwrap_err();
/// let first = problems.iter().next().unwrap();
/// assert_eq!(first.rule, "SM-C1");
/// assert_eq!(
///     first.message,
///     "initial state `Nwe` is not a declared state; did you mean `New`?"
/// );
/// ```
///
/// # Errors
///
/// Every violation, as [`Diagnostics`].
pub fn validate(definition: &Definition) -> Result<(), Diagnostics> {
    // Sizes first (DEF-3): over a limit, no other rule runs, so the work stays linear.
    limits::check_definition(definition)?;
    // Within the limits, the did-you-mean search (FC-25) shares one bounded budget.
    crate::diagnostics::with_suggestion_budget(crate::diagnostics::SUGGESTION_BUDGET, || {
        check_rules(definition)
    })
}

/// Every rule but the size limits.
fn check_rules(definition: &Definition) -> Result<(), Diagnostics> {
    let mut cx = Diagnostics::new();
    if definition.name.trim().is_empty() {
        cx.push(Diagnostic::new(
            "DEF-2",
            Location::root().field("name"),
            "workflow name is empty; expected a stable name such as `OrderFlow`",
        ));
    }
    let at = Location::root().field("root");
    walk(
        &definition.root,
        &at,
        Place::Root,
        &definition.name,
        false,
        &mut cx,
    );
    faults::check(definition, &mut cx);
    cx.into_result()
}

/// Where an activity sits, for rules that depend on it (FC-V14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The definition's root.
    Root,
    /// A node of the top-level flowchart.
    TopLevelNode,
    /// Anywhere else.
    Nested,
}

/// Checks `activity` at `at` and everything inside it. `workflow` is the definition's name
/// (FC-V13); `in_loop` says whether a While, ForEach, ParallelForEach or Timer encloses it
/// (ACT-V1).
fn walk(
    activity: &Activity,
    at: &Location,
    place: Place,
    workflow: &str,
    in_loop: bool,
    cx: &mut Diagnostics,
) {
    check_id(activity.id(), &at.field("id"), cx);
    if activity.is_trigger() && place == Place::Nested {
        cx.push(Diagnostic::new(
            "FC-V14",
            at.field("trigger"),
            format!(
                "trigger `{}` must be an entry point of the top-level flowchart; only a loop may lead back to it",
                activity.id()
            ),
        ));
    }
    activity::check(activity, at, in_loop, cx);
    match activity {
        Activity::StateMachine(machine) => state_machine::check(machine, at, cx),
        Activity::Flowchart(chart) => flowchart::check(chart, at, workflow, cx),
        _ => {}
    }
    let child_in_loop = in_loop
        || matches!(
            activity,
            Activity::While(_)
                | Activity::ForEach(_)
                | Activity::ParallelForEach(_)
                | Activity::Timer(_)
        );
    let child_place = match (activity, place) {
        (Activity::Flowchart(_), Place::Root) => Place::TopLevelNode,
        // A saga scope at the root wraps the workflow's body (FLT-10).
        (Activity::Saga(_), Place::Root) => Place::Root,
        _ => Place::Nested,
    };
    for (child, child_at) in children_with_locations(activity, at) {
        walk(child, &child_at, child_place, workflow, child_in_loop, cx);
    }
}

/// FC-1 / FC-V16: an id is an ASCII letter or `_` followed by letters, digits or `_`.
fn check_id(id: &str, at: &Location, cx: &mut Diagnostics) {
    if !is_valid_id(id) {
        cx.push(Diagnostic::new(
            "FC-V16",
            at.clone(),
            format!(
                "invalid node id `{id}`; expected a letter or `_` followed by letters, digits or `_`"
            ),
        ));
    }
}

/// Whether `id` follows the id grammar of FC-1 (also used for port names, FC-2).
pub fn is_valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The direct children of `activity` with their locations, in the order of
/// [`Activity::children`].
pub(crate) fn children_with_locations<'a>(
    activity: &'a Activity,
    at: &Location,
) -> Vec<(&'a Activity, Location)> {
    let mut out = Vec::new();
    let list =
        |out: &mut Vec<(&'a Activity, Location)>, items: &'a [Activity], field: &'static str| {
            let base = at.field(field);
            out.extend(items.iter().enumerate().map(|(i, a)| (a, base.index(i))));
        };
    match activity {
        Activity::Sequence(s) => list(&mut out, &s.steps, "steps"),
        Activity::Flowchart(f) => list(&mut out, &f.nodes, "nodes"),
        Activity::Parallel(p) => list(&mut out, &p.branches, "branches"),
        Activity::StateMachine(m) => {
            for (i, state) in m.states.iter().enumerate() {
                let state_at = at.field("states").index(i);
                out.extend(state.entry.iter().map(|a| (a, state_at.field("entry"))));
                out.extend(state.exit.iter().map(|a| (a, state_at.field("exit"))));
            }
            for (i, transition) in m.transitions.iter().enumerate() {
                let transition_at = at.field("transitions").index(i);
                out.extend(
                    transition
                        .trigger
                        .iter()
                        .map(|a| (a, transition_at.field("trigger"))),
                );
                out.extend(
                    transition
                        .action
                        .iter()
                        .map(|a| (a, transition_at.field("action"))),
                );
            }
        }
        Activity::If(i) => {
            out.extend(i.then.as_deref().map(|a| (a, at.field("then"))));
            out.extend(i.r#else.as_deref().map(|a| (a, at.field("else"))));
        }
        Activity::Switch(s) => {
            for (i, case) in s.cases.iter().enumerate() {
                out.extend(
                    case.body
                        .iter()
                        .map(|a| (a, at.field("cases").index(i).field("body"))),
                );
            }
            out.extend(s.default.as_deref().map(|a| (a, at.field("default"))));
        }
        Activity::While(w) => out.push((&*w.body, at.field("body"))),
        Activity::ForEach(f) => out.push((&*f.body, at.field("body"))),
        Activity::ParallelForEach(f) => out.push((&*f.body, at.field("body"))),
        Activity::Timer(t) => out.extend(t.body.as_deref().map(|a| (a, at.field("body")))),
        Activity::Saga(s) => out.push((&*s.body, at.field("body"))),
        _ => {}
    }
    out
}
