//! `POST /v1/sessions/{id}/upgrade` (an upgrade in place, or its rollback)
//! and `GET /v1/sessions/{id}/versions` (the versions it has run).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use roost_wire::api::{Session, SessionVersions, UpgradeRequest};

use super::{ApiError, ApiState};

/// Largest drain timeout taken (a day).
const MAX_DRAIN_SECS: u64 = 86_400;

pub(super) async fn upgrade(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    body: Result<Json<UpgradeRequest>, JsonRejection>,
) -> Result<Json<Session>, ApiError> {
    let Json(request) = body.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; expected {{\"path\": DIR}} or {{\"rollback\": true}}, with \
             \"drain_timeout_secs\"? and \"force\"?",
            e.body_text()
        ))
    })?;
    if request
        .drain_timeout_secs
        .is_some_and(|s| s > MAX_DRAIN_SECS)
    {
        return Err(ApiError::bad_request(format!(
            "drain_timeout_secs may be at most {MAX_DRAIN_SECS} (a day)"
        )));
    }
    Ok(Json(state.supervisor.upgrade(&id, request).await?))
}

pub(super) async fn versions(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<SessionVersions>, ApiError> {
    let versions = state.supervisor.versions(&id).await?;
    Ok(Json(SessionVersions { versions }))
}
