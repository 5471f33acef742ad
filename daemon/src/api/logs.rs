//! `GET /v1/sessions/{id}/logs[?follow=true]`: the captured guest output, and with
//! `follow` a stream of new output until the session ends.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ApiError, ApiState};
use crate::logs;

const FOLLOW_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogsQuery {
    #[serde(default)]
    follow: bool,
}

pub(super) async fn logs(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let session = state.supervisor.get(&id).await?;
    let root = PathBuf::from(&session.workdir);
    let dir = PathBuf::from(&session.bookkeeping_dir).join("logs");
    let existing = read_blocking(root.clone(), dir.clone()).await?;
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

async fn read_blocking(root: PathBuf, dir: PathBuf) -> Result<Vec<u8>, ApiError> {
    tokio::task::spawn_blocking(move || logs::read_all(&root, &dir))
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
