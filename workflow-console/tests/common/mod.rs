//! What the console's tests share: an application with two workflows (an order waiting for
//! its payment, a job whose printer fails until an operator repairs it), its stores, and
//! requests to the console's router.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    dead_code,
    unreachable_pub,
    missing_docs
)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use tower::ServiceExt as _;
use workflow_runtime::store::Store;
use workflow_runtime::{
    Runtime, RuntimeBuilder, StartOptions, TaskContext, TaskError, state_machine, workflow,
};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Order {
    pub order_id: String,
    pub paid: u64,
    pub note: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    pub amount: u64,
}

async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<(), TaskError> {
    let payment: Payment = ctx.payload()?;
    ctx.data_mut().paid += payment.amount;
    Ok(())
}

#[state_machine(data = Order, initial = New)]
pub enum ShopOrder {
    #[on(pay: event::<Payment>("payment").key(order_id) => Paid, action = record_payment)]
    New,
    Paid,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
}

/// Jobs whose printer an operator has repaired: they print instead of failing.
pub static REPAIRED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

pub fn repair(name: &str) {
    REPAIRED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(name.to_owned());
}

async fn print(ctx: &mut TaskContext<Job>) -> Result<(), TaskError> {
    let repaired = REPAIRED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&ctx.data().name);
    if repaired {
        return Ok(());
    }
    Err(TaskError::permanent("the printer is on fire"))
}

workflow! {
    pub workflow PrintJob(Job) = sequence [print = task(print)];
}

/// The application's runtime over `store`, both workflows registered.
pub fn application(store: Arc<dyn Store>) -> Runtime {
    registered(Runtime::builder().store(store)).build().unwrap()
}

pub fn registered(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder.register::<ShopOrder>().register::<PrintJob>()
}

pub fn with_id(id: &str) -> StartOptions {
    StartOptions {
        instance_id: Some(id.to_owned()),
        ..StartOptions::default()
    }
}

/// Two orders waiting for their payment (`o-1`, `o-2`, the second holding markup in its
/// data) and one faulted job named `job` (`job-1`).
pub async fn populate(rt: &Runtime, job: &str) {
    for (id, note) in [("o-1", "first"), ("o-2", "<script>alert('x')</script>")] {
        let order = Order {
            order_id: id.to_owned(),
            paid: 0,
            note: note.to_owned(),
        };
        rt.start_with::<ShopOrder>(order, with_id(id))
            .await
            .unwrap();
    }
    let started = rt
        .start_with::<PrintJob>(
            Job {
                name: job.to_owned(),
            },
            with_id("job-1"),
        )
        .await;
    assert!(started.is_ok(), "{started:?}");
}

/// A response's status and body.
pub struct Page {
    pub status: StatusCode,
    pub location: Option<String>,
    pub content_type: String,
    pub policy: String,
    pub body: String,
}

impl Page {
    /// The console's CSRF token, as its forms carry it.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no CSRF token in the page:\n{}", self.body));
        let rest = &self.body[at + 19..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

async fn call(router: &Router, request: Request<Body>) -> Page {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let location = response
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().unwrap().to_owned());
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map_or_else(String::new, |v| v.to_str().unwrap().to_owned());
    let policy = response
        .headers()
        .get(header::CONTENT_SECURITY_POLICY)
        .map_or_else(String::new, |v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Page {
        status,
        location,
        content_type,
        policy,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(router: &Router, uri: &str) -> Page {
    call(router, Request::get(uri).body(Body::empty()).unwrap()).await
}

pub async fn post(router: &Router, uri: &str, form: &[(&str, &str)]) -> Page {
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let request = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body.join("&")))
        .unwrap();
    call(router, request).await
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
