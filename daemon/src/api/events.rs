//! `GET /v1/events[?follow=true][&tail=N]`: session state changes across the
//! daemon as JSON lines (`roost_wire::api::SessionEvent`), oldest first; with
//! `follow`, new ones as they are committed, until the daemon shuts down.

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ApiError, ApiState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    #[serde(default)]
    follow: bool,
    /// Only the last N changes before following.
    tail: Option<u64>,
}

/// A follower's place in the stream.
struct Follow {
    state: ApiState,
    after: i64,
    follow: bool,
    changes: tokio::sync::watch::Receiver<u64>,
    done: bool,
}

pub(super) async fn events(
    State(state): State<ApiState>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // Subscribed before the first read, so nothing committed in between is missed.
    let changes = state.supervisor.session_changes();
    let after = match query.tail {
        Some(n) => state.supervisor.session_events_tail(n).await?,
        None => 0,
    };
    let follow = Follow {
        state: state.clone(),
        after,
        follow: query.follow,
        changes,
        done: false,
    };
    let stream = futures::stream::unfold(follow, |mut f| async move {
        f.next()
            .await
            .map(|chunk| (Ok::<_, std::io::Error>(chunk), f))
    });
    let headers = [(header::CONTENT_TYPE, "application/x-ndjson")];
    Ok((headers, Body::from_stream(stream)).into_response())
}

impl Follow {
    /// The next lines; `None` at the end (all read without `follow`, or the
    /// daemon shutting down).
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            let page = match self.state.supervisor.session_events_after(self.after).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "cannot read session events");
                    return None;
                }
            };
            if let Some(last) = page.last() {
                self.after = last.seq;
                let mut lines = Vec::new();
                for event in &page {
                    if serde_json::to_writer(&mut lines, event).is_ok() {
                        lines.push(b'\n');
                    }
                }
                return Some(Bytes::from(lines));
            }
            if !self.follow || self.state.shutdown.is_cancelled() {
                self.done = true;
                return None;
            }
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        self.done = true;
                    }
                }
                () = self.state.shutdown.cancelled() => self.done = true,
            }
        }
    }
}
