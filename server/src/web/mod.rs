//! The host's HTTP side (HTTP/1.1, axum), beside the gRPC API: the
//! read-only status page, the JSON it polls, and Prometheus's `/metrics`.
//!
//! | path | what |
//! |---|---|
//! | `/` (`/app.js`, `/style.css`) | the status page: plain HTML/CSS/JS shipped in the binary |
//! | `/api/status` | jobs, tasks, devices as JSON (the gRPC API's own answers, [`status`]) |
//! | `/api/series?task=T[&metric=M][&points=N]` | one metric of a task over steps (sparklines) |
//! | `/metrics` | Prometheus text format ([`crate::telemetry`]) |
//!
//! The token rule is the API's: a server bound beyond loopback needs a
//! token, and with a token every data path (`/api/*`, `/metrics`) needs
//! `Authorization: Bearer <token>`. The page's static files carry no data and
//! are served to anyone; the page asks for the token (or reads it from the
//! URL fragment `#token=...`, which browsers never send to servers).

mod sample;
pub mod status;

use crate::api::auth::Auth;
use crate::api::ShutdownSignal;
use crate::telemetry::Telemetry;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::net::SocketAddr;
use std::sync::Arc;
use tli_runtime::orchestrator::engine::Orchestrator;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What one HTTP listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serves {
    /// The page, its JSON and `/metrics`.
    PageAndMetrics,
    /// `/metrics` only (`--metrics-listen` on its own port).
    MetricsOnly,
}

/// Why the HTTP side could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "refusing to serve {what} on {addr} without a token: pass --token-file FILE or set \
         TLI_SERVE_TOKEN, or keep it on loopback (127.0.0.1)"
    )]
    NeedsToken {
        what: &'static str,
        addr: SocketAddr,
    },
    #[error("cannot listen on {addr} for {what}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[derive(Clone)]
struct WebState {
    orchestrator: Arc<Orchestrator>,
    api: status::ApiHandle,
    auth: Auth,
    telemetry: Arc<Telemetry>,
}

/// Binds a listener for `serves` on `addr`, refusing a non-loopback address
/// without a token.
pub fn bind(
    addr: SocketAddr,
    serves: Serves,
    token_configured: bool,
) -> Result<std::net::TcpListener, WebError> {
    let what = match serves {
        Serves::PageAndMetrics => "the status page",
        Serves::MetricsOnly => "metrics",
    };
    if !token_configured && !addr.ip().is_loopback() {
        return Err(WebError::NeedsToken { what, addr });
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|source| WebError::Bind {
        what,
        addr,
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| WebError::Bind { what, addr, source })?;
    Ok(listener)
}

/// The routes of one listener.
pub fn router(
    orchestrator: Arc<Orchestrator>,
    shutdown: ShutdownSignal,
    auth: Auth,
    serves: Serves,
    telemetry: Arc<Telemetry>,
) -> Router {
    let state = WebState {
        api: status::ApiHandle::new(orchestrator.clone(), shutdown),
        orchestrator,
        auth,
        telemetry,
    };
    let data = match serves {
        Serves::PageAndMetrics => Router::new()
            .route("/api/status", get(api_status))
            .route("/api/series", get(api_series))
            .route("/metrics", get(metrics)),
        Serves::MetricsOnly => Router::new().route("/metrics", get(metrics)),
    }
    .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let routes = match serves {
        Serves::PageAndMetrics => data
            .route(
                "/",
                get(|| async { page(INDEX_HTML, "text/html; charset=utf-8") }),
            )
            .route(
                "/app.js",
                get(|| async { page(APP_JS, "text/javascript; charset=utf-8") }),
            )
            .route(
                "/style.css",
                get(|| async { page(STYLE_CSS, "text/css; charset=utf-8") }),
            ),
        Serves::MetricsOnly => data,
    };
    routes.fallback(not_found).with_state(state)
}

/// Serves `router` on `listener` until `stop` resolves, its connections
/// held by `gate` (crate::connections: a cap shared with the gRPC side, and
/// a connection silent too long is closed, so a half-sent request does not
/// hold a descriptor for ever).
pub async fn serve(
    listener: std::net::TcpListener,
    gate: &crate::connections::ConnectionGate,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = gate.listener(tokio::net::TcpListener::from_std(listener)?);
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "not found: the status page is at /, its data at /api/status, metrics at /metrics\n",
    )
        .into_response()
}

async fn require_token(State(state): State<WebState>, request: Request, next: Next) -> Response {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match state.auth.check_authorization(value) {
        Ok(()) => next.run(request).await,
        Err(why) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{why}\n"),
        )
            .into_response(),
    }
}

async fn api_status(State(state): State<WebState>) -> Response {
    match state.api.status().await {
        Ok(body) => Json(body).into_response(),
        Err(status) => error_response(&status),
    }
}

async fn api_series(
    State(state): State<WebState>,
    Query(query): Query<status::SeriesQuery>,
) -> Response {
    let orchestrator = state.orchestrator.clone();
    match tokio::task::spawn_blocking(move || status::series(&orchestrator, &query)).await {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err(status)) => error_response(&status),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("request handler failed: {e}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<WebState>) -> Response {
    let orchestrator = state.orchestrator.clone();
    let telemetry = state.telemetry.clone();
    let text = tokio::task::spawn_blocking(move || {
        let sample = sample::state_sample(&orchestrator);
        if let Err(e) = &sample {
            tracing::warn!("metrics: the host's state could not be sampled: {e}");
        }
        telemetry.encode(sample.ok().as_ref())
    })
    .await
    .unwrap_or_else(|e| format!("# metrics handler failed: {e}\n"));
    (
        [(header::CONTENT_TYPE, crate::telemetry::CONTENT_TYPE)],
        text,
    )
        .into_response()
}

/// A gRPC status as an HTTP error with the same message.
fn error_response(status: &tonic::Status) -> Response {
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, format!("{}\n", status.message())).into_response()
}
