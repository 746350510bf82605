//! Where an instance is, read from its state document, and what its recorded definition says
//! about that place: its current state or nodes by name, what each does and where it goes
//! next. The definition is the one the application recorded in the store, so none of the
//! application's code is needed.

use serde::Serialize;
use serde_json::Value;
use workflow_model::{Activity, Definition, Flowchart, Missed, StateMachine};

use crate::render::duration;

/// Where an instance is, as its state document says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Position {
    /// The current state of a root state machine.
    State(String),
    /// The node paths (`root:review`) of the contexts that have not completed, innermost
    /// only.
    Nodes(Vec<String>),
    /// Neither (a finished instance, an unreadable document).
    Nowhere,
}

/// Where an instance is: the current state of a root state machine, else the nodes of its
/// contexts that have not completed (innermost only), else nowhere.
pub(crate) fn locate(state: &Value) -> Position {
    let contexts = state.get("contexts").and_then(Value::as_object);
    let root = state.get("root").and_then(Value::as_u64);
    let (Some(contexts), Some(root)) = (contexts, root) else {
        return Position::Nowhere;
    };
    let current = contexts
        .get(&root.to_string())
        .and_then(|c| c.pointer("/properties/current_state"))
        .and_then(Value::as_str);
    if let Some(current) = current {
        return Position::State(current.to_owned());
    }
    let mut open: Vec<(u64, String)> = contexts
        .values()
        .filter(|c| {
            let status = c.get("status").and_then(Value::as_str);
            matches!(status, Some("Running" | "Pending" | "Faulted"))
        })
        .filter(|c| c.get("id").and_then(Value::as_u64) != Some(root))
        .filter_map(|c| {
            let id = c.get("id").and_then(Value::as_u64)?;
            let node = c.get("node_id").and_then(Value::as_str)?;
            Some((id, node.to_owned()))
        })
        .collect();
    open.sort();
    // Only the innermost: drop a node that is the ancestor of another listed node.
    let nodes: Vec<String> = open.into_iter().map(|(_, n)| n).collect();
    let innermost: Vec<String> = nodes
        .iter()
        .filter(|n| !nodes.iter().any(|m| m.starts_with(&format!("{n}:"))))
        .cloned()
        .collect();
    Position::Nodes(innermost)
}

/// `root:review` -> `review`: node ids are ancestor paths; people name the last part.
pub(crate) fn short_node(node_id: &str) -> &str {
    node_id.rsplit(':').next().unwrap_or(node_id)
}

/// One state or node an instance is at, as its definition describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Place {
    /// The state name, or the node id.
    pub(crate) name: String,
    /// The state's or transition's name for people, when the definition gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) display_name: Option<String>,
    /// `state`, or the node's activity kind (`task`, `event`, `delay`, ...).
    pub(crate) kind: String,
    /// What it does, in words (`waits for the event `payment``), when that says more than
    /// its kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) does: Option<String>,
    /// Where it goes next, one way a line: `on the event `payment` -> Paid`, `done -> ship`.
    pub(crate) next: Vec<String>,
}

/// The places of `position` in `definition`; a state or node the definition does not have is
/// left out.
pub(crate) fn places(definition: &Definition, position: &Position) -> Vec<Place> {
    match position {
        Position::State(name) => match &definition.root {
            Activity::StateMachine(machine) => state_place(machine, name).into_iter().collect(),
            _ => Vec::new(),
        },
        Position::Nodes(paths) => paths
            .iter()
            .filter_map(|path| node_place(&definition.root, path))
            .collect(),
        Position::Nowhere => Vec::new(),
    }
}

fn state_place(machine: &StateMachine, name: &str) -> Option<Place> {
    let state = machine.states.iter().find(|s| s.name == name)?;
    let display = |state_name: &str| {
        machine
            .states
            .iter()
            .find(|s| s.name == state_name)
            .and_then(|s| s.display_name.as_deref())
            .map_or_else(
                || state_name.to_owned(),
                |shown| format!("{state_name} \"{shown}\""),
            )
    };
    let next = machine
        .transitions
        .iter()
        .filter(|t| t.from == name)
        .map(|t| {
            let label = t
                .display_name
                .as_deref()
                .or(t.name.as_deref())
                .map_or_else(String::new, |n| format!("`{n}`: "));
            let condition = t
                .condition
                .as_deref()
                .map_or_else(String::new, |c| format!(" if `{c}`"));
            format!(
                "{label}{}{condition} -> {}",
                trigger_words(t.trigger.as_ref()),
                display(&t.to)
            )
        })
        .collect();
    Some(Place {
        name: state.name.clone(),
        display_name: state.display_name.clone(),
        kind: "state".to_owned(),
        does: state
            .entry
            .as_ref()
            .and_then(does)
            .map(|entry| format!("on entry {entry}")),
        next,
    })
}

/// How a transition is taken.
fn trigger_words(trigger: Option<&Activity>) -> String {
    match trigger {
        None => "automatically".to_owned(),
        Some(Activity::Event(e)) => format!("on the event `{}`{}", e.event, key_words(e)),
        Some(other) => does(other).map_or_else(
            || format!("after the {} `{}`", other.kind_name(), other.id()),
            |words| format!("once it {words}"),
        ),
    }
}

fn key_words(event: &workflow_model::Event) -> String {
    event
        .key
        .as_deref()
        .map_or_else(String::new, |k| format!(" (its key is the data's `{k}`)"))
}

/// What an activity does, in words, for the kinds where that says more than the kind.
fn does(activity: &Activity) -> Option<String> {
    let millis = |ms: u64| duration(i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX));
    match activity {
        Activity::Task(t) => Some(format!("runs the task `{}`", t.function)),
        Activity::Event(e) => Some(format!("waits for the event `{}`{}", e.event, key_words(e))),
        Activity::Delay(d) => match (d.duration_ms, &d.until) {
            (Some(ms), _) => Some(format!("waits {}", millis(ms))),
            (None, Some(until)) => Some(format!("waits until `{until}`")),
            (None, None) => None,
        },
        Activity::Timer(t) => {
            let mut words = format!("ticks every {}", millis(t.interval_ms));
            if t.trigger {
                words.push_str(&format!(
                    "; ticks missed while no process ran are {}",
                    missed_words(t.missed)
                ));
            }
            Some(words)
        }
        Activity::StartAt(s) => {
            let zone = s
                .time_zone
                .as_deref()
                .map_or_else(String::new, |z| format!(" ({z})"));
            s.at.as_deref()
                .map(|at| format!("waits until {at}{zone}"))
                .or_else(|| Some(format!("waits until a computed instant{zone}")))
        }
        Activity::Cron(c) => Some(cron_words(c)),
        Activity::SubWorkflow(s) => Some(format!("runs the child workflow `{}`", s.workflow)),
        Activity::Join(_) => Some("waits for its incoming branches".to_owned()),
        _ => None,
    }
}

/// The time triggers of a definition's top-level flowchart (a cron, a repeating timer or a
/// one-shot `start_at`), each as (node id, what it does in words).
pub(crate) fn time_triggers(definition: &Definition) -> Vec<(String, String)> {
    let mut root = &definition.root;
    while let Activity::Saga(saga) = root {
        root = &saga.body;
    }
    let Activity::Flowchart(chart) = root else {
        return Vec::new();
    };
    chart
        .nodes
        .iter()
        .filter(|n| match n {
            Activity::Cron(c) => c.trigger,
            Activity::Timer(t) => t.trigger,
            Activity::StartAt(s) => s.trigger,
            _ => false,
        })
        .filter_map(|n| Some((n.id().to_owned(), does(n)?)))
        .collect()
}

/// A cron in words: its schedule, its zone and, for a trigger, what it does with occurrences
/// missed while no process ran (TM-16, TM-19).
fn cron_words(cron: &workflow_model::Cron) -> String {
    let zone = cron.time_zone.as_deref().unwrap_or("UTC");
    let mut words = format!("waits for the schedule `{}` in {zone}", cron.expression);
    if cron.trigger {
        words.push_str(&format!(
            "; occurrences missed while no process ran are {}",
            missed_words(cron.missed)
        ));
    }
    words
}

/// What a trigger's missed policy does, in words (TM-19).
fn missed_words(missed: Missed) -> String {
    match missed {
        Missed::Skip => "skipped".to_owned(),
        Missed::Once => "started once together (the default)".to_owned(),
        Missed::Backfill(n) => format!("each started, the latest {n} at most"),
    }
}

/// The node at `path` (`root:review`, `root:later:audit`): each part after the root's id is
/// a child of the previous one (found among its descendants when an unnamed wrapper sits
/// between them). Its next steps are the connections out of it in the flowchart holding it.
fn node_place(root: &Activity, path: &str) -> Option<Place> {
    let mut parts = path.split(':');
    if parts.next()? != root.id() {
        return None;
    }
    let mut current = root;
    let mut chart: Option<&Flowchart> = None;
    for part in parts {
        let (child, parent) = find(current, part)?;
        chart = match parent {
            Activity::Flowchart(f) => Some(f),
            _ => None,
        };
        current = child;
    }
    if std::ptr::eq(current, root) {
        return None;
    }
    let next = chart.map_or_else(Vec::new, |f| {
        f.connections
            .iter()
            .filter(|c| c.source == current.id())
            .map(|c| format!("{} -> {}", c.port, c.target))
            .collect()
    });
    Some(Place {
        name: short_node(path).to_owned(),
        display_name: None,
        kind: current.kind_name().to_owned(),
        does: does(current),
        next,
    })
}

/// The descendant of `activity` with this id, nearest first, with its direct parent.
fn find<'a>(activity: &'a Activity, id: &str) -> Option<(&'a Activity, &'a Activity)> {
    activity
        .children()
        .find(|c| c.id() == id)
        .map(|c| (c, activity))
        .or_else(|| activity.children().find_map(|c| find(c, id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use workflow_model::{Connection, Event, State, Task, Transition};

    fn order() -> Definition {
        let mut new = State::new("New");
        new.display_name = Some("Waiting for payment".to_owned());
        let mut pay = Transition::new("New", "Paid");
        pay.name = Some("pay".to_owned());
        let mut payment = Event::new("payment", "payment");
        payment.key = Some("order_id".to_owned());
        pay.trigger = Some(payment.into());
        let machine = StateMachine {
            id: "root".into(),
            initial: "New".into(),
            states: vec![new, State::new("Paid"), State::new("Gone")],
            transitions: vec![pay, Transition::new("New", "Gone")],
        };
        Definition::new("Order", machine)
    }

    #[test]
    fn a_state_is_named_with_its_display_name_and_the_ways_out_of_it() {
        let at = places(&order(), &Position::State("New".to_owned()));
        assert_eq!(
            at,
            [Place {
                name: "New".to_owned(),
                display_name: Some("Waiting for payment".to_owned()),
                kind: "state".to_owned(),
                does: None,
                next: vec![
                    "`pay`: on the event `payment` (its key is the data's `order_id`) -> Paid"
                        .to_owned(),
                    "automatically -> Gone".to_owned()
                ],
            }]
        );
        assert!(places(&order(), &Position::State("Lost".to_owned())).is_empty());
    }

    #[test]
    fn a_node_says_what_it_does_and_where_its_ports_lead() {
        let chart = Flowchart {
            id: "root".into(),
            start: vec!["submit".into()],
            nodes: vec![
                Task::new("submit", "submit_expense").into(),
                Event::new("approval", "expense.approved").into(),
                Task::new("pay", "pay_out").into(),
            ],
            connections: vec![
                Connection::new("submit", "done", "approval"),
                Connection::new("approval", "done", "pay"),
            ],
        };
        let definition = Definition::new("Expense", chart);
        let at = places(
            &definition,
            &Position::Nodes(vec!["root:approval".to_owned(), "root:nowhere".to_owned()]),
        );
        assert_eq!(
            at,
            [Place {
                name: "approval".to_owned(),
                display_name: None,
                kind: "event".to_owned(),
                does: Some("waits for the event `expense.approved`".to_owned()),
                next: vec!["done -> pay".to_owned()],
            }]
        );
        let other_root = places(&definition, &Position::Nodes(vec!["main:pay".to_owned()]));
        assert!(other_root.is_empty());
    }

    #[test]
    fn a_cron_says_its_zone_and_what_it_does_with_missed_occurrences() {
        let cron = |zone: Option<&str>, trigger: bool, missed: Missed| {
            Activity::Cron(workflow_model::Cron {
                id: "tick".into(),
                expression: "0 9 * * MON-FRI".into(),
                time_zone: zone.map(Into::into),
                trigger,
                missed,
            })
        };
        assert_eq!(
            does(&cron(None, false, Missed::Once)).as_deref(),
            Some("waits for the schedule `0 9 * * MON-FRI` in UTC")
        );
        assert_eq!(
            does(&cron(Some("Europe/Berlin"), true, Missed::Once)).as_deref(),
            Some(
                "waits for the schedule `0 9 * * MON-FRI` in Europe/Berlin; occurrences missed \
                 while no process ran are started once together (the default)"
            )
        );
        assert_eq!(
            does(&cron(Some("America/New_York"), true, Missed::Backfill(3))).as_deref(),
            Some(
                "waits for the schedule `0 9 * * MON-FRI` in America/New_York; occurrences \
                 missed while no process ran are each started, the latest 3 at most"
            )
        );
        assert!(does(&cron(None, true, Missed::Skip)).is_some_and(|w| w.ends_with("are skipped")));
    }

    #[test]
    fn a_timer_trigger_says_what_it_does_with_missed_ticks() {
        let timer = |trigger: bool, missed: Missed| {
            Activity::Timer(workflow_model::Timer {
                id: "poll".into(),
                interval_ms: 300_000,
                body: None,
                until: None,
                max_ticks: None,
                trigger,
                missed,
            })
        };
        let poll = does(&timer(false, Missed::Once)).unwrap();
        assert!(!poll.contains("missed"), "{poll}");
        let skip = does(&timer(true, Missed::Skip)).unwrap();
        assert!(
            skip.ends_with("; ticks missed while no process ran are skipped"),
            "{skip}"
        );
        let backfill = does(&timer(true, Missed::Backfill(2))).unwrap();
        assert!(
            backfill.ends_with("are each started, the latest 2 at most"),
            "{backfill}"
        );
    }
}
