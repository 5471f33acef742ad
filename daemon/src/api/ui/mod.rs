//! The web dashboard (`ui.listen`): a login with the token from
//! `ui.token_file`, then sessions, a session's page and a task's page, kept
//! current over server-sent events (`live.rs`), with stop, restart and
//! cancel. Plain HTML shells and one small script (`assets/`), compiled in:
//! nothing is fetched from elsewhere.
//!
//! Safety: the login sets an `HttpOnly; SameSite=Strict` cookie naming a
//! random login id kept in memory (12 h); every action is a `POST` that
//! also needs the login's CSRF token in `X-CSRF-Token` (a header a form on
//! another site cannot send) and, when the browser sends `Origin`, our own
//! origin. Pages carry a strict Content-Security-Policy (scripts from
//! `/assets/` only) and the script builds the DOM with `textContent`.

mod live;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::HostFacts;
use crate::supervisor::Supervisor;

const COOKIE: &str = "roost_ui";
const LOGIN_TTL: Duration = Duration::from_secs(12 * 3600);
/// Logins kept at once; the oldest goes first.
const MAX_LOGINS: usize = 64;

/// One browser's login.
struct Login {
    csrf: String,
    expires: Instant,
    /// The token it logged in with: when `ui.token_file` is replaced
    /// (SIGHUP), logins made with the old token end.
    token: Arc<str>,
}

/// What the dashboard serves from.
#[derive(Clone)]
pub struct UiState {
    pub supervisor: Supervisor,
    pub host: Arc<HostFacts>,
    /// Replaced on SIGHUP.
    pub token: Arc<super::TokenCell>,
    pub shutdown: CancellationToken,
    logins: Arc<Mutex<HashMap<String, Login>>>,
    /// `ui.secure_cookie`.
    secure_cookie: bool,
}

impl UiState {
    pub fn new(
        supervisor: Supervisor,
        host: Arc<HostFacts>,
        token: Arc<super::TokenCell>,
        shutdown: CancellationToken,
    ) -> Self {
        let secure_cookie = host.config.ui.secure_cookie;
        Self {
            supervisor,
            host,
            token,
            shutdown,
            logins: Arc::default(),
            secure_cookie,
        }
    }

    /// The CSRF token of the request's login, if it has a live one.
    fn login_of(&self, headers: &HeaderMap) -> Option<String> {
        let id = cookie(headers)?;
        let mut logins = self.logins.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let token = self.token.get();
        logins.retain(|_, l| l.expires > now && l.token == token);
        logins.get(&id).map(|l| l.csrf.clone())
    }
}

/// Whether a proxy in front says the client came over HTTPS
/// (`X-Forwarded-Proto: https`, or `Forwarded: proto=https`).
fn over_https(headers: &HeaderMap) -> bool {
    let value = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    value("x-forwarded-proto").split(',').next().map(str::trim) == Some("https")
        || value("forwarded").contains("proto=https")
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            c.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_string)
        })
}

fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // Never on Linux (getrandom); a login that cannot be made is refused.
        return String::new();
    }
    hex::encode(bytes)
}

/// Serves the dashboard until `stop`.
pub async fn serve_ui(
    listener: tokio::net::TcpListener,
    state: UiState,
    limits: super::listen::Limits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    super::listen::serve(
        listener,
        app(state),
        "dashboard",
        limits,
        Vec::new(),
        None,
        stop,
    )
    .await
}

/// The dashboard's router (tests drive it without a socket).
pub fn app(state: UiState) -> Router {
    let private = Router::new()
        .route("/", get(sessions_page))
        .route("/s/{id}", get(session_page))
        .route("/t/{id}", get(task_page))
        .route("/live/sessions", get(live::sessions))
        .route("/live/s/{id}", get(live::session))
        .route("/live/t/{id}", get(live::task))
        .route("/act/s/{id}/stop", post(stop))
        .route("/act/s/{id}/restart", post(restart))
        .route("/act/t/{id}/cancel", post(cancel))
        .route("/logout", post(logout))
        .layer(middleware::from_fn_with_state(state.clone(), guard));
    Router::new()
        .route("/login", get(|| async { login_page() }).post(login))
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", APP_JS) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css", APP_CSS) }),
        )
        .merge(private)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const PAGE: &str = include_str!("assets/page.html");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A page: the shell the script fills in (`page` says which), with the
/// login's CSRF token for its actions.
fn shell(page: &str, id: &str, title: &str, csrf: &str) -> Response {
    let html = PAGE
        .replace("{{TITLE}}", &escape(title))
        .replace("{{PAGE}}", page)
        .replace("{{ID}}", &escape(id))
        .replace("{{CSRF}}", &escape(csrf));
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

fn login_page() -> Response {
    shell("login", "", "Log in", "")
}

async fn sessions_page(State(state): State<UiState>, headers: HeaderMap) -> Response {
    let csrf = state.login_of(&headers).unwrap_or_default();
    shell("sessions", "", "Sessions", &csrf)
}

async fn session_page(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let csrf = state.login_of(&headers).unwrap_or_default();
    shell("session", &id, "Session", &csrf)
}

async fn task_page(
    State(state): State<UiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let csrf = state.login_of(&headers).unwrap_or_default();
    shell("task", &id, "Task", &csrf)
}

/// Without a login, pages go to the login page and everything else is
/// 401; an action (`POST`) also needs the login's CSRF token and our origin.
async fn guard(State(state): State<UiState>, request: Request, next: Next) -> Response {
    let Some(csrf) = state.login_of(request.headers()) else {
        let path = request.uri().path();
        if request.method() == axum::http::Method::GET && !path.starts_with("/live/") {
            return Redirect::to("/login").into_response();
        }
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "log in first (/login)"})),
        )
            .into_response();
    };
    if request.method() == axum::http::Method::POST {
        let given = request
            .headers()
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !super::constant_time_eq(given.as_bytes(), csrf.as_bytes()) || !same_origin(&request) {
            return (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"error": "the request did not come from this dashboard"})),
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// `Origin`, when sent, names the host the request went to.
fn same_origin(request: &Request) -> bool {
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return true;
    };
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    origin.to_str().ok() == Some(&format!("http://{host}"))
        || origin.to_str().ok() == Some(&format!("https://{host}"))
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `POST /login` with `{"token": "..."}` (JSON: a cross-site form cannot
/// send it).
async fn login(State(state): State<UiState>, headers: HeaderMap, body: Bytes) -> Response {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let given: Option<String> = json_body
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|v| v["token"].as_str().map(str::to_string));
    let token = state.token.get();
    let ok = given.is_some_and(|g| super::constant_time_eq(g.as_bytes(), token.as_bytes()));
    if !ok {
        // A guess costs a moment.
        tokio::time::sleep(Duration::from_millis(300)).await;
        tracing::warn!("dashboard login refused");
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "wrong token (the one in ui.token_file)"})),
        )
            .into_response();
    }
    let id = random_hex();
    if id.is_empty() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    {
        let mut logins = state.logins.lock().unwrap_or_else(|e| e.into_inner());
        if logins.len() >= MAX_LOGINS
            && let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, l)| l.expires)
                .map(|(k, _)| k.clone())
        {
            logins.remove(&oldest);
        }
        logins.insert(
            id.clone(),
            Login {
                csrf: random_hex(),
                expires: Instant::now() + LOGIN_TTL,
                token,
            },
        );
    }
    tracing::info!("dashboard login");
    // Secure when the dashboard is reached over HTTPS: roostd serves plain
    // HTTP, so a TLS proxy in front says so (or `ui.secure_cookie`). A
    // client that claims HTTPS falsely only makes its own cookie stricter.
    let secure = if state.secure_cookie || over_https(&headers) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        LOGIN_TTL.as_secs()
    );
    (StatusCode::NO_CONTENT, [(header::SET_COOKIE, cookie)]).into_response()
}

async fn logout(State(state): State<UiState>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers) {
        state
            .logins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
    (
        StatusCode::NO_CONTENT,
        [(
            header::SET_COOKIE,
            format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
        )],
    )
        .into_response()
}

fn outcome<T, E: std::fmt::Display>(result: Result<T, E>) -> Response {
    match result {
        Ok(_) => axum::Json(json!({"ok": true})).into_response(),
        Err(error) => (
            StatusCode::CONFLICT,
            axum::Json(json!({"error": error.to_string()})),
        )
            .into_response(),
    }
}

async fn stop(State(state): State<UiState>, Path(id): Path<String>) -> Response {
    tracing::info!(session_id = %id, "stop from the dashboard");
    outcome(state.supervisor.stop(&id).await)
}

async fn restart(State(state): State<UiState>, Path(id): Path<String>) -> Response {
    tracing::info!(session_id = %id, "restart from the dashboard");
    outcome(state.supervisor.restart(&id).await)
}

async fn cancel(State(state): State<UiState>, Path(id): Path<String>) -> Response {
    tracing::info!(task_id = %id, "cancel from the dashboard");
    let id = crate::ids::TaskId::from(id);
    let tasks = &state.host.tasks;
    match tasks.task(&id).await {
        Ok(Some(task)) if task.state.is_terminal() => outcome::<(), _>(Err(format!(
            "task {id} has ended ({})",
            task.state.as_str()
        ))),
        Ok(Some(_)) => outcome(tasks.cancel(&id).await),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": format!("no task {id}")})),
        )
            .into_response(),
        Err(error) => outcome::<(), _>(Err(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_cookie_is_found_among_others_and_html_is_escaped() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; roost_ui=abc123; other=1"),
        );
        assert_eq!(cookie(&headers).as_deref(), Some("abc123"));
        headers.insert(header::COOKIE, HeaderValue::from_static("xroost_ui=nope"));
        assert_eq!(cookie(&headers), None);
        assert_eq!(
            escape("\"><script>alert('x')</script>"),
            "&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(random_hex().len(), 64);
        assert_ne!(random_hex(), random_hex());
    }
}
