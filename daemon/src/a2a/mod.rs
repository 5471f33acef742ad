//! The A2A gateway (`--a2a-listen`): with `api`, the only module that serves
//! HTTP. Each live agent session is an A2A agent at `/a2a/<route>` (its name or
//! id): the agent card at `/a2a/<route>/.well-known/agent-card.json`, JSON-RPC
//! by POST to `/a2a/<route>`, and the HTTP+JSON binding under it. Protocol 1.0
//! with `A2A-Version: 1.0`; 0.3 semantics without the header. Tasks are
//! accepted and stored through [`crate::tasks::Broker`].

pub mod access;
pub mod card;
pub mod client;
pub mod envelope;
pub mod error;
pub mod grpc;
mod grpc_v03;
mod guard;
pub mod handoff;
mod list;
pub mod push;
pub mod routing;
mod rpc;
pub mod signing;
mod streams;
mod v03_proto;
pub mod wire;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Extension, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::ids::TaskId;
use crate::tasks::{A2aTask, Broker, EventKind, TaskEvent, TaskState};
use error::A2aError;
use guard::Checked;
use routing::{Route, Routing};
use wire::Dialect;

/// Largest request body the gateway reads.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long a blocking SendMessage waits for the task to end before
/// answering with the task as it is.
const BLOCKING_WAIT: Duration = Duration::from_secs(600);

#[derive(Clone)]
struct Gateway {
    /// Where routes run and what their cards say.
    routing: Arc<dyn Routing>,
    /// Tasks: accepted, delivered, read back, streamed.
    tasks: Arc<crate::tasks::Broker>,
    /// Where agent cards say the gateway is.
    base: card::PublicBase,
    /// Who may call which route.
    access: Arc<access::Access>,
    /// Signs cards (`a2a.sign_cards`).
    signer: Option<Arc<signing::CardSigner>>,
    /// Where push notifications may go; `None`: they are off.
    push: Option<Arc<push::PushPolicy>>,
    /// `a2a.dedupe_message_ids`.
    dedupe: bool,
    /// The gRPC binding is served (`a2a.grpc.enabled`).
    grpc: bool,
    /// The route 0.3's gRPC service serves (`a2a.grpc.default_route`: 0.3
    /// has no tenant).
    grpc_default: Option<Arc<str>>,
    /// What cards say to a client that names no version
    /// (`a2a.card_compat`; a capsule's own overrides it).
    card_compat: crate::manifest::a2a::CardCompat,
    /// Where a token may come as an API key besides `Authorization`
    /// (`a2a.api_key_header`).
    api_key_header: Option<axum::http::HeaderName>,
    /// Web pages that may call the gateway (`a2a.cors.allow_origins`).
    allow_origins: Arc<[String]>,
    /// Streams open per route (`http.max_streams_per_route`).
    streams: Arc<streams::Streams>,
    /// Carries requests for routes other nodes run (a cluster's node).
    handoff: Option<Arc<dyn routing::Handoff>>,
}

/// What the gateway serves from: the supervisor's routes and the broker's
/// tasks (it never reaches the store), the URL its cards advertise, the
/// tokens it checks.
pub struct GatewayParts {
    pub routing: Arc<dyn Routing>,
    pub tasks: Arc<crate::tasks::Broker>,
    pub base: card::PublicBase,
    /// Shared with roostd's reload (SIGHUP), which replaces its tokens.
    pub access: Arc<access::Access>,
    pub signer: Option<Arc<signing::CardSigner>>,
    pub push: Option<Arc<push::PushPolicy>>,
    /// A `SendMessage` whose message id the route has a task for answers
    /// that task (and runs nothing); off, every one makes a task.
    pub dedupe: bool,
    /// Serve the gRPC binding, and where a request without a tenant goes.
    pub grpc: Option<crate::config::GrpcSettings>,
    /// `a2a.card_compat`.
    pub card_compat: crate::manifest::a2a::CardCompat,
    /// `a2a.api_key_header`.
    pub api_key_header: Option<String>,
    /// `/healthz` and `/readyz` (no token: they say nothing about tasks).
    pub health: Arc<crate::health::Health>,
    /// What one client may hold (`http:`).
    pub http: crate::config::HttpConfig,
    /// `a2a.cors.allow_origins`.
    pub allow_origins: Vec<String>,
    /// On a node of a cluster: carries requests for routes other nodes run.
    pub handoff: Option<Arc<dyn routing::Handoff>>,
}

/// What the listener holds every connection to: the client limits and the
/// host names requests may name.
pub struct ListenRules {
    limits: crate::api::listen::Limits,
    hosts: Vec<String>,
}

pub fn listen_rules(parts: &GatewayParts) -> ListenRules {
    ListenRules {
        limits: (&parts.http).into(),
        hosts: parts.base.configured_host().into_iter().collect(),
    }
}

/// Serves `app` (the gateway [`app`] made) on `listener` until `stop`.
/// `tls`: HTTPS (and gRPC over TLS), `a2a.tls`.
pub async fn listen(
    listener: tokio::net::TcpListener,
    app: Router,
    rules: ListenRules,
    tls: Option<Arc<crate::api::tls::ServerTls>>,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    crate::api::listen::serve(listener, app, "a2a", rules.limits, rules.hosts, tls, stop).await
}

/// The gateway; on a route that needs a token (`access`), every request
/// but the agent card needs `Authorization: Bearer <token>` (and the card
/// declares the scheme).
pub fn app(parts: GatewayParts) -> Router {
    let gw = Gateway {
        routing: parts.routing,
        tasks: parts.tasks,
        base: parts.base,
        access: parts.access,
        signer: parts.signer,
        push: parts.push,
        dedupe: parts.dedupe,
        grpc: parts.grpc.is_some(),
        grpc_default: parts
            .grpc
            .as_ref()
            .and_then(|g| g.default_route.as_deref())
            .map(Arc::from),
        card_compat: parts.card_compat,
        api_key_header: parts.api_key_header.as_deref().and_then(|h| {
            axum::http::HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).ok()
        }),
        allow_origins: parts.allow_origins.into(),
        streams: streams::Streams::new(parts.http.max_streams_per_route),
        handoff: parts.handoff,
    };
    let mut router = Router::new();
    if let Some(settings) = &parts.grpc {
        router = router.merge(
            Router::new()
                .route_service(
                    grpc::PATH,
                    grpc::service(&gw, settings.default_route.as_deref()),
                )
                .route_service(
                    grpc_v03::PATH,
                    grpc_v03::service(&gw, settings.default_route.as_deref()),
                )
                .layer(middleware::from_fn(grpc::log_refusals)),
        );
    }
    router = router
        .route(signing::JWKS_PATH, any(card::jwks))
        .route("/a2a/{route}", any(root))
        .route("/a2a/{route}/", any(root))
        .route("/a2a/{route}/{*rest}", any(rest))
        .fallback(|| async {
            problem(
                StatusCode::NOT_FOUND,
                "not_found",
                "A2A agents are addressed at /a2a/<session name or id>",
            )
        })
        .layer(middleware::from_fn_with_state(gw.clone(), guard::auth));
    // On a node of a cluster, a request for a route another node runs goes
    // there before any check here.
    if gw.handoff.is_some() {
        router = router.layer(middleware::from_fn_with_state(
            gw.clone(),
            handoff::route_elsewhere,
        ));
    }
    router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(gw)
        .merge(crate::api::health_routes(parts.health))
}

/// A gateway path's route segment (still encoded) and what follows it;
/// `None` outside `/a2a/`.
impl Gateway {
    /// The token a request gives: `Authorization: Bearer …`, else the
    /// value of `a2a.api_key_header` (one place, for every binding).
    pub(super) fn given_token<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        bearer.or_else(|| {
            headers
                .get(self.api_key_header.as_ref()?)
                .and_then(|v| v.to_str().ok())
        })
    }
}

pub(super) fn route_path(path: &str) -> Option<(&str, &str)> {
    let under = path.strip_prefix("/a2a/")?;
    Some(under.split_once('/').unwrap_or((under, "")))
}

/// Whether a request asks for a route's public agent card (1.0's path or
/// 0.3's): the one request no token is checked for.
pub(super) fn card_request(method: &Method, rest: &str) -> bool {
    method == Method::GET
        && matches!(
            rest,
            ".well-known/agent-card.json" | ".well-known/agent.json"
        )
}

fn problem(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

fn no_agent(route: &str) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no agent at /a2a/{route}: no session has had this name (`roostctl list --all` \
             shows them)"
        ),
    )
}

/// What a route's agent card is made from (its live session, or the last
/// one, ended).
async fn agent_record(gw: &Gateway, route: &str) -> Result<routing::Agent, Response> {
    gw.routing.agent(route).await.ok_or_else(|| no_agent(route))
}

/// The route a request names: a live one (one host: from the supervisor's
/// memory, no database read), else one whose session has ended, whose
/// tasks stay readable.
async fn route_of(gw: &Gateway, route: &str) -> Option<Route> {
    gw.routing.route(route).await
}

/// The route a request is served from and who sent it: the client whose
/// token opened the route (`""` for its one token, roostd's, or an open
/// route). A client reads and continues only its own tasks and contexts.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub route: &'a Route,
    pub owner: &'a str,
    /// The A2A version the client speaks, whatever shapes the request was
    /// read in: what roostd sends it later (push notifications).
    pub client: Dialect,
}

/// A task of this session, or TaskNotFound.
async fn own_task(gw: &Gateway, at: At<'_>, id: &TaskId) -> Result<A2aTask, A2aError> {
    match gw.tasks.task(id).await? {
        // Matched by route: a task outlives its session (ended, restarted
        // or replaced under the same name); and by its client: another
        // client's task is not found.
        Some(t) if t.route == at.route.name && t.owner == at.owner => Ok(t),
        _ => Err(A2aError::TaskNotFound(format!(
            "no task '{id}' at this agent"
        ))),
    }
}

/// The card a request asks for: 0.3's with `A2A-Version: 0.3`, 1.0's with
/// any other; without the header, what the route's `card_compat` says.
fn card_version(headers: &HeaderMap) -> card::CardShape {
    match headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        None | Some("") => card::CardShape::Unnamed,
        Some(v) if v.starts_with("0.") => card::CardShape::Named(Dialect::V03),
        Some(_) => card::CardShape::Named(Dialect::V10),
    }
}

fn dialect(headers: &HeaderMap) -> Result<Dialect, wire::UnsupportedVersion> {
    let value = headers.get("a2a-version").and_then(|v| v.to_str().ok());
    Dialect::from_header(value)
}

/// The route a handler serves: the one the auth layer found, else looked
/// up now.
async fn found_or_look(gw: &Gateway, found: Option<Route>, route: &str) -> Option<Route> {
    match found {
        Some(r) => Some(r),
        None => route_of(gw, route).await,
    }
}

async fn root(
    State(gw): State<Gateway>,
    Extension(checked): Extension<Checked>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (route, owner) = (checked.named, checked.caller);
    let Some(session) = found_or_look(&gw, checked.found, &route).await else {
        return no_agent(&route);
    };
    if method != Method::POST {
        return problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "JSON-RPC requests are POSTed here; the agent card is at .well-known/agent-card.json",
        );
    }
    let at = At {
        route: &session,
        owner: &owner,
        client: dialect(&headers).unwrap_or(Dialect::V10),
    };
    rpc::jsonrpc(&gw, at, &headers, &body).await
}

async fn rest(
    State(gw): State<Gateway>,
    Extension(checked): Extension<Checked>,
    Path((_, rest)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    let (route, owner) = (checked.named, checked.caller);
    // The card: 1.0's; 0.3's for a client that says `A2A-Version: 0.3`,
    // and at 0.3's older path.
    let card_dialect = match rest.as_str() {
        ".well-known/agent-card.json" => Some(card_version(&headers)),
        ".well-known/agent.json" => Some(card::CardShape::Named(Dialect::V03)),
        _ => None,
    };
    if let (Some(d), true) = (card_dialect, method == Method::GET) {
        return match agent_record(&gw, &route).await {
            Ok(session) => card::public(&gw, &session, &headers, d),
            Err(r) => r,
        };
    }
    let Some(session) = found_or_look(&gw, checked.found, &route).await else {
        return no_agent(&route);
    };
    let at = At {
        route: &session,
        owner: &owner,
        // 0.3's paths are under `v1/`.
        client: if rest.starts_with("v1/") {
            Dialect::V03
        } else {
            Dialect::V10
        },
    };
    rpc::rest(&gw, at, &method, &rest, uri.query(), &headers, &body).await
}

/// Waits until the task has ended, or (`at_input`) needs input, or the wait
/// runs out, and returns it. `live`: a subscription made before the task
/// could change (saves reading it first); then the task's whole log comes
/// back too when every event was seen (saves reading that).
async fn wait_until_ended(
    broker: &Arc<Broker>,
    task: A2aTask,
    at_input: bool,
    live: Option<crate::tasks::Subscription>,
) -> (A2aTask, Option<Vec<TaskEvent>>) {
    let over =
        |state: TaskState| state.is_terminal() || (at_input && state == TaskState::InputRequired);
    if over(task.state) {
        return (task, None);
    }
    // Read once after subscribing (an end that came first is not missed),
    // then only if events were missed; the ending event itself has all a
    // read would.
    let mut check = live.is_none();
    // The log so far, while nothing was missed: the first event (written
    // with the task) and what the subscription saw.
    let mut log = live.is_some().then(|| {
        vec![TaskEvent {
            seq: 1,
            at: task.created_at.clone(),
            kind: EventKind::Status {
                parts: None,
                state: TaskState::Submitted,
                message: None,
            },
        }]
    });
    let mut live = live.unwrap_or_else(|| broker.subscribe(&task.id));
    let deadline = tokio::time::Instant::now() + BLOCKING_WAIT;
    loop {
        if check
            && let Ok(Some(now)) = broker.task(&task.id).await
            && over(now.state)
        {
            return (now, None);
        }
        match tokio::time::timeout_at(deadline, live.rx.recv()).await {
            Ok(Ok(event)) => {
                let ends = matches!(&event.kind, EventKind::Status { state, .. } if over(*state));
                let status = match &event.kind {
                    EventKind::Status {
                        state,
                        message,
                        parts,
                    } if ends => Some((*state, message.clone(), parts.clone(), event.at.clone())),
                    _ => None,
                };
                if let Some(l) = &mut log {
                    if l.last().is_some_and(|e| e.seq + 1 == event.seq) {
                        l.push(event);
                    } else {
                        log = None;
                    }
                }
                // The event that ends the wait is the task's last status, as
                // stored: the task as a read would give it, without the read.
                if let Some((state, status_message, status_parts, updated_at)) = status {
                    let task = A2aTask {
                        state,
                        status_message,
                        status_parts,
                        updated_at,
                        ..task
                    };
                    return (task, log);
                }
                check = false;
            }
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                check = true;
                log = None;
            }
            Ok(Err(_)) | Err(_) => {
                let now = broker.task(&task.id).await.ok().flatten();
                return (now.unwrap_or(task), None);
            }
        }
    }
}

/// A server-sent-event stream of a task: its current snapshot first, then
/// every event after `after` from the log, then live events, until it ends.
fn task_stream(
    broker: Arc<Broker>,
    task: A2aTask,
    (after, through_input): (u64, bool),
    (d, slot): (Dialect, streams::Slot),
    frame: impl Fn(Value) -> Value + Send + 'static,
) -> Response {
    let stream = task_events(broker, task, after, through_input, (d, slot)).map(move |event| {
        Ok::<_, Infallible>(match event {
            Some(v) => Bytes::from(wire::sse_data(&frame(v))),
            // Keep the connection alive through proxies.
            None => Bytes::from_static(b": keep-alive\n\n"),
        })
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A task's events as values (the bindings frame them): its snapshot first,
/// then every event after `after` from the log, then live events, until it
/// ends (or, unless `through_input`, needs input); `None` when 15 s pass
/// without one (a keep-alive).
fn task_events(
    broker: Arc<Broker>,
    task: A2aTask,
    after: u64,
    through_input: bool,
    (d, slot): (Dialect, streams::Slot),
) -> impl futures::Stream<Item = Option<Value>> + Send {
    struct St {
        /// Held while the stream is open.
        _slot: streams::Slot,
        broker: Arc<Broker>,
        task: A2aTask,
        seq: u64,
        d: Dialect,
        live: Option<crate::tasks::Subscription>,
        pending: std::collections::VecDeque<Value>,
        started: bool,
        done: bool,
    }
    let st = St {
        _slot: slot,
        live: Some(broker.subscribe(&task.id)),
        broker,
        task,
        seq: after,
        d,
        pending: Default::default(),
        started: false,
        done: false,
    };
    futures::stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(v) = st.pending.pop_front() {
                return Some((Some(v), st));
            }
            if st.done {
                return None;
            }
            if !st.started {
                st.started = true;
                st.pending.push_back(wire::task_result(&st.task, st.d));
                st.done = st.task.state.is_terminal();
                continue;
            }
            // The log first (what was missed), then live events.
            let logged = st
                .broker
                .events(&st.task.id, st.seq)
                .await
                .unwrap_or_default();
            if !logged.is_empty() {
                for e in logged {
                    st.seq = e.seq;
                    let ended = matches!(&e.kind, EventKind::Status { state, .. }
                        if state.is_terminal()
                            || (*state == TaskState::InputRequired && !through_input));
                    st.pending.extend(wire::event(&st.task, &e, st.d));
                    if ended {
                        st.done = true;
                        break;
                    }
                }
                continue;
            }
            let live = st.live.as_mut()?;
            match tokio::time::timeout(Duration::from_secs(15), live.rx.recv()).await {
                Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(_)) => {
                    // The task ended (its channel closed): drain the log once more.
                    st.live = None;
                    let rest = st
                        .broker
                        .events(&st.task.id, st.seq)
                        .await
                        .unwrap_or_default();
                    for e in rest {
                        st.seq = e.seq;
                        st.pending.extend(wire::event(&st.task, &e, st.d));
                    }
                    st.done = true;
                }
                Err(_) => return Some((None, st)),
            }
        }
    })
}
