//! The control API (HTTP/JSON under `/v1/`, plus `/metrics`), the metrics
//! listener (`observe.rs`) and the web dashboard (`ui/`): with `a2a`, the
//! only module that knows HTTP. Handlers hold a [`Supervisor`] handle and nothing else.

mod carried;
mod cluster;
mod error;
mod events;
pub mod listen;
mod logs;
mod observe;
mod policy;
mod registry;
mod schedules;
mod sessions;
pub mod tls;
pub mod ui;
pub mod unix;
mod upgrade;
mod uploads;

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

pub use carried::controls;
pub use error::ApiError;
pub use observe::{MetricsState, health_routes, serve_metrics};
pub use sessions::starter;

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
    /// Who may use the control socket.
    pub peers: Arc<unix::PeerPolicy>,
    /// The TCP control listener's address, if any.
    pub control_addr: Option<String>,
    /// What the API reports and decides from besides the supervisor, fixed
    /// at start-up.
    pub host: Arc<HostFacts>,
}

/// The daemon's settings, what its tool jail enforces, its counters, and
/// its tasks (the broker, the port the gateway reads them through too).
pub struct HostFacts {
    pub config: crate::config::DaemonConfig,
    pub jail: crate::sandbox::Jail,
    pub support: crate::sandbox::Support,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub tasks: Arc<crate::tasks::Broker>,
    /// The cluster this roostd joined (`cluster:`), if any.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Schedules: made, listed, paused and removed through the API.
    pub schedules: Arc<crate::schedules::Schedules>,
}

/// Serves the control API on its Unix socket (each connection's peer
/// credentials checked) until `stop`.
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    state: ApiState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = app(state).into_make_service_with_connect_info::<unix::PeerCred>();
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// A bearer token that can be replaced while roostd runs (SIGHUP).
#[derive(Debug)]
pub struct TokenCell(std::sync::RwLock<Arc<str>>);

impl TokenCell {
    pub fn new(token: Arc<str>) -> Self {
        Self(std::sync::RwLock::new(token))
    }

    pub fn get(&self) -> Arc<str> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    pub fn set(&self, token: Arc<str>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = token;
    }
}

/// Serves the control API on TCP (bearer token required) until `stop`.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    state: ApiState,
    token: Arc<TokenCell>,
    limits: listen::Limits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = tcp_app(state, token);
    listen::serve(listener, app, "control", limits, Vec::new(), None, stop).await
}

/// The control API over TCP: the same routes, every request needing
/// `Authorization: Bearer <token>`.
pub fn tcp_app(state: ApiState, token: Arc<TokenCell>) -> Router {
    app(state).layer(middleware::from_fn(move |request: Request, next: Next| {
        let token = token.get();
        async move {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
                return next.run(request).await;
            }
            tracing::warn!(path = %request.uri().path(), "control request without a valid bearer token");
            let mut response = ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send `Authorization: Bearer <token>` with the token from control.token_file",
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }))
}

/// Compares without leaking where the first difference is.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The control API router (tests drive it with `oneshot` without a socket).
pub fn app(state: ApiState) -> Router {
    let bundle_limit =
        usize::try_from(state.host.config.artifacts.max_bundle_mb << 20).unwrap_or(usize::MAX);
    Router::new()
        .route("/v1/health", get(sessions::health))
        .route("/v1/sessions", post(sessions::start).get(sessions::list))
        .route("/v1/cluster/sessions", get(cluster::sessions))
        .route("/v1/cluster/drain", post(cluster::drain))
        .merge(one_session(state.clone()))
        .route("/v1/prune", post(sessions::prune))
        .route("/v1/events", get(events::events))
        .route("/v1/policy", post(policy::policy))
        .route("/v1/schedules", get(schedules::list).post(schedules::add))
        .route(
            "/v1/schedules/{id}",
            get(schedules::get_one).delete(schedules::remove),
        )
        .route("/v1/schedules/{id}/pause", post(schedules::pause))
        .route("/v1/schedules/{id}/resume", post(schedules::resume))
        // Bundles are bigger than any JSON request: their own limit.
        .route(
            "/v1/registry",
            post(registry::publish).layer(axum::extract::DefaultBodyLimit::max(bundle_limit)),
        )
        .route(
            "/v1/uploads",
            post(uploads::upload).layer(axum::extract::DefaultBodyLimit::max(bundle_limit)),
        )
        .route("/metrics", get(metrics))
        .fallback(fallback)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), trace_request))
        .with_state(state)
}

/// Calls on one session; in a cluster, carried to the node that runs it
/// when this one does not.
fn one_session(state: ApiState) -> Router<ApiState> {
    Router::new()
        .route(
            "/v1/sessions/{id}",
            get(sessions::get_one).delete(sessions::remove),
        )
        .route("/v1/sessions/{id}/stop", post(sessions::stop))
        .route("/v1/sessions/{id}/restart", post(sessions::restart))
        .route("/v1/sessions/{id}/upgrade", post(upgrade::upgrade))
        .route("/v1/sessions/{id}/versions", get(upgrade::versions))
        .route("/v1/sessions/{id}/wait", get(sessions::wait))
        .route("/v1/sessions/{id}/events", get(sessions::events))
        .route("/v1/sessions/{id}/logs", get(logs::logs))
        .route("/v1/sessions/{id}/tasks", get(sessions::tasks))
        .route("/v1/sessions/{id}/trace", get(sessions::trace))
        .route_layer(middleware::from_fn_with_state(state, carried::elsewhere))
}

/// One span per request; the peer's credentials are logged when known.
async fn trace_request(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    state.host.metrics.api_request();
    let peer = request
        .extensions()
        .get::<ConnectInfo<unix::PeerCred>>()
        .map(|c| c.0.clone());
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        peer_uid = peer.as_ref().and_then(|p| p.uid),
        peer_pid = peer.as_ref().and_then(|p| p.pid),
        status = tracing::field::Empty,
    );
    let mutating = request.method() != axum::http::Method::GET;
    if let Some(peer) = &peer
        && let Err(reason) = state.peers.check(peer)
    {
        let _entered = span.enter();
        tracing::warn!(%reason, "control connection refused");
        return ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            reason.to_string(),
        )
        .into_response();
    }
    // A tool runs with roostd's uid (or one admitted above); it is still no
    // operator.
    // Judged whole when the connection was accepted; per request only
    // whether the process that connected is still there.
    if let Some(tool) = peer.as_ref().and_then(|p| {
        p.tool
            .clone()
            .or_else(|| p.pid.and_then(crate::tools::origin::gone))
    }) {
        let _entered = span.enter();
        tracing::warn!(
            session_id = tool.session_id.as_deref().unwrap_or("unknown"),
            why = tool.by,
            "control connection from a tool refused"
        );
        return ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this connection comes from a native or shell tool ({}); tools may not use \
                 roostd's control API",
                tool.by
            ),
        )
        .into_response();
    }
    async move {
        let response = next.run(request).await;
        tracing::Span::current().record("status", response.status().as_u16());
        // Changes are worth a line each (with the peer's uid/pid); reads are not.
        if mutating {
            tracing::info!("served");
        } else {
            tracing::debug!("served");
        }
        response
    }
    .instrument(span)
    .await
}

async fn metrics(State(state): State<ApiState>) -> Response {
    observe::exposition(&state.supervisor, &state.host, state.started)
}

async fn fallback(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint {} {}; the control API lives under /v1/ (see ARCHITECTURE.md)",
        request.method(),
        request.uri().path()
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::config::DaemonConfig;
    use crate::metrics::Metrics;
    use crate::runtime::{Runtime, RuntimeConfig};
    use crate::store::Store;

    async fn test_app(pool: sqlx::SqlitePool, dir: &std::path::Path) -> Router {
        let metrics = Arc::new(Metrics::default());
        let runtime = Runtime::new(
            &RuntimeConfig {
                max_instances: 4,
                max_memory_bytes: 16 << 20,
                cache_dir: dir.join("cache"),
            },
            Arc::clone(&metrics),
        )
        .expect("runtime");
        let config = DaemonConfig {
            state_dir: dir.to_path_buf(),
            ..DaemonConfig::default()
        };
        let store = Store::from_pool(pool).expect("store");
        let (parts, _outbox) = crate::daemon::wire(
            config.clone(),
            store.clone(),
            runtime,
            Arc::clone(&metrics),
            crate::daemon::Gateway {
                a2a_base: "http://127.0.0.1:7420".into(),
                peer_tokens: Vec::new(),
                access: Arc::default(),
            },
            Arc::new(store),
        );
        let host = Arc::new(HostFacts {
            config,
            jail: crate::sandbox::Jail::Off,
            support: crate::sandbox::Support::detect(None),
            metrics,
            tasks: Arc::clone(&parts.tasks),
            cluster: None,
            schedules: Arc::new(crate::schedules::Schedules::new(
                parts.store.clone(),
                Arc::clone(&parts.tasks),
                Arc::clone(&parts.routes),
                Arc::clone(&parts.schedules_changed),
            )),
        });
        let supervisor = Supervisor::spawn(crate::supervisor::Shared::new(parts));
        app(ApiState {
            supervisor,
            started: Instant::now(),
            a2a_addr: "127.0.0.1:7420".into(),
            peers: Arc::new(unix::PeerPolicy::new(None).expect("policy")),
            control_addr: None,
            shutdown: CancellationToken::new(),
            host,
        })
    }

    async fn call(app: Router, request: Request<Body>) -> (StatusCode, serde_json::Value) {
        let response = app.oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&bytes).expect("JSON body"))
    }

    #[sqlx::test(migrations = "../migrations")]
    async fn health_list_and_errors_without_a_socket(pool: sqlx::SqlitePool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let app = test_app(pool, dir.path()).await;
        let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("request");

        let (status, health) = call(app.clone(), get("/v1/health")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(health["status"], "ok");
        assert_eq!(health["live_sessions"], 0);

        let (status, list) = call(app.clone(), get("/v1/sessions?all=true")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["sessions"], serde_json::json!([]));

        let (status, err) = call(app.clone(), get("/v1/sessions/ses_missing")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(err["error"]["code"], "not_found");

        let post = Request::post("/v1/sessions")
            .body(Body::from(r#"{"path": "capsule"}"#))
            .expect("request");
        let (status, err) = call(app.clone(), post).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("must be an absolute path"),
            "{err}"
        );

        let (status, err) = call(app, get("/nope")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(err["error"]["code"], "not_found");
    }

    /// What another node (anyone who can publish to
    /// `roost.control.<node>`) can ask: calls on one session only.
    #[sqlx::test(migrations = "../migrations")]
    async fn another_node_carries_only_calls_on_one_session(pool: sqlx::SqlitePool) {
        use crate::cluster::control::Forwarded;
        let dir = tempfile::tempdir().expect("tempdir");
        let app = test_app(pool, dir.path()).await;
        let controls = super::controls(app.clone());
        let get = |uri: &str| Request::get(uri).body(Body::empty()).expect("request");
        for (method, path) in [
            ("GET", "/v1/health"),
            ("POST", "/v1/prune"),
            ("POST", "/v1/sessions"),
            ("POST", "/v1/cluster/drain"),
            ("POST", "/v1/registry?platform=any"),
            ("GET", "/v1/sessions/x/../../health"),
        ] {
            let answer = controls(
                Forwarded::new(method, path, None, b"{}")
                    .by("uid 0 on node b's control socket".into()),
            )
            .await;
            assert_eq!(answer.status, 403, "{method} {path}");
            let body = String::from_utf8(answer.body()).expect("utf-8");
            assert!(body.contains("only calls on one session"), "{body}");
        }
        // The controls: the same API answers /v1/health asked directly,
        // and a carried call on one session reaches it.
        let (status, _) = call(app, get("/v1/health")).await;
        assert_eq!(status, StatusCode::OK);
        let missing = Forwarded::new("GET", "/v1/sessions/ses_missing", None, &[]);
        let answer = controls(
            missing
                .clone()
                .by("uid 0 on node b's control socket".into()),
        )
        .await;
        assert_eq!(answer.status, 404);
        let body: serde_json::Value = serde_json::from_slice(&answer.body()).expect("JSON");
        assert_eq!(body["error"]["code"], "not_found");
        // A call that does not say who made it is not answered.
        let answer = controls(missing).await;
        assert_eq!(answer.status, 400);
        let body = String::from_utf8(answer.body()).expect("utf-8");
        assert!(body.contains("says who made it"), "{body}");
    }
}
