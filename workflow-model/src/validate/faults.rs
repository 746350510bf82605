//! Timer and fault rules: TM-V1 to TM-V6 and FLT-V1 to FLT-V6; queues (QU-V1 to QU-V3).

use super::children_with_locations;
use crate::cron::{Schedule, Zone};
use crate::definition::{
    Activity, COMPENSATED, Decimal, Definition, Flowchart, Missed, RetryPolicy, SagaOnFailure,
};
use crate::diagnostics::{Diagnostic, Diagnostics, Location, suggest};
use crate::duration::duration;

/// The longest attempt timeout a task may declare (FLT-V4): 365 days, in milliseconds. Longer
/// values would not fit the runtime's microsecond instants once added to "now".
pub(crate) const MAX_ATTEMPT_TIMEOUT_MS: u64 = 365 * 24 * 60 * 60 * 1000;

/// Checks the whole definition for the timer and fault rules.
pub(super) fn check(definition: &Definition, cx: &mut Diagnostics) {
    if let Some(policy) = &definition.retry {
        check_retry(policy, &Location::root().field("retry"), cx);
    }
    if let Some(crate::definition::CommitStrategy::Periodic { interval_ms: 0 }) =
        definition.commit_strategy
    {
        cx.push(Diagnostic::new(
            "ENG-32",
            Location::root().field("commit_strategy"),
            "periodic commit interval must be greater than zero",
        ));
    }
    if let Some(name) = &definition.queue
        && let Err(error) = crate::queue::check_queue_name(name)
    {
        cx.push(Diagnostic::new(
            "QU-V1",
            Location::root().field("queue"),
            error.to_string(),
        ));
    }
    walk(&definition.root, &Location::root().field("root"), false, cx);
}

fn walk(activity: &Activity, at: &Location, in_saga: bool, cx: &mut Diagnostics) {
    check_activity(activity, at, in_saga, cx);
    if let Activity::Flowchart(chart) = activity {
        check_flowchart(chart, at, cx);
    }
    let in_saga = in_saga || matches!(activity, Activity::Saga(_));
    for (child, child_at) in children_with_locations(activity, at) {
        walk(child, &child_at, in_saga, cx);
    }
}

fn check_activity(activity: &Activity, at: &Location, in_saga: bool, cx: &mut Diagnostics) {
    match activity {
        Activity::Task(task) => {
            if let Some(policy) = &task.retry {
                check_retry(policy, &at.field("retry"), cx);
            }
            if task.attempt_timeout_ms == Some(0) {
                cx.push(Diagnostic::new(
                    "FLT-V4",
                    at.field("attempt_timeout_ms"),
                    "attempt timeout must be greater than zero",
                ));
            }
            if let Some(ms) = task.attempt_timeout_ms
                && ms > MAX_ATTEMPT_TIMEOUT_MS
            {
                cx.push(Diagnostic::new(
                    "FLT-V4",
                    at.field("attempt_timeout_ms"),
                    format!(
                        "attempt timeout of {ms} ms is too long; at most {MAX_ATTEMPT_TIMEOUT_MS} ms (365 days) is allowed"
                    ),
                ));
            }
            if let Some(name) = &task.queue
                && let Err(error) = crate::queue::check_queue_name(name)
            {
                cx.push(Diagnostic::new(
                    "QU-V1",
                    at.field("queue"),
                    error.to_string(),
                ));
            }
            if let Some(priority) = task.priority
                && priority > crate::queue::Priority::MAX.get()
            {
                cx.push(Diagnostic::new(
                    "QU-V2",
                    at.field("priority"),
                    format!("priority {priority} is out of range; use 0 to 9"),
                ));
            }
            if task.priority.is_some() && task.queue.is_none() {
                cx.push(Diagnostic::new(
                    "QU-V2",
                    at.field("priority"),
                    "a priority needs a `queue`",
                ));
            }
            if let Some(path) = &task.queue_key {
                if task.queue.is_none() {
                    cx.push(Diagnostic::new(
                        "QU-V3",
                        at.field("queue_key"),
                        "a partition key needs a `queue`",
                    ));
                } else if path.split('.').any(str::is_empty) {
                    cx.push(Diagnostic::new(
                        "QU-V3",
                        at.field("queue_key"),
                        format!("partition key path `{path}` is not a dotted field path"),
                    ));
                }
            }
            if task.compensation.is_some() && !in_saga {
                cx.push(Diagnostic::new(
                    "FLT-V5",
                    at.field("compensation"),
                    format!(
                        "compensation of `{0}` can never run; `{0}` is not inside a saga scope",
                        task.id
                    ),
                ));
            }
        }
        Activity::Cron(cron) => {
            if let Err(error) = Schedule::parse(&cron.expression) {
                cx.push(Diagnostic::new(
                    "TM-V1",
                    at.field("expression"),
                    error.to_string(),
                ));
            }
            if let Some(zone) = &cron.time_zone {
                check_time_zone(zone, &at.field("time_zone"), cx);
            }
            if cron.missed == Missed::Backfill(0) {
                cx.push(Diagnostic::new(
                    "TM-V5",
                    at.field("missed"),
                    format!(
                        "`backfill(0)` on cron `{}` starts nothing; use `skip` to drop missed occurrences",
                        cron.id
                    ),
                ));
            }
            if !cron.missed.is_default() && !cron.trigger {
                cx.push(Diagnostic::new(
                    "TM-V5",
                    at.field("missed"),
                    format!(
                        "cron `{}` is not a trigger: it waits for one occurrence and has none to miss; `missed` applies to a cron trigger",
                        cron.id
                    ),
                ));
            }
        }
        Activity::Timer(timer) => {
            if timer.missed == Missed::Backfill(0) {
                cx.push(Diagnostic::new(
                    "TM-V5",
                    at.field("missed"),
                    format!(
                        "`backfill(0)` on timer `{}` starts nothing; use `skip` to drop missed ticks",
                        timer.id
                    ),
                ));
            }
            if !timer.missed.is_default() && !timer.trigger {
                cx.push(Diagnostic::new(
                    "TM-V5",
                    at.field("missed"),
                    format!(
                        "timer `{}` is not a trigger: it coalesces the ticks it misses; `missed` applies to a timer trigger",
                        timer.id
                    ),
                ));
            }
        }
        Activity::StartAt(start) => {
            let zone = start.time_zone.as_deref().map(Zone::parse);
            if let Some(Err(error)) = &zone {
                cx.push(Diagnostic::new(
                    "TM-V2",
                    at.field("time_zone"),
                    error.to_string(),
                ));
            }
            // An unknown zone is one mistake, reported above; the instant is read without it.
            if let Some(instant) = &start.at
                && !matches!(zone, Some(Err(_)))
            {
                let with_offset = instant.parse::<jiff::Timestamp>().is_ok();
                let local = match &zone {
                    Some(Ok(zone)) => zone.instant_of_local_text(instant).is_some(),
                    _ => false,
                };
                if !with_offset && !local {
                    let expected = if zone.is_some() {
                        "a local date and time such as `2026-03-29T09:00:00`, or an RFC 3339 instant with an offset"
                    } else {
                        "an RFC 3339 instant with an offset such as `2026-03-29T09:00:00Z`, or a local date and time with a `time_zone`"
                    };
                    cx.push(Diagnostic::new(
                        "TM-V6",
                        at.field("at"),
                        format!("`{instant}` is not an instant; expected {expected}"),
                    ));
                }
            }
        }
        Activity::Event(event) => check_deadline(&event.id, event.deadline_ms, at, cx),
        Activity::SubWorkflow(sub) => check_deadline(&sub.id, sub.deadline_ms, at, cx),
        _ => {}
    }
}

/// Whether a connection that FC-V2 or FC-V3 reports may have been meant to leave `node`: one
/// from `node` through an outcome it does not have (`ack.timout`), or one from an unknown node
/// whose closest match is `node` (`akc.timeout`). An outcome of `node` left unconnected beside
/// such a mistake follows from it: one mistake, one error.
fn misspelled_connection_from(chart: &Flowchart, node: &Activity) -> bool {
    let ports = node.ports();
    let known = |id: &str| chart.nodes.iter().any(|n| n.id() == id);
    chart.connections.iter().any(|c| {
        if c.source == node.id() {
            !ports.contains(&c.port)
        } else {
            !known(&c.source)
                && suggest(&c.source, chart.nodes.iter().map(Activity::id)) == Some(node.id())
        }
    })
}

/// TM-V4: a literal deadline that is zero.
fn check_deadline(id: &str, deadline_ms: Option<u64>, at: &Location, cx: &mut Diagnostics) {
    if deadline_ms == Some(0) {
        cx.push(Diagnostic::new(
            "TM-V4",
            at.field("deadline_ms"),
            format!("deadline of `{id}` must be greater than zero"),
        ));
    }
}

/// TM-V3 (a deadline whose `timeout` is not connected) and FLT-V6 (a `continue` saga whose
/// `compensated` is not connected), for the nodes of one flowchart.
fn check_flowchart(chart: &Flowchart, at: &Location, cx: &mut Diagnostics) {
    let connected = |node: &Activity, port: &str| {
        chart
            .connections
            .iter()
            .any(|c| c.source == node.id() && c.port == port)
            || misspelled_connection_from(chart, node)
    };
    for (i, node) in chart.nodes.iter().enumerate() {
        let node_at = at.field("nodes").index(i);
        let deadline = match node {
            Activity::Event(e) => e.deadline_ms.is_some(),
            Activity::SubWorkflow(s) => s.deadline_ms.is_some(),
            _ => false,
        };
        if deadline && !connected(node, "timeout") {
            cx.push(Diagnostic::new(
                "TM-V3",
                node_at.field("deadline_ms"),
                format!(
                    "the `timeout` outcome of `{}` is not connected; connect it or remove the deadline",
                    node.id()
                ),
            ));
        }
        if let Activity::Saga(saga) = node
            && saga.on_failure == SagaOnFailure::CompensateThenContinue
            && !connected(node, COMPENSATED)
        {
            cx.push(Diagnostic::new(
                "FLT-V6",
                node_at.field("on_failure"),
                format!(
                    "the `compensated` outcome of `{}` is not connected",
                    saga.id
                ),
            ));
        }
    }
}

/// FLT-V1 to FLT-V3 for one retry policy at `at`.
pub(super) fn check_retry(policy: &RetryPolicy, at: &Location, cx: &mut Diagnostics) {
    if policy.max_attempts == Some(0) {
        cx.push(Diagnostic::new(
            "FLT-V1",
            at.field("max_attempts"),
            "retry policy needs at least 1 attempt",
        ));
    }
    let initial = policy
        .initial_delay_ms
        .unwrap_or(RetryPolicy::DEFAULT_INITIAL_DELAY_MS);
    let max = policy
        .max_delay_ms
        .unwrap_or(RetryPolicy::DEFAULT_MAX_DELAY_MS);
    if initial > max {
        let field = if policy.initial_delay_ms.is_some() {
            "initial_delay_ms"
        } else {
            "max_delay_ms"
        };
        cx.push(Diagnostic::new(
            "FLT-V2",
            at.field(field),
            format!(
                "initial retry delay `{}` exceeds the maximum delay `{}`",
                duration(initial),
                duration(max)
            ),
        ));
    }
    if policy.multiplier.is_some_and(|m| m < Decimal::ONE) {
        cx.push(Diagnostic::new(
            "FLT-V3",
            at.field("multiplier"),
            "backoff multiplier must be at least 1",
        ));
    }
    if policy
        .jitter
        .is_some_and(|j| j < Decimal::from_millis(0) || j > Decimal::ONE)
    {
        cx.push(Diagnostic::new(
            "FLT-V3",
            at.field("jitter"),
            "jitter must be between 0 and 1",
        ));
    }
}

fn check_time_zone(zone: &str, at: &Location, cx: &mut Diagnostics) {
    if let Err(error) = Zone::parse(zone) {
        cx.push(Diagnostic::new("TM-V2", at.clone(), error.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::MAX_ATTEMPT_TIMEOUT_MS;
    use crate::definition::{
        Activity, CommitStrategy, Connection, Cron, Decimal, Definition, Event, Flowchart, Missed,
        RetryPolicy, Saga, SagaOnFailure, Sequence, SubWorkflow, SubWorkflowMode, Task,
    };
    use crate::validate;

    fn found(definition: &Definition) -> Vec<(&'static str, String, String)> {
        match validate(definition) {
            Ok(()) => Vec::new(),
            Err(diagnostics) => diagnostics
                .iter()
                .map(|d| (d.rule, d.at.json_pointer(), d.message.clone()))
                .collect(),
        }
    }

    fn one(rule: &'static str, at: &str, message: &str) -> Vec<(&'static str, String, String)> {
        vec![(rule, at.to_owned(), message.to_owned())]
    }

    fn sequence(steps: Vec<Activity>) -> Activity {
        Sequence {
            id: "root".into(),
            steps,
        }
        .into()
    }

    fn saga(on_failure: SagaOnFailure, body: Activity) -> Activity {
        Saga {
            id: "booking".into(),
            on_failure,
            body: Box::new(body),
        }
        .into()
    }

    fn cron(expression: &str, zone: Option<&str>) -> Definition {
        Definition::new(
            "Demo",
            sequence(vec![
                Cron {
                    id: "tick".into(),
                    expression: expression.into(),
                    time_zone: zone.map(Into::into),
                    trigger: false,
                    missed: Missed::Once,
                }
                .into(),
            ]),
        )
    }

    fn retried(policy: RetryPolicy) -> Definition {
        Definition::new(
            "Demo",
            sequence(vec![
                Task::new("charge", "charge").with_retry(policy).into(),
            ]),
        )
    }

    fn event_chart(deadline_ms: u64, timeout_connected: bool) -> Definition {
        let mut event = Event::new("approval", "approved");
        event.deadline_ms = Some(deadline_ms);
        let mut connections = vec![Connection::new("approval", "done", "ship")];
        if timeout_connected {
            connections.push(Connection::new("approval", "timeout", "ship"));
        }
        Definition::new(
            "Demo",
            Flowchart {
                id: "root".into(),
                start: Vec::new(),
                nodes: vec![event.into(), Task::new("ship", "ship").into()],
                connections,
            },
        )
    }

    #[test]
    fn tm_v1_cron_expression_that_does_not_parse() {
        assert_eq!(
            found(&cron("0 25 * * *", None)),
            one(
                "TM-V1",
                "/root/steps/0/expression",
                "invalid cron expression `0 25 * * *`; hour `25` is out of range 0-23"
            )
        );
        assert_eq!(found(&cron("0 9 * * MON-FRI", Some("UTC"))), vec![]);
    }

    #[test]
    fn tm_v2_unknown_time_zone() {
        assert_eq!(
            found(&cron("* * * * *", Some("UTX"))),
            one(
                "TM-V2",
                "/root/steps/0/time_zone",
                "unknown time zone `UTX`; did you mean `UTC`?"
            )
        );
        assert_eq!(
            found(&cron("* * * * *", Some("Europe/Pariss"))),
            one(
                "TM-V2",
                "/root/steps/0/time_zone",
                "unknown time zone `Europe/Pariss`; did you mean `Europe/Paris`?"
            )
        );
        assert_eq!(
            found(&cron("* * * * *", Some("Mars/Olympus_Mons"))),
            one(
                "TM-V2",
                "/root/steps/0/time_zone",
                "unknown time zone `Mars/Olympus_Mons`; expected `UTC`, a fixed offset such as \
                 `+02:00` or an IANA name such as `Europe/Berlin`"
            )
        );
        for zone in [
            "+02:00",
            "-05:30",
            "+14:00",
            "+00:00",
            "Europe/Berlin",
            "America/New_York",
        ] {
            assert_eq!(found(&cron("* * * * *", Some(zone))), vec![], "{zone}");
        }
        for zone in ["+15:00", "+02:60", "0200", "+2:00", "europe/berlin"] {
            assert_eq!(found(&cron("* * * * *", Some(zone))).len(), 1, "{zone}");
        }
    }

    #[test]
    fn tm_v3_deadline_with_unconnected_timeout() {
        assert_eq!(
            found(&event_chart(60_000, false)),
            one(
                "TM-V3",
                "/root/nodes/0/deadline_ms",
                "the `timeout` outcome of `approval` is not connected; connect it or remove the deadline"
            )
        );
        assert_eq!(found(&event_chart(60_000, true)), vec![]);
    }

    /// `approval.timout` and `aproval.timeout` are each one mistake: the misspelled outcome or
    /// node (FC-V3, FC-V2), not also a `timeout` outcome left unconnected.
    #[test]
    fn tm_v3_not_beside_a_misspelled_connection() {
        for (source, port, rule, message) in [
            (
                "approval",
                "timout",
                "FC-V3",
                "node `approval` has no outcome `timout`; did you mean `timeout`?",
            ),
            (
                "aproval",
                "timeout",
                "FC-V2",
                "unknown node `aproval`; did you mean `approval`?",
            ),
        ] {
            let mut definition = event_chart(60_000, false);
            let Activity::Flowchart(chart) = &mut definition.root else {
                panic!("a flowchart")
            };
            chart
                .connections
                .push(Connection::new(source, port, "ship"));
            let problems = found(&definition);
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!((problems[0].0, problems[0].2.as_str()), (rule, message));
        }
        // A connection from an unrelated unknown node leaves TM-V3 reported.
        let mut definition = event_chart(60_000, false);
        let Activity::Flowchart(chart) = &mut definition.root else {
            panic!("a flowchart")
        };
        chart
            .connections
            .push(Connection::new("audit", "done", "ship"));
        assert!(found(&definition).iter().any(|p| p.0 == "TM-V3"));
    }

    #[test]
    fn tm_v4_zero_deadline() {
        assert_eq!(
            found(&event_chart(0, true)),
            one(
                "TM-V4",
                "/root/nodes/0/deadline_ms",
                "deadline of `approval` must be greater than zero"
            )
        );
        let sub = SubWorkflow {
            id: "child".into(),
            workflow: "Child".into(),
            input: None,
            assign: None,
            mode: SubWorkflowMode::Wait,
            deadline_ms: Some(0),
        };
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![sub.into()]))),
            one(
                "TM-V4",
                "/root/steps/0/deadline_ms",
                "deadline of `child` must be greater than zero"
            )
        );
    }

    #[test]
    fn flt_v1_zero_attempts() {
        let policy = RetryPolicy {
            max_attempts: Some(0),
            ..RetryPolicy::default()
        };
        assert_eq!(
            found(&retried(policy.clone())),
            one(
                "FLT-V1",
                "/root/steps/0/retry/max_attempts",
                "retry policy needs at least 1 attempt"
            )
        );
        let mut workflow_level = Definition::new("Demo", sequence(vec![]));
        workflow_level.retry = Some(policy);
        assert_eq!(
            found(&workflow_level),
            one(
                "FLT-V1",
                "/retry/max_attempts",
                "retry policy needs at least 1 attempt"
            )
        );
    }

    #[test]
    fn flt_v2_initial_delay_above_max_delay() {
        assert_eq!(
            found(&retried(RetryPolicy {
                initial_delay_ms: Some(600_000),
                max_delay_ms: Some(60_000),
                ..RetryPolicy::default()
            })),
            one(
                "FLT-V2",
                "/root/steps/0/retry/initial_delay_ms",
                "initial retry delay `10m` exceeds the maximum delay `1m`"
            )
        );
        // Against the runtime's default cap of 60 s.
        assert_eq!(
            found(&retried(RetryPolicy {
                initial_delay_ms: Some(120_000),
                ..RetryPolicy::default()
            })),
            one(
                "FLT-V2",
                "/root/steps/0/retry/initial_delay_ms",
                "initial retry delay `2m` exceeds the maximum delay `1m`"
            )
        );
    }

    #[test]
    fn flt_v3_multiplier_and_jitter() {
        assert_eq!(
            found(&retried(RetryPolicy {
                multiplier: Some(Decimal::from_millis(500)),
                jitter: Some(Decimal::from_millis(1_500)),
                ..RetryPolicy::default()
            })),
            vec![
                (
                    "FLT-V3",
                    "/root/steps/0/retry/multiplier".to_owned(),
                    "backoff multiplier must be at least 1".to_owned()
                ),
                (
                    "FLT-V3",
                    "/root/steps/0/retry/jitter".to_owned(),
                    "jitter must be between 0 and 1".to_owned()
                ),
            ]
        );
        assert_eq!(
            found(&retried(RetryPolicy {
                max_attempts: Some(5),
                initial_delay_ms: Some(1_000),
                max_delay_ms: Some(60_000),
                multiplier: Some(Decimal::ONE),
                jitter: Some(Decimal::ONE),
                retry_on: Some(vec!["timeout".into()]),
            })),
            vec![]
        );
    }

    #[test]
    fn eng_32_periodic_commit_interval_of_zero() {
        let mut definition = Definition::new("Demo", sequence(vec![]));
        definition.commit_strategy = Some(CommitStrategy::Periodic { interval_ms: 0 });
        assert_eq!(
            found(&definition),
            one(
                "ENG-32",
                "/commit_strategy",
                "periodic commit interval must be greater than zero"
            )
        );
        definition.commit_strategy = Some(CommitStrategy::Periodic { interval_ms: 500 });
        assert_eq!(found(&definition), vec![]);
    }

    #[test]
    fn flt_v4_zero_attempt_timeout() {
        let mut task = Task::new("charge", "charge");
        task.attempt_timeout_ms = Some(0);
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![task.into()]))),
            one(
                "FLT-V4",
                "/root/steps/0/attempt_timeout_ms",
                "attempt timeout must be greater than zero"
            )
        );
    }

    #[test]
    fn qu_v1_v2_a_task_queue_and_priority() {
        let mut task = Task::new("charge", "charge").with_queue("pay ments");
        task.priority = Some(10);
        let both = found(&Definition::new("Demo", sequence(vec![task.into()])));
        assert_eq!(
            both.iter()
                .map(|(rule, at, _)| (*rule, at.as_str()))
                .collect::<Vec<_>>(),
            [
                ("QU-V1", "/root/steps/0/queue"),
                ("QU-V2", "/root/steps/0/priority")
            ],
            "{both:?}"
        );
        let mut task = Task::new("charge", "charge");
        task.priority = Some(3);
        assert_eq!(
            found(&Definition::new(
                "Demo",
                sequence(vec![task.clone().into()])
            )),
            one(
                "QU-V2",
                "/root/steps/0/priority",
                "a priority needs a `queue`"
            )
        );
        let task = task.with_queue("payments");
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![task.into()]))),
            vec![]
        );
    }

    #[test]
    fn flt_v4_attempt_timeout_too_long() {
        let mut task = Task::new("charge", "charge");
        task.attempt_timeout_ms = Some(i64::MAX as u64 - 1);
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![task.into()]))),
            one(
                "FLT-V4",
                "/root/steps/0/attempt_timeout_ms",
                "attempt timeout of 9223372036854775806 ms is too long; at most 31536000000 ms (365 days) is allowed"
            )
        );
        let mut task = Task::new("charge", "charge");
        task.attempt_timeout_ms = Some(MAX_ATTEMPT_TIMEOUT_MS);
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![task.into()]))),
            vec![]
        );
    }

    #[test]
    fn flt_v5_compensation_outside_a_saga() {
        let charge = || Activity::from(Task::new("charge", "charge").with_compensation("refund"));
        assert_eq!(
            found(&Definition::new("Demo", sequence(vec![charge()]))),
            one(
                "FLT-V5",
                "/root/steps/0/compensation",
                "compensation of `charge` can never run; `charge` is not inside a saga scope"
            )
        );
        let inside = saga(SagaOnFailure::CompensateThenFault, sequence(vec![charge()]));
        assert_eq!(found(&Definition::new("Demo", inside)), vec![]);
    }

    #[test]
    fn flt_v6_continue_saga_with_unconnected_compensated() {
        let chart = |connected: bool| {
            let body = sequence(vec![
                Task::new("charge", "charge")
                    .with_compensation("refund")
                    .into(),
            ]);
            let mut connections = vec![Connection::new("booking", "done", "ship")];
            if connected {
                connections.push(Connection::new("booking", "compensated", "ship"));
            }
            Definition::new(
                "Demo",
                Flowchart {
                    id: "root".into(),
                    start: Vec::new(),
                    nodes: vec![
                        saga(SagaOnFailure::CompensateThenContinue, body),
                        Task::new("ship", "ship").into(),
                    ],
                    connections,
                },
            )
        };
        assert_eq!(
            found(&chart(false)),
            one(
                "FLT-V6",
                "/root/nodes/0/on_failure",
                "the `compensated` outcome of `booking` is not connected"
            )
        );
        assert_eq!(found(&chart(true)), vec![]);
    }
}
