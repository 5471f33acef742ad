//! The control API (HTTP/JSON under `/v1/`, plus `/metrics`): with `a2a`, the
//! only module that knows HTTP. Handlers hold a [`Supervisor`] handle and nothing else.

mod error;
mod logs;
mod sessions;
pub mod unix;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use error::ApiError;

use crate::supervisor::Supervisor;

/// Largest request body the control API reads.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct ApiState {
    pub supervisor: Supervisor,
    pub started: Instant,
    pub a2a_addr: String,
    /// Cancelled when the daemon shuts down, so streaming responses end.
    pub shutdown: CancellationToken,
}

/// The control API router (tests drive it with `oneshot` without a socket).
pub fn app(state: ApiState) -> Router {
    Router::new()
        .route("/v1/health", get(sessions::health))
        .route("/v1/sessions", post(sessions::start).get(sessions::list))
        .route("/v1/sessions/{id}", get(sessions::get_one))
        .route("/v1/sessions/{id}/stop", post(sessions::stop))
        .route("/v1/sessions/{id}/wait", get(sessions::wait))
        .route("/v1/sessions/{id}/events", get(sessions::events))
        .route("/v1/sessions/{id}/logs", get(logs::logs))
        .route("/metrics", get(metrics))
        .fallback(fallback)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), trace_request))
        .with_state(state)
}

/// One span per request; the peer's credentials are logged when known.
async fn trace_request(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    state.supervisor.shared().metrics.api_request();
    let peer = request
        .extensions()
        .get::<ConnectInfo<unix::PeerCred>>()
        .map(|c| c.0);
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        peer_uid = peer.and_then(|p| p.uid),
        peer_pid = peer.and_then(|p| p.pid),
        status = tracing::field::Empty,
    );
    async move {
        let response = next.run(request).await;
        tracing::Span::current().record("status", response.status().as_u16());
        tracing::debug!("served");
        response
    }
    .instrument(span)
    .await
}

async fn metrics(State(state): State<ApiState>) -> impl IntoResponse {
    let shared = Arc::clone(state.supervisor.shared());
    let text = shared.metrics.render(
        state.supervisor.live_sessions(),
        state.started.elapsed().as_secs(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

async fn fallback(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {} {}; the control API lives under /v1/ (see ARCHITECTURE.md)",
        request.method(),
        request.uri().path()
    ))
}
