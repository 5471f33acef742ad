//! `POST /v1/uploads`: a capsule directory as a zip (`roostctl start` of a
//! capsule roostd cannot read), stored under the state dir
//! ([`crate::uploads`]); answers the path to start it from.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use roost_wire::api::UploadReport;

use super::{ApiError, ApiState};
use crate::uploads::UploadError;

pub(super) async fn upload(
    State(state): State<ApiState>,
    body: Bytes,
) -> Result<Json<UploadReport>, ApiError> {
    let state_dir = state.host.config.state_dir.clone();
    let max_bytes = state.host.config.artifacts.max_bundle_mb << 20;
    let stored =
        tokio::task::spawn_blocking(move || crate::uploads::store(&state_dir, &body, max_bytes))
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?
            .map_err(|e| {
                let message = e.to_string();
                match e {
                    UploadError::Io { .. } => {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "upload_failed", message)
                    }
                    UploadError::Bundle(_) | UploadError::NoManifest => {
                        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_upload", message)
                    }
                }
            })?;
    tracing::info!(
        sha256 = %stored.sha256,
        files = stored.files,
        bytes = stored.bytes,
        "capsule uploaded"
    );
    Ok(Json(UploadReport {
        path: stored.manifest.display().to_string(),
        sha256: stored.sha256,
        files: stored.files,
        bytes: stored.bytes,
    }))
}
