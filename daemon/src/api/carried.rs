//! A session's control calls in a cluster: asked of a node that does not
//! run the session, carried to the node that does ([`elsewhere`], through
//! `cluster::control`); carried here by another node, answered by this
//! node's own API ([`controls`]) and never carried on again. Only calls on
//! one session (`/v1/sessions/{id}…`) are carried either way.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiState, MAX_BODY_BYTES};
use crate::cluster::control::{Answered, Controls, Forwarded};

/// Marks a call another node carried here.
#[derive(Clone, Copy)]
struct Carried;

/// The longest answer this node sends back for a carried call (NATS
/// carries less by default: that refusal names the node).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The session a path names: `/v1/sessions/{id}[/…]` (no `.` or `..`
/// segment).
fn session_of(path: &str) -> Option<&str> {
    if path.split('/').any(|s| s == "." || s == "..") {
        return None;
    }
    path.strip_prefix("/v1/sessions/")
        .and_then(|rest| rest.split('/').next())
        .filter(|id| !id.is_empty())
}

/// In a cluster, a call on a session this node does not have is answered
/// by the node that has it; the answer says which (`Roost-Node`).
pub(super) async fn elsewhere(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(cluster) = state.host.cluster.clone() else {
        return next.run(request).await;
    };
    if request.extensions().get::<Carried>().is_some() {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(e) if super::listen::body_timed_out(&e) => {
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, "body_timed_out", e.to_string())
                .into_response();
        }
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is over {MAX_BODY_BYTES} bytes"),
            )
            .into_response();
        }
    };
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let caller = match parts
        .extensions
        .get::<axum::extract::ConnectInfo<super::unix::PeerCred>>()
    {
        Some(peer) => format!(
            "uid {} (pid {}) on node {}'s control socket",
            peer.0.uid.map_or("?".into(), |u| u.to_string()),
            peer.0.pid.map_or("?".into(), |p| p.to_string()),
            cluster.node()
        ),
        None => format!("a holder of node {}'s control token", cluster.node()),
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let here = next
        .run(Request::from_parts(parts, Body::from(body.clone())))
        .await;
    if here.status() != StatusCode::NOT_FOUND {
        return here;
    }
    let Some(id) = session_of(uri.path()) else {
        return here;
    };
    let path = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string());
    let follows = uri.path().ends_with("/logs")
        && uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "follow=true"));
    // A followed log never ends, and a carried answer is one message: the
    // session's record is fetched instead, to say where to follow it.
    let call = if follows {
        Forwarded::new("GET", &format!("/v1/sessions/{id}"), None, &[])
    } else {
        Forwarded::new(method.as_str(), &path, content_type, &body)
    }
    .by(caller);
    let Some((node, answer)) = cluster.forward(id, &call).await else {
        return here;
    };
    if follows && answer.status == 200 {
        return ApiError::new(
            StatusCode::CONFLICT,
            "on_another_node",
            format!(
                "session '{id}' runs on node {node}: follow its logs on that node (roostctl \
                 --socket or --url of {node}), or read them here without --follow"
            ),
        )
        .into_response();
    }
    let mut response = (
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY),
        answer.body(),
    )
        .into_response();
    if let Some(kind) = answer
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        response.headers_mut().insert(header::CONTENT_TYPE, kind);
    }
    if let Ok(node) = HeaderValue::from_str(&node) {
        response.headers_mut().insert("roost-node", node);
    }
    response
}

/// What answers the calls other nodes carry here: this node's control API
/// (`router`), for calls on one session only.
pub fn controls(router: Router) -> Controls {
    Arc::new(move |call: Forwarded| {
        let router = router.clone();
        Box::pin(async move { answer(router, call).await })
    })
}

async fn answer(router: Router, call: Forwarded) -> Answered {
    let refused = |status: StatusCode, code: &str, message: String| {
        let body = serde_json::json!({"error": {"code": code, "message": message}});
        Answered::new(
            status.as_u16(),
            Some("application/json".into()),
            body.to_string().as_bytes(),
        )
    };
    let path = call.path.split('?').next().unwrap_or_default();
    if call.caller.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a carried call says who made it (its caller); this one does not".into(),
        );
    }
    if session_of(path).is_none() {
        return refused(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "only calls on one session (/v1/sessions/ID…) are carried between nodes, not {path}"
            ),
        );
    }
    let mut request = match Request::builder()
        .method(call.method.as_str())
        .uri(call.path.as_str())
        .body(Body::from(call.body()))
    {
        Ok(request) => request,
        Err(e) => {
            return refused(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("invalid carried call: {e}"),
            );
        }
    };
    if let Some(kind) = call
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        request.headers_mut().insert(header::CONTENT_TYPE, kind);
    }
    request.extensions_mut().insert(Carried);
    let changes = call.method != "GET";
    if changes {
        tracing::info!(caller = %call.caller, method = %call.method, path, "a call carried from another node");
    } else {
        tracing::debug!(caller = %call.caller, method = %call.method, path, "a call carried from another node");
    }
    let response = match tower::ServiceExt::oneshot(router, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = tokio::time::timeout(
        Duration::from_secs(305),
        axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES),
    )
    .await;
    match body {
        Ok(Ok(body)) => Answered::new(status, content_type, &body),
        _ => refused(
            StatusCode::BAD_GATEWAY,
            "answer_too_large",
            format!(
                "the answer did not end within 305 s or is over {MAX_ANSWER_BYTES} bytes; ask \
                 the node that runs the session directly"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::session_of;

    #[test]
    fn only_paths_on_one_session_name_one() {
        assert_eq!(session_of("/v1/sessions/ses_1"), Some("ses_1"));
        assert_eq!(session_of("/v1/sessions/echo/wait"), Some("echo"));
        assert_eq!(session_of("/v1/sessions"), None);
        assert_eq!(session_of("/v1/sessions/"), None);
        assert_eq!(session_of("/v1/cluster/drain"), None);
        assert_eq!(session_of("/v1/registry"), None);
        assert_eq!(session_of("/v1/sessions/x/../../prune"), None);
        assert_eq!(session_of("/v1/sessions/../prune"), None);
    }
}
