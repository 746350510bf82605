//! The repeating Timer (ACT-21, TM-11), StartAt (ACT-22) and Cron not as trigger (ACT-23,
//! TM-12) inside an instance, on the manual clock: each waits on a timer bookmark
//! (`wf.timer`, `wf.start_at`, `wf.cron`) whose timer row is written with it (TM-3). As
//! triggers (ACT-7, TM-11 to TM-13) they start instances from schedules in the store: one per
//! tick or occurrence, exactly one for a StartAt.

mod common;

use std::time::Duration;

use common::block_on;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_runtime::model::Definition;
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{BuildError, Registry, Runtime, StartOptions, TaskContext, WorkflowStatus};

/// 2026-01-01T00:00:00Z, where the manual clock starts ([`workflow_runtime::ManualClock`]).
const START_MS: u64 = 1_767_225_600_000;
/// The same instant in µs, the unit of instants in bookmark payloads and timer rows.
const START_US: i64 = 1_767_225_600_000_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
struct Steps {
    log: Vec<String>,
    /// The instant a `start_at` with `at_fn` waits for (ms since the epoch).
    at_ms: u64,
}

fn definition(name: &str, wait: Value) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "sequence", "id": "root", "steps": [
            wait,
            { "kind": "task", "id": "b", "function": "b" }
        ] }
    }))
    .unwrap()
}

fn registry() -> Registry<Steps> {
    Registry::new()
        .value("at", |d: &Steps| d.at_ms)
        .condition("three", |d: &Steps| {
            d.log.iter().filter(|l| l.as_str() == "t").count() >= 3
        })
        .task("t", |cx: &mut TaskContext<Steps>| {
            Box::pin(async move {
                cx.data_mut().log.push("t".to_owned());
                Ok(workflow_runtime::Outcome::done())
            })
        })
        .task("b", |cx: &mut TaskContext<Steps>| {
            Box::pin(async move {
                cx.data_mut().log.push("b".to_owned());
                Ok(workflow_runtime::Outcome::done())
            })
        })
}

fn runtime(definitions: Vec<Definition>) -> Result<TestRuntime, BuildError> {
    let mut builder = Runtime::builder();
    for d in definitions {
        builder = builder.register_definition(d, registry());
    }
    TestRuntime::build(builder)
}

async fn start(test: &TestRuntime, name: &str, data: Steps) -> (String, WorkflowStatus) {
    let started = test
        .start_by_name(
            name,
            serde_json::to_value(&data).unwrap(),
            StartOptions::default(),
        )
        .await
        .unwrap();
    (started.instance_id, started.status)
}

async fn log_of(test: &TestRuntime, id: &str) -> (WorkflowStatus, Vec<String>) {
    let snapshot = test.get_state(id).await.unwrap().unwrap();
    (snapshot.status(), snapshot.data::<Steps>().unwrap().log)
}

/// The one bookmark of the instance: (name, payload), and that its timer row matches it (TM-3).
async fn one_timer(test: &TestRuntime, id: &str) -> (String, Value) {
    let snapshot = test.get_state(id).await.unwrap().unwrap();
    let [bookmark] = snapshot.state.bookmarks() else {
        panic!("one bookmark: {:?}", snapshot.state.bookmarks())
    };
    let timers = test.store().list_timers(id).await.unwrap();
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].timer_id, bookmark.id);
    let due = bookmark.payload["due_at"].as_i64().unwrap();
    assert_eq!(timers[0].due_at, due);
    (bookmark.name.clone(), bookmark.payload.clone())
}

// ACT-22, TM-3: a constant RFC 3339 instant two hours ahead: a `wf.start_at` bookmark with
// payload `{due_at}` and its timer row; nothing at 1h59m59s, done at 2h; the row is gone.
#[test]
fn act22_start_at_waits_for_a_constant_instant() {
    block_on(async {
        let wait = json!({ "kind": "start_at", "id": "at", "at": "2026-01-01T02:00:00Z" });
        let test = runtime(vec![definition("At", wait)]).unwrap();
        let (id, status) = start(&test, "At", Steps::default()).await;
        assert_eq!(status, WorkflowStatus::Suspended);
        let (name, payload) = one_timer(&test, &id).await;
        assert_eq!(name, "wf.start_at");
        assert_eq!(payload, json!({ "due_at": START_US + 7_200_000_000 }));

        test.advance(Duration::from_secs(2 * 3600 - 1))
            .await
            .unwrap();
        assert_eq!(
            log_of(&test, &id).await,
            (WorkflowStatus::Suspended, vec![])
        );
        let fired = test.advance(Duration::from_secs(1)).await.unwrap();
        assert_eq!(fired.fired.len(), 1);
        assert_eq!(
            log_of(&test, &id).await,
            (WorkflowStatus::Finished, vec!["b".to_owned()])
        );
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
    });
}

// ACT-22: an instant that is not in the future completes at once, with no bookmark or timer;
// one with an offset is read as the UTC instant it names.
#[test]
fn act22_start_at_in_the_past_completes_at_once_and_offsets_count() {
    block_on(async {
        let past = json!({ "kind": "start_at", "id": "at", "at": "2025-12-31T23:59:59.999Z" });
        let offset = json!({ "kind": "start_at", "id": "at", "at": "2026-01-01T03:30:00+02:00" });
        let test = runtime(vec![definition("Past", past), definition("Offset", offset)]).unwrap();
        let (id, status) = start(&test, "Past", Steps::default()).await;
        assert_eq!(status, WorkflowStatus::Finished);
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
        assert_eq!(log_of(&test, &id).await.1, ["b"]);

        let (id, _) = start(&test, "Offset", Steps::default()).await;
        let (_, payload) = one_timer(&test, &id).await;
        assert_eq!(payload["due_at"], json!(START_US + 5_400_000_000));
    });
}

// ACT-22: the instant from a value fn (ms since the epoch), computed when the node starts.
#[test]
fn act22_start_at_an_instant_computed_by_a_fn() {
    block_on(async {
        let wait = json!({ "kind": "start_at", "id": "at", "at_fn": "at" });
        let test = runtime(vec![definition("AtFn", wait)]).unwrap();
        let data = Steps {
            at_ms: START_MS + 60_000,
            ..Steps::default()
        };
        let (id, status) = start(&test, "AtFn", data).await;
        assert_eq!(status, WorkflowStatus::Suspended);
        assert_eq!(one_timer(&test, &id).await.0, "wf.start_at");
        test.advance(Duration::from_secs(60)).await.unwrap();
        assert_eq!(log_of(&test, &id).await.0, WorkflowStatus::Finished);

        let data = Steps {
            at_ms: START_MS,
            ..Steps::default()
        };
        let (_, status) = start(&test, "AtFn", data).await;
        assert_eq!(status, WorkflowStatus::Finished);
    });
}

// ACT-23, TM-12: a Cron node not as trigger waits for the next occurrence after now, with a
// `wf.cron` bookmark carrying `{due_at, expression}`, then completes. `30 9 * * *` from
// midnight UTC is 09:30 UTC; in `+02:00` it is 07:30 UTC.
#[test]
fn act23_cron_waits_for_the_next_occurrence_then_completes() {
    block_on(async {
        let utc = json!({ "kind": "cron", "id": "daily", "expression": "30 9 * * *" });
        let east = json!({
            "kind": "cron", "id": "daily", "expression": "30 9 * * *", "time_zone": "+02:00"
        });
        let test = runtime(vec![definition("Utc", utc), definition("East", east)]).unwrap();
        let (utc_id, status) = start(&test, "Utc", Steps::default()).await;
        assert_eq!(status, WorkflowStatus::Suspended);
        let (name, payload) = one_timer(&test, &utc_id).await;
        assert_eq!(name, "wf.cron");
        assert_eq!(
            payload,
            json!({ "due_at": START_US + 34_200_000_000, "expression": "30 9 * * *" })
        );
        let (east_id, _) = start(&test, "East", Steps::default()).await;
        let (_, payload) = one_timer(&test, &east_id).await;
        assert_eq!(payload["due_at"], json!(START_US + 27_000_000_000));

        test.advance(Duration::from_secs(7 * 3600 + 30 * 60))
            .await
            .unwrap();
        assert_eq!(log_of(&test, &east_id).await.0, WorkflowStatus::Finished);
        assert_eq!(log_of(&test, &utc_id).await.0, WorkflowStatus::Suspended);
        test.advance(Duration::from_secs(2 * 3600)).await.unwrap();
        assert_eq!(
            log_of(&test, &utc_id).await,
            (WorkflowStatus::Finished, vec!["b".to_owned()])
        );
    });
}

// ACT-23: an occurrence exactly at now is not waited for: the next one is (strictly after now).
#[test]
fn act23_cron_at_an_occurrence_waits_for_the_next() {
    block_on(async {
        let hourly = json!({ "kind": "cron", "id": "hourly", "expression": "0 * * * *" });
        let test = runtime(vec![definition("Hourly", hourly)]).unwrap();
        let (id, _) = start(&test, "Hourly", Steps::default()).await;
        let (_, payload) = one_timer(&test, &id).await;
        assert_eq!(payload["due_at"], json!(START_US + 3_600_000_000));
    });
}

fn triggered(name: &str, activity: Value) -> Definition {
    serde_json::from_value(json!({
        "name": name,
        "root": { "kind": "flowchart", "id": "root",
            "nodes": [activity, { "kind": "task", "id": "b", "function": "b" }],
            "connections": [{ "source": "t", "target": "b" }] }
    }))
    .unwrap()
}

async fn all_finished_with_b(test: &TestRuntime, ids: &[(String, String)]) {
    for (id, _) in ids {
        assert_eq!(
            log_of(test, id).await,
            (WorkflowStatus::Finished, vec!["b".to_owned()]),
            "{id}"
        );
    }
}

// ACT-7, ACT-23, TM-12: a Cron trigger's schedule is written at registration (a timer row
// with no instance); each occurrence starts one instance at the trigger node, which completes
// at once, and the schedule advances to the next occurrence.
#[test]
fn tm12_a_cron_trigger_starts_one_instance_per_occurrence() {
    block_on(async {
        let cron = json!({ "kind": "cron", "id": "t", "expression": "0 * * * *", "trigger": true });
        let test = runtime(vec![triggered("Hourly", cron)]).unwrap();
        let fired = test
            .advance(Duration::from_secs(3 * 3600 + 60))
            .await
            .unwrap();
        assert_eq!(fired.fired.len(), 3, "{fired:?}");
        all_finished_with_b(&test, &fired.fired).await;
        let ids: std::collections::HashSet<_> = fired.fired.iter().map(|f| &f.0).collect();
        assert_eq!(ids.len(), 3);
        let schedules = test.store().list_schedules("Hourly").await.unwrap();
        assert_eq!(schedules.len(), 1);
        assert_eq!(
            schedules[0].due_at,
            i64::try_from(START_MS + 4 * 3_600_000).unwrap() * 1000
        );
    });
}

// ACT-7, ACT-21, TM-11: a Timer trigger starts one instance per tick, anchored at its first
// registration; its body is not used.
#[test]
fn tm11_a_timer_trigger_starts_one_instance_per_tick() {
    block_on(async {
        let timer = json!({
            "kind": "timer", "id": "t", "interval_ms": 1_800_000, "trigger": true,
            "body": { "kind": "task", "id": "x", "function": "t" }
        });
        let test = runtime(vec![triggered("Half", timer)]).unwrap();
        let fired = test.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(fired.fired.len(), 2, "{fired:?}");
        all_finished_with_b(&test, &fired.fired).await;
    });
}

// ACT-22, TM-13: a StartAt trigger starts exactly one instance, at the instant; one in the
// past fires at first registration.
#[test]
fn tm13_a_start_at_trigger_starts_exactly_one_instance() {
    block_on(async {
        let later =
            json!({ "kind": "start_at", "id": "t", "at": "2026-01-01T01:00:00Z", "trigger": true });
        let past =
            json!({ "kind": "start_at", "id": "t", "at": "2025-06-01T00:00:00Z", "trigger": true });
        let test = runtime(vec![triggered("Later", later), triggered("Past", past)]).unwrap();
        let fired = test.advance(Duration::ZERO).await.unwrap();
        assert_eq!(fired.fired.len(), 1, "{fired:?}");
        all_finished_with_b(&test, &fired.fired).await;
        let fired = test.advance(Duration::from_secs(5 * 3600)).await.unwrap();
        assert_eq!(fired.fired.len(), 1, "{fired:?}");
        all_finished_with_b(&test, &fired.fired).await;
        let fired = test.advance(Duration::from_secs(50 * 3600)).await.unwrap();
        assert!(fired.fired.is_empty());
        assert!(test.store().list_schedules("Later").await.unwrap()[0].fired);
    });
}

// TM-13: a StartAt trigger needs a constant instant (its schedule is written before any data
// exists): one with only `at_fn` is refused at build with a typed error.
#[test]
fn a_start_at_trigger_without_a_constant_instant_is_refused_at_build() {
    let at = json!({ "kind": "start_at", "id": "t", "at_fn": "at", "trigger": true });
    match runtime(vec![triggered("T", at)]) {
        Err(BuildError::UnsupportedActivity { kind, .. }) => {
            assert_eq!(kind, "start_at trigger without a constant instant");
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("built"),
    }
}

// ACT-21, TM-11, TM-3: a Timer without body and `max_ticks: 3` ticks at anchor + k × 1h, one
// `wf.timer` bookmark `{due_at, tick, missed}` re-created per tick, then completes.
#[test]
fn act21_a_timer_ticks_on_its_grid_until_max_ticks() {
    block_on(async {
        let wait =
            json!({ "kind": "timer", "id": "tick", "interval_ms": 3_600_000, "max_ticks": 3 });
        let test = runtime(vec![definition("Ticks", wait)]).unwrap();
        let (id, status) = start(&test, "Ticks", Steps::default()).await;
        assert_eq!(status, WorkflowStatus::Suspended);
        let (name, payload) = one_timer(&test, &id).await;
        assert_eq!(name, "wf.timer");
        assert_eq!(
            payload,
            json!({ "due_at": START_US + 3_600_000_000, "tick": 1, "missed": 0 })
        );
        test.advance(Duration::from_secs(3600)).await.unwrap();
        let (_, payload) = one_timer(&test, &id).await;
        assert_eq!(
            payload,
            json!({ "due_at": START_US + 7_200_000_000, "tick": 2, "missed": 0 })
        );
        test.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(log_of(&test, &id).await.0, WorkflowStatus::Suspended);
        let fired = test.advance(Duration::from_secs(5 * 3600)).await.unwrap();
        assert_eq!(fired.fired.len(), 1);
        assert_eq!(
            log_of(&test, &id).await,
            (WorkflowStatus::Finished, vec!["b".to_owned()])
        );
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
    });
}

// ACT-21: the body runs on every tick; the `until` condition, evaluated after the body, stops
// the timer.
#[test]
fn act21_the_body_runs_per_tick_until_the_condition_holds() {
    block_on(async {
        let wait = json!({
            "kind": "timer", "id": "tick", "interval_ms": 60_000, "until": "three",
            "body": { "kind": "task", "id": "t", "function": "t" }
        });
        let test = runtime(vec![definition("Until3", wait)]).unwrap();
        let (id, _) = start(&test, "Until3", Steps::default()).await;
        test.advance(Duration::from_secs(150)).await.unwrap();
        assert_eq!(
            log_of(&test, &id).await,
            (
                WorkflowStatus::Suspended,
                vec!["t".to_owned(), "t".to_owned()]
            )
        );
        let fired = test.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(fired.fired.len(), 1);
        assert_eq!(log_of(&test, &id).await.1, ["t", "t", "t", "b"]);
        assert_eq!(log_of(&test, &id).await.0, WorkflowStatus::Finished);
    });
}

// ACT-21, ACT-29: Break in the body completes the timer.
#[test]
fn act21_break_in_the_body_completes_the_timer() {
    block_on(async {
        let wait = json!({
            "kind": "timer", "id": "tick", "interval_ms": 60_000,
            "body": { "kind": "sequence", "id": "once", "steps": [
                { "kind": "task", "id": "t", "function": "t" },
                { "kind": "break", "id": "stop" }
            ] }
        });
        let test = runtime(vec![definition("Once", wait)]).unwrap();
        let (id, _) = start(&test, "Once", Steps::default()).await;
        let fired = test.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(fired.fired.len(), 1);
        assert_eq!(
            log_of(&test, &id).await,
            (
                WorkflowStatus::Finished,
                vec!["t".to_owned(), "b".to_owned()]
            )
        );
        assert!(test.store().list_timers(&id).await.unwrap().is_empty());
    });
}

// TM-12, TM-6: two processes on one store, both firing at every occurrence: each occurrence
// starts exactly one instance (the claim and `fire_schedule` guard it).
#[test]
fn tm12_two_processes_start_one_instance_per_occurrence() {
    block_on(async {
        let store: std::sync::Arc<dyn workflow_runtime::Store> =
            std::sync::Arc::new(workflow_runtime::MemoryStore::new());
        let cron =
            json!({ "kind": "cron", "id": "t", "expression": "*/10 * * * *", "trigger": true });
        let process = || {
            let clock =
                workflow_runtime::ManualClock::new(workflow_runtime::ManualClock::DEFAULT_START);
            let builder = Runtime::builder()
                .store(store.clone())
                .register_definition(triggered("Every10", cron.clone()), registry());
            TestRuntime::build_at(builder, clock).unwrap()
        };
        let (a, b) = (process(), process());
        let mut started = Vec::new();
        for minute in 1..=60u64 {
            let at = i64::try_from(START_MS + minute * 60_000).unwrap() * 1000;
            started.extend(b.set(at).await.unwrap().fired);
            started.extend(a.set(at).await.unwrap().fired);
        }
        assert_eq!(started.len(), 6, "{started:?}");
        let ids: std::collections::HashSet<_> = started.iter().map(|f| &f.0).collect();
        assert_eq!(ids.len(), 6);
        all_finished_with_b(&a, &started).await;
    });
}
