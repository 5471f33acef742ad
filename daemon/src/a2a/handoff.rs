//! Requests for routes another node runs: handed there whole (before any
//! check here: that node's gateway checks them as its own), and the answer
//! passed back as it comes; and the other side, requests other nodes hand
//! to this one, served by this gateway as if they had come to it. Only a
//! route's agent card is answered here, from the cluster's route table.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::{StreamExt, TryStreamExt};

use super::routing::{Forward, ForwardHead, Forwarded, HandoffError, Serve};
use super::{Gateway, MAX_BODY_BYTES, access, problem};

/// Marks a request another node handed to this one: it is served here or
/// refused, never handed on again.
#[derive(Clone, Copy)]
struct HandedOver;

/// Headers that belong to one connection, not to the request.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-connection"
            | "content-length"
    )
}

/// Runs before every other check: a request for a route another node runs
/// goes there.
pub(super) async fn route_elsewhere(
    State(gw): State<Gateway>,
    request: Request,
    next: Next,
) -> Response {
    let Some(handoff) = gw.handoff.clone() else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    let Some(under) = path.strip_prefix("/a2a/") else {
        return next.run(request).await;
    };
    let (segment, rest) = under.split_once('/').unwrap_or((under, ""));
    // A name that is not one is refused by the checks that follow.
    let Ok(named) = access::route_name(segment) else {
        return next.run(request).await;
    };
    let handed = request.extensions().get::<HandedOver>().is_some();
    let card = matches!(
        rest,
        ".well-known/agent-card.json" | ".well-known/agent.json"
    ) && request.method() == Method::GET;
    if card && !handed {
        // Served here from the route table, naming this gateway.
        return next.run(request).await;
    }
    let Some(node) = gw.routing.route(&named).await.and_then(|r| r.node) else {
        return next.run(request).await;
    };
    if handed {
        tracing::warn!(route = %named, %node, "a request handed here for a route that runs elsewhere");
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "route_moved",
            format!("route '{named}' no longer runs on the node it was handed to; send it again"),
        );
    }
    hand_over(&*handoff, &node, request).await
}

async fn hand_over(
    handoff: &dyn super::routing::Handoff,
    node: &str,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are at most {MAX_BODY_BYTES} bytes"),
        );
    };
    let headers = parts
        .headers
        .iter()
        .filter(|(name, _)| !hop_by_hop(name))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let forward = Forward {
        method: parts.method.to_string(),
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), ToString::to_string),
        headers,
        body,
    };
    match handoff.forward(node, forward).await {
        Ok(answer) => response(answer),
        Err(error) => {
            tracing::warn!(%node, %error, "cannot hand a request to the node that runs its route");
            let status = match &error {
                HandoffError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                HandoffError::Unreachable { .. } => StatusCode::BAD_GATEWAY,
                HandoffError::Transport(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            problem(status, "node_unreachable", error.to_string())
        }
    }
}

fn response(answer: Forwarded) -> Response {
    let status = StatusCode::from_u16(answer.head.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = Response::new(Body::from_stream(
        answer
            .body
            .map_err(|e| std::io::Error::other(e.to_string())),
    ));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in answer.head.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value))
            && !hop_by_hop(&name)
        {
            headers.append(name, value);
        }
    }
    response
}

/// What serves requests other nodes hand to this one: `gateway`, as if they
/// had come to it.
pub fn server(gateway: Router) -> Serve {
    Arc::new(move |forward: Forward| {
        let gateway = gateway.clone();
        Box::pin(async move {
            let mut request = axum::http::Request::builder()
                .method(forward.method.as_str())
                .uri(forward.uri.as_str());
            for (name, value) in &forward.headers {
                request = request.header(name.as_str(), value.as_str());
            }
            let answer = match request.body(Body::from(forward.body)) {
                Ok(mut request) => {
                    request.extensions_mut().insert(HandedOver);
                    match tower::ServiceExt::oneshot(gateway, request).await {
                        Ok(answer) => answer,
                        Err(never) => match never {},
                    }
                }
                Err(error) => problem(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("a request handed over from another node does not parse: {error}"),
                ),
            };
            forwarded(answer)
        })
    })
}

fn forwarded(answer: Response) -> Forwarded {
    let (parts, body) = answer.into_parts();
    let streamed = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let head = ForwardHead {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| !hop_by_hop(name))
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect(),
        streamed,
    };
    let body = body
        .into_data_stream()
        .map_err(|e| HandoffError::Transport(e.to_string()))
        .boxed();
    Forwarded { head, body }
}
