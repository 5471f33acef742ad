//! What every gateway request must be before anything runs: from no web
//! page but a listed origin (CORS preflights answered for those), naming a
//! route that decodes to a session name or id (once: the value checked is
//! the value served), with a JSON body if it has one, and with a token that
//! opens the route — which also says who the caller is.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routing::Route;
use super::{Gateway, access, grpc, problem, route_of, signing};

/// What the checks found, handed to the handler.
#[derive(Clone)]
pub(super) struct Checked {
    /// The route the request names, decoded and checked once
    /// ([`access::route_name`]): the value its token was checked against is
    /// the value the handler serves.
    pub(super) named: String,
    /// Who the request's token says sent it (see [`super::At`]); `""` for
    /// the public card.
    pub(super) caller: String,
    /// The route as looked up, so the handler does not look again (a route
    /// whose session ended is a database read).
    pub(super) found: Option<Route>,
}

/// Every request passes here first, in this order: a web page's `Origin`
/// (refused unless `a2a.cors.allow_origins` lists it; preflights answered
/// for those that are), the route the path names (decoded once), then for
/// all but the public card and JWKS a JSON body type on POSTs and the
/// route's token, from one snapshot of the tokens.
pub(super) async fn auth(State(gw): State<Gateway>, mut request: Request, next: Next) -> Response {
    let origin = match request.headers().get(header::ORIGIN) {
        None => None,
        Some(o)
            if gw
                .allow_origins
                .iter()
                .any(|a| a.as_bytes() == o.as_bytes()) =>
        {
            Some(o.clone())
        }
        Some(o) => {
            tracing::warn!(origin = ?o, path = %request.uri().path(), "A2A request from a web page whose origin a2a.cors.allow_origins does not list refused");
            return problem(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "requests from web pages are refused unless roostd's a2a.cors.allow_origins \
                 lists the page's origin",
            );
        }
    };
    if let (Some(origin), &Method::OPTIONS) = (&origin, request.method()) {
        return preflight(origin, gw.api_key_header.as_ref());
    }
    let response = checked(&gw, &mut request).await;
    let mut response = match response {
        Ok(()) => next.run(request).await,
        Err(refused) => refused,
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// The route, body type and token checks of [`auth`]; `Ok` lets the
/// request through (with [`Checked`]).
async fn checked(gw: &Gateway, request: &mut Request) -> Result<(), Response> {
    let path = request.uri().path();
    // gRPC requests name their route in the message: the service checks
    // their token (`grpc.rs`).
    if path == signing::JWKS_PATH || path.starts_with(grpc::PREFIX) {
        return Ok(());
    }
    // Anything else outside /a2a/ is the fallback's 404.
    let Some((segment, rest)) = super::route_path(path) else {
        return Ok(());
    };
    let named = access::route_name(segment).map_err(|m| {
        tracing::warn!(path = %path, "A2A request naming no valid route refused");
        problem(StatusCode::NOT_FOUND, "not_found", m)
    })?;
    if super::card_request(request.method(), rest) {
        request.extensions_mut().insert(Checked {
            named,
            caller: String::new(),
            found: None,
        });
        return Ok(());
    }
    // A body must be JSON; a POST without one (SubscribeToTask and
    // CancelTask over HTTP+JSON, as the SDKs send them) has nothing to
    // misread, and a web page's carries an Origin (refused above).
    if request.method() == Method::POST
        && has_body(request.headers())
        && !json_body_type(request.headers())
    {
        tracing::warn!(path = %path, route = %named, "A2A POST without a JSON Content-Type refused");
        // 415 either way, in the binding's error shape: JSON-RPC's
        // ContentTypeNotSupportedError (the id unread), HTTP+JSON's
        // google.rpc.Status.
        let e = super::A2aError::ContentType(
            "A2A requests are JSON: send Content-Type: application/json (or \
             application/a2a+json)"
                .into(),
        );
        if !rest.is_empty() {
            return Err(e.http());
        }
        let d = super::dialect(request.headers()).unwrap_or(super::Dialect::V10);
        e.log_refusal("jsonrpc");
        let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": e.rpc(d)});
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, axum::Json(body)).into_response());
    }
    let rules = gw.access.snapshot();
    let found = match rules.per_route() {
        true => route_of(gw, &named).await,
        false => None,
    };
    // Tokens are keyed by name; a route named by its session's id is
    // checked as the session's name.
    let route = found.as_ref().map_or(named.as_str(), |r| r.name.as_str());
    let given = gw.given_token(request.headers());
    let Some(owner) = rules.caller(route, given) else {
        tracing::warn!(path = %path, route = %route, "A2A request without a valid bearer token");
        let mut response = problem(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer <token>` with this agent's token (its card's \
             securitySchemes)",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Err(response);
    };
    request.extensions_mut().insert(Checked {
        named,
        caller: owner,
        found,
    });
    Ok(())
}

/// Whether the request says it has a body (a non-zero Content-Length, or
/// Transfer-Encoding).
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// `application/json` or `application/a2a+json`, parameters aside.
fn json_body_type(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|t| t == "application/json" || t == "application/a2a+json")
}

/// A CORS preflight from an allowed origin.
fn preflight(origin: &HeaderValue, api_key: Option<&axum::http::HeaderName>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE"),
    );
    let allowed = "authorization, content-type, a2a-version, a2a-extensions";
    let allowed = match api_key {
        Some(name) => HeaderValue::from_str(&format!("{allowed}, {name}"))
            .unwrap_or(HeaderValue::from_static(allowed)),
        None => HeaderValue::from_static(allowed),
    };
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allowed);
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}
