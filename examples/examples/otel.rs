//! Exporting the runtime's traces to OpenTelemetry, across runtimes: `tracing-opentelemetry`
//! with the OpenTelemetry SDK and its stdout exporter (no network). Two runtimes share one
//! SQLite file, as a web process and a worker would share a database: the first sends a
//! payment inside an OpenTelemetry span, the store keeps the send's W3C trace context with
//! the queued stimulus, and the second runtime's run that delivers it joins the same trace.
//! Both trace ids are printed, then each exported span.
//!
//! ```text
//! cargo run -p examples --example otel
//! ```

#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use workflow_runtime::store::{SqliteStore, Storage};
use workflow_runtime::{Runtime, StartOptions, Stimulus, TaskContext, TraceParent, state_machine};

/// A parcel waiting for its payment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Parcel {
    id: String,
    paid: bool,
}

/// The trace the payment's task ran in, as the task saw it.
static PAID_IN: std::sync::Mutex<Option<TraceId>> = std::sync::Mutex::new(None);

async fn record_payment(ctx: &mut TaskContext<Parcel>) {
    ctx.data_mut().paid = true;
    // The task runs inside the run's `workflow.execution` span, whose OpenTelemetry parent
    // is the send's context (set by `on_execution_span` below).
    let trace_id = current_trace_id();
    println!("delivering runtime: the payment's run is in trace {trace_id}");
    *PAID_IN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(trace_id);
}

/// Paid by a `parcel.paid` event keyed by the parcel's id.
#[state_machine(data = Parcel, initial = Placed)]
pub enum Shipping {
    /// Waits for its payment.
    #[on(pay: event::<serde_json::Value>("parcel.paid").key(id) => Paid, action = record_payment)]
    Placed,
    /// Paid.
    Paid,
}

/// The OpenTelemetry trace id of the current `tracing` span.
fn current_trace_id() -> TraceId {
    tracing::Span::current()
        .context()
        .span()
        .span_context()
        .trace_id()
}

/// A runtime over `store` that bridges the W3C trace context it stores with OpenTelemetry's.
fn runtime(store: Storage, worker: bool) -> Result<Runtime, Box<dyn Error>> {
    Ok(Runtime::builder()
        .store(store)
        .inbox_worker(worker)
        // A send or a start outside any run takes the current OpenTelemetry span's context.
        .trace_context_from(|| {
            let mut carrier = HashMap::new();
            TraceContextPropagator::new()
                .inject_context(&tracing::Span::current().context(), &mut carrier);
            carrier.get("traceparent")?.parse().ok()
        })
        // Each run's span becomes a child of the context it continues, in whichever process.
        .on_execution_span(|span, parent: &TraceParent| {
            let carrier = HashMap::from([("traceparent".to_owned(), parent.to_string())]);
            let _ = span.set_parent(TraceContextPropagator::new().extract(&carrier));
        })
        .register::<Shipping>()
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // The SDK with the stdout exporter: each span is printed as it ends.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("otel-example")));
    tracing::subscriber::set_global_default(subscriber)?;

    let dir = std::env::temp_dir().join(format!("workflow-otel-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // One process holds a SQLite file at a time: the two runtimes share its store.
    let store: Storage = Arc::new(SqliteStore::open(dir.join("otel.db"))?).into();
    let web = runtime(store.clone(), false)?;
    let worker = runtime(store, false)?;
    let parcel = Parcel {
        id: "p-1".to_owned(),
        paid: false,
    };
    let options = StartOptions {
        instance_id: Some("parcel-1".to_owned()),
        ..StartOptions::default()
    };
    web.start_with::<Shipping>(parcel, options).await?;

    // The web runtime sends the payment inside a span of its own, through the store's inbox.
    let checkout = tracing::info_span!("checkout");
    let sent_in = checkout.in_scope(current_trace_id);
    println!("sending runtime: the payment is sent in trace {sent_in}");
    let send = web.send(Stimulus::new("parcel.paid").key("p-1").via_inbox());
    tracing::Instrument::instrument(send, checkout).await?;

    // The worker runtime delivers it: its run joins the send's trace.
    let delivered = worker.deliver_inbox().await?;
    let paid_in = PAID_IN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    println!(
        "{delivered} stimulus delivered; one trace: {}",
        paid_in == Some(sent_in)
    );

    web.shutdown(std::time::Duration::from_secs(1)).await;
    worker.shutdown(std::time::Duration::from_secs(1)).await;
    provider.shutdown()?;
    std::fs::remove_dir_all(&dir)?;
    if paid_in != Some(sent_in) {
        return Err(format!("the run was in trace {paid_in:?}, the send in {sent_in}").into());
    }
    Ok(())
}
