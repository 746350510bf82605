//! Time zones (TM-16 to TM-18) and missed occurrences (TM-19) on the manual clock: cron
//! triggers and cron waits in Europe/Berlin and America/New_York across spring-forward and
//! fall-back, a local `start_at` (in JSON and in the macro form), each missed-occurrence
//! policy of a cron and of a repeating timer after three days with no process running, and
//! the typed errors for an unknown zone, a cron field out of range, a policy that cannot
//! apply and a `start_at` that is not an instant.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_runtime::model::Definition;
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    BuildError, ManualClock, MemoryStore, Registry, Runtime, StartOptions, Store, TaskContext,
    WorkflowStatus, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Data {
    log: Vec<String>,
    /// What a time trigger passes to the instance it starts: a cron its occurrence, a
    /// repeating timer its tick's due time.
    occurrence: Option<i64>,
    due_at: Option<i64>,
    missed: Option<u64>,
}

fn registry() -> Registry<Data> {
    Registry::new().task("b", |cx: &mut TaskContext<Data>| {
        Box::pin(async move {
            cx.data_mut().log.push("b".to_owned());
            Ok(workflow_runtime::Outcome::done())
        })
    })
}

/// µs since the epoch of an RFC 3339 instant such as `2026-03-29T01:00:00Z`.
fn us(text: &str) -> i64 {
    let (date, time) = text.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let t: Vec<i64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant), for the years these tests use.
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 1_000_000
}

fn triggered(name: &str, cron: Value) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "flowchart", "id": "root",
            "nodes": [cron, { "kind": "task", "id": "b", "function": "b" }],
            "connections": [{ "source": "t", "target": "b" }] }
    }))
    .unwrap()
}

fn cron_trigger(expression: &str, zone: &str) -> Value {
    json!({ "kind": "cron", "id": "t", "expression": expression, "time_zone": zone, "trigger": true })
}

fn runtime_at(start: &str, definitions: Vec<Definition>) -> TestRuntime {
    let mut builder = Runtime::builder();
    for d in definitions {
        builder = builder.register_definition(d, registry());
    }
    TestRuntime::build_at(builder, ManualClock::new(us(start))).unwrap()
}

/// A trigger `expression` in `zone`, from `start`: it fires at each of `expected` (RFC 3339
/// UTC) exactly, one instance each, and at no other time in between.
async fn fires_exactly_at(expression: &str, zone: &str, start: &str, expected: &[&str]) {
    let test = runtime_at(start, vec![triggered("T", cron_trigger(expression, zone))]);
    for at in expected {
        let before = test.set(us(at) - 1_000_000).await.unwrap();
        assert!(
            before.fired.is_empty(),
            "`{expression}` in {zone}: fired before {at}: {before:?}"
        );
        let fired = test.set(us(at)).await.unwrap();
        assert_eq!(
            fired.fired.len(),
            1,
            "`{expression}` in {zone}: expected one instance at {at}: {fired:?}"
        );
    }
}

// TM-17: Berlin springs forward on 2026-03-29 at 01:00 UTC (02:00 CET becomes 03:00 CEST).
// A daily 02:30 that day fires at the transition; the hourly 02:00 and 03:00 both fall on
// the transition instant and fire once there.
#[test]
fn tm17_berlin_spring_forward_daily_and_hourly() {
    block_on(async {
        fires_exactly_at(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        )
        .await;
        fires_exactly_at(
            "0 * * * *",
            "Europe/Berlin",
            "2026-03-28T23:30:00Z",
            &[
                "2026-03-29T00:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z",
            ],
        )
        .await;
    });
}

// TM-18: Berlin falls back on 2026-10-25 at 01:00 UTC (03:00 CEST becomes 02:00 CET). The
// daily 02:30 fires once, at the first 02:30 (CEST); the hourly 02:00 fires at its first
// instant only, so nothing fires at 01:00 UTC (the second 02:00).
#[test]
fn tm18_berlin_fall_back_daily_and_hourly() {
    block_on(async {
        fires_exactly_at(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        )
        .await;
        fires_exactly_at(
            "0 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:30:00Z",
            &["2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"],
        )
        .await;
    });
}

// TM-17, TM-18 in New York: spring-forward on 2026-03-08 at 07:00 UTC (02:00 EST becomes
// 03:00 EDT), fall-back on 2026-11-01 at 06:00 UTC (02:00 EDT becomes 01:00 EST).
#[test]
fn tm17_tm18_new_york_spring_forward_and_fall_back() {
    block_on(async {
        fires_exactly_at(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
        )
        .await;
        fires_exactly_at(
            "0 * * * *",
            "America/New_York",
            "2026-03-08T06:30:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"],
        )
        .await;
        fires_exactly_at(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        )
        .await;
        fires_exactly_at(
            "0 * * * *",
            "America/New_York",
            "2026-11-01T04:30:00Z",
            &[
                "2026-11-01T05:00:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T08:00:00Z",
            ],
        )
        .await;
    });
}

fn waiting(name: &str, wait: Value) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "sequence", "id": "root", "steps": [
            wait,
            { "kind": "task", "id": "b", "function": "b" }
        ] }
    }))
    .unwrap()
}

async fn status_of(test: &TestRuntime, id: &str) -> WorkflowStatus {
    test.get_state(id).await.unwrap().unwrap().status()
}

// TM-16, TM-17: a calendar timer (a cron wait, not a trigger) started on Saturday in winter
// time waits for Sunday 09:00 in Berlin, which is already summer time: 07:00 UTC, not the
// 08:00 a fixed +01:00 would give. A `start_at` at a local time the spring-forward skips
// fires at the transition.
#[test]
fn tm16_a_calendar_timer_and_a_local_start_at_across_the_spring_forward() {
    block_on(async {
        let nine = json!({
            "kind": "cron", "id": "w", "expression": "0 9 * * *", "time_zone": "Europe/Berlin"
        });
        let skipped = json!({
            "kind": "start_at", "id": "w", "at": "2026-03-29T02:30:00",
            "time_zone": "Europe/Berlin"
        });
        let test = runtime_at(
            "2026-03-28T12:00:00Z",
            vec![waiting("Nine", nine), waiting("Skipped", skipped)],
        );
        let mut ids = Vec::new();
        for name in ["Nine", "Skipped"] {
            let started = test
                .start_by_name(name, json!({}), StartOptions::default())
                .await
                .unwrap();
            assert_eq!(started.status, WorkflowStatus::Suspended, "{name}");
            ids.push(started.instance_id);
        }
        let (nine_id, skipped_id) = (&ids[0], &ids[1]);
        let timers = test.store().list_timers(nine_id).await.unwrap();
        assert_eq!(timers[0].due_at, us("2026-03-29T07:00:00Z"));
        let timers = test.store().list_timers(skipped_id).await.unwrap();
        assert_eq!(timers[0].due_at, us("2026-03-29T01:00:00Z"));

        test.set(us("2026-03-29T00:59:59Z")).await.unwrap();
        assert_eq!(
            status_of(&test, skipped_id).await,
            WorkflowStatus::Suspended
        );
        test.set(us("2026-03-29T01:00:00Z")).await.unwrap();
        assert_eq!(status_of(&test, skipped_id).await, WorkflowStatus::Finished);
        test.set(us("2026-03-29T06:59:59Z")).await.unwrap();
        assert_eq!(status_of(&test, nine_id).await, WorkflowStatus::Suspended);
        test.set(us("2026-03-29T07:00:00Z")).await.unwrap();
        assert_eq!(status_of(&test, nine_id).await, WorkflowStatus::Finished);
    });
}

/// One process runs a daily 09:00 Berlin trigger with `missed` (JSON, `None` for the
/// default) on 2026-01-01 and fires that day's occurrence, then stops; another starts on the
/// same store three days and four hours later, after the occurrences of 2, 3 and 4 January
/// fell due. Returns the data of the instances the second one started when it came up, and
/// the schedule's next due time.
async fn after_three_days_down(missed: Option<Value>) -> (Vec<Data>, i64, usize) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut cron = cron_trigger("0 9 * * *", "Europe/Berlin");
    if let Some(missed) = missed {
        cron["missed"] = missed;
    }
    let process = |at: &str| {
        let builder = Runtime::builder()
            .store(store.clone())
            .register_definition(triggered("Daily", cron.clone()), registry());
        TestRuntime::build_at(builder, ManualClock::new(us(at))).unwrap()
    };
    let first = process("2026-01-01T00:00:00Z");
    let fired = first.set(us("2026-01-01T08:00:00Z")).await.unwrap();
    assert_eq!(fired.fired.len(), 1, "{fired:?}");
    drop(first);

    let second = process("2026-01-04T12:00:00Z");
    let fired = second.advance(Duration::ZERO).await.unwrap();
    let mut started = Vec::new();
    for (id, _) in &fired.fired {
        let snapshot = second.get_state(id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished, "{id}");
        started.push(snapshot.data::<Data>().unwrap());
    }
    let schedules = second.store().list_schedules("Daily").await.unwrap();
    (started, schedules[0].due_at, fired.skipped.len())
}

fn occurrence(data: &Data) -> (Option<i64>, Option<u64>) {
    (data.occurrence, data.missed)
}

// TM-19 default `once`: the three missed occurrences start one instance together, for the
// latest, which says it stands for two more; the schedule goes on at the next occurrence.
#[test]
fn tm19_once_coalesces_three_missed_days_into_one_instance() {
    block_on(async {
        let (started, next_due, skipped) = after_three_days_down(None).await;
        let got: Vec<_> = started.iter().map(occurrence).collect();
        assert_eq!(got, [(Some(us("2026-01-04T08:00:00Z")), Some(2))]);
        assert_eq!(next_due, us("2026-01-05T08:00:00Z"));
        assert_eq!(skipped, 0);
    });
}

// TM-19 `skip`: the missed occurrences start nothing; the schedule goes on at the next one.
#[test]
fn tm19_skip_starts_nothing_for_three_missed_days() {
    block_on(async {
        let (started, next_due, skipped) = after_three_days_down(Some(json!("skip"))).await;
        assert_eq!(started, []);
        assert_eq!(skipped, 1);
        assert_eq!(next_due, us("2026-01-05T08:00:00Z"));
    });
}

// TM-19 `backfill`: each missed occurrence starts its own instance, oldest first, the latest
// N at most; the first of them says how many older ones were dropped.
#[test]
fn tm19_backfill_starts_one_instance_per_missed_day_up_to_n() {
    block_on(async {
        let (started, next_due, _) = after_three_days_down(Some(json!({ "backfill": 5 }))).await;
        let got: Vec<_> = started.iter().map(occurrence).collect();
        assert_eq!(
            got,
            [
                (Some(us("2026-01-02T08:00:00Z")), Some(0)),
                (Some(us("2026-01-03T08:00:00Z")), Some(0)),
                (Some(us("2026-01-04T08:00:00Z")), Some(0)),
            ]
        );
        assert_eq!(next_due, us("2026-01-05T08:00:00Z"));

        let (started, next_due, _) = after_three_days_down(Some(json!({ "backfill": 2 }))).await;
        let got: Vec<_> = started.iter().map(occurrence).collect();
        assert_eq!(
            got,
            [
                (Some(us("2026-01-03T08:00:00Z")), Some(1)),
                (Some(us("2026-01-04T08:00:00Z")), Some(0)),
            ]
        );
        assert_eq!(next_due, us("2026-01-05T08:00:00Z"));
    });
}

/// One process runs a daily repeating-timer trigger with `missed` (JSON, `None` for the
/// default), registered at midnight on 2026-01-01, and fires its first tick (2 January);
/// another starts on the same store three and a half days later, after the ticks of 3, 4 and
/// 5 January fell due. Time zones play no part: a timer ticks on a grid of elapsed time.
/// Returns the data of the instances the second one started when it came up, the schedule's
/// next due time and how many schedules it skipped.
async fn every_after_three_days_down(missed: Option<Value>) -> (Vec<Data>, i64, usize) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut timer =
        json!({ "kind": "timer", "id": "t", "interval_ms": 86_400_000, "trigger": true });
    if let Some(missed) = missed {
        timer["missed"] = missed;
    }
    let process = |at: &str| {
        let builder = Runtime::builder()
            .store(store.clone())
            .register_definition(triggered("Daily", timer.clone()), registry());
        TestRuntime::build_at(builder, ManualClock::new(us(at))).unwrap()
    };
    let first = process("2026-01-01T00:00:00Z");
    let fired = first.set(us("2026-01-02T00:00:00Z")).await.unwrap();
    assert_eq!(fired.fired.len(), 1, "{fired:?}");
    drop(first);

    let second = process("2026-01-05T12:00:00Z");
    let fired = second.advance(Duration::ZERO).await.unwrap();
    let mut started = Vec::new();
    for (id, _) in &fired.fired {
        let snapshot = second.get_state(id).await.unwrap().unwrap();
        assert_eq!(snapshot.status(), WorkflowStatus::Finished, "{id}");
        started.push(snapshot.data::<Data>().unwrap());
    }
    let schedules = second.store().list_schedules("Daily").await.unwrap();
    (started, schedules[0].due_at, fired.skipped.len())
}

fn tick(data: &Data) -> (Option<i64>, Option<u64>) {
    (data.due_at, data.missed)
}

// TM-11, TM-19 default `once` on a repeating timer: the three missed ticks start one
// instance together, with the first tick's due time and two more counted as missed; the
// grid goes on at the next tick after now.
#[test]
fn tm19_every_once_coalesces_three_missed_ticks() {
    block_on(async {
        let (started, next_due, skipped) = every_after_three_days_down(None).await;
        let got: Vec<_> = started.iter().map(tick).collect();
        assert_eq!(got, [(Some(us("2026-01-03T00:00:00Z")), Some(2))]);
        assert_eq!(next_due, us("2026-01-06T00:00:00Z"));
        assert_eq!(skipped, 0);
    });
}

// TM-19 `skip` on a repeating timer: the missed ticks start nothing; the grid goes on.
#[test]
fn tm19_every_skip_starts_nothing_for_three_missed_ticks() {
    block_on(async {
        let (started, next_due, skipped) = every_after_three_days_down(Some(json!("skip"))).await;
        assert_eq!(started, []);
        assert_eq!(skipped, 1);
        assert_eq!(next_due, us("2026-01-06T00:00:00Z"));
    });
}

// TM-19 `backfill` on a repeating timer: each missed tick starts its own instance, oldest
// first, the latest N at most; the first says how many older ones were dropped.
#[test]
fn tm19_every_backfill_starts_one_instance_per_missed_tick_up_to_n() {
    block_on(async {
        let (started, next_due, _) =
            every_after_three_days_down(Some(json!({ "backfill": 5 }))).await;
        let got: Vec<_> = started.iter().map(tick).collect();
        assert_eq!(
            got,
            [
                (Some(us("2026-01-03T00:00:00Z")), Some(0)),
                (Some(us("2026-01-04T00:00:00Z")), Some(0)),
                (Some(us("2026-01-05T00:00:00Z")), Some(0)),
            ]
        );
        assert_eq!(next_due, us("2026-01-06T00:00:00Z"));

        let (started, next_due, _) =
            every_after_three_days_down(Some(json!({ "backfill": 2 }))).await;
        let got: Vec<_> = started.iter().map(tick).collect();
        assert_eq!(
            got,
            [
                (Some(us("2026-01-04T00:00:00Z")), Some(1)),
                (Some(us("2026-01-05T00:00:00Z")), Some(0)),
            ]
        );
        assert_eq!(next_due, us("2026-01-06T00:00:00Z"));
    });
}

async fn b(cx: &mut TaskContext<Data>) {
    cx.data_mut().log.push("b".to_owned());
}

// A wait for 02:30 Berlin time on the night of the spring-forward, which does not exist.
workflow! {
    workflow SpringWait(Data) = sequence [
        start_at("2026-03-29T02:30:00", tz = "Europe/Berlin"),
        task(b),
    ];
}

// A one-shot trigger at 02:30 Berlin time on the night of the fall-back, which happens twice.
workflow! {
    workflow FallStart(Data) {
        at = start_at("2026-10-25T02:30:00", tz = "Europe/Berlin").trigger();
        run = task(b);

        at -> run;
    }
}

// TM-16 to TM-18 through the macro form: `start_at(.., tz = "Europe/Berlin")` as a wait at a
// local time the spring-forward skips fires at the change (01:00 UTC), not at 01:30 UTC
// (02:30 read as +01:00); as a trigger at a local time the fall-back repeats, it starts one
// instance at the first 02:30 (00:30 UTC, summer time) and none at the second (01:30 UTC).
#[test]
fn tm16_start_at_macro_form_with_a_zone_across_both_changes() {
    block_on(async {
        let builder = Runtime::builder().register::<SpringWait>();
        let test =
            TestRuntime::build_at(builder, ManualClock::new(us("2026-03-28T12:00:00Z"))).unwrap();
        let started = test
            .start_by_name("SpringWait", json!({}), StartOptions::default())
            .await
            .unwrap();
        let id = started.instance_id;
        let timers = test.store().list_timers(&id).await.unwrap();
        assert_eq!(timers[0].due_at, us("2026-03-29T01:00:00Z"));
        test.set(us("2026-03-29T00:59:59Z")).await.unwrap();
        assert_eq!(status_of(&test, &id).await, WorkflowStatus::Suspended);
        test.set(us("2026-03-29T01:00:00Z")).await.unwrap();
        assert_eq!(status_of(&test, &id).await, WorkflowStatus::Finished);

        let builder = Runtime::builder().register::<FallStart>();
        let test =
            TestRuntime::build_at(builder, ManualClock::new(us("2026-10-24T12:00:00Z"))).unwrap();
        let before = test.set(us("2026-10-25T00:29:59Z")).await.unwrap();
        assert!(before.fired.is_empty(), "{before:?}");
        let first = test.set(us("2026-10-25T00:30:00Z")).await.unwrap();
        assert_eq!(first.fired.len(), 1, "{first:?}");
        let data = test
            .get_state(&first.fired[0].0)
            .await
            .unwrap()
            .unwrap()
            .data::<Data>()
            .unwrap();
        assert_eq!(data.log, ["b"]);
        let second = test.set(us("2026-10-25T01:30:00Z")).await.unwrap();
        assert!(second.fired.is_empty(), "{second:?}");
        let later = test.set(us("2026-10-27T00:00:00Z")).await.unwrap();
        assert!(later.fired.is_empty(), "{later:?}");
    });
}

/// The problems the JSON loader reports: (rule, JSON Pointer, message).
fn problems(definition: &Value) -> Vec<(&'static str, String, String)> {
    match Definition::from_json(&definition.to_string()) {
        Err(error) => error
            .diagnostics()
            .unwrap()
            .iter()
            .map(|d| (d.rule, d.at.json_pointer(), d.message.clone()))
            .collect(),
        Ok(_) => panic!("loaded"),
    }
}

fn one(rule: &'static str, at: &str, message: &str) -> Vec<(&'static str, String, String)> {
    vec![(rule, at.to_owned(), message.to_owned())]
}

// TM-V2, TM-V1, TM-V5, TM-V6: an unknown zone in JSON, a cron field out of range, a policy
// that cannot start anything (on a cron or a timer) and a `start_at` that is not an instant
// are typed errors naming them, with a did-you-mean for the zone from
// the bundled database; a runtime refuses to build with such a definition.
#[test]
fn bad_zones_fields_and_policies_are_typed_errors_naming_them() {
    let with = |cron: Value| json!({ "name": "Z", "root": { "kind": "sequence", "id": "root", "steps": [cron] } });
    let zone = with(json!({
        "kind": "cron", "id": "w", "expression": "0 9 * * *", "time_zone": "Europe/Berln"
    }));
    assert_eq!(
        problems(&zone),
        one(
            "TM-V2",
            "/root/steps/0/time_zone",
            "unknown time zone `Europe/Berln`; did you mean `Europe/Berlin`?"
        )
    );
    let start_at = with(json!({
        "kind": "start_at", "id": "w", "at": "2026-03-29T02:30:00", "time_zone": "America/New_Yrok"
    }));
    assert_eq!(
        problems(&start_at),
        one(
            "TM-V2",
            "/root/steps/0/time_zone",
            "unknown time zone `America/New_Yrok`; did you mean `America/New_York`?"
        )
    );
    let range = with(json!({
        "kind": "cron", "id": "w", "expression": "0 9 32 * *", "time_zone": "America/New_York"
    }));
    assert_eq!(
        problems(&range),
        one(
            "TM-V1",
            "/root/steps/0/expression",
            "invalid cron expression `0 9 32 * *`; day of month `32` is out of range 1-31"
        )
    );
    let mut backfill_none =
        serde_json::to_value(triggered("B", cron_trigger("0 9 * * *", "UTC"))).unwrap();
    backfill_none["root"]["nodes"][0]["missed"] = json!({ "backfill": 0 });
    assert_eq!(
        problems(&backfill_none),
        one(
            "TM-V5",
            "/root/nodes/0/missed",
            "`backfill(0)` on cron `t` starts nothing; use `skip` to drop missed occurrences"
        )
    );
    let timer_backfill_none = serde_json::to_value(triggered(
        "B",
        json!({ "kind": "timer", "id": "t", "interval_ms": 60_000, "trigger": true }),
    ))
    .unwrap();
    let mut timer_backfill_none = timer_backfill_none;
    timer_backfill_none["root"]["nodes"][0]["missed"] = json!({ "backfill": 0 });
    assert_eq!(
        problems(&timer_backfill_none),
        one(
            "TM-V5",
            "/root/nodes/0/missed",
            "`backfill(0)` on timer `t` starts nothing; use `skip` to drop missed ticks"
        )
    );
    let timer_not_a_trigger = with(json!({
        "kind": "timer", "id": "w", "interval_ms": 60_000, "missed": "skip"
    }));
    assert_eq!(
        problems(&timer_not_a_trigger),
        one(
            "TM-V5",
            "/root/steps/0/missed",
            "timer `w` is not a trigger: it coalesces the ticks it misses; `missed` applies to a timer trigger"
        )
    );
    let local_without_zone = with(json!({
        "kind": "start_at", "id": "w", "at": "2026-03-29T02:30:00"
    }));
    assert_eq!(
        problems(&local_without_zone),
        one(
            "TM-V6",
            "/root/steps/0/at",
            "`2026-03-29T02:30:00` is not an instant; expected an RFC 3339 instant with an offset such as `2026-03-29T09:00:00Z`, or a local date and time with a `time_zone`"
        )
    );
    let not_a_date = with(json!({
        "kind": "start_at", "id": "w", "at": "2026-02-30T09:00:00", "time_zone": "Europe/Berlin"
    }));
    assert_eq!(
        problems(&not_a_date),
        one(
            "TM-V6",
            "/root/steps/0/at",
            "`2026-02-30T09:00:00` is not an instant; expected a local date and time such as `2026-03-29T09:00:00`, or an RFC 3339 instant with an offset"
        )
    );
    let unknown_policy = with(json!({
        "kind": "cron", "id": "w", "expression": "0 9 * * *", "missed": "sometimes"
    }));
    let found = problems(&unknown_policy);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].2.contains("sometimes"), "{found:?}");

    let built =
        Runtime::builder().register_definition(serde_json::from_value(zone).unwrap(), registry());
    match TestRuntime::build(built) {
        Err(BuildError::Invalid { name, diagnostics }) => {
            assert_eq!(name, "Z");
            assert_eq!(diagnostics.iter().next().unwrap().rule, "TM-V2");
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("built"),
    }
}
