//! The API error type: a status, a stable code and a message that says what to
//! do; internal details are logged, not sent.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use roost_wire::api::{ErrorBody, ErrorDetail};

use crate::staging::StageError;
use crate::supervisor::SupervisorError;

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(super) fn internal(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "internal error serving API request");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "roostd hit an internal error; see its log (journalctl -u roostd)",
        )
    }
}

impl ApiError {
    /// The last line of a start with progress: what the plain request
    /// would have answered.
    pub(super) fn into_progress(self) -> roost_wire::api::StartProgress {
        roost_wire::api::StartProgress::Error {
            status: self.status.as_u16(),
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<SupervisorError> for ApiError {
    fn from(error: SupervisorError) -> Self {
        let message = error.to_string();
        match error {
            SupervisorError::Stage(stage) => match stage {
                StageError::RelativePath { .. }
                | StageError::Name(_)
                | StageError::LifecycleOverrideWithoutTasks { .. } => {
                    Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
                }
                // roostd cannot read it (it does not exist for roostd, or
                // its permissions or the unit keep roostd out): roostctl
                // uploads it when it can read it itself.
                StageError::Manifest(
                    crate::manifest::ManifestError::NotFound { .. }
                    | crate::manifest::ManifestError::Read { .. },
                ) => Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "capsule_unreadable",
                    format!(
                        "{message} (roostctl uploads a capsule roostd cannot read; over the \
                         API, POST the directory as a zip to /v1/uploads)"
                    ),
                ),
                StageError::Manifest(_) | StageError::LifecycleWithoutHandler { .. } => Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_manifest",
                    message,
                ),
                StageError::Workdir { .. } => {
                    Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_workdir", message)
                }
                StageError::MemoryLimit { .. } => {
                    Self::new(StatusCode::UNPROCESSABLE_ENTITY, "limit_too_high", message)
                }
                StageError::Runtime(_) => Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_component",
                    message,
                ),
                StageError::Agent { .. } => {
                    Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_agent", message)
                }
                StageError::CapsuleFile { .. } | StageError::TooManySchedules { .. } => Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_manifest",
                    message,
                ),
                StageError::TaskTooLarge { .. } => {
                    Self::new(StatusCode::PAYLOAD_TOO_LARGE, "task_too_large", message)
                }
                StageError::Unenforceable { .. } => Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unenforceable_policy",
                    message,
                ),
                StageError::Artifact(artifact) => {
                    use crate::artifacts::ArtifactError as A;
                    let code = match artifact {
                        A::LockMissingEntry { .. } => "lock_missing_entry",
                        A::LockVersionMismatch { .. } => "lock_version_mismatch",
                        A::LockHashMismatch { .. } => "lock_hash_mismatch",
                        A::Integrity { .. } => "integrity_failed",
                        A::Lock(_) => "invalid_lock",
                        A::Registry { .. } => "registry_error",
                        A::Bundle(_) | A::RuntimeMismatch { .. } => "invalid_bundle",
                        A::Compile(_) => "invalid_component",
                        A::SkillSourceMissing { .. }
                        | A::SkillNoSkillMd { .. }
                        | A::SkillRead { .. }
                        | A::SkillOutside { .. } => "invalid_skill_source",
                    };
                    Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
                }
            },
            SupervisorError::NotFound(_) => Self::not_found(message),
            SupervisorError::NameInUse(_) => {
                Self::new(StatusCode::CONFLICT, "name_in_use", message)
            }
            SupervisorError::Live(_) => Self::new(StatusCode::CONFLICT, "session_live", message),
            SupervisorError::Upgrade(_) => {
                Self::new(StatusCode::CONFLICT, "upgrade_refused", message)
            }
            SupervisorError::UpgradeInProgress(_) => {
                Self::new(StatusCode::CONFLICT, "upgrade_in_progress", message)
            }
            SupervisorError::Claim(crate::a2a::routing::ClaimError::Taken { .. }) => {
                Self::new(StatusCode::CONFLICT, "name_in_use", message)
            }
            SupervisorError::Claim(crate::a2a::routing::ClaimError::Unavailable { .. }) => {
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cluster_unavailable",
                    message,
                )
            }
            SupervisorError::ShuttingDown => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message)
            }
            SupervisorError::Store(e) => Self::internal(&e),
            SupervisorError::Io(e) => Self::internal(&e),
            SupervisorError::Gone => Self::internal(&"supervisor gone"),
        }
    }
}
