//! Requests for routes another node runs: handed there whole (before any
//! check here: that node's gateway checks them as its own), and the answer
//! passed back as it comes; and the other side, requests other nodes hand
//! to this one, served by this gateway as if they had come to it. Only a
//! route's agent card is answered here, from the cluster's route table.
//! The gRPC binding, whose route is inside the message, hands its calls
//! over as the JSON-RPC requests they are ([`jsonrpc`]).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::{StreamExt, TryStreamExt};

use serde_json::{Value, json};

use super::envelope::Op;
use super::error::A2aError;
use super::routing::{Forward, ForwardHead, Forwarded, Handoff, HandoffError, Serve};
use super::wire::Dialect;
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

/// The headers that go to (or come back from) another node: all but the
/// connection's, those that are text.
fn carried(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !hop_by_hop(name))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect()
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
    let Some((segment, rest)) = super::route_path(request.uri().path()) else {
        return next.run(request).await;
    };
    // A name that is not one is refused by the checks that follow.
    let Ok(named) = access::route_name(segment) else {
        return next.run(request).await;
    };
    let handed = request.extensions().get::<HandedOver>().is_some();
    if super::card_request(request.method(), rest) && !handed {
        // Served here from the route table, naming this gateway.
        return next.run(request).await;
    }
    let Some(node) = gw.routing.route(&named).await.and_then(|r| r.node) else {
        return next.run(request).await;
    };
    if node == handoff.node() {
        let mut refused = problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "route_starting",
            format!(
                "route '{named}' is starting on this node (taken over from a node that left \
                 the cluster, or just started); send it again in a moment"
            ),
        );
        refused.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
        return refused;
    }
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

async fn hand_over(handoff: &dyn Handoff, node: &str, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(e) if crate::api::listen::body_timed_out(&e) => {
            return problem(StatusCode::REQUEST_TIMEOUT, "body_timed_out", e.to_string());
        }
        Err(_) => {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("request bodies are at most {MAX_BODY_BYTES} bytes"),
            );
        }
    };
    let forward = Forward {
        method: parts.method.to_string(),
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), ToString::to_string),
        headers: carried(&parts.headers),
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
        headers: carried(&parts.headers),
        streamed,
    };
    let body = body
        .into_data_stream()
        .map_err(|e| HandoffError::Transport(e.to_string()))
        .boxed();
    Forwarded { head, body }
}

/// What a call handed over as JSON-RPC answered: a value, or a stream of
/// them (each an event's `result`).
pub(super) enum Handed {
    Value(Value),
    Events(futures::stream::BoxStream<'static, Result<Value, Refused>>),
}

/// Why a handed-over call has no answer.
#[derive(Debug)]
pub(super) enum Refused {
    /// The route's node answered with an A2A error.
    A2a(A2aError),
    /// Its node refused the request before any operation (its HTTP status).
    Http(u16, String),
    /// It could not be carried there.
    Node(HandoffError),
}

/// Headers a call carries on to the route's node.
const CARRIED: [&str; 4] = [
    "authorization",
    "traceparent",
    "tracestate",
    "a2a-extensions",
];

/// Hands operation `op` with `params` for route `route` to node `node` as
/// the JSON-RPC 1.0 request it is (what the gRPC binding's calls read and
/// answer is what JSON-RPC's do).
pub(super) async fn jsonrpc(
    handoff: &dyn Handoff,
    node: &str,
    route: &str,
    (op, params): (Op, &Value),
    headers: &HeaderMap,
) -> Result<Handed, Refused> {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": op.method(Dialect::V10), "params": params});
    let mut sent = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("a2a-version".to_string(), "1.0".to_string()),
    ];
    for name in CARRIED {
        if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
            sent.push((name.to_string(), value.to_string()));
        }
    }
    let forward = Forward {
        method: "POST".into(),
        uri: format!("/a2a/{route}"),
        headers: sent,
        body: serde_json::to_vec(&body).unwrap_or_default().into(),
    };
    let answer = handoff
        .forward(node, forward)
        .await
        .map_err(Refused::Node)?;
    if answer.head.streamed {
        return Ok(Handed::Events(sse_results(answer.body).boxed()));
    }
    let status = answer.head.status;
    let body: Vec<bytes::Bytes> = answer.body.try_collect().await.map_err(Refused::Node)?;
    let value: Value = serde_json::from_slice(&body.concat()).map_err(|e| {
        Refused::Http(
            status,
            format!("the route's node answered {status} without JSON: {e}"),
        )
    })?;
    result_of(value, status).map(Handed::Value)
}

/// A JSON-RPC answer's `result`, or its error.
fn result_of(mut value: Value, status: u16) -> Result<Value, Refused> {
    if let Some(error) = value.get("error") {
        let message = error["message"].as_str().unwrap_or_default().to_string();
        return Err(match error["code"].as_i64() {
            Some(code) => Refused::A2a(A2aError::from_code(code, message)),
            // The gateway's own refusals (a token, a route): `{"code": "…"}`.
            None => Refused::Http(status, message),
        });
    }
    match value.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(Refused::Http(
            status,
            format!("the route's node answered {status} without a result"),
        )),
    }
}

/// The `result` of each event of a server-sent-event body.
fn sse_results(
    body: futures::stream::BoxStream<'static, Result<bytes::Bytes, HandoffError>>,
) -> impl futures::Stream<Item = Result<Value, Refused>> + Send {
    let state = (
        body,
        Vec::<u8>::new(),
        std::collections::VecDeque::new(),
        false,
    );
    futures::stream::unfold(
        state,
        |(mut body, mut buffer, mut ready, mut over)| async move {
            loop {
                if let Some(event) = ready.pop_front() {
                    return Some((event, (body, buffer, ready, over)));
                }
                if over {
                    return None;
                }
                match body.next().await {
                    Some(Ok(bytes)) => buffer.extend_from_slice(&bytes),
                    Some(Err(error)) => {
                        ready.push_back(Err(Refused::Node(error)));
                        over = true;
                        continue;
                    }
                    None => over = true,
                }
                // Whole events only (each ends with a blank line).
                while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = buffer.drain(..end + 2).collect();
                    let text = String::from_utf8_lossy(&event);
                    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
                        ready.push_back(match serde_json::from_str(data) {
                            Ok(value) => result_of(value, 200),
                            Err(e) => Err(Refused::Http(
                                200,
                                format!("an event that is not JSON: {e}"),
                            )),
                        });
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_read_whole_across_any_split_and_errors_keep_their_kind() {
        let sse = concat!(
            ": keep-alive\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"n\":1}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"n\":2}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,\"message\":\"no task 'x'\"}}\n\n",
        );
        // Every way of cutting the body in two gives the same events.
        for cut in 0..sse.len() {
            let parts: Vec<Result<bytes::Bytes, HandoffError>> = vec![
                Ok(bytes::Bytes::copy_from_slice(&sse.as_bytes()[..cut])),
                Ok(bytes::Bytes::copy_from_slice(&sse.as_bytes()[cut..])),
            ];
            let events: Vec<_> = sse_results(futures::stream::iter(parts).boxed())
                .collect()
                .await;
            assert_eq!(events.len(), 3, "cut at {cut}");
            assert_eq!(events[0].as_ref().ok(), Some(&json!({"n": 1})));
            assert_eq!(events[1].as_ref().ok(), Some(&json!({"n": 2})));
            assert!(
                matches!(&events[2], Err(Refused::A2a(A2aError::TaskNotFound(m))) if m == "no task 'x'"),
                "{:?}",
                events[2]
            );
        }
        // A stream that breaks off says so, after what came whole.
        let parts: Vec<Result<bytes::Bytes, HandoffError>> = vec![
            Ok(bytes::Bytes::from_static(
                b"data: {\"result\":{\"n\":1}}\n\ndata: {\"res",
            )),
            Err(HandoffError::Transport("gone".into())),
        ];
        let events: Vec<_> = sse_results(futures::stream::iter(parts).boxed())
            .collect()
            .await;
        assert_eq!(events.len(), 2);
        assert!(matches!(&events[1], Err(Refused::Node(_))));
    }

    #[test]
    fn a_gateway_refusal_is_its_http_status_and_an_answer_without_result_is_refused() {
        let refused = json!({"error": {"code": "unauthorized", "message": "send a token"}});
        assert!(
            matches!(result_of(refused, 401), Err(Refused::Http(401, m)) if m == "send a token")
        );
        assert!(matches!(
            result_of(json!({"id": 1}), 200),
            Err(Refused::Http(200, _))
        ));
        assert_eq!(result_of(json!({"result": 5}), 200).ok(), Some(json!(5)));
    }
}
