//! The dashboard's live data: each page subscribes to one server-sent event
//! stream whose events are whole snapshots (JSON), sent when they change —
//! woken by every committed session write, and each second for what has
//! no such signal (logs, tasks, an agent's trace).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use roost_wire::api::Session;
use serde_json::{Value, json};

use super::UiState;
use crate::tasks::{A2aTask, TaskFilter};

/// How often a snapshot is taken again without a session write.
const TICK: Duration = Duration::from_secs(1);
/// Log lines and trace events a session's page shows.
const LOG_TAIL: u64 = 200;
const TRACE_TAIL: usize = 300;
const TASKS_SHOWN: u32 = 100;

/// A stream of `make`'s snapshots, each sent when it differs from the last.
fn snapshots<F, Fut>(
    state: UiState,
    make: F,
) -> Sse<impl Stream<Item = Result<Event, std::io::Error>>>
where
    F: Fn(UiState) -> Fut + Send + 'static,
    Fut: Future<Output = Value> + Send,
{
    let changes = state.supervisor.session_changes();
    let stream = futures::stream::unfold(
        (state, make, changes, None::<String>, true),
        |(state, make, mut changes, mut last, mut first)| async move {
            loop {
                if !first {
                    tokio::select! {
                        () = state.shutdown.cancelled() => return None,
                        _ = changes.changed() => {}
                        () = tokio::time::sleep(TICK) => {}
                    }
                }
                first = false;
                let text = make(state.clone()).await.to_string();
                if last.as_deref() != Some(text.as_str()) {
                    last = Some(text.clone());
                    let event = Event::default().data(text);
                    return Some((Ok(event), (state, make, changes, last, first)));
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A session as a row of the list.
fn row(s: &Session) -> Value {
    json!({
        "id": s.id, "name": s.name, "capsule": s.capsule, "version": s.version,
        "state": s.state.as_str(), "route": format!("/a2a/{}", s.name),
        "created_at": s.created_at, "started_at": s.started_at, "ended_at": s.ended_at,
        "restarts": s.restart_count, "sandbox": s.sandbox,
        "tokens": s.usage.input_tokens + s.usage.output_tokens,
        "error": s.error,
    })
}

fn task_json(t: &A2aTask) -> Value {
    json!({
        "id": t.id.to_string(), "context_id": t.context_id, "session_id": t.session_id.to_string(),
        "route": t.route, "state": t.state.as_str(), "text": t.text,
        "status_message": t.status_message, "answer": t.answer,
        "created_at": t.created_at, "updated_at": t.updated_at,
    })
}

/// `GET /live/sessions`: every recorded session, live ones first.
pub(super) async fn sessions(State(state): State<UiState>) -> Response {
    snapshots(state, |state| async move {
        match state.supervisor.list(true).await {
            Ok(mut list) => {
                list.sort_by_key(|s| s.state.is_ended());
                json!({"sessions": list.iter().map(row).collect::<Vec<_>>(),
                       "live": state.supervisor.live_sessions()})
            }
            Err(error) => json!({"error": error.to_string()}),
        }
    })
    .into_response()
}

/// `GET /live/s/{id}`: a session, its tasks, its route's schedules, the
/// versions it has run, its log's tail, its policy and (for an agent) its trace's last events.
pub(super) async fn session(State(state): State<UiState>, Path(id): Path<String>) -> Response {
    // Read once per page: a session's manifest does not change while it is shown.
    let policy = match state.supervisor.get(&id).await {
        Ok(session) => {
            let dir = PathBuf::from(&session.manifest)
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            super::super::policy::report(&state.host, dir)
                .await
                .ok()
                .and_then(|p| serde_json::to_value(p).ok())
        }
        Err(_) => None,
    };
    snapshots(state, move |state| {
        let id = id.clone();
        let policy = policy.clone();
        async move {
            let session = match state.supervisor.get(&id).await {
                Ok(s) => s,
                Err(error) => return json!({"error": error.to_string()}),
            };
            let a2a = state
                .host
                .tasks
                .tasks(&TaskFilter {
                    route: Some(&session.name),
                    context_id: None,
                    state: None,
                    limit: TASKS_SHOWN,
                    offset: 0,
                    after: None,
                    // The operator sees every client's tasks.
                    owner: None,
                })
                .await
                .map(|(tasks, _)| tasks.iter().map(task_json).collect::<Vec<_>>())
                .unwrap_or_default();
            let agent_tasks = state
                .supervisor
                .tasks(&session.id)
                .await
                .unwrap_or_default();
            let (logs, trace) = read_files(&session).await;
            // The route's schedules (snapshots differ when a tick fires).
            let schedules = state
                .host
                .schedules
                .list(Some(&session.name))
                .await
                .unwrap_or_default();
            // The versions it has run (upgrades in place, rollbacks).
            let versions = state
                .supervisor
                .versions(&session.id)
                .await
                .unwrap_or_default();
            json!({
                "session": session, "route": format!("/a2a/{}", session.name),
                "a2a_tasks": a2a, "agent_tasks": agent_tasks, "schedules": schedules,
                "versions": versions,
                "policy": policy, "logs": logs, "trace": trace,
            })
        }
    })
    .into_response()
}

/// The most of a log or trace a session page reads for its tail.
const TAIL_BYTES: u64 = 256 << 10;

/// The last `max` bytes of a file (from its first whole line).
fn read_tail(root: &std::path::Path, path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = crate::fsx::open_read(root, path)?;
    let len = file.metadata()?.len();
    let from = len.saturating_sub(max);
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    if from > 0 {
        let cut = bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..cut);
    }
    Ok(bytes)
}

/// The log's last lines and the trace's last events, read off the runtime.
async fn read_files(session: &Session) -> (Vec<String>, Vec<Value>) {
    let root = PathBuf::from(&session.workdir);
    let bookkeeping = PathBuf::from(&session.bookkeeping_dir);
    tokio::task::spawn_blocking(move || {
        // Bounded reads: the page is refreshed every second, and a guest
        // may have grown these files to any size.
        let lines = crate::logs::lines::read_recent(&root, &bookkeeping.join("logs"), TAIL_BYTES);
        let logs = crate::logs::lines::select(lines, Some(LOG_TAIL), None)
            .into_iter()
            .map(|l| String::from_utf8_lossy(&l.text).trim_end().to_string())
            .collect();
        let trace_path = bookkeeping.join(crate::agent::trace::TRACE_FILE);
        let trace = read_tail(&root, &trace_path, TAIL_BYTES)
            .map(|bytes| {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let all: Vec<Value> = text
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                let skip = all.len().saturating_sub(TRACE_TAIL);
                all.into_iter().skip(skip).collect()
            })
            .unwrap_or_default();
        (logs, trace)
    })
    .await
    .unwrap_or_default()
}

/// `GET /live/t/{id}`: an A2A task and its event log.
pub(super) async fn task(State(state): State<UiState>, Path(id): Path<String>) -> Response {
    let id = crate::ids::TaskId::from(id);
    snapshots(state, move |state| {
        let id = id.clone();
        async move {
            let tasks = &state.host.tasks;
            let task = match tasks.task(&id).await {
                Ok(Some(task)) => task,
                Ok(None) => return json!({"error": format!("no task {id}")}),
                Err(error) => return json!({"error": error.to_string()}),
            };
            let events = tasks.events(&id, 0).await.unwrap_or_default();
            json!({"task": task_json(&task), "events": events})
        }
    })
    .into_response()
}
