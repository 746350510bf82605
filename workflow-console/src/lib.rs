//! The operator console of compile-time workflows: every instance of a store in a browser,
//! with its workflow's own diagram, where it is and where it has been, what it waits for,
//! its journal, incidents and data, and the operator's actions on it; the registered
//! definitions, the dead letters, the flow-control queues, and `/metrics` in the Prometheus text format.
//!
//! The console is an [`axum::Router`] over a [`Runtime`]: the `workflow console` command
//! serves it over a store, and an application mounts it under a path of its own, behind its
//! own authentication (the console has none):
//!
//! ```no_run
//! use workflow_console::Console;
//! use workflow_runtime::Runtime;
//!
//! # fn app(runtime: Runtime) -> axum::Router {
//! let app = axum::Router::new()
//!     // ... the application's routes, and its authentication layer around these:
//!     .nest("/ops/workflows", Console::new(runtime).router());
//! # app }
//! ```
//!
//! Pages are rendered on the server, with everything the store holds escaped; the style
//! sheet is embedded, so the console works with no network. Every action (retry, cancel,
//! suspend, resume, purge, send an event, replay a dead letter) is a `POST` carrying the
//! console's CSRF token, confirmed on a second page before it is done; [`Console::read_only`]
//! hides and refuses them. Lists read the store's indexed queries and the listing each
//! instance row carries, never an instance's document per row.

mod actions;
mod diagram;
mod html;
mod instance;
mod instances;
mod lists;
mod metrics;
mod queues;

pub use metrics::record_census;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use workflow_runtime::Runtime;
use workflow_runtime::store::{Census, Micros, StoreError};

/// The operator console over a runtime's store; [`Console::router`] serves it.
///
/// # Examples
///
/// ```
/// use workflow_console::Console;
/// use workflow_runtime::Runtime;
///
/// let runtime = Runtime::builder().build()?;
/// let router: axum::Router = Console::new(runtime).read_only(true).router();
/// # let _ = router;
/// # Ok::<(), workflow_runtime::BuildError>(())
/// ```
#[derive(Clone)]
pub struct Console {
    runtime: Runtime,
    read_only: bool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console over `runtime`'s store. Its actions go through `runtime`: an application's
    /// own runtime applies them at once to the instances it runs; a runtime without the
    /// application's workflows (as the `workflow console` command builds) records them as
    /// requests the process running the instance honours at its next step.
    pub fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            read_only: false,
        }
    }

    /// Hides the actions and refuses them (`403`): the console only shows.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The console's routes: `/` (instances), `/instances/{id}`, `/definitions`,
    /// `/dead-letters`, `/queues`, `/metrics` and the actions' `POST`s. Links are relative to where
    /// the router is mounted, so it works under any prefix ([`Router::nest`]).
    pub fn router(self) -> Router {
        let shared = Arc::new(Shared::new(self));
        Router::new()
            .route("/", get(instances::page))
            .route("/instances/{id}", get(instance::page))
            .route("/instances/{id}/{action}", post(actions::instance_action))
            .route("/send", post(actions::send))
            .route("/definitions", get(lists::definitions))
            .route("/dead-letters", get(lists::dead_letters))
            .route("/dead-letters/{item}/replay", post(actions::replay))
            .route("/queues", get(queues::page))
            .route("/metrics", get(metrics::render))
            .fallback(not_found)
            .layer(axum::middleware::map_response(guarded))
            .with_state(shared)
    }
}

/// Every response's headers against injected content and framing: no script runs on a
/// console page, no other site frames it (its buttons cannot be clicked through a decoy), and
/// forms post only to the console.
async fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) runtime: Runtime,
    pub(crate) read_only: bool,
    /// The token every action's form carries: a value only this console's pages hold.
    pub(crate) csrf: String,
    pub(crate) metrics: metrics::Exporter,
    /// The last census the instances page showed, and when it was counted.
    counts: Mutex<Option<(Instant, Arc<Census>)>>,
    /// Whether a census is being counted in the background.
    counting: AtomicBool,
}

/// How long the instances page shows a census before it has it counted again (in the
/// background: the page never waits for a recount).
const COUNTS_FRESH_FOR: Duration = Duration::from_secs(2);

impl Shared {
    fn new(console: Console) -> Self {
        Self {
            runtime: console.runtime,
            read_only: console.read_only,
            csrf: csrf_token(),
            metrics: metrics::Exporter::new(),
            counts: Mutex::new(None),
            counting: AtomicBool::new(false),
        }
    }

    /// The instances by status for the instances page, with when they were counted: the
    /// last census while it is fresh; once it is older than [`COUNTS_FRESH_FOR`], still that
    /// one while a new one is counted in the background; a census counted now when there is
    /// none yet. A count over 100,000 rows is a table scan: pages do not wait for one each.
    pub(crate) async fn counts(self: &Arc<Self>) -> Result<(Instant, Arc<Census>), StoreError> {
        let cached = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some((at, census)) = cached else {
            let census = Arc::new(self.runtime.store().census().await?);
            let counted = (Instant::now(), census);
            *self
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(counted.clone());
            return Ok(counted);
        };
        if at.elapsed() >= COUNTS_FRESH_FOR && !self.counting.swap(true, Ordering::AcqRel) {
            let shared = Arc::clone(self);
            tokio::spawn(async move {
                if let Ok(census) = shared.runtime.store().census().await {
                    *shared
                        .counts
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some((Instant::now(), Arc::new(census)));
                }
                shared.counting.store(false, Ordering::Release);
            });
        }
        Ok((at, census))
    }

    /// Forgets the last census: an action changed what it counted.
    pub(crate) fn recount(&self) {
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

pub(crate) type State = axum::extract::State<Arc<Shared>>;

/// 128 bits from the standard library's per-process random hash keys, mixed with the time
/// and the process id.
fn csrf_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    for round in 0..2u8 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(round);
        hasher.write_i64(now());
        hasher.write_u32(std::process::id());
        out.push_str(&format!("{:016x}", hasher.finish()));
    }
    out
}

/// The path the console is mounted at (`""` at the root, `/ops/workflows` when nested), so
/// every link works under a prefix.
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        let inner = parts.uri.path().to_owned();
        let original = parts
            .extensions
            .get::<OriginalUri>()
            .map_or_else(|| inner.clone(), |o| o.0.path().to_owned());
        let base = match original.strip_suffix(inner.as_str()) {
            Some(base) => base.to_owned(),
            // Nested at `/prefix`, the inner path of `/prefix` itself is `/`.
            None if inner == "/" => original.trim_end_matches('/').to_owned(),
            None => String::new(),
        };
        Ok(Self(base))
    }
}

/// A page that could not be shown: its status and what to say.
#[derive(Debug)]
pub(crate) struct Failure {
    status: StatusCode,
    title: &'static str,
    message: String,
    base: String,
}

impl Failure {
    pub(crate) fn bad_request(base: &Base, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            title: "Bad request",
            message: message.into(),
            base: base.0.clone(),
        }
    }

    pub(crate) fn not_found(base: &Base, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            title: "Not found",
            message: message.into(),
            base: base.0.clone(),
        }
    }

    pub(crate) fn forbidden(base: &Base, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            title: "Refused",
            message: message.into(),
            base: base.0.clone(),
        }
    }

    pub(crate) fn store(base: &Base, error: &StoreError) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: "The store failed",
            message: error.to_string(),
            base: base.0.clone(),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = html::message_page(&self.base, self.title, &self.message);
        (self.status, Html(body)).into_response()
    }
}

async fn not_found(base: Base, uri: axum::http::Uri) -> Failure {
    Failure::not_found(&base, format!("no page at `{}`", uri.path()))
}

/// Microseconds since the epoch, now.
pub(crate) fn now() -> Micros {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            Micros::try_from(d.as_micros()).unwrap_or(Micros::MAX)
        })
}
