//! The order service's routes, called in process as a client would call them over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use examples::web::{WebOrder, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use workflow_runtime::{Runtime, SqliteStore};

async fn call(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let request = Request::builder().method(method).uri(uri);
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

fn app(runtime: Runtime) -> Router {
    router(Arc::new(runtime))
}

#[tokio::test]
async fn an_order_goes_from_payment_to_shipping_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("web.db")).unwrap();
    let app = app(Runtime::builder()
        .store(Arc::new(store))
        .register::<WebOrder>()
        .build()
        .unwrap());

    let (status, order) = call(
        &app,
        "POST",
        "/orders",
        Some(json!({ "order_id": "o-1", "total": 30 })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    assert_eq!(order["instance_id"], "o-1");
    assert_eq!(order["state"], "AwaitingPayment");
    assert_eq!(order["status"], "Suspended");

    // A payment that does not cover the total is refused by the transition's condition.
    let (status, sent) = call(
        &app,
        "POST",
        "/orders/o-1/events/payment",
        Some(json!({ "amount": 10 })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{sent}");
    let (_, order) = call(&app, "GET", "/instances/o-1", None).await;
    assert_eq!(order["state"], "AwaitingPayment", "{order}");

    let (status, sent) = call(
        &app,
        "POST",
        "/orders/o-1/events/payment",
        Some(json!({ "amount": 30 })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(sent["resumed"], json!(["o-1"]), "{sent}");
    let (_, order) = call(&app, "GET", "/instances/o-1", None).await;
    assert_eq!(order["state"], "Paid");
    assert_eq!(order["data"]["paid"], 30);

    let (_, sent) = call(
        &app,
        "POST",
        "/orders/o-1/events/shipped",
        Some(json!({ "tracking": "TRK-1" })),
    )
    .await;
    assert_eq!(sent["resumed"], json!(["o-1"]), "{sent}");
    let (status, order) = call(&app, "GET", "/instances/o-1", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(order["status"], "Finished");
    assert_eq!(order["state"], "Shipped");
    assert_eq!(order["data"]["tracking"], "TRK-1");
    assert!(
        order["diagram"].as_str().unwrap().contains("Shipped"),
        "{order}"
    );

    let (status, diagram) = call(&app, "GET", "/instances/o-1/diagram", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        diagram.as_str().unwrap().contains("AwaitingPayment"),
        "{diagram}"
    );
}

#[tokio::test]
async fn bad_requests_get_a_status_and_a_message_that_say_what_is_wrong() {
    let app = app(Runtime::builder().register::<WebOrder>().build().unwrap());

    let (status, error) = call(&app, "GET", "/instances/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error["error"].as_str().unwrap().contains("nope"), "{error}");

    let (status, _) = call(
        &app,
        "POST",
        "/orders",
        Some(json!({ "order_id": "o-2", "total": 5 })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, error) = call(
        &app,
        "POST",
        "/orders",
        Some(json!({ "order_id": "o-2", "total": 5 })),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(error["error"].as_str().unwrap().contains("o-2"), "{error}");

    // A payment whose payload does not fit is rejected for the order, which keeps waiting.
    let (status, sent) = call(
        &app,
        "POST",
        "/orders/o-2/events/payment",
        Some(json!({ "amount": "lots" })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{sent}");
    assert_eq!(sent["resumed"], json!([]), "{sent}");
    let (_, order) = call(&app, "GET", "/instances/o-2", None).await;
    assert_eq!(order["state"], "AwaitingPayment", "{order}");

    // An event for no order at all is kept for one that may start later.
    let (_, sent) = call(
        &app,
        "POST",
        "/orders/o-9/events/payment",
        Some(json!({ "amount": 1 })),
    )
    .await;
    assert_eq!(sent["queued"], true, "{sent}");
}
