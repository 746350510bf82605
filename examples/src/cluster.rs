//! One process of a cluster sharing a PostgreSQL database: the definitions every process
//! registers, and [`run_worker`], what the `worker` example and the multi-process test run.
//!
//! Two definitions, each with an event, a durable delay and a task that fails its first
//! attempt and is retried: the state machine [`Ticket`] and the sequence [`Pipeline`]. A third,
//! [`Tick`], is started by a repeating timer trigger, so every process holds the same
//! schedule and each occurrence must start one instance only.
//!
//! With recording on ([`WorkerConfig::record`]), every task execution writes a row to
//! `cluster_executions` in the store's schema: the instance, the process id, the lease token
//! the run holds, and the start and end times on the database's clock. The multi-process test
//! reads these rows to check that no two executions of one instance overlapped.

use std::error::Error;
use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use workflow_runtime::store::PostgresOptions;
use workflow_runtime::{
    PostgresStore, Runtime, StartError, StartOptions, Stimulus, TaskContext, TaskError,
    state_machine, workflow,
};

/// The data of every cluster instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Job {
    /// The key events are routed by (the instance id).
    pub id: String,
    /// Tasks completed.
    pub steps: u32,
}

/// Where task executions are recorded, when recording is on.
struct Recorder {
    pool: PgPool,
    table: String,
    instances: String,
}

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// How long each task works: long enough that two overlapping executions would show.
const WORK: Duration = Duration::from_millis(5);

/// Records one task execution around `WORK`: a row at the start (with the lease token the
/// run holds), its end time at the end.
async fn execute(instance_id: &str) -> Result<(), TaskError> {
    let Some(recorder) = RECORDER.get() else {
        tokio::time::sleep(WORK).await;
        return Ok(());
    };
    let failed = |e: sqlx::Error| TaskError::new(format!("recording the execution failed: {e}"));
    let id: i64 = sqlx::query_scalar(&format!(
        "INSERT INTO {} (instance_id, pid, lease_token, started_at)
         SELECT $1, $2, lease_token, clock_timestamp() FROM {} WHERE instance_id = $1
         RETURNING id",
        recorder.table, recorder.instances
    ))
    .bind(instance_id)
    .bind(i64::from(std::process::id()))
    .fetch_one(&recorder.pool)
    .await
    .map_err(failed)?;
    tokio::time::sleep(WORK).await;
    sqlx::query(&format!(
        "UPDATE {} SET ended_at = clock_timestamp() WHERE id = $1",
        recorder.table
    ))
    .bind(id)
    .execute(&recorder.pool)
    .await
    .map_err(failed)?;
    Ok(())
}

async fn step(ctx: &mut TaskContext<Job>) -> Result<(), TaskError> {
    execute(ctx.instance_id()).await?;
    ctx.data_mut().steps += 1;
    Ok(())
}

/// Fails its first attempt (a transient error), succeeds on the retry.
async fn flaky(ctx: &mut TaskContext<Job>) -> Result<(), TaskError> {
    execute(ctx.instance_id()).await?;
    if ctx.attempt() == 1 {
        return Err(TaskError::new("the first attempt fails"));
    }
    ctx.data_mut().steps += 1;
    Ok(())
}

/// A ticket: waits for `approve`, then a flaky task (retried), a delay, a last step.
#[state_machine(data = Job, initial = New)]
pub enum Ticket {
    #[entry(step)]
    #[on(approve: event("approve").key(id) => Approved)]
    New,
    #[entry(flaky.retry(attempts = 3, backoff = millis(200)..millis(400)))]
    #[on(wait: after(millis(300)) => Done)]
    Approved,
    #[entry(step)]
    Done,
}

workflow! {
    /// A pipeline: a step, the `go` event, a delay, a flaky task (retried), a last step.
    pub workflow Pipeline(Job) = sequence [
        first = task(step),
        go = event("go").key(id),
        wait = after(millis(300)),
        task(flaky).retry(attempts = 3, backoff = millis(200)..millis(400)),
        last = task(step),
    ];
}

workflow! {
    /// Started by a timer every second, in whichever process fires the occurrence.
    pub workflow Tick(Job) {
        every = every(secs(1)).trigger();
        work  = task(step);

        every -> work;
    }
}

/// What one worker process does.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The database (`WORKFLOW_PG_URL`).
    pub url: String,
    /// The store's schema.
    pub schema: String,
    /// Instances this worker starts and sends their event to: for `n` in the range, `n`
    /// even is a [`Ticket`] `ticket-n`, odd a [`Pipeline`] `pipeline-n`. Starting is
    /// idempotent (an existing id is skipped, the send carries an idempotency key), so a
    /// restarted worker can be given the same range.
    pub starts: Range<u32>,
    /// Record task executions in `cluster_executions`.
    pub record: bool,
    /// The lease TTL: how long a dead process's instances wait before another takes them.
    pub lease_ttl: Duration,
}

impl WorkerConfig {
    /// A worker on `url` in schema `workflow` that starts nothing.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "workflow".to_owned(),
            starts: 0..0,
            record: false,
            lease_ttl: Duration::from_secs(30),
        }
    }
}

/// The instance id of start number `n`.
pub fn instance_id(n: u32) -> String {
    if n.is_multiple_of(2) {
        format!("ticket-{n}")
    } else {
        format!("pipeline-{n}")
    }
}

/// Creates the executions table (idempotent; safe when processes start at once).
async fn prepare_recording(pool: &PgPool, schema: &str) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("cluster-executions:{schema}"))
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".cluster_executions (
            id          BIGSERIAL PRIMARY KEY,
            instance_id TEXT NOT NULL,
            pid         BIGINT NOT NULL,
            lease_token BIGINT NOT NULL,
            started_at  TIMESTAMPTZ NOT NULL,
            ended_at    TIMESTAMPTZ
        )"
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Starts instance `n` unless it exists, then sends its event (idempotently).
async fn start_one(runtime: &Runtime, n: u32) -> Result<(), Box<dyn Error + Send + Sync>> {
    let id = instance_id(n);
    let data = Job {
        id: id.clone(),
        steps: 0,
    };
    let options = StartOptions {
        instance_id: Some(id.clone()),
        correlation_id: None,
        traceparent: None,
    };
    let started = if n.is_multiple_of(2) {
        runtime.start_with::<Ticket>(data, options).await
    } else {
        runtime.start_with::<Pipeline>(data, options).await
    };
    match started {
        Ok(_) | Err(StartError::InstanceExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let event = if n.is_multiple_of(2) { "approve" } else { "go" };
    runtime
        .send(
            Stimulus::new(event)
                .key(&id)
                .idempotency_key(format!("{event}-{id}")),
        )
        .await?;
    Ok(())
}

/// Runs one worker process until `stop` completes, then shuts down gracefully (running tasks
/// get `grace` to finish, the rest is interrupted and resumed by another process).
///
/// # Errors
///
/// Opening the store, building the runtime, or starting an instance of
/// [`WorkerConfig::starts`] failed.
pub async fn run_worker(
    config: WorkerConfig,
    stop: impl Future<Output = ()>,
    grace: Duration,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let options = PostgresOptions::default().schema(config.schema.clone());
    let store = PostgresStore::connect_with(&config.url, &options).await?;
    if config.record {
        prepare_recording(store.pool(), &config.schema).await?;
        // One worker per process: a second call keeps the first recorder.
        let _ = RECORDER.set(Recorder {
            pool: store.pool().clone(),
            table: format!("\"{}\".cluster_executions", config.schema),
            instances: format!("\"{}\".wf_instances", config.schema),
        });
    }
    let runtime = Runtime::builder()
        .store(Arc::new(store))
        .register::<Ticket>()
        .register::<Pipeline>()
        .register::<Tick>()
        .lease_ttl(config.lease_ttl)
        .recovery_sweep(Some(config.lease_ttl.min(Duration::from_secs(10))))
        .sweep_interval(Some(Duration::from_secs(1)))
        .build()?;
    runtime.run_background()?;
    tracing::info!(pid = std::process::id(), starts = ?config.starts, "worker: running");

    let starting = async {
        let mut pending = tokio::task::JoinSet::new();
        for n in config.starts.clone() {
            let runtime = runtime.clone();
            pending.spawn(async move { start_one(&runtime, n).await });
            // A few starts at a time: each runs the instance's first step inline.
            while pending.len() >= 8 {
                if let Some(done) = pending.join_next().await {
                    done??;
                }
            }
        }
        while let Some(done) = pending.join_next().await {
            done??;
        }
        Ok::<(), Box<dyn Error + Send + Sync>>(())
    };
    tokio::pin!(stop);
    tokio::select! {
        started = starting => {
            started?;
            tracing::info!(pid = std::process::id(), "worker: its instances are started");
            stop.await;
        }
        () = &mut stop => {}
    }
    tracing::info!(pid = std::process::id(), ?grace, "worker: shutting down");
    runtime.shutdown(grace).await;
    Ok(())
}
