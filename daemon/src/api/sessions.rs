//! Session endpoints: start, list, get, stop, wait, events, health.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use roost_ctl::api::{Health, Session, SessionList, StartRequest};
use serde::Deserialize;

use super::{ApiError, ApiState, MAX_BODY_BYTES};

pub(super) async fn health(State(state): State<ApiState>) -> Json<Health> {
    let host = &state.host;
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_secs: state.started.elapsed().as_secs(),
        live_sessions: state.supervisor.live_sessions(),
        a2a_addr: state.a2a_addr.clone(),
        control_addr: state.control_addr.clone(),
        state_dir: host.config.state_dir.display().to_string(),
        tool_jail: Some(crate::sandbox::assess(true, &host.jail, &host.support).0),
        jail_helper: host.jail.helper().map(|p| p.display().to_string()),
        a2a_token: host.config.a2a.token_file.is_some(),
    })
}

pub(super) async fn start(
    State(state): State<ApiState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Session>), ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body exceeds {MAX_BODY_BYTES} bytes"),
            )
        } else {
            ApiError::bad_request(format!("cannot read request body: {rejection}"))
        }
    })?;
    let request: StartRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid JSON body: {e}; expected {{\"path\": \"/abs/capsule\", \"name\"?, \"workdir\"?, \"restart\"?}}"
        ))
    })?;
    let session = state.supervisor.start(request).await?;
    Ok((StatusCode::CREATED, Json(session)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    all: bool,
}

pub(super) async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<SessionList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let sessions = state.supervisor.list(query.all).await?;
    Ok(Json(SessionList { sessions }))
}

pub(super) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.supervisor.get(&id).await?))
}

pub(super) async fn stop(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.supervisor.stop(&id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    #[serde(default = "default_wait")]
    timeout_secs: u64,
}

fn default_wait() -> u64 {
    30
}

/// Long-poll: answers when the session has ended, or with its current record
/// after `timeout_secs` (at most 300).
pub(super) async fn wait(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Session>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let timeout = Duration::from_secs(query.timeout_secs.min(300));
    Ok(Json(state.supervisor.wait(&id, timeout).await?))
}

#[derive(Debug, serde::Serialize)]
pub(super) struct Event {
    state: String,
    detail: Option<String>,
    at: String,
}

/// Every state transition of a session, oldest first.
pub(super) async fn events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let session = state.supervisor.get(&id).await?;
    let events = state.supervisor.events(&session.id).await?;
    Ok(Json(
        events
            .into_iter()
            .map(|(state, detail, at)| Event { state, detail, at })
            .collect(),
    ))
}

/// `GET /v1/sessions/{id}/tasks`: an agent session's tasks with their token use.
pub(super) async fn tasks(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<roost_ctl::api::TaskRecord>>, ApiError> {
    let session = state.supervisor.get(&id).await?;
    let tasks = state.supervisor.tasks(&session.id).await?;
    Ok(Json(tasks))
}

/// `GET /v1/sessions/{id}/trace`: an agent session's `trace.jsonl` as written.
pub(super) async fn trace(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let session = state.supervisor.get(&id).await?;
    let path = std::path::Path::new(&session.bookkeeping_dir).join(crate::agent::trace::TRACE_FILE);
    // Not through a link a tool may have put there (crate::fsx).
    let (root, file) = (std::path::PathBuf::from(&session.workdir), path.clone());
    let read = tokio::task::spawn_blocking(move || crate::fsx::read(&root, &file))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(ApiError::internal(&format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        bytes,
    )
        .into_response())
}
