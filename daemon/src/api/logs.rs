//! `GET /v1/sessions/{id}/logs[?follow=true]`: the captured guest output, and with
//! `follow` a stream of new output until the session ends. With `tail`,
//! `since_ms`, `timestamps` or `json` it comes by line (`logs::lines`).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use roost_wire::api::LogsQuery;

use super::{ApiError, ApiState};
use crate::logs;

const FOLLOW_POLL: Duration = Duration::from_millis(100);

pub(super) async fn logs(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let session = state.supervisor.get(&id).await?;
    let root = PathBuf::from(&session.workdir);
    let dir = PathBuf::from(&session.bookkeeping_dir).join("logs");
    if query.by_line() {
        return by_line(state, session, root, dir, query).await;
    }
    let existing = read_blocking(root.clone(), dir.clone(), kept_bytes(&state)).await?;
    let headers = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !query.follow || session.state.is_ended() {
        return Ok((headers, existing).into_response());
    }
    let offset = crate::fsx::open_read(&root, &logs::live_path(&dir))
        .and_then(|f| f.metadata())
        .map(|m| m.len())
        .unwrap_or(0);
    let follow = Follow {
        root,
        path: logs::live_path(&dir),
        offset,
        first: Some(Bytes::from(existing)),
        state,
        id: session.id,
        done: false,
    };
    let stream = futures::stream::unfold(follow, |mut f| async move {
        f.next()
            .await
            .map(|chunk| (Ok::<_, std::io::Error>(chunk), f))
    });
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// The log by line: what was kept (as `tail` and `since_ms` select), then
/// with `follow` each new line until the session ends.
async fn by_line(
    state: ApiState,
    session: roost_wire::api::Session,
    root: PathBuf,
    dir: PathBuf,
    query: LogsQuery,
) -> Result<Response, ApiError> {
    let content_type = if query.json {
        "application/x-ndjson"
    } else {
        "text/plain; charset=utf-8"
    };
    let headers = [(header::CONTENT_TYPE, content_type)];
    let max = kept_bytes(&state);
    let (kept, follower) = {
        let (root, dir) = (root.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            let follower = logs::lines::Follower::at_end(&root, &dir);
            (logs::lines::read_recent(&root, &dir, max), follower)
        })
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read logs: {e}")))?
    };
    let (timestamps, json) = (query.timestamps, query.json);
    let render = move |lines: Vec<logs::lines::Line>| -> Bytes {
        let mut out = Vec::new();
        for line in lines {
            out.extend(line.render(timestamps, json));
        }
        Bytes::from(out)
    };
    let first = render(logs::lines::select(kept, query.tail, query.since_ms));
    if !query.follow || session.state.is_ended() {
        return Ok((headers, first).into_response());
    }
    let follow = LineFollow {
        follower: Some(follower),
        first: Some(first),
        state,
        id: session.id,
        since_ms: query.since_ms,
        render: Box::new(render),
    };
    let stream = futures::stream::unfold(follow, |mut f| async move {
        f.next()
            .await
            .map(|chunk| (Ok::<_, std::io::Error>(chunk), f))
    });
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// A follower by line.
struct LineFollow {
    /// Taken while a poll runs on a blocking thread; `None` at the end.
    follower: Option<logs::lines::Follower>,
    first: Option<Bytes>,
    state: ApiState,
    id: String,
    since_ms: Option<u64>,
    render: Box<dyn Fn(Vec<logs::lines::Line>) -> Bytes + Send>,
}

impl LineFollow {
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take()
            && !first.is_empty()
        {
            return Some(first);
        }
        loop {
            let mut follower = self.follower.take()?;
            let ended = match self.state.supervisor.get(&self.id).await {
                Ok(session) => session.state.is_ended(),
                Err(_) => true,
            };
            let done = ended || self.state.shutdown.is_cancelled();
            let (follower, lines) = tokio::task::spawn_blocking(move || {
                let lines = follower.poll(done);
                (follower, lines)
            })
            .await
            .ok()?;
            let lines = logs::lines::select(lines, None, self.since_ms);
            if !done {
                self.follower = Some(follower);
            }
            if !lines.is_empty() {
                return Some((self.render)(lines));
            }
            if done {
                return None;
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW_POLL) => {}
                () = self.state.shutdown.cancelled() => {}
            }
        }
    }
}

/// What roostd keeps of a log (two generations of `logs.max_bytes`): the
/// most a request reads, whatever a guest wrote to the files directly.
fn kept_bytes(state: &ApiState) -> u64 {
    state.host.config.logs.max_bytes.saturating_mul(2)
}

async fn read_blocking(root: PathBuf, dir: PathBuf, max: u64) -> Result<Vec<u8>, ApiError> {
    tokio::task::spawn_blocking(move || logs::read_recent(&root, &dir, max))
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read logs: {e}")))?
        .map_err(|e| ApiError::bad_request(format!("cannot read logs: {e}")))
}

struct Follow {
    /// The session's workdir: links below it are not followed.
    root: PathBuf,
    path: PathBuf,
    offset: u64,
    first: Option<Bytes>,
    state: ApiState,
    id: String,
    done: bool,
}

impl Follow {
    /// The next chunk of output; `None` once the session has ended and all was sent.
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take()
            && !first.is_empty()
        {
            return Some(first);
        }
        loop {
            if self.done {
                return None;
            }
            let ended = match self.state.supervisor.get(&self.id).await {
                Ok(session) => session.state.is_ended(),
                Err(_) => true,
            };
            let chunk = self.read_new();
            if !chunk.is_empty() {
                return Some(chunk);
            }
            if ended || self.state.shutdown.is_cancelled() {
                self.done = true;
                return None;
            }
            tokio::select! {
                () = tokio::time::sleep(FOLLOW_POLL) => {}
                () = self.state.shutdown.cancelled() => {}
            }
        }
    }

    fn read_new(&mut self) -> Bytes {
        let Ok(mut file) = crate::fsx::open_read(&self.root, &self.path) else {
            return Bytes::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Rotated: the live file started again.
            self.offset = 0;
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Bytes::new();
        }
        let mut buf = Vec::with_capacity((len - self.offset).min(1 << 20) as usize);
        let read = file.take(1 << 20).read_to_end(&mut buf).unwrap_or(0);
        self.offset += read as u64;
        Bytes::from(buf)
    }
}
