//! `murmur:peer/call@0.1.0` for [`Peers`]: a message sent and the peer's task
//! followed to its end or to its question — through the broker for a peer
//! on this daemon, over the peer's stream (1.0's `SendStreamingMessage`,
//! 0.3's `message/stream`) for one elsewhere, followed by the one follower
//! `@0.2.0` calls use (`follow.rs`), under the same limits — passing on the
//! text it streams.

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::*;
use crate::ids::TaskId;
use crate::runtime::peer_stream::PeerProgress;
use crate::runtime::{PeerBinding, PeerOp};
use crate::tasks::{A2aTask, EventKind, TaskState};

/// A wait is over: the task ended, or asks its client a question.
fn over(state: TaskState) -> bool {
    state.is_terminal() || state == TaskState::InputRequired
}

impl Peers {
    pub(super) async fn call_local(
        &self,
        peer_url: &str,
        route: &str,
        m: OutMessage,
        wait: Duration,
        progress: PeerProgress,
    ) -> Result<PeerAnswer, SendError> {
        let deadline = Instant::now() + wait;
        let sent = self.local(peer_url, route, m).await?;
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
                    EventKind::Artifact { text, .. } => progress.pass_on(&text),
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
        progress: PeerProgress,
    ) -> Result<PeerAnswer, RemoteError> {
        let dialect = self.dialect_of(peer_url).await;
        let v03 = dialect == Dialect::V03;
        match self
            .follow_call(peer_url, m, wait, v03, progress.clone())
            .await
        {
            Err(RemoteError::Refused { code, .. }) if !v03 && code == -32601 => {
                self.learn_dialect(peer_url, Dialect::V03);
                self.follow_call(peer_url, m, wait, true, progress).await
            }
            other => other,
        }
    }

    /// The message streamed on the peer's JSON-RPC interface in a version's
    /// dialect, as a `@0.2.0` call is: the same follower, the same limits.
    async fn follow_call(
        &self,
        peer_url: &str,
        m: &OutMessage,
        wait: Duration,
        v03: bool,
        progress: PeerProgress,
    ) -> Result<PeerAnswer, RemoteError> {
        let at = PeerInterface {
            url: peer_url.to_string(),
            binding: PeerBinding::JsonRpc,
            v03,
            tenant: None,
        };
        let call = PeerCall {
            op: PeerOp::Send {
                message: message_json(m, Dialect::V10),
                streaming: true,
                push: None,
            },
            accepted_only: false,
            wait,
            traceparent: m.traceparent.clone(),
            caller: m.caller.clone(),
        };
        let task = self.exchange_remote(&at, call, progress).await?;
        let answer: String = task
            .artifacts
            .iter()
            .map(|(_, parts)| texts(parts))
            .collect();
        Ok(PeerAnswer {
            text: if answer.is_empty() {
                texts(&task.message)
            } else {
                answer
            },
            task_id: task.task_id,
            context_id: task.context_id,
            state: task.state,
        })
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

/// The text parts of 1.0 parts, joined.
fn texts(parts: &[Value]) -> String {
    parts.iter().filter_map(|p| p["text"].as_str()).collect()
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

/// Server-sent events as they arrive: the bytes not yet cut into events,
/// and how far they have been searched for an event's end, so each byte is
/// looked at once however the peer trickles them (a peer sending a byte at
/// a time would otherwise cost a search of everything held, per byte).
#[derive(Default)]
pub(super) struct SseBuffer {
    bytes: Vec<u8>,
    /// Where the next event begins.
    start: usize,
    /// Up to where no event's end has been found.
    searched: usize,
}

impl SseBuffer {
    pub(super) fn push(&mut self, data: &[u8]) {
        // Events read are dropped from the front once they are half of it.
        if self.start > 0 && self.start >= self.bytes.len() / 2 {
            self.bytes.drain(..self.start);
            self.searched -= self.start;
            self.start = 0;
        }
        self.bytes.extend_from_slice(data);
    }

    /// Bytes held that are no whole event yet.
    pub(super) fn pending(&self) -> usize {
        self.bytes.len() - self.start
    }

    /// The next whole event, as the JSON its `data:` lines hold; `None`
    /// until one has arrived. Each event ends with a blank line; one
    /// without data is skipped.
    pub(super) fn next(&mut self) -> Option<Result<Value, RemoteError>> {
        loop {
            // A blank line may straddle what was searched and what came.
            let from = self.searched.saturating_sub(3).max(self.start);
            let Some((text_end, end)) = find_blank_line(&self.bytes[from..]) else {
                self.searched = self.bytes.len();
                return None;
            };
            let text =
                String::from_utf8_lossy(&self.bytes[self.start..from + text_end]).into_owned();
            self.start = from + end;
            self.searched = self.start;
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
    }
}

/// Where the first event of `buf` ends: (end of its text, end of its blank
/// line), for `\n\n` or `\r\n\r\n`; one pass.
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    for (i, &b) in buf.iter().enumerate() {
        if b != b'\n' {
            continue;
        }
        if buf.get(i + 1) == Some(&b'\n') {
            return Some((i, i + 2));
        }
        if i >= 1 && buf[i - 1] == b'\r' && buf.get(i + 1..i + 3) == Some(b"\r\n".as_slice()) {
            return Some((i - 1, i + 3));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_sent_events_are_cut_at_their_blank_lines() {
        assert_eq!(
            find_blank_line(b"data: x\r\n\r\ndata: y\n\n"),
            Some((7, 11))
        );
        let whole =
            b"event: a\ndata: {\"n\":\ndata: 1}\n\n: comment\n\ndata: {\"n\": 2}\r\n\r\ndata: {";
        // Whole, and a byte at a time: the same events.
        for pieces in [vec![whole.as_slice()], whole.chunks(1).collect()] {
            let mut buffer = SseBuffer::default();
            let mut events = Vec::new();
            for piece in pieces {
                buffer.push(piece);
                while let Some(event) = buffer.next() {
                    events.push(event.expect("json"));
                }
            }
            assert_eq!(events, [json!({"n": 1}), json!({"n": 2})]);
            assert_eq!(buffer.pending(), b"data: {".len(), "the third is not whole");
        }
    }
}
