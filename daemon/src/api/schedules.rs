//! `/v1/schedules`: schedules made, listed, read, paused, resumed and
//! removed (the scheduler is `schedules::Schedules`).

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use roost_wire::api::{ScheduleInfo, ScheduleList, ScheduleRequest};
use serde::Deserialize;

use super::{ApiError, ApiState};
use crate::schedules::ScheduleError;

impl From<ScheduleError> for ApiError {
    fn from(error: ScheduleError) -> Self {
        let message = error.to_string();
        match error {
            ScheduleError::Times(_) | ScheduleError::Invalid(_) => {
                Self::new(StatusCode::BAD_REQUEST, "invalid_schedule", message)
            }
            ScheduleError::NoRoute(_) => Self::new(StatusCode::NOT_FOUND, "no_route", message),
            ScheduleError::NotFound(_) => Self::not_found(message),
            ScheduleError::NameTaken { .. } => {
                Self::new(StatusCode::CONFLICT, "schedule_exists", message)
            }
            ScheduleError::Store(e) => Self::internal(&e),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    route: Option<String>,
}

/// `GET /v1/schedules[?route=R]`.
pub(super) async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ScheduleList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let schedules = state.host.schedules.list(query.route.as_deref()).await?;
    Ok(Json(ScheduleList { schedules }))
}

/// `POST /v1/schedules`.
pub(super) async fn add(
    State(state): State<ApiState>,
    body: Result<Json<ScheduleRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<ScheduleInfo>), ApiError> {
    let Json(request) = body.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; expected {{\"route\": R, \"text\": T, one of \"cron\" (with \"tz\"?), \
             \"every\" or \"at\", \"context_id\"?, \"name\"?, \"missed\"?, \"overlap\"?}}",
            e.body_text()
        ))
    })?;
    let made = state.host.schedules.add(request).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

/// `GET /v1/schedules/{id}`.
pub(super) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleInfo>, ApiError> {
    Ok(Json(state.host.schedules.get(&id).await?))
}

/// `DELETE /v1/schedules/{id}`: answers the schedule as it was.
pub(super) async fn remove(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleInfo>, ApiError> {
    Ok(Json(state.host.schedules.remove(&id).await?))
}

/// `POST /v1/schedules/{id}/pause`.
pub(super) async fn pause(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleInfo>, ApiError> {
    Ok(Json(state.host.schedules.set_paused(&id, true).await?))
}

/// `POST /v1/schedules/{id}/resume`: ticks that fell while it was paused
/// are passed over.
pub(super) async fn resume(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<ScheduleInfo>, ApiError> {
    Ok(Json(state.host.schedules.set_paused(&id, false).await?))
}
