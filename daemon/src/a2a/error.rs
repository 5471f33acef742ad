//! An A2A error, before a binding renders it: JSON-RPC's codes and
//! HTTP+JSON's statuses, one variant per kind of failure.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::wire::Dialect;

/// An A2A error, before it is rendered for a binding.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub enum A2aError {
    Parse(String),
    InvalidRequest(String),
    MethodNotFound(String),
    InvalidParams(String),
    Internal(String),
    TaskNotFound(String),
    NotCancelable(String),
    PushNotSupported,
    Unsupported(String),
    ExtendedCardNotConfigured,
    Version(String),
    ContentType(String),
}

impl A2aError {
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => -32700,
            Self::InvalidRequest(_) => -32600,
            Self::MethodNotFound(_) => -32601,
            Self::InvalidParams(_) => -32602,
            Self::Internal(_) => -32603,
            Self::TaskNotFound(_) => -32001,
            Self::NotCancelable(_) => -32002,
            Self::PushNotSupported => -32003,
            Self::Unsupported(_) => -32004,
            Self::ExtendedCardNotConfigured => -32007,
            Self::Version(_) => -32009,
            Self::ContentType(_) => -32005,
        }
    }

    /// The error a JSON-RPC error object with `code` says (the inverse
    /// of [`Self::code`]; an unknown code is an internal error).
    pub fn from_code(code: i64, message: String) -> Self {
        match code {
            -32700 => Self::Parse(message),
            -32600 => Self::InvalidRequest(message),
            -32601 => Self::MethodNotFound(message),
            -32602 => Self::InvalidParams(message),
            -32001 => Self::TaskNotFound(message),
            -32002 => Self::NotCancelable(message),
            -32003 => Self::PushNotSupported,
            -32004 => Self::Unsupported(message),
            -32007 => Self::ExtendedCardNotConfigured,
            -32009 => Self::Version(message),
            -32005 => Self::ContentType(message),
            _ => Self::Internal(message),
        }
    }

    pub fn reason(&self) -> Option<&'static str> {
        Some(match self {
            Self::TaskNotFound(_) => "TASK_NOT_FOUND",
            Self::NotCancelable(_) => "TASK_NOT_CANCELABLE",
            Self::PushNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Self::Unsupported(_) => "UNSUPPORTED_OPERATION",
            Self::ExtendedCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Self::Version(_) => "VERSION_NOT_SUPPORTED",
            Self::ContentType(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            _ => return None,
        })
    }

    pub fn message(&self) -> String {
        match self {
            Self::Parse(m)
            | Self::InvalidRequest(m)
            | Self::MethodNotFound(m)
            | Self::InvalidParams(m)
            | Self::Internal(m)
            | Self::TaskNotFound(m)
            | Self::NotCancelable(m)
            | Self::Unsupported(m)
            | Self::Version(m)
            | Self::ContentType(m) => m.clone(),
            Self::PushNotSupported => {
                "push notifications are turned off here (roostd's a2a.push.enabled: false)".into()
            }
            Self::ExtendedCardNotConfigured => "this agent has no extended agent card".into(),
        }
    }

    pub fn http_status(&self) -> StatusCode {
        match self {
            Self::TaskNotFound(_) | Self::MethodNotFound(_) => StatusCode::NOT_FOUND,
            Self::NotCancelable(_) => StatusCode::CONFLICT,
            Self::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    pub fn error_info(&self) -> Option<Value> {
        self.reason().map(|reason| {
            json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                   "reason": reason, "domain": "a2a-protocol.org"})
        })
    }

    /// The JSON-RPC error object.
    pub fn rpc(&self, d: Dialect) -> Value {
        let mut e = json!({"code": self.code(), "message": self.message()});
        if d == Dialect::V10
            && let Some(info) = self.error_info()
        {
            e["data"] = json!([info]);
        }
        e
    }

    /// One log line for a refused request (the gRPC binding logs its own,
    /// `grpc::log_refusals`).
    pub fn log_refusal(&self, binding: &'static str) {
        tracing::info!(binding, code = self.code(), message = %self.message(), "A2A request refused");
    }

    /// The HTTP+JSON error response (`google.rpc.Status` shape).
    pub fn http(&self) -> Response {
        self.log_refusal("http+json");
        let status = self.http_status();
        let mut e = json!({
            "code": status.as_u16(),
            "status": status.canonical_reason().unwrap_or("ERROR").to_ascii_uppercase().replace(' ', "_"),
            "message": self.message(),
        });
        if let Some(info) = self.error_info() {
            e["details"] = json!([info]);
        }
        (status, axum::Json(json!({"error": e}))).into_response()
    }
}

impl From<crate::tasks::LogError> for A2aError {
    fn from(e: crate::tasks::LogError) -> Self {
        tracing::error!(error = %e, "A2A request failed in the task log");
        Self::Internal("the task store failed; see roostd's log".into())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn every_error_reads_back_from_its_jsonrpc_code() {
        let all = [
            A2aError::Parse("m".into()),
            A2aError::InvalidRequest("m".into()),
            A2aError::MethodNotFound("m".into()),
            A2aError::InvalidParams("m".into()),
            A2aError::Internal("m".into()),
            A2aError::TaskNotFound("m".into()),
            A2aError::NotCancelable("m".into()),
            A2aError::PushNotSupported,
            A2aError::Unsupported("m".into()),
            A2aError::ExtendedCardNotConfigured,
            A2aError::Version("m".into()),
            A2aError::ContentType("m".into()),
        ];
        for e in all {
            let back = A2aError::from_code(e.code(), e.message());
            assert_eq!((back.code(), back.message()), (e.code(), e.message()));
        }
        assert!(matches!(
            A2aError::from_code(-1, "x".into()),
            A2aError::Internal(_)
        ));
    }

    use super::*;

    #[test]
    fn errors_carry_codes_and_error_info() {
        let e = A2aError::TaskNotFound("no task".into());
        let v = e.rpc(Dialect::V10);
        assert_eq!(v["code"], -32001);
        assert_eq!(v["data"][0]["reason"], "TASK_NOT_FOUND");
        assert!(e.rpc(Dialect::V03).get("data").is_none());
        assert_eq!(A2aError::Parse("x".into()).code(), -32700);
        assert_eq!(e.http_status(), StatusCode::NOT_FOUND);
    }
}
