//! Session endpoints: start (with its staging steps as they happen when
//! asked), list, get, stop, restart, remove, prune, wait, events, health.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use roost_wire::api::{
    Health, PruneReport, PruneRequest, Session, SessionList, StartProgress, StartRequest,
};
use serde::Deserialize;

use super::{ApiError, ApiState, MAX_BODY_BYTES};

pub(super) async fn health(State(state): State<ApiState>) -> Json<Health> {
    let host = &state.host;
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_secs: state.started.elapsed().as_secs(),
        live_sessions: state.supervisor.live_sessions(),
        a2a_addr: state.a2a_addr.clone(),
        control_addr: state.control_addr.clone(),
        state_dir: host.config.state_dir.display().to_string(),
        tool_jail: Some(crate::sandbox::assess(true, &host.jail, &host.support).0),
        jail_helper: host.jail.helper().map(|p| p.display().to_string()),
        a2a_token: host.config.a2a.token_file.is_some(),
        resuming: state.supervisor.resuming(),
        cluster: match &host.cluster {
            Some(cluster) => Some(super::cluster::status(cluster).await),
            None => None,
        },
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartQuery {
    /// Stream each staging step, then the outcome, as JSON lines
    /// (`roost_wire::api::StartProgress`).
    #[serde(default)]
    progress: bool,
}

/// Where a start goes.
enum Placed {
    Here(StartRequest),
    /// Started on another node: what it answered.
    There(StartProgress),
}

/// In a cluster a start goes to the node asked for (`node`, `node_labels`),
/// by default to the live node with the most free capacity (a tie: this
/// one). A capsule uploaded to this node, or a cluster this node cannot
/// read yet, starts here.
async fn place(state: &ApiState, mut request: StartRequest) -> Result<Placed, ApiError> {
    let asked = request.node.is_some() || !request.node_labels.is_empty();
    let uploaded = std::path::Path::new(&request.path)
        .starts_with(state.host.config.state_dir.join(crate::uploads::DIR));
    let Some(cluster) = &state.host.cluster else {
        if !asked {
            return Ok(Placed::Here(request));
        }
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_clustered",
            "node and node_labels (--node, --label) place a session on a node of a cluster; \
             this roostd is not one (cluster.servers is unset; see docs/cluster.md)",
        ));
    };
    if let Some(node) = request.node.as_deref().filter(|n| *n != "auto") {
        crate::manifest::validate_name(node)
            .map_err(|why| ApiError::bad_request(format!("node: {why}")))?;
    }
    // Asked for this node: no need to read the node registry.
    let this_node = request.node.as_deref() == Some(cluster.node());
    if (!asked && uploaded) || (this_node && request.node_labels.is_empty()) {
        request.node = None;
        return Ok(Placed::Here(request));
    }
    use crate::cluster::PlaceError as P;
    let target = match cluster
        .placement(request.node.as_deref(), &request.node_labels)
        .await
    {
        Ok(target) => target,
        Err(error) if !asked => {
            tracing::warn!(%error, "the cluster cannot place this session now; it starts here");
            return Ok(Placed::Here(request));
        }
        Err(e) => {
            return Err(match e {
                P::NoNode(_) => ApiError::not_found(e.to_string()),
                P::Labels { .. } | P::NoMatch(_) | P::Draining(_) => {
                    ApiError::new(StatusCode::CONFLICT, "no_node", e.to_string())
                }
                P::Unanswered { .. } | P::Registry(_) => ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "cluster_unavailable",
                    e.to_string(),
                ),
            });
        }
    };
    request.node = None;
    request.node_labels.clear();
    if target == cluster.node() {
        return Ok(Placed::Here(request));
    }
    tracing::info!(node = %target, path = %request.path, "placing a session on another node");
    cluster
        .place(&target, &request)
        .await
        .map(Placed::There)
        .map_err(|e| match e {
            P::NoNode(_) => ApiError::not_found(e.to_string()),
            _ => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "cluster_unavailable",
                e.to_string(),
            ),
        })
}

/// Another node's answer to a placed start, as this API answers a start.
fn placed(answer: StartProgress, progress: bool) -> Response {
    if progress {
        let mut line = serde_json::to_vec(&answer).unwrap_or_default();
        line.push(b'\n');
        return (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
            line,
        )
            .into_response();
    }
    match answer {
        StartProgress::Session(session) => (StatusCode::CREATED, Json(*session)).into_response(),
        StartProgress::Error { status, error } => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            Json(roost_wire::api::ErrorBody { error }),
        )
            .into_response(),
        StartProgress::Step { .. } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "cluster_unavailable",
            "the node answered a step",
        )
        .into_response(),
    }
}

/// What starts sessions other nodes of a cluster place on this one: the
/// same start as `POST /v1/sessions`, answered as a start with progress
/// ends (the session, or the error).
pub fn starter(supervisor: crate::supervisor::Supervisor) -> crate::cluster::Starter {
    Arc::new(move |request| {
        let supervisor = supervisor.clone();
        Box::pin(async move {
            match supervisor.start(request).await {
                Ok(session) => StartProgress::Session(Box::new(session)),
                Err(error) => ApiError::from(error).into_progress(),
            }
        })
    })
}

pub(super) async fn start(
    State(state): State<ApiState>,
    query: Result<Query<StartQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body exceeds {MAX_BODY_BYTES} bytes"),
            )
        } else {
            ApiError::bad_request(format!("cannot read request body: {rejection}"))
        }
    })?;
    let request: StartRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid JSON body: {e}; expected {{\"path\": \"/abs/capsule\", \"name\"?, \"workdir\"?, \"restart\"?}}"
        ))
    })?;
    // In a cluster, `node` and `node_labels` place it: here, or on the
    // node picked, which starts it and answers.
    let request = match place(&state, request).await? {
        Placed::Here(request) => request,
        Placed::There(answer) => return Ok(placed(answer, query.progress)),
    };
    if !query.progress {
        let session = state.supervisor.start(request).await?;
        return Ok((StatusCode::CREATED, Json(session)).into_response());
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let supervisor = state.supervisor.clone();
    tokio::spawn(async move {
        let progress = crate::staging::Progress::to(tx.clone());
        let last = match supervisor.start_with_progress(request, progress).await {
            Ok(session) => StartProgress::Session(Box::new(session)),
            Err(error) => ApiError::from(error).into_progress(),
        };
        let _ = tx.send(last);
    });
    let lines = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(|event| {
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::io::Error>(Bytes::from(line))
    });
    Ok((
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default)]
    all: bool,
}

pub(super) async fn list(
    State(state): State<ApiState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<SessionList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let sessions = state.supervisor.list(query.all).await?;
    Ok(Json(SessionList { sessions }))
}

pub(super) async fn get_one(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.supervisor.get(&id).await?))
}

pub(super) async fn stop(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.supervisor.stop(&id).await?))
}

/// `POST /v1/sessions/{id}/restart`: stopped if live, then run again from
/// its start request under the same id; answers the new run's record.
pub(super) async fn restart(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    Ok(Json(state.supervisor.restart(&id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RemoveQuery {
    #[serde(default)]
    force: bool,
}

/// `DELETE /v1/sessions/{id}[?force=true]`: the session with its rows,
/// tasks and directories; a live one only with `force` (stopped first).
/// Answers the record as it was.
pub(super) async fn remove(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> Result<Json<Session>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(state.supervisor.remove(&id, query.force).await?))
}

/// `POST /v1/prune`: ended sessions and A2A tasks older than asked.
pub(super) async fn prune(
    State(state): State<ApiState>,
    body: Result<Json<PruneRequest>, JsonRejection>,
) -> Result<Json<PruneReport>, ApiError> {
    let Json(request) = body.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; expected {{\"older_than_secs\"?: N, \"dry_run\"?: bool}}",
            e.body_text()
        ))
    })?;
    let before = crate::supervisor::ago(Duration::from_secs(request.older_than_secs));
    let rule = crate::supervisor::PruneRule {
        sessions_ended_before: Some(before.clone()),
        tasks_ended_before: Some(before),
        dry_run: request.dry_run,
        ..Default::default()
    };
    Ok(Json(state.supervisor.prune(&rule).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    #[serde(default = "default_wait")]
    timeout_secs: u64,
}

fn default_wait() -> u64 {
    30
}

/// Long-poll: answers when the session has ended, or with its current record
/// after `timeout_secs` (at most 300).
pub(super) async fn wait(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Session>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let timeout = Duration::from_secs(query.timeout_secs.min(300));
    Ok(Json(state.supervisor.wait(&id, timeout).await?))
}

#[derive(Debug, serde::Serialize)]
pub(super) struct Event {
    state: String,
    detail: Option<String>,
    at: String,
}

/// Every state transition of a session, oldest first.
pub(super) async fn events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let session = state.supervisor.get(&id).await?;
    let events = state.supervisor.events(&session.id).await?;
    Ok(Json(
        events
            .into_iter()
            .map(|(state, detail, at)| Event { state, detail, at })
            .collect(),
    ))
}

/// `GET /v1/sessions/{id}/tasks`: an agent session's tasks with their token use.
pub(super) async fn tasks(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<roost_wire::api::TaskRecord>>, ApiError> {
    let session = state.supervisor.get(&id).await?;
    let tasks = state.supervisor.tasks(&session.id).await?;
    Ok(Json(tasks))
}

/// Bytes of a trace page unless the request asks for fewer.
const TRACE_PAGE: u64 = 4 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TraceQuery {
    #[serde(default)]
    offset: u64,
    #[serde(default = "default_trace_page")]
    limit: u64,
}

fn default_trace_page() -> u64 {
    TRACE_PAGE
}

/// `GET /v1/sessions/{id}/trace[?offset=N&limit=BYTES]`: a page of an agent
/// session's `trace.jsonl` as written: whole lines from byte `offset`, up
/// to `limit` bytes (at most 4 MiB; a longer line comes whole). The next
/// page starts at `offset` plus the bytes returned; an empty page is the end.
pub(super) async fn trace(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<TraceQuery>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let session = state.supervisor.get(&id).await?;
    let path = std::path::Path::new(&session.bookkeeping_dir).join(crate::agent::trace::TRACE_FILE);
    // Not through a link a tool may have put there (crate::fsx).
    let (root, file) = (std::path::PathBuf::from(&session.workdir), path.clone());
    let (offset, limit) = (query.offset, query.limit.clamp(1, TRACE_PAGE));
    let read = tokio::task::spawn_blocking(move || read_lines(&root, &file, offset, limit))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(ApiError::internal(&format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        bytes,
    )
        .into_response())
}

/// Whole lines of `file` from byte `offset`: up to `limit` bytes, or the one
/// line there when it is longer.
fn read_lines(
    root: &std::path::Path,
    file: &std::path::Path,
    offset: u64,
    limit: u64,
) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = crate::fsx::open_read(root, file)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.by_ref().take(limit).read_to_end(&mut bytes)?;
    match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => bytes.truncate(end + 1),
        // One line longer than a page (or a last line being written).
        None if bytes.len() as u64 == limit => {
            let mut rest = Vec::new();
            let mut reader = std::io::BufReader::new(file);
            std::io::BufRead::read_until(&mut reader, b'\n', &mut rest)?;
            if rest.last() != Some(&b'\n') {
                bytes.clear();
            } else {
                bytes.extend(rest);
            }
        }
        None => bytes.clear(),
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::read_lines;

    #[test]
    fn trace_pages_are_whole_lines_and_a_long_line_comes_whole() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("trace.jsonl");
        let long = "x".repeat(50);
        std::fs::write(&file, format!("aaaa\nbbbb\n{long}\ntail-no-newline")).expect("write");
        let page = |offset, limit| read_lines(dir.path(), &file, offset, limit).expect("read");
        assert_eq!(page(0, 12), b"aaaa\nbbbb\n");
        assert_eq!(
            page(0, 3),
            b"aaaa\n",
            "a line longer than the page comes whole"
        );
        assert_eq!(page(10, 5), format!("{long}\n").as_bytes());
        assert_eq!(page(61, 100), b"", "a line being written is not returned");
        assert_eq!(page(1000, 100), b"", "past the end");
    }
}
