//! The A2A gateway listener (`--a2a-listen`): with `api`, the only module that
//! knows HTTP. Each live session is addressed at `/a2a/<route>`; this roostd
//! hosts script capsules only, which accept no A2A tasks, so every route answers
//! with a JSON error that says so.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::any;

use crate::api::ApiError;
use crate::supervisor::Supervisor;

pub fn app(supervisor: Supervisor) -> Router {
    Router::new()
        .route("/a2a/{route}", any(route))
        .route("/a2a/{route}/{*rest}", any(route_rest))
        .fallback(|| async {
            ApiError::not_found("A2A agents are addressed at /a2a/<session name or id>")
        })
        .with_state(supervisor)
}

async fn route_rest(
    state: State<Supervisor>,
    Path((route_name, _rest)): Path<(String, String)>,
) -> ApiError {
    lookup(state, route_name).await
}

async fn route(state: State<Supervisor>, Path(route_name): Path<String>) -> ApiError {
    lookup(state, route_name).await
}

async fn lookup(State(supervisor): State<Supervisor>, route: String) -> ApiError {
    match supervisor.get(&route).await {
        Ok(session) if !session.state.is_ended() => ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_an_agent",
            format!(
                "session '{}' runs script capsule {}; script capsules accept no A2A tasks",
                session.name, session.capsule
            ),
        ),
        _ => ApiError::not_found(format!("no live session is routed at /a2a/{route}")),
    }
}
