//! `murmur:peer/call` for [`Peers`]: a message sent and the peer's task
//! followed to its end or to its question — through the broker for a peer
//! on this daemon, over the peer's stream (1.0's `SendStreamingMessage`,
//! 0.3's `message/stream`) for one elsewhere — passing on the text it
//! streams.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::*;
use crate::ids::TaskId;
use crate::tasks::{A2aTask, EventKind, TaskState};

/// A wait is over: the task ended, or asks its client a question.
fn over(state: TaskState) -> bool {
    state.is_terminal() || state == TaskState::InputRequired
}

/// Largest event of a peer's stream.
const MAX_EVENT_BYTES: usize = 1 << 20;

impl Peers {
    pub(super) async fn call_local(
        &self,
        route: &str,
        m: OutMessage,
        wait: Duration,
        progress: UnboundedSender<String>,
    ) -> Result<PeerAnswer, SendError> {
        let deadline = Instant::now() + wait;
        let sent = self.local(route, m).await?;
        let task_id = TaskId::from(sent.task_id);
        let mut live = self.broker.subscribe(&task_id);
        // Read once after subscribing (an end that came first is not
        // missed), then whenever the stream says it ended or lost events.
        let mut check = true;
        loop {
            if check {
                let task = self
                    .broker
                    .task(&task_id)
                    .await
                    .map_err(|e| SendError::Local(Box::new(e)))?;
                if let Some(task) = task.filter(|t| over(t.state)) {
                    return Ok(answer_of(task));
                }
                check = false;
            }
            match tokio::time::timeout_at(deadline, live.rx.recv()).await {
                Err(_) => {
                    return Err(SendError::Deadline {
                        task_id: task_id.to_string(),
                        secs: wait.as_secs(),
                    });
                }
                Ok(Ok(event)) => match event.kind {
                    EventKind::Artifact { text, .. } if !text.is_empty() => {
                        let _ = progress.send(text);
                    }
                    EventKind::Status { state, .. } if over(state) => check = true,
                    EventKind::Reply { .. } => check = true,
                    _ => {}
                },
                Ok(Err(RecvError::Lagged(_))) => check = true,
                Ok(Err(RecvError::Closed)) => {
                    check = true;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    pub(super) async fn call_remote(
        &self,
        peer_url: &str,
        m: &OutMessage,
        wait: Duration,
        progress: UnboundedSender<String>,
    ) -> Result<PeerAnswer, RemoteError> {
        let dialect = self.dialect_of(peer_url).await;
        let auth = self.auth_for(peer_url).await?;
        match stream(peer_url, m, dialect, &auth, wait, &progress).await {
            Err(RemoteError::Refused { code, .. }) if dialect == Dialect::V10 && code == -32601 => {
                self.learn_dialect(peer_url, Dialect::V03);
                stream(peer_url, m, Dialect::V03, &auth, wait, &progress).await
            }
            other => other,
        }
    }
}

fn answer_of(task: A2aTask) -> PeerAnswer {
    PeerAnswer {
        task_id: task.id.into(),
        context_id: task.context_id,
        state: task.state.as_str().to_string(),
        text: task.answer.or(task.status_message).unwrap_or_default(),
    }
}

/// What a peer's stream has said so far.
#[derive(Default)]
struct Followed {
    task_id: String,
    context_id: String,
    /// Each artifact's text, by id (a chunk without `append` replaces it).
    artifacts: BTreeMap<String, String>,
    status_message: Option<String>,
}

impl Followed {
    /// Takes one event of either dialect; the answer when it ends the wait.
    fn take(&mut self, event: &Value, progress: &UnboundedSender<String>) -> Option<PeerAnswer> {
        let result = &event["result"];
        let (kind, body) = match result["kind"].as_str() {
            Some("task") => ("task", result),
            Some("status-update") => ("status", result),
            Some("artifact-update") => ("artifact", result),
            Some("message") => ("message", result),
            _ => ["task", "statusUpdate", "artifactUpdate", "message"]
                .into_iter()
                .find_map(|k| result.get(k).map(|b| (k, b)))
                .map(|(k, b)| (k.trim_end_matches("Update"), b))
                .unwrap_or(("", result)),
        };
        for (key, slot) in [
            ("taskId", &mut self.task_id),
            ("contextId", &mut self.context_id),
        ] {
            if let Some(v) = body[key].as_str().filter(|v| !v.is_empty()) {
                *slot = v.to_string();
            }
        }
        match kind {
            "task" => {
                if let Some(id) = body["id"].as_str() {
                    self.task_id = id.to_string();
                }
                self.status(&body["status"])
            }
            "status" => self.status(&body["status"]),
            "artifact" => {
                let artifact = &body["artifact"];
                let id = artifact["artifactId"]
                    .as_str()
                    .unwrap_or("answer")
                    .to_string();
                let text = texts(&artifact["parts"]);
                if !text.is_empty() {
                    let _ = progress.send(text.clone());
                }
                let slot = self.artifacts.entry(id).or_default();
                if body["append"].as_bool() != Some(true) {
                    slot.clear();
                }
                if slot.len() + text.len() <= MAX_REPLY_BYTES as usize {
                    slot.push_str(&text);
                }
                None
            }
            "message" => Some(PeerAnswer {
                task_id: body["taskId"].as_str().unwrap_or(&self.task_id).to_string(),
                context_id: body["contextId"]
                    .as_str()
                    .unwrap_or(&self.context_id)
                    .to_string(),
                state: "completed".into(),
                text: texts(&body["parts"]),
            }),
            _ => None,
        }
    }

    fn status(&mut self, status: &Value) -> Option<PeerAnswer> {
        let message = texts(&status["message"]["parts"]);
        if !message.is_empty() {
            self.status_message = Some(message);
        }
        let state = wire::parse_state(status["state"].as_str()?)?;
        over(state).then(|| {
            let answer: String = self.artifacts.values().map(String::as_str).collect();
            PeerAnswer {
                task_id: self.task_id.clone(),
                context_id: self.context_id.clone(),
                state: state.as_str().to_string(),
                text: if answer.is_empty() {
                    self.status_message.clone().unwrap_or_default()
                } else {
                    answer
                },
            }
        })
    }
}

/// The text parts of a parts list, joined.
fn texts(parts: &Value) -> String {
    parts
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

/// Sends `m` on the peer's stream and follows its task until the wait is
/// over, or `wait` runs out.
async fn stream(
    peer_url: &str,
    m: &OutMessage,
    dialect: Dialect,
    auth: &super::Auth,
    wait: Duration,
    progress: &UnboundedSender<String>,
) -> Result<PeerAnswer, RemoteError> {
    let deadline = Instant::now() + wait;
    let method = match dialect {
        Dialect::V10 => "SendStreamingMessage",
        Dialect::V03 => "message/stream",
    };
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": method,
        "params": {"message": message_json(m, dialect)},
    });
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(peer_url)
        .header(http::header::USER_AGENT, "roostd")
        .header(http::header::ACCEPT, "text/event-stream");
    for (name, value) in rpc_headers(m, dialect, auth) {
        request = request.header(name, value);
    }
    let request = auth.with_tls(request);
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| RemoteError::Http(crate::http_client::HttpError::Request(e)))?;
    // The call's own deadline decides (and names the peer's task): the
    // client's read timeouts are a little longer, so the two never race.
    let read = wait.saturating_add(std::time::Duration::from_secs(1));
    let timeouts = crate::http_client::Timeouts {
        connect: crate::http_client::TIMEOUT,
        first_byte: read,
        between_bytes: read,
    };
    let unfinished = |followed: &Followed| RemoteError::Deadline {
        task_id: followed.task_id.clone(),
    };
    let mut followed = Followed::default();
    let response = tokio::time::timeout_at(deadline, crate::http_client::send(request, timeouts))
        .await
        .map_err(|_| unfinished(&followed))??;
    let status = response.status();
    if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
        return Err(RemoteError::Unauthorized {
            status,
            configured: auth.configured(),
        });
    }
    let sse = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut body = response.into_body();
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .map_err(|_| unfinished(&followed))?;
        let Some(frame) = frame else {
            break;
        };
        if let Ok(data) = frame?.into_data() {
            pending.extend_from_slice(&data);
        }
        if pending.len() > MAX_EVENT_BYTES {
            return Err(RemoteError::NotAStream(format!(
                "an event over {MAX_EVENT_BYTES} bytes"
            )));
        }
        if !sse {
            continue;
        }
        while let Some(event) = next_event(&mut pending) {
            let event = event?;
            if let Some(error) = event.get("error") {
                return Err(refusal(error));
            }
            if let Some(answer) = followed.take(&event, progress) {
                return Ok(answer);
            }
        }
    }
    if !sse {
        // A JSON-RPC error instead of a stream (or nothing readable).
        let reply: Value =
            serde_json::from_slice(&pending).map_err(|_| RemoteError::NotJson(status))?;
        return Err(match reply.get("error") {
            Some(error) => refusal(error),
            None => RemoteError::NotAStream(format!("answered {status} without a stream")),
        });
    }
    Err(RemoteError::StreamEnded)
}

pub(super) fn refusal(error: &Value) -> RemoteError {
    RemoteError::Refused {
        code: error["code"].as_i64().unwrap_or_default(),
        message: error["message"]
            .as_str()
            .unwrap_or("no message")
            .to_string(),
    }
}

/// The next whole server-sent event in `pending` (taken out of it), as the
/// JSON its `data:` lines hold; `None` until one has arrived. Each event
/// ends with a blank line; one without data is skipped.
pub(super) fn next_event(pending: &mut Vec<u8>) -> Option<Result<Value, RemoteError>> {
    while let Some(end) = find_blank_line(pending) {
        let block: Vec<u8> = pending.drain(..end.1).collect();
        let text = String::from_utf8_lossy(&block[..end.0]).into_owned();
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            return Some(
                serde_json::from_str(&data.join("\n"))
                    .map_err(|e| RemoteError::NotAStream(e.to_string())),
            );
        }
    }
    None
}

/// Where the first event of `buf` ends: (end of its text, end of its blank
/// line), for `\n\n` or `\r\n\r\n`.
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_of_either_dialect_ends_at_the_tasks_end_with_its_answer() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut v10 = Followed::default();
        for event in [
            json!({"result": {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}}),
            json!({"result": {"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "answer", "parts": [{"text": "hel"}]}}}}),
            json!({"result": {"artifactUpdate": {"taskId": "t1", "append": true, "artifact": {"artifactId": "answer", "parts": [{"text": "lo"}]}}}}),
        ] {
            assert!(v10.take(&event, &tx).is_none());
        }
        let done = v10
            .take(&json!({"result": {"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}}), &tx)
            .expect("ended");
        assert_eq!(
            (done.task_id.as_str(), done.context_id.as_str()),
            ("t1", "c1")
        );
        assert_eq!(
            (done.state.as_str(), done.text.as_str()),
            ("completed", "hello")
        );
        assert_eq!(rx.try_recv().ok().as_deref(), Some("hel"));
        assert_eq!(rx.try_recv().ok().as_deref(), Some("lo"));

        let mut v03 = Followed::default();
        assert!(v03
            .take(&json!({"result": {"kind": "task", "id": "t2", "contextId": "c2", "status": {"state": "working"}}}), &tx)
            .is_none());
        let asks = v03
            .take(&json!({"result": {"kind": "status-update", "taskId": "t2", "status": {"state": "input-required",
                "message": {"kind": "message", "parts": [{"kind": "text", "text": "which one?"}]}}}}), &tx)
            .expect("a question ends the wait");
        assert_eq!(
            (asks.state.as_str(), asks.text.as_str()),
            ("input-required", "which one?")
        );
        assert_eq!(
            find_blank_line(b"data: x\r\n\r\ndata: y\n\n"),
            Some((7, 11))
        );
    }
}
