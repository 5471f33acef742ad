//! The metrics listener (`metrics.listen`): `GET /metrics`, `/healthz` and
//! `/readyz` and nothing else, so a scraper never reaches the control API.
//! The health routes are the gateway's too ([`health_routes`]).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::supervisor::Supervisor;

/// What the listener reads.
#[derive(Clone)]
pub struct MetricsState {
    pub supervisor: Supervisor,
    pub host: Arc<super::HostFacts>,
    pub started: Instant,
    pub health: Arc<Health>,
}

/// Serves the metrics listener until `stop`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: MetricsState,
    limits: super::listen::Limits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(state.clone())
        .merge(health_routes(Arc::clone(&state.health)))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "this listener serves /metrics, /healthz and /readyz\n",
            )
        });
    super::listen::serve(listener, app, "metrics", limits, Vec::new(), None, stop).await
}

async fn scrape(State(state): State<MetricsState>) -> Response {
    exposition(&state.supervisor, &state.host, state.started)
}

/// The metrics as `GET /metrics` answers them (here and on the control API).
pub fn exposition(supervisor: &Supervisor, host: &super::HostFacts, started: Instant) -> Response {
    let text = host.metrics.render(
        supervisor.live_sessions(),
        started.elapsed().as_secs(),
        &host.tasks.queue_depths(),
    );
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response()
}

/// `/healthz` (200 while the process answers) and `/readyz` (200 when the
/// store takes writes and the gateway accepts, else 503 naming what failed).
pub fn health_routes<S: Clone + Send + Sync + 'static>(health: Arc<Health>) -> Router<S> {
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(crate::health::live()) }),
        )
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn readyz(State(health): State<Arc<Health>>) -> Response {
    let report = health.ready().await;
    let status = match report.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, axum::Json(report.body)).into_response()
}
