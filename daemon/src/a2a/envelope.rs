//! What an A2A request asks for, read from either binding's envelope — a
//! JSON-RPC 2.0 body, or HTTP+JSON's method, path, query and body — before
//! anything runs: pure functions of the bytes a peer sent.

use serde_json::{Value, json};

use super::error::A2aError;
use super::wire::Dialect;

/// A parameter by its 1.0 (camelCase) or 0.3 / gRPC (snake_case) name.
pub(super) fn field<'a>(params: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    params.get(camel).or_else(|| params.get(snake))
}

/// An integer parameter, as a number or a string of one (ProtoJSON's
/// int64).
pub(super) fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(|v| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    })
}

/// An A2A operation either binding can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Send,
    Stream,
    Get,
    List,
    Cancel,
    Subscribe,
    /// The authenticated extended agent card.
    ExtendedCard,
    /// A task's push notification configs: create (or replace), get, list,
    /// delete.
    PushCreate,
    PushGet,
    PushList,
    PushDelete,
}

impl Op {
    /// The JSON-RPC method name of the operation in a dialect.
    pub fn method(self, d: Dialect) -> &'static str {
        match (d, self) {
            (Dialect::V10, Op::Send) => "SendMessage",
            (Dialect::V10, Op::Stream) => "SendStreamingMessage",
            (Dialect::V10, Op::Get) => "GetTask",
            (Dialect::V10, Op::List) => "ListTasks",
            (Dialect::V10, Op::Cancel) => "CancelTask",
            (Dialect::V10, Op::Subscribe) => "SubscribeToTask",
            (Dialect::V03, Op::Send) => "message/send",
            (Dialect::V03, Op::Stream) => "message/stream",
            (Dialect::V03, Op::Get) => "tasks/get",
            (Dialect::V03, Op::List) => "tasks/list",
            (Dialect::V03, Op::Cancel) => "tasks/cancel",
            (Dialect::V03, Op::Subscribe) => "tasks/resubscribe",
            (Dialect::V10, Op::ExtendedCard) => "GetExtendedAgentCard",
            (Dialect::V03, Op::ExtendedCard) => "agent/getAuthenticatedExtendedCard",
            (Dialect::V10, Op::PushCreate) => "CreateTaskPushNotificationConfig",
            (Dialect::V10, Op::PushGet) => "GetTaskPushNotificationConfig",
            (Dialect::V10, Op::PushList) => "ListTaskPushNotificationConfigs",
            (Dialect::V10, Op::PushDelete) => "DeleteTaskPushNotificationConfig",
            (Dialect::V03, Op::PushCreate) => "tasks/pushNotificationConfig/set",
            (Dialect::V03, Op::PushGet) => "tasks/pushNotificationConfig/get",
            (Dialect::V03, Op::PushList) => "tasks/pushNotificationConfig/list",
            (Dialect::V03, Op::PushDelete) => "tasks/pushNotificationConfig/delete",
        }
    }

    const ALL: [Op; 11] = [
        Op::Send,
        Op::Stream,
        Op::Get,
        Op::List,
        Op::Cancel,
        Op::Subscribe,
        Op::ExtendedCard,
        Op::PushCreate,
        Op::PushGet,
        Op::PushList,
        Op::PushDelete,
    ];
}

/// A request both bindings agree on: the operation and its params (always a
/// JSON object); `id` is the JSON-RPC id (null for HTTP+JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: Value,
    pub op: Op,
    pub params: Value,
}

/// A JSON-RPC request body. A refusal carries the id to answer with (null
/// when the body has none that is valid).
pub fn jsonrpc(
    d: Dialect,
    content_type: Option<&[u8]>,
    body: &[u8],
) -> Result<Request, (Value, A2aError)> {
    let null = Value::Null;
    json_content(content_type).map_err(|e| (null.clone(), e))?;
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| (null, A2aError::Parse(format!("invalid JSON: {e}"))))?;
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let valid_id = matches!(id, Value::String(_) | Value::Number(_) | Value::Null);
    let method = request.get("method").and_then(Value::as_str);
    let (Some(method), true, Some("2.0")) = (
        method,
        valid_id,
        request.get("jsonrpc").and_then(Value::as_str),
    ) else {
        let e = A2aError::InvalidRequest(
            "a JSON-RPC 2.0 request needs \"jsonrpc\": \"2.0\", a string \"method\" and a string or number \"id\"".into(),
        );
        let id = if valid_id { id } else { Value::Null };
        return Err((id, e));
    };
    let params = request.get("params").cloned().unwrap_or(json!({}));
    if !params.is_object() {
        let e = A2aError::InvalidParams("params must be an object".into());
        return Err((id, e));
    }
    let Some(op) = Op::ALL.into_iter().find(|op| op.method(d) == method) else {
        let hint = match d {
            Dialect::V10 => {
                "SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, GetExtendedAgentCard, CreateTaskPushNotificationConfig, GetTaskPushNotificationConfig, ListTaskPushNotificationConfigs, DeleteTaskPushNotificationConfig"
            }
            Dialect::V03 => {
                "message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe, tasks/pushNotificationConfig/set|get|list|delete, agent/getAuthenticatedExtendedCard (send A2A-Version: 1.0 for the 1.0 names)"
            }
        };
        let e = A2aError::MethodNotFound(format!(
            "method '{method}' not found; this agent serves {hint}"
        ));
        return Err((id, e));
    };
    Ok(Request { id, op, params })
}

/// An HTTP+JSON request (1.0) under `/a2a/<route>/`: `path` is what follows
/// the route, without the leading slash.
pub fn rest(
    method: &str,
    path: &str,
    query: Option<&str>,
    content_type: Option<&[u8]>,
    body: &[u8],
) -> Result<Request, A2aError> {
    let body_json = || -> Result<Value, A2aError> {
        if body.is_empty() {
            return Ok(json!({}));
        }
        json_content(content_type)?;
        serde_json::from_slice(body).map_err(|e| A2aError::Parse(format!("invalid JSON: {e}")))
    };
    let query: Value = Value::Object(
        query
            .map(|q| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), Value::String(percent_decode(v))))
                    .collect()
            })
            .unwrap_or_default(),
    );
    let unknown = || A2aError::MethodNotFound(format!("no A2A operation is {method} /{path}"));
    let (op, params) = match (method, path) {
        ("POST", "message:send") => (Op::Send, body_json()?),
        ("POST", "message:stream") => (Op::Stream, body_json()?),
        ("GET", "tasks") => (Op::List, query),
        (m, p) if p.starts_with("tasks/") && p.contains("/pushNotificationConfigs") => {
            let rest = &p["tasks/".len()..];
            let (task, tail) = rest
                .split_once("/pushNotificationConfigs")
                .unwrap_or((rest, ""));
            if task.is_empty() || task.contains('/') {
                return Err(unknown());
            }
            match (m, tail.strip_prefix('/')) {
                ("POST", None) if tail.is_empty() => {
                    let mut p = body_json()?;
                    if !p.is_object() {
                        return Err(A2aError::InvalidParams(
                            "the body must be a JSON object".into(),
                        ));
                    }
                    p["taskId"] = json!(task);
                    (Op::PushCreate, p)
                }
                ("GET", None) if tail.is_empty() => {
                    let mut q = query;
                    q["taskId"] = json!(task);
                    (Op::PushList, q)
                }
                ("GET", Some(id)) if !id.is_empty() && !id.contains('/') => {
                    (Op::PushGet, json!({"taskId": task, "id": id}))
                }
                ("DELETE", Some(id)) if !id.is_empty() && !id.contains('/') => {
                    (Op::PushDelete, json!({"taskId": task, "id": id}))
                }
                _ => return Err(unknown()),
            }
        }
        (m, p) if p.starts_with("tasks/") => {
            let rest = &p["tasks/".len()..];
            match (m, rest.split_once(':')) {
                ("GET", None) if !rest.contains('/') => {
                    let mut q = query;
                    q["id"] = json!(rest);
                    (Op::Get, q)
                }
                ("POST", Some((id, "cancel"))) => (Op::Cancel, json!({"id": id})),
                ("GET" | "POST", Some((id, "subscribe"))) => (Op::Subscribe, json!({"id": id})),
                _ => return Err(unknown()),
            }
        }
        ("GET", "extendedAgentCard") => (Op::ExtendedCard, json!({})),
        _ => return Err(unknown()),
    };
    if !params.is_object() {
        return Err(A2aError::InvalidParams(
            "the body must be a JSON object".into(),
        ));
    }
    Ok(Request {
        id: Value::Null,
        op,
        params,
    })
}

/// Requests with a body must be JSON (`application/json`, or A2A's
/// `application/a2a+json`). Over HTTP the gateway's checks (`guard.rs`)
/// refuse a body without a JSON Content-Type before this runs; here (the
/// pure reading, fuzzed) a missing one is taken as JSON.
fn json_content(content_type: Option<&[u8]>) -> Result<(), A2aError> {
    let Some(ct) = content_type else {
        return Ok(());
    };
    let ct = String::from_utf8_lossy(ct).to_ascii_lowercase();
    let essence = ct.split(';').next().unwrap_or_default().trim();
    if essence == "application/json" || essence.ends_with("+json") {
        return Ok(());
    }
    Err(A2aError::ContentType(format!(
        "Content-Type '{essence}' is not supported; send application/json"
    )))
}

/// A query value, decoded (`%XX`, `+` for a space).
pub use crate::http_client::percent_decode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_are_decoded_and_a_bare_percent_kept() {
        assert_eq!(percent_decode("a%20b+c%3D"), "a b c=");
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn a_request_names_its_operation_in_either_dialect() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"id":"t"}}"#;
        let r = jsonrpc(Dialect::V03, None, body).expect("read");
        assert_eq!(
            (r.op, r.id, r.params["id"].clone()),
            (Op::Get, json!(7), json!("t"))
        );
        let (id, e) = jsonrpc(Dialect::V10, None, body).expect_err("refused");
        assert_eq!((id, e.code()), (json!(7), -32601));
        let (id, e) = jsonrpc(
            Dialect::V10,
            None,
            br#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#,
        )
        .expect_err("refused");
        assert_eq!((id, e.code()), (Value::Null, -32600));
        let e = jsonrpc(Dialect::V10, Some(b"text/plain"), body)
            .expect_err("refused")
            .1;
        assert_eq!(e.code(), -32005);
    }

    #[test]
    fn a_rest_path_maps_to_its_operation() {
        let r = rest("GET", "tasks/abc", Some("historyLength=2&x=%41"), None, b"").expect("read");
        assert_eq!(r.op, Op::Get);
        assert_eq!(
            r.params,
            json!({"id": "abc", "historyLength": "2", "x": "A"})
        );
        assert_eq!(
            rest("POST", "tasks/abc:cancel", None, None, b"")
                .expect("read")
                .op,
            Op::Cancel
        );
        assert_eq!(
            rest("DELETE", "tasks/abc", None, None, b"")
                .expect_err("refused")
                .code(),
            -32601
        );
        assert_eq!(
            rest("POST", "message:send", None, None, b"[1]")
                .expect_err("refused")
                .code(),
            -32602
        );
    }
}
