//! An order service over HTTP: the workflow runtime embedded in an axum application.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /orders` `{"order_id": "o-1", "total": 30}` | starts an order (`201`, the instance) |
//! | `POST /orders/{order_id}/events/{name}` with a JSON payload | sends the event `name` keyed by the order id (`202`, what the send did) |
//! | `GET /instances/{id}` | the instance: status, current state, data, and its Mermaid diagram |
//! | `GET /instances/{id}/diagram` | the Mermaid diagram alone, as text |
//!
//! Errors are JSON `{"error": "..."}` with a status that says whose fault it is: `400` for a
//! request the workflow cannot take, `404` for an unknown instance, `409` for a conflict,
//! `503` when the store is unavailable.
//!
//! The `web` example serves [`router`] on a port and shuts down gracefully on ctrl-c; the
//! tests in `examples/tests/web.rs` call the same routes in process.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use workflow_runtime::{
    Rejection, Runtime, SendError, StartError, StartOptions, StateError, Stimulus, TaskContext,
    TaskError, WorkflowStatus, state_machine,
};

/// The order's data, persisted with the instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Order {
    /// The order id, also the key of its events.
    pub order_id: String,
    /// What the customer owes.
    pub total: u64,
    /// What was paid.
    #[serde(default)]
    pub paid: u64,
    /// The parcel's tracking number once shipped.
    #[serde(default)]
    pub tracking: Option<String>,
}

/// The payload of a `payment` event.
#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    /// The amount paid.
    pub amount: u64,
}

/// The payload of a `shipped` event.
#[derive(Debug, Serialize, Deserialize)]
pub struct Shipment {
    /// The carrier's tracking number.
    pub tracking: String,
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(())
}

async fn record_shipment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let shipment: Shipment = ctx.payload()?;
    ctx.data_mut().tracking = Some(shipment.tracking);
    Ok(())
}

fn covers_total(order: &Order, payment: &Payment) -> bool {
    payment.amount >= order.total
}

/// An order placed over HTTP, from payment to shipping.
#[state_machine(data = Order, initial = AwaitingPayment)]
pub enum WebOrder {
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_total, action = record_payment)]
    #[on(cancel: event("cancel").key(order_id) => Cancelled)]
    AwaitingPayment,
    #[on(ship: event::<Shipment>("shipped").key(order_id) => Shipped, action = record_shipment)]
    Paid,
    Shipped,
    Cancelled,
}

/// What `POST /orders` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewOrder {
    /// The order id: also the instance id, so `GET /instances/{order_id}` finds it.
    pub order_id: String,
    /// What the customer owes.
    pub total: u64,
}

/// An instance as the service shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct InstanceView {
    /// The instance id.
    pub instance_id: String,
    /// `Running`, `Suspended`, `Finished`, `Cancelled` or `Faulted`.
    pub status: WorkflowStatus,
    /// The state the order is in.
    pub state: Option<String>,
    /// The order's data.
    pub data: Value,
    /// The machine as a Mermaid diagram.
    pub diagram: String,
}

/// What a send did, as the service shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct SendView {
    /// Instances the event resumed, with their status after the run.
    pub resumed: Vec<String>,
    /// Why the event was rejected, per instance (a payload that does not fit): each is unchanged.
    pub rejected: Vec<String>,
    /// The event matched no waiting order and was kept in the queue for one.
    pub queued: bool,
    /// The report in words.
    pub summary: String,
}

/// The service's state: the runtime, shared by every request.
#[derive(Debug, Clone)]
pub struct App {
    runtime: Arc<Runtime>,
}

/// The routes of the service over a runtime that registered [`WebOrder`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use examples::web::{WebOrder, router};
/// use workflow_runtime::Runtime;
///
/// let runtime = Runtime::builder().register::<WebOrder>().build()?;
/// let app = router(Arc::new(runtime));
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn router(runtime: Arc<Runtime>) -> Router {
    Router::new()
        .route("/orders", post(start_order))
        .route("/orders/{order_id}/events/{name}", post(send_event))
        .route("/instances/{id}", get(get_instance))
        .route("/instances/{id}/diagram", get(get_diagram))
        .with_state(App { runtime })
}

/// An error answered as `{"error": "..."}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl ToString) -> Self {
        Self {
            status,
            message: message.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        let status = match &error {
            StartError::InstanceExists { .. } | StartError::ActivationRefused { .. } => {
                StatusCode::CONFLICT
            }
            StartError::Input { .. }
            | StartError::InvalidInstanceId { .. }
            | StartError::DefinitionNotRegistered { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, error)
    }
}

impl From<SendError> for ApiError {
    fn from(error: SendError) -> Self {
        let status = match &error {
            SendError::InstanceNotFound { .. } => StatusCode::NOT_FOUND,
            SendError::IdempotencyKeyReused { .. } => StatusCode::CONFLICT,
            SendError::Routing(_)
            | SendError::Payload { .. }
            | SendError::PayloadTooLarge { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, error)
    }
}

impl From<StateError> for ApiError {
    fn from(error: StateError) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, error)
    }
}

async fn start_order(
    State(app): State<App>,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<InstanceView>), ApiError> {
    let data = Order {
        order_id: order.order_id.clone(),
        total: order.total,
        ..Order::default()
    };
    let options = StartOptions {
        instance_id: Some(order.order_id.clone()),
        ..StartOptions::default()
    };
    let started = app.runtime.start_with::<WebOrder>(data, options).await?;
    let view = instance_view(&app.runtime, &started.instance_id).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

async fn send_event(
    State(app): State<App>,
    Path((order_id, name)): Path<(String, String)>,
    Json(payload): Json<Value>,
) -> Result<(StatusCode, Json<SendView>), ApiError> {
    let report = app
        .runtime
        .send(Stimulus::new(name).key(&order_id).payload(payload))
        .await?;
    let view = SendView {
        resumed: report
            .resumed
            .iter()
            .map(|s| s.instance_id.clone())
            .collect(),
        rejected: report.rejected.iter().map(rejection).collect(),
        queued: report.inbox_item.is_some(),
        summary: report.to_string(),
    };
    Ok((StatusCode::ACCEPTED, Json(view)))
}

fn rejection(rejection: &Rejection) -> String {
    match rejection {
        Rejection::PayloadDecode {
            instance, message, ..
        } => format!("{instance}: {message}"),
        Rejection::StateTooLarge {
            instance,
            size,
            limit,
            ..
        } => format!("{instance}: state too large ({size} bytes, limit {limit}); faulted"),
    }
}

async fn get_instance(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<InstanceView>, ApiError> {
    Ok(Json(instance_view(&app.runtime, &id).await?))
}

async fn get_diagram(State(app): State<App>, Path(id): Path<String>) -> Result<String, ApiError> {
    Ok(instance_view(&app.runtime, &id).await?.diagram)
}

async fn instance_view(runtime: &Runtime, id: &str) -> Result<InstanceView, ApiError> {
    let snapshot = runtime
        .get_state(id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no instance `{id}`")))?;
    let data = snapshot
        .data::<Value>()
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    Ok(InstanceView {
        instance_id: id.to_owned(),
        status: snapshot.status(),
        state: snapshot.current_state().map(str::to_owned),
        data,
        diagram: WebOrder::mermaid().to_owned(),
    })
}
