//! The `deferred` example's process (a port of workflow-core's sample 05: start, sleep,
//! continue), durable on SQLite across a restart: a library module so that
//! `examples/tests/deferred.rs` runs it as two processes would, and checks what it says.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::{
    Completion, Registry, Runtime, SqliteStore, StartOptions, TaskContext, WorkflowStatus,
};

/// Where the example writes its lines: standard output in the example, a list in its test.
pub type Say = Arc<dyn Fn(String) + Send + Sync>;

/// The instance's data.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Greeting {
    /// Appended to by each step, so a second run of a step would show.
    steps: Vec<String>,
}

async fn hello(ctx: &mut TaskContext<Greeting>, say: &Say) {
    say("  step `hello` runs: Hello world".to_owned());
    ctx.data_mut().steps.push("hello".to_owned());
}

async fn goodbye(ctx: &mut TaskContext<Greeting>, say: &Say) {
    say("  step `goodbye` runs: Goodbye world".to_owned());
    ctx.data_mut().steps.push("goodbye".to_owned());
}

// The sleep is a JSON definition so its length can come from the environment; the macro form
// is `sequence [task(hello), sleep = after(secs(5)), task(goodbye)]`.
/// The instance's id.
pub const INSTANCE: &str = "deferred-1";

fn definition(seconds: u64) -> Result<workflow_runtime::model::Definition, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "name": "Deferred",
        "root": { "kind": "sequence", "id": "root", "steps": [
            { "kind": "task", "id": "hello", "function": "hello" },
            { "kind": "delay", "id": "sleep", "duration_ms": seconds * 1000 },
            { "kind": "task", "id": "goodbye", "function": "goodbye" }
        ] }
    }))
}

fn registry(say: &Say) -> Registry<Greeting> {
    let (first, second) = (Arc::clone(say), Arc::clone(say));
    Registry::new()
        .task("hello", move |cx: &mut TaskContext<Greeting>| {
            let say = Arc::clone(&first);
            Box::pin(async move {
                hello(cx, &say).await;
                Ok(workflow_runtime::Outcome::done())
            })
        })
        .task("goodbye", move |cx: &mut TaskContext<Greeting>| {
            let say = Arc::clone(&second);
            Box::pin(async move {
                goodbye(cx, &say).await;
                Ok(workflow_runtime::Outcome::done())
            })
        })
}

/// Microseconds since the epoch, now: the unit of the runtime's instants.
fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `3.2 s` from microseconds.
fn seconds_text(micros: i64) -> String {
    format!(
        "{}.{} s",
        micros / 1_000_000,
        (micros % 1_000_000) / 100_000
    )
}

/// The file of the example: the first argument, else `DEFERRED_EXAMPLE_DB`, else
/// `target/deferred-example.db`.
pub fn default_path() -> PathBuf {
    std::env::args_os()
        .nth(1)
        .or_else(|| std::env::var_os("DEFERRED_EXAMPLE_DB"))
        .map_or_else(
            || PathBuf::from("target/deferred-example.db"),
            PathBuf::from,
        )
}

/// One process of the example on the SQLite file at `path`, with a sleep of `seconds`: the
/// first run starts the instance and returns while it sleeps; a later one continues it (at
/// once when the sleep fell due meanwhile, else when it does) and reports it finished; a run
/// after that says it finished already.
///
/// # Errors
///
/// The store's and the runtime's, as text.
pub async fn run(path: &Path, seconds: u64, say: Say) -> Result<(), Box<dyn Error>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    say(format!("SQLite file {}", path.display()));
    let store = Arc::new(SqliteStore::open(path)?);
    // The timer driver is started below, once this process has said where the instance is:
    // its first pass fires the timers that fell due while no process ran.
    let runtime = Runtime::builder()
        .store(store)
        .register_definition(definition(seconds)?, registry(&say))
        .timer_driver(false)
        .build()?;

    match runtime.get_state(INSTANCE).await? {
        None => {
            say(format!(
                "starting {INSTANCE}: step `hello`, a durable sleep of {seconds} s, then step \
                 `goodbye`"
            ));
            let options = StartOptions {
                instance_id: Some(INSTANCE.to_owned()),
                ..StartOptions::default()
            };
            let data = serde_json::to_value(Greeting::default())?;
            let started = runtime.start_by_name("Deferred", data, options).await?;
            say(format!(
                "{INSTANCE} is {}, sleeping. This process exits now: run the example again in \
                 {seconds} s or later, and the new process continues it.",
                started.status.to_string().to_lowercase()
            ));
            runtime.shutdown(Duration::from_secs(1)).await;
            return Ok(());
        }
        Some(snapshot) if snapshot.status() == WorkflowStatus::Finished => {
            let data: Greeting = snapshot.data()?;
            say(format!(
                "{INSTANCE} finished in an earlier run; its steps ran once each: {}",
                data.steps.join(", ")
            ));
            say(format!("(delete {} to start over)", path.display()));
            runtime.shutdown(Duration::from_secs(1)).await;
            return Ok(());
        }
        Some(snapshot) => {
            let due = snapshot
                .state
                .bookmarks()
                .iter()
                .find(|b| b.name == "wf.delay")
                .and_then(|b| b.payload["due_at"].as_i64());
            let now = now_micros();
            match due {
                Some(due) if due <= now => say(format!(
                    "{INSTANCE} is sleeping; its sleep fell due {} ago while no process ran: \
                     it fires once, now, late",
                    seconds_text(now - due)
                )),
                Some(due) => say(format!(
                    "{INSTANCE} is sleeping; its sleep is due in {}: this process waits for it",
                    seconds_text(due - now)
                )),
                None => say(format!(
                    "{INSTANCE} is {}: this process continues it",
                    snapshot.status().to_string().to_lowercase()
                )),
            }
        }
    }
    // A run interrupted by a crash runs again; then the timer driver fires the sleep.
    runtime.recover().await?;
    runtime.start_timer_driver();
    match runtime
        .await_completion(INSTANCE, Duration::from_secs(seconds + 30))
        .await?
    {
        Completion::Finished(_) => {
            let snapshot = runtime
                .get_state(INSTANCE)
                .await?
                .ok_or("instance vanished")?;
            let data: Greeting = snapshot.data()?;
            let late = snapshot
                .journal
                .iter()
                .find_map(|e| {
                    let due = e.detail.get("due_at")?.as_i64()?;
                    let fired = e.detail.get("fired_at")?.as_i64()?;
                    Some(fired.saturating_sub(due))
                })
                .map_or_else(String::new, |late| {
                    format!(
                        "; the timer fired {} after its due time",
                        seconds_text(late)
                    )
                });
            say(format!(
                "{INSTANCE} finished: its steps ran once each: {}{late}",
                data.steps.join(", ")
            ));
        }
        Completion::Cancelled(reason) => say(format!(
            "{INSTANCE} was cancelled{}",
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        )),
    }
    runtime.shutdown(Duration::from_secs(1)).await;
    Ok(())
}
