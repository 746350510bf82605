//! State-machine rules SM-C1..SM-C9.
//!
//! Every rule runs and every violation is reported, but a rule never reports what is only the
//! echo of another one (no cascades): a transition whose `from` or `to` is unknown (SM-C4) is
//! left out of the graph rules (SM-C5..SM-C8), reachability (SM-C5) only runs from a declared
//! initial state and stays silent when an unknown target might have reached a state, and a
//! transition already dead by SM-C6 feeds neither SM-C7 nor SM-C8.

use std::collections::{HashMap, HashSet};

use super::is_valid_id;
use crate::definition::{Activity, StateMachine, Transition};
use crate::diagnostics::{Diagnostic, Diagnostics, Location, did_you_mean};

/// Checks one state machine located at `at`, adding every violation to `cx`.
pub(super) fn check(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    let names = Names::new(machine);
    check_structure(machine, at, cx);
    check_unique_state_names(machine, at, cx);
    check_unique_transition_names(machine, at, cx);
    check_unique_slot_ids(machine, at, cx);
    if machine.states.is_empty() {
        // SM-C9 said so; every name would be unknown, which is only the echo of that.
        return;
    }
    let initial_ok = check_initial(machine, &names, at, cx);
    let ends = check_endpoints(machine, &names, at, cx);
    let graph = Graph::new(machine, &names, &ends);
    if initial_ok {
        check_reachable(machine, &names, &ends, &graph, at, cx);
    }
    check_shadowed(machine, &graph, at, cx);
    check_automatic_cycles(machine, &graph, at, cx);
    check_same_event(machine, &graph, at, cx);
}

/// The declared state names (non-empty ones; an empty name is an SM-C9 error and names nothing).
struct Names<'a> {
    /// In declaration order, duplicates included, for suggestions (ties go to the earlier).
    ordered: Vec<&'a str>,
    /// Each distinct name, with the index of its first declaration.
    first: HashMap<&'a str, usize>,
}

impl<'a> Names<'a> {
    fn new(machine: &'a StateMachine) -> Self {
        let ordered: Vec<&str> = machine
            .states
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        let mut first = HashMap::new();
        for (i, state) in machine.states.iter().enumerate() {
            if !state.name.is_empty() {
                first.entry(state.name.as_str()).or_insert(i);
            }
        }
        Self { ordered, first }
    }

    fn contains(&self, name: &str) -> bool {
        self.first.contains_key(name)
    }

    /// `"; did you mean `X`?"` and the suggestion, for an unknown state name; without a close
    /// name, `"; expected one of `A`, `B`"`.
    fn did_you_mean(&self, name: &str) -> (String, Option<String>) {
        let (hint, suggestion) = did_you_mean(name, self.ordered.iter().copied());
        if suggestion.is_none() && !self.ordered.is_empty() {
            let choices = crate::diagnostics::choices(self.ordered.iter().copied());
            return (format!("; expected one of {choices}"), None);
        }
        (hint, suggestion)
    }
}

/// How a transition is named in messages: its name, or `From->To` when it has none.
fn label(transition: &Transition) -> String {
    match transition.name.as_deref() {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => format!("{}->{}", transition.from, transition.to),
    }
}

fn is_automatic(transition: &Transition) -> bool {
    transition.trigger.is_none()
}

fn is_unconditional_automatic(transition: &Transition) -> bool {
    transition.trigger.is_none() && transition.condition.is_none()
}

fn transition_at(at: &Location, index: usize) -> Location {
    at.field("transitions").index(index)
}

/// SM-C9: what the model can tell of malformed values (unknown and missing options are the
/// macro's and the JSON decoder's job).
fn check_structure(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    if machine.states.is_empty() {
        cx.push(Diagnostic::new(
            "SM-C9",
            at.field("states"),
            format!("state machine `{}` has no states", machine.id),
        ));
    }
    if machine.initial.is_empty() {
        cx.push(Diagnostic::new(
            "SM-C9",
            at.field("initial"),
            "initial state is empty; expected the name of a declared state",
        ));
    }
    for (i, state) in machine.states.iter().enumerate() {
        if state.name.is_empty() {
            cx.push(Diagnostic::new(
                "SM-C9",
                at.field("states").index(i).field("name"),
                "state name is empty",
            ));
        }
    }
    for (i, transition) in machine.transitions.iter().enumerate() {
        let Some(name) = transition.name.as_deref() else {
            continue;
        };
        if !is_valid_id(name) {
            cx.push(Diagnostic::new(
                "SM-C9",
                transition_at(at, i).field("name"),
                format!(
                    "invalid transition name `{name}`; expected a letter or `_` followed by letters, digits or `_`"
                ),
            ));
        }
    }
}

/// SM-C1: the initial state exists.
fn check_initial(
    machine: &StateMachine,
    names: &Names<'_>,
    at: &Location,
    cx: &mut Diagnostics,
) -> bool {
    let initial = machine.initial.as_str();
    if initial.is_empty() {
        // Reported by SM-C9.
        return false;
    }
    if names.contains(initial) {
        return true;
    }
    let (hint, suggestion) = names.did_you_mean(initial);
    let mut d = Diagnostic::new(
        "SM-C1",
        at.field("initial"),
        format!("initial state `{initial}` is not a declared state{hint}"),
    );
    d.suggestion = suggestion;
    cx.push(d);
    false
}

/// SM-C2: state names are unique; the same message on both occurrences.
fn check_unique_state_names(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, state) in machine.states.iter().enumerate() {
        if state.name.is_empty() {
            continue;
        }
        match first.get(state.name.as_str()) {
            Some(&j) => cx.push_pair(
                "SM-C2",
                at.field("states").index(j).field("name"),
                at.field("states").index(i).field("name"),
                &format!("duplicate state name `{}`", state.name),
            ),
            None => {
                first.insert(&state.name, i);
            }
        }
    }
}

/// SM-C3, first half: transition names are unique within the machine.
fn check_unique_transition_names(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, transition) in machine.transitions.iter().enumerate() {
        let Some(name) = transition.name.as_deref() else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        match first.get(name) {
            Some(&j) => cx.push_pair(
                "SM-C3",
                transition_at(at, j).field("name"),
                transition_at(at, i).field("name"),
                &format!("duplicate transition name `{name}`"),
            ),
            None => {
                first.insert(name, i);
            }
        }
    }
}

/// SM-C3, second half: the activities directly in the machine's slots (entries, exits,
/// triggers, actions) have unique ids.
fn check_unique_slot_ids(machine: &StateMachine, at: &Location, cx: &mut Diagnostics) {
    struct Slot<'a> {
        id: &'a str,
        at: Location,
        trigger: bool,
    }
    let mut slots: Vec<Slot<'_>> = Vec::new();
    for (i, state) in machine.states.iter().enumerate() {
        let state_at = at.field("states").index(i);
        for (activity, field) in [(&state.entry, "entry"), (&state.exit, "exit")] {
            slots.extend(activity.iter().map(|a| Slot {
                id: a.id(),
                at: state_at.field(field).field("id"),
                trigger: false,
            }));
        }
    }
    for (i, transition) in machine.transitions.iter().enumerate() {
        let here = transition_at(at, i);
        for (activity, field, trigger) in [
            (&transition.trigger, "trigger", true),
            (&transition.action, "action", false),
        ] {
            slots.extend(activity.iter().map(|a| Slot {
                id: a.id(),
                at: here.field(field).field("id"),
                trigger,
            }));
        }
    }
    let mut first: HashMap<&str, &Slot<'_>> = HashMap::new();
    for slot in &slots {
        if slot.id.is_empty() {
            // An empty id is reported by FC-V16.
            continue;
        }
        match first.get(slot.id) {
            Some(earlier) => {
                let what = if earlier.trigger && slot.trigger {
                    "trigger"
                } else {
                    "activity"
                };
                cx.push_pair(
                    "SM-C3",
                    earlier.at.clone(),
                    slot.at.clone(),
                    &format!("duplicate {what} id `{}`", slot.id),
                );
            }
            None => {
                first.insert(slot.id, slot);
            }
        }
    }
}

/// Whether each end of a transition names a declared state.
#[derive(Debug, Clone, Copy)]
struct Ends {
    from: bool,
    to: bool,
}

impl Ends {
    fn valid(self) -> bool {
        self.from && self.to
    }
}

/// SM-C4: `from` and `to` name declared states (an empty one is SM-C9). Returns, for each
/// transition, which of its ends resolved.
fn check_endpoints(
    machine: &StateMachine,
    names: &Names<'_>,
    at: &Location,
    cx: &mut Diagnostics,
) -> Vec<Ends> {
    let mut out = Vec::with_capacity(machine.transitions.len());
    for (i, transition) in machine.transitions.iter().enumerate() {
        let here = transition_at(at, i);
        let mut end = |name: &str, field: &'static str, what: &str| -> bool {
            if name.is_empty() {
                cx.push(Diagnostic::new(
                    "SM-C9",
                    here.field(field),
                    format!("transition {what} is empty; expected the name of a declared state"),
                ));
                return false;
            }
            if names.contains(name) {
                return true;
            }
            let (hint, suggestion) = names.did_you_mean(name);
            let mut d = Diagnostic::new(
                "SM-C4",
                here.field(field),
                format!("transition {what} `{name}` is not a declared state{hint}"),
            );
            d.suggestion = suggestion;
            cx.push(d);
            false
        };
        let from = end(&transition.from, "from", "source");
        let to = end(&transition.to, "to", "target");
        out.push(Ends { from, to });
    }
    out
}

/// The transitions between declared states, per source state.
struct Graph<'a> {
    /// Distinct declared state names, in declaration order.
    states: Vec<&'a str>,
    /// For each state name, the indexes of its valid outbound transitions, in declaration order
    /// (SM-3's *valid*).
    outbound: HashMap<&'a str, Vec<usize>>,
    /// For each state name whose first automatic valid transition is unconditional, that
    /// transition's index: the one SM-3 takes at once, every time.
    forced: HashMap<&'a str, usize>,
}

impl<'a> Graph<'a> {
    fn new(machine: &'a StateMachine, names: &Names<'a>, ends: &[Ends]) -> Self {
        let mut states: Vec<&str> = Vec::new();
        for name in &names.ordered {
            if !states.contains(name) {
                states.push(name);
            }
        }
        let mut outbound: HashMap<&str, Vec<usize>> = HashMap::new();
        for ((i, transition), end) in machine.transitions.iter().enumerate().zip(ends) {
            if end.valid() {
                outbound
                    .entry(transition.from.as_str())
                    .or_default()
                    .push(i);
            }
        }
        let mut forced = HashMap::new();
        for (&state, list) in &outbound {
            let first_automatic = list
                .iter()
                .filter_map(|&i| machine.transitions.get(i).map(|t| (i, t)))
                .find(|(_, t)| is_automatic(t));
            if let Some((i, t)) = first_automatic
                && is_unconditional_automatic(t)
            {
                forced.insert(state, i);
            }
        }
        Self {
            states,
            outbound,
            forced,
        }
    }

    /// The valid outbound transitions of `state`, with their indexes.
    fn outbound<'m>(
        &self,
        machine: &'m StateMachine,
        state: &str,
    ) -> impl Iterator<Item = (usize, &'m Transition)> + use<'m, '_> {
        self.outbound
            .get(state)
            .into_iter()
            .flatten()
            .filter_map(|&i| machine.transitions.get(i).map(|t| (i, t)))
    }
}

/// SM-C5: every state is reachable from the initial state (any transition kind counts).
///
/// Conservative when SM-C4 found unknown names, so that a typo is reported once: a transition
/// with an unknown source and a known target may have been meant from a reachable state, so its
/// target counts as reachable; a transition with an unknown target from a reachable (or unknown)
/// source may have been meant to reach any state, so nothing is reported.
fn check_reachable(
    machine: &StateMachine,
    names: &Names<'_>,
    ends: &[Ends],
    graph: &Graph<'_>,
    at: &Location,
    cx: &mut Diagnostics,
) {
    let initial = machine.initial.as_str();
    let mut reached: HashSet<&str> = HashSet::new();
    let mut work: Vec<&str> = vec![initial];
    for (transition, end) in machine.transitions.iter().zip(ends) {
        if !end.from && end.to {
            work.push(&transition.to);
        }
    }
    while let Some(state) = work.pop() {
        if reached.insert(state) {
            work.extend(graph.outbound(machine, state).map(|(_, t)| t.to.as_str()));
        }
    }
    let unknown_target_from_reached = machine
        .transitions
        .iter()
        .zip(ends)
        .any(|(t, end)| !end.to && (!end.from || reached.contains(t.from.as_str())));
    if unknown_target_from_reached {
        return;
    }
    for (i, state) in machine.states.iter().enumerate() {
        let name = state.name.as_str();
        // Only the first declaration of a name: a duplicate is SM-C2's business.
        if names.first.get(name) != Some(&i) || reached.contains(name) {
            continue;
        }
        cx.push(Diagnostic::new(
            "SM-C5",
            at.field("states").index(i).field("name"),
            format!("state `{name}` is unreachable from the initial state `{initial}`"),
        ));
    }
}

/// SM-C6: once a state has an automatic transition without a condition, SM-3 takes it at once:
/// the automatic transitions after it and every triggered transition of the state can never be
/// taken.
fn check_shadowed(machine: &StateMachine, graph: &Graph<'_>, at: &Location, cx: &mut Diagnostics) {
    for &state in &graph.states {
        let mut list = graph.outbound(machine, state);
        let Some((u, winner)) = list.find(|(_, t)| is_unconditional_automatic(t)) else {
            continue;
        };
        let winner_label = label(winner);
        for (i, transition) in graph.outbound(machine, state) {
            let why = if i > u {
                "before it"
            } else if !is_automatic(transition) {
                "from the same state"
            } else {
                // An automatic transition before the winner: evaluated first, it can be taken.
                continue;
            };
            cx.push(
                Diagnostic::new(
                    "SM-C6",
                    transition_at(at, i),
                    format!(
                        "transition `{}` can never be taken: `{winner_label}` {why} is automatic and unconditional",
                        label(transition)
                    ),
                )
                .with_related(
                    transition_at(at, u),
                    format!("`{winner_label}` is automatic and unconditional: it is taken first"),
                ),
            );
        }
    }
}

/// SM-C7: no cycle of automatic transitions without conditions, which would loop forever.
///
/// The edges are the transitions SM-3 takes unconditionally: a state's first automatic
/// transition when it has no condition. An earlier automatic transition with a condition is a
/// way out of the loop, and a transition after the first unconditional one is never taken
/// (SM-C6), so neither makes a cycle. Each state has at most one such edge, so each cycle is
/// found once; it is reported at its earliest declared transition, and listed from there.
fn check_automatic_cycles(
    machine: &StateMachine,
    graph: &Graph<'_>,
    at: &Location,
    cx: &mut Diagnostics,
) {
    // 0 = not visited, 1 = on the current path, 2 = done.
    let mut mark: HashMap<&str, u8> = HashMap::new();
    for &start in &graph.states {
        let mut path: Vec<&str> = Vec::new();
        let mut state = start;
        loop {
            match mark.get(state).copied().unwrap_or(0) {
                0 => {}
                1 => {
                    if let Some(pos) = path.iter().position(|&s| s == state) {
                        let cycle: Vec<usize> = path
                            .get(pos..)
                            .into_iter()
                            .flatten()
                            .filter_map(|s| graph.forced.get(s).copied())
                            .collect();
                        report_cycle(machine, &cycle, at, cx);
                    }
                    break;
                }
                _ => break,
            }
            mark.insert(state, 1);
            path.push(state);
            let next = graph
                .forced
                .get(state)
                .and_then(|&i| machine.transitions.get(i))
                .map(|t| t.to.as_str());
            match next {
                Some(next) => state = next,
                None => break,
            }
        }
        for s in path {
            mark.insert(s, 2);
        }
    }
}

fn report_cycle(machine: &StateMachine, cycle: &[usize], at: &Location, cx: &mut Diagnostics) {
    let Some(start) = cycle
        .iter()
        .enumerate()
        .min_by_key(|&(_, &i)| i)
        .map(|(pos, _)| pos)
    else {
        return;
    };
    let ordered: Vec<usize> = cycle
        .iter()
        .cycle()
        .skip(start)
        .take(cycle.len())
        .copied()
        .collect();
    let labels: Vec<String> = ordered
        .iter()
        .filter_map(|&i| machine.transitions.get(i).map(label))
        .collect();
    let (Some(&first), Some(first_label)) = (ordered.first(), labels.first()) else {
        return;
    };
    let message = if ordered.len() == 1 {
        format!(
            "automatic transition `{first_label}` loops forever: it has no condition or trigger"
        )
    } else {
        let around: Vec<String> = labels
            .iter()
            .chain([first_label])
            .map(|l| format!("`{l}`"))
            .collect();
        format!(
            "automatic transitions {} loop forever: none has a condition or a trigger",
            around.join(" -> ")
        )
    };
    let mut d = Diagnostic::new("SM-C7", transition_at(at, first), message);
    for (&i, label) in ordered.iter().zip(&labels).skip(1) {
        d = d.with_related(
            transition_at(at, i),
            format!("then `{label}`, automatic and unconditional too"),
        );
    }
    cx.push(d);
}

/// SM-C8: two transitions of one state whose triggers wait for the same event (same name, same
/// key) need a condition to tell them apart. A state whose triggers are never armed (SM-C6) is
/// left alone.
fn check_same_event(
    machine: &StateMachine,
    graph: &Graph<'_>,
    at: &Location,
    cx: &mut Diagnostics,
) {
    for &state in &graph.states {
        if graph
            .outbound(machine, state)
            .any(|(_, t)| is_unconditional_automatic(t))
        {
            continue;
        }
        let mut first: HashMap<(&str, Option<&str>), (usize, &Transition)> = HashMap::new();
        for (i, transition) in graph.outbound(machine, state) {
            let Some(Activity::Event(event)) = &transition.trigger else {
                continue;
            };
            if transition.condition.is_some() {
                continue;
            }
            let stimulus = (event.event.as_str(), event.key.as_deref());
            match first.get(&stimulus) {
                Some(&(j, earlier)) => cx.push(
                    Diagnostic::new(
                        "SM-C8",
                        transition_at(at, i).field("trigger"),
                        format!(
                            "transitions `{}` and `{}` from `{state}` wait for the same event `{}` and neither has a condition",
                            label(earlier),
                            label(transition),
                            event.event
                        ),
                    )
                    .with_related(
                        transition_at(at, j).field("trigger"),
                        format!("`{}` waits for `{}` too", label(earlier), event.event),
                    ),
                ),
                None => {
                    first.insert(stimulus, (i, transition));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{Definition, Delay, Event, State, Task};
    use crate::json::LoadError;
    use crate::validate::validate;

    /// A machine `root` with plain states.
    fn machine(initial: &str, states: &[&str], transitions: Vec<Transition>) -> StateMachine {
        StateMachine {
            id: "root".into(),
            initial: initial.into(),
            states: states.iter().map(|&s| State::new(s)).collect(),
            transitions,
        }
    }

    /// A named automatic transition.
    fn auto(name: &str, from: &str, to: &str) -> Transition {
        Transition {
            name: Some(name.into()),
            ..Transition::new(from, to)
        }
    }

    /// A named transition triggered by the event `event` (trigger id = the transition's name).
    fn on(name: &str, from: &str, to: &str, event: &str) -> Transition {
        Transition {
            trigger: Some(Event::new(name, event).with_key("order_id").into()),
            ..auto(name, from, to)
        }
    }

    fn when(mut transition: Transition, condition: &str) -> Transition {
        transition.condition = Some(condition.into());
        transition
    }

    fn check_at_root(machine: &StateMachine) -> Vec<Diagnostic> {
        let mut cx = Diagnostics::new();
        check(machine, &Location::root().field("root"), &mut cx);
        cx.into_iter().collect()
    }

    /// Each diagnostic as `RULE at /pointer: message`, in the order found.
    fn problems(machine: &StateMachine) -> Vec<String> {
        check_at_root(machine)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn order() -> StateMachine {
        let definition = Definition::from_json(include_str!("../../docs/order.json")).unwrap();
        let Activity::StateMachine(machine) = definition.root else {
            panic!("the order definition's root is a state machine");
        };
        machine
    }

    /// A small machine breaking no rule: New -(pay)-> Paid -(ship)-> Shipped, New -(cancel)->
    /// Cancelled, Paid -> Done automatically when `shipped_already`, Shipped -> Done.
    fn good() -> StateMachine {
        machine(
            "New",
            &["New", "Paid", "Shipped", "Cancelled", "Done"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("cancel", "New", "Cancelled", "cancel"),
                when(auto("skip", "Paid", "Done"), "shipped_already"),
                on("ship", "Paid", "Shipped", "shipped"),
                auto("finish", "Shipped", "Done"),
            ],
        )
    }

    #[test]
    fn good_machines_break_no_rule() {
        assert_eq!(problems(&order()), Vec::<String>::new());
        assert_eq!(problems(&good()), Vec::<String>::new());
        assert!(validate(&Definition::new("Good", good())).is_ok());
    }

    #[test]
    fn sm_c1_unknown_initial_suggests_declared_state() {
        let m = machine("Nwe", &["New", "Done"], vec![auto("done", "New", "Done")]);
        let found = check_at_root(&m);
        assert_eq!(found.len(), 1);
        let d = &found[0];
        assert_eq!(d.rule, "SM-C1");
        assert_eq!(d.at.json_pointer(), "/root/initial");
        assert_eq!(
            d.message,
            "initial state `Nwe` is not a declared state; did you mean `New`?"
        );
        assert_eq!(d.suggestion.as_deref(), Some("New"));
    }

    #[test]
    fn sm_c1_unknown_initial_without_close_match_has_no_suggestion() {
        let m = machine("Elsewhere", &["New"], vec![]);
        let found = check_at_root(&m);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].to_string(),
            "SM-C1 at /root/initial: initial state `Elsewhere` is not a declared state; expected one of `New`"
        );
        assert_eq!(found[0].suggestion, None);
    }

    #[test]
    fn sm_c2_duplicate_state_name_on_both() {
        let m = machine(
            "New",
            &["New", "Paid", "Paid"],
            vec![on("pay", "New", "Paid", "payment")],
        );
        let found = check_at_root(&m);
        assert_eq!(
            problems(&m),
            [
                "SM-C2 at /root/states/1/name: duplicate state name `Paid`",
                "SM-C2 at /root/states/2/name: duplicate state name `Paid`",
            ]
        );
        assert_eq!(found[0].related[0].at, found[1].at);
        assert_eq!(found[1].related[0].at, found[0].at);
        assert_eq!(found[1].related[0].label, "first used here");
        // Unique names: nothing.
        assert!(problems(&machine("New", &["New"], vec![])).is_empty());
    }

    #[test]
    fn sm_c3_duplicate_transition_name_on_both() {
        let m = machine(
            "New",
            &["New", "Paid"],
            vec![
                on("pay", "New", "Paid", "payment"),
                Transition {
                    trigger: Some(Event::new("pay_card", "card").into()),
                    ..auto("pay", "New", "Paid")
                },
            ],
        );
        assert_eq!(
            problems(&m),
            [
                "SM-C3 at /root/transitions/0/name: duplicate transition name `pay`",
                "SM-C3 at /root/transitions/1/name: duplicate transition name `pay`",
            ]
        );
    }

    #[test]
    fn sm_c3_duplicate_trigger_id_on_both() {
        let m = machine(
            "New",
            &["New", "Paid"],
            vec![
                on("pay", "New", "Paid", "payment"),
                Transition {
                    trigger: Some(Delay::new("pay", 1000).into()),
                    ..auto("pay_late", "New", "Paid")
                },
            ],
        );
        let found = check_at_root(&m);
        assert_eq!(
            problems(&m),
            [
                "SM-C3 at /root/transitions/0/trigger/id: duplicate trigger id `pay`",
                "SM-C3 at /root/transitions/1/trigger/id: duplicate trigger id `pay`",
            ]
        );
        assert_eq!(found[1].related[0].at, found[0].at);
        assert_eq!(found[1].related[0].label, "first used here");
    }

    #[test]
    fn sm_c3_duplicate_activity_id_across_slots() {
        let mut m = machine(
            "New",
            &["New", "Paid"],
            vec![on("pay", "New", "Paid", "payment")],
        );
        m.states[0].entry = Some(Task::new("work", "send_confirmation").into());
        m.states[1].exit = Some(Task::new("work", "release").into());
        m.transitions[0].action = Some(Task::new("pay", "record_payment").into());
        assert_eq!(
            problems(&m),
            [
                "SM-C3 at /root/states/0/entry/id: duplicate activity id `work`",
                "SM-C3 at /root/states/1/exit/id: duplicate activity id `work`",
                "SM-C3 at /root/transitions/0/trigger/id: duplicate activity id `pay`",
                "SM-C3 at /root/transitions/0/action/id: duplicate activity id `pay`",
            ]
        );
    }

    #[test]
    fn sm_c4_unknown_target_suggests_declared_state() {
        let m = machine(
            "New",
            &["New", "Shipped"],
            vec![on("ship", "New", "Shiped", "shipped")],
        );
        let found = check_at_root(&m);
        // Only the typo: `Shipped` is not also reported as unreachable (no cascade).
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, "SM-C4");
        assert_eq!(found[0].at.json_pointer(), "/root/transitions/0/to");
        assert_eq!(
            found[0].message,
            "transition target `Shiped` is not a declared state; did you mean `Shipped`?"
        );
        assert_eq!(found[0].suggestion.as_deref(), Some("Shipped"));
    }

    #[test]
    fn sm_c4_unknown_source_suggests_declared_state() {
        let m = machine(
            "New",
            &["New", "Paid", "Done"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("close", "Piad", "Done", "close"),
            ],
        );
        let found = check_at_root(&m);
        // `Done` may have been meant to be reached from `Paid`: not reported unreachable.
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].to_string(),
            "SM-C4 at /root/transitions/1/from: transition source `Piad` is not a declared state; \
             did you mean `Paid`?"
        );
        assert_eq!(found[0].suggestion.as_deref(), Some("Paid"));
    }

    #[test]
    fn sm_c5_unreachable_state() {
        let m = machine(
            "New",
            &["New", "Paid", "Refunded"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("refund", "Refunded", "New", "refund"),
            ],
        );
        let found = check_at_root(&m);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rule, "SM-C5");
        assert_eq!(found[0].at.json_pointer(), "/root/states/2/name");
        assert_eq!(
            found[0].message,
            "state `Refunded` is unreachable from the initial state `New`"
        );
    }

    #[test]
    fn sm_c5_needs_a_declared_initial_state() {
        // `Paid` is unreachable from nothing: only SM-C1 is reported.
        let m = machine("Nwe", &["New", "Paid"], vec![]);
        let rules: Vec<&str> = check_at_root(&m).iter().map(|d| d.rule).collect();
        assert_eq!(rules, ["SM-C1"]);
    }

    #[test]
    fn sm_c5_still_reports_past_an_unknown_target_from_an_unreachable_state() {
        let m = machine(
            "New",
            &["New", "Paid", "Orphan"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("lost", "Orphan", "Nowhere", "lost"),
            ],
        );
        assert_eq!(
            problems(&m),
            [
                "SM-C4 at /root/transitions/1/to: transition target `Nowhere` is not a declared state; expected one of `New`, `Paid`, `Orphan`",
                "SM-C5 at /root/states/2/name: state `Orphan` is unreachable from the initial state `New`",
            ]
        );
    }

    #[test]
    fn sm_c6_transition_after_an_unconditional_automatic_one_is_never_taken() {
        let m = machine(
            "A",
            &["A", "B", "C", "D"],
            vec![
                auto("a", "A", "B"),
                when(auto("b", "A", "C"), "ready"),
                on("c", "A", "D", "poke"),
            ],
        );
        let found = check_at_root(&m);
        assert_eq!(
            problems(&m),
            [
                "SM-C6 at /root/transitions/1: transition `b` can never be taken: `a` before it is \
                 automatic and unconditional",
                "SM-C6 at /root/transitions/2: transition `c` can never be taken: `a` before it is \
                 automatic and unconditional",
            ]
        );
        assert_eq!(
            found[0]
                .related
                .iter()
                .map(|r| r.at.clone())
                .collect::<Vec<_>>(),
            [Location::root().field("root").field("transitions").index(0)]
        );
    }

    #[test]
    fn sm_c6_triggered_transition_of_a_state_with_an_unconditional_automatic_one() {
        let m = machine(
            "A",
            &["A", "B", "C"],
            vec![
                on("wait", "A", "C", "poke"),
                when(auto("maybe", "A", "C"), "ready"),
                Transition::new("A", "B"),
            ],
        );
        assert_eq!(
            problems(&m),
            [
                "SM-C6 at /root/transitions/0: transition `wait` can never be taken: `A->B` from the \
              same state is automatic and unconditional"
            ]
        );
    }

    #[test]
    fn sm_c6_conditional_automatic_transitions_before_triggers_are_fine() {
        let m = machine(
            "A",
            &["A", "B", "C"],
            vec![
                when(auto("fast", "A", "B"), "ready"),
                on("slow", "A", "C", "poke"),
                when(auto("late", "A", "C"), "late"),
            ],
        );
        assert!(problems(&m).is_empty());
    }

    #[test]
    fn sm_c7_cycle_of_unconditional_automatic_transitions() {
        let m = machine(
            "Start",
            &["Start", "A", "B"],
            vec![
                on("go", "Start", "B", "go"),
                auto("b", "B", "A"),
                auto("a", "A", "B"),
            ],
        );
        let found = check_at_root(&m);
        // Reported once, at the earliest declared transition of the cycle.
        assert_eq!(
            problems(&m),
            [
                "SM-C7 at /root/transitions/1: automatic transitions `b` -> `a` -> `b` loop forever: \
              none has a condition or a trigger"
            ]
        );
        assert_eq!(
            found[0]
                .related
                .iter()
                .map(|r| r.at.clone())
                .collect::<Vec<_>>(),
            [Location::root().field("root").field("transitions").index(2)]
        );
    }

    #[test]
    fn sm_c7_unnamed_self_loop() {
        let m = machine("A", &["A"], vec![Transition::new("A", "A")]);
        assert_eq!(
            problems(&m),
            [
                "SM-C7 at /root/transitions/0: automatic transition `A->A` loops forever: it has no \
              condition or trigger"
            ]
        );
    }

    #[test]
    fn sm_c7_a_condition_or_an_earlier_conditional_way_out_breaks_the_loop() {
        // A condition in the cycle.
        let m = machine(
            "A",
            &["A", "B"],
            vec![auto("a", "A", "B"), when(auto("b", "B", "A"), "again")],
        );
        assert!(problems(&m).is_empty());
        // A conditional automatic transition evaluated before the loop's: a polling loop.
        let m = machine(
            "Check",
            &["Check", "Wait", "Done"],
            vec![
                when(auto("ready", "Check", "Done"), "is_ready"),
                auto("not_yet", "Check", "Wait"),
                auto("again", "Wait", "Check"),
            ],
        );
        assert!(problems(&m).is_empty());
    }

    #[test]
    fn sm_c8_same_event_without_conditions() {
        let m = machine(
            "New",
            &["New", "Paid"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("pay_again", "New", "Paid", "payment"),
            ],
        );
        let found = check_at_root(&m);
        assert_eq!(
            problems(&m),
            [
                "SM-C8 at /root/transitions/1/trigger: transitions `pay` and `pay_again` from `New` \
              wait for the same event `payment` and neither has a condition"
            ]
        );
        assert_eq!(
            found[0]
                .related
                .iter()
                .map(|r| r.at.clone())
                .collect::<Vec<_>>(),
            [Location::root()
                .field("root")
                .field("transitions")
                .index(0)
                .field("trigger")]
        );
    }

    #[test]
    fn sm_c8_a_condition_or_another_key_tells_them_apart() {
        let with_condition = machine(
            "New",
            &["New", "Paid"],
            vec![
                on("pay", "New", "Paid", "payment"),
                when(on("pay_again", "New", "Paid", "payment"), "is_second"),
            ],
        );
        assert!(problems(&with_condition).is_empty());
        let mut other_key = machine(
            "New",
            &["New", "Paid"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("pay_again", "New", "Paid", "payment"),
            ],
        );
        other_key.transitions[1].trigger = Some(
            Event::new("pay_again", "payment")
                .with_key("customer_id")
                .into(),
        );
        assert!(problems(&other_key).is_empty());
    }

    #[test]
    fn sm_c9_machine_without_states() {
        let m = machine("New", &[], vec![Transition::new("New", "Done")]);
        // Only the root cause: not also an unknown initial state or unknown ends.
        assert_eq!(
            problems(&m),
            ["SM-C9 at /root/states: state machine `root` has no states"]
        );
    }

    #[test]
    fn sm_c9_empty_names_and_invalid_transition_name() {
        let m = machine(
            "",
            &["New", ""],
            vec![
                on("pay now", "New", "", "payment"),
                Transition::new("", "New"),
            ],
        );
        assert_eq!(
            problems(&m),
            [
                "SM-C9 at /root/initial: initial state is empty; expected the name of a declared state",
                "SM-C9 at /root/states/1/name: state name is empty",
                "SM-C9 at /root/transitions/0/name: invalid transition name `pay now`; expected a \
                 letter or `_` followed by letters, digits or `_`",
                "SM-C9 at /root/transitions/0/to: transition target is empty; expected the name of a \
                 declared state",
                "SM-C9 at /root/transitions/1/from: transition source is empty; expected the name of \
                 a declared state",
            ]
        );
        assert!(check_at_root(&m).iter().all(|d| d.rule == "SM-C9"));
    }

    #[test]
    fn several_violations_are_reported_together() {
        let mut m = machine(
            "New",
            &["New", "Paid", "Paid", "Refunded", "Loop"],
            vec![
                on("pay", "New", "Paid", "payment"),
                on("pay", "New", "Shiped", "payment"),
                on("pay_again", "New", "Paid", "payment"),
                auto("spin", "Paid", "Paid"),
                on("refund", "Paid", "Refunded", "refund"),
            ],
        );
        m.transitions[2].trigger = Some(Event::new("pay", "payment").with_key("order_id").into());
        m.initial = "Nwe".into();
        assert_eq!(
            problems(&m),
            [
                "SM-C2 at /root/states/1/name: duplicate state name `Paid`",
                "SM-C2 at /root/states/2/name: duplicate state name `Paid`",
                "SM-C3 at /root/transitions/0/name: duplicate transition name `pay`",
                "SM-C3 at /root/transitions/1/name: duplicate transition name `pay`",
                "SM-C3 at /root/transitions/0/trigger/id: duplicate trigger id `pay`",
                "SM-C3 at /root/transitions/1/trigger/id: duplicate trigger id `pay`",
                "SM-C3 at /root/transitions/0/trigger/id: duplicate trigger id `pay`",
                "SM-C3 at /root/transitions/2/trigger/id: duplicate trigger id `pay`",
                "SM-C1 at /root/initial: initial state `Nwe` is not a declared state; did you mean `New`?",
                "SM-C4 at /root/transitions/1/to: transition target `Shiped` is not a declared state; expected one of `New`, `Paid`, `Refunded`, `Loop`",
                "SM-C6 at /root/transitions/4: transition `refund` can never be taken: `spin` before it \
                 is automatic and unconditional",
                "SM-C7 at /root/transitions/3: automatic transition `spin` loops forever: it has no \
                 condition or trigger",
                "SM-C8 at /root/transitions/2/trigger: transitions `pay` and `pay_again` from `New` wait \
                 for the same event `payment` and neither has a condition",
            ]
        );
    }

    #[test]
    fn json_state_machine_reports_every_problem_with_its_pointer() {
        let err = Definition::from_json(
            r#"{
              "name": "OrderFlow",
              "root": {
                "kind": "state_machine", "id": "root", "initial": "Nwe",
                "states": [ { "name": "New" }, { "name": "Paid" }, { "name": "Shipped" } ],
                "transitions": [
                  { "name": "pay", "from": "New", "to": "Piad",
                    "trigger": { "kind": "event", "id": "pay", "event": "payment" } },
                  { "name": "ship", "from": "Paid", "to": "Shipped",
                    "trigger": { "kind": "event", "id": "pay", "event": "shipped" } }
                ]
              }
            }"#,
        )
        .unwrap_err();
        let LoadError::Invalid(diagnostics) = &err else {
            panic!("expected LoadError::Invalid, got {err:?}");
        };
        let found: Vec<(&str, String)> = diagnostics
            .iter()
            .map(|d| (d.rule, d.at.json_pointer()))
            .collect();
        assert_eq!(
            found,
            [
                ("SM-C3", "/root/transitions/0/trigger/id".to_owned()),
                ("SM-C3", "/root/transitions/1/trigger/id".to_owned()),
                ("SM-C1", "/root/initial".to_owned()),
                ("SM-C4", "/root/transitions/0/to".to_owned()),
            ]
        );
        assert_eq!(
            err.to_string(),
            "4 problems in the definition\n  \
             SM-C3 at /root/transitions/0/trigger/id: duplicate trigger id `pay`\n  \
             SM-C3 at /root/transitions/1/trigger/id: duplicate trigger id `pay`\n  \
             SM-C1 at /root/initial: initial state `Nwe` is not a declared state; did you mean `New`?\n  \
             SM-C4 at /root/transitions/0/to: transition target `Piad` is not a declared state; \
             did you mean `Paid`?"
        );
    }

    #[test]
    fn json_order_definition_loads_cleanly() {
        assert!(Definition::from_json(include_str!("../../docs/order.json")).is_ok());
    }
}
