//! The host interfaces of the A2A task a guest call works on:
//! `murmur:a2a/io` (artifacts, input requests), `murmur:message/send`
//! (outgoing A2A, allow-list first), `murmur:text/chunks` and
//! `murmur:task/task`; the wait for a client's input is not the guest's time.

use std::sync::Arc;
use std::time::Instant;

use super::GuestState;
use super::bindings::murmur;
use crate::logs::Stream;

impl murmur::a2a::io::Host for GuestState {
    async fn emit_artifact(
        &mut self,
        artifact_id: String,
        part: murmur::a2a::io::Part,
        append: bool,
        last_chunk: bool,
    ) {
        use murmur::a2a::io::Part;
        let Some(task) = &self.task else {
            return;
        };
        let file = |kind: &str, value: String, name: Option<String>, media: Option<String>| {
            let mut p = serde_json::json!({ kind: value });
            if let Some(name) = name {
                p["filename"] = name.into();
            }
            if let Some(media) = media {
                p["mediaType"] = media.into();
            }
            p
        };
        let (text, part) = match part {
            Part::Text(text) => (text, None),
            Part::Data(json) => match serde_json::from_str::<serde_json::Value>(&json) {
                Ok(value) => (String::new(), Some(serde_json::json!({ "data": value }))),
                Err(_) => (json, None),
            },
            Part::Raw(f) => {
                let bytes = base64_encode(&f.bytes);
                (
                    String::new(),
                    Some(file("raw", bytes, f.filename, f.media_type)),
                )
            }
            Part::Url(f) => (
                String::new(),
                Some(file("url", f.url, f.filename, f.media_type)),
            ),
        };
        task.artifact(super::ArtifactUpdate {
            artifact_id,
            text,
            append,
            last_chunk,
            part,
        })
        .await;
    }

    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<murmur::a2a::io::Reply> {
        let reply = self.ask(&prompt).await?;
        Ok(murmur::a2a::io::Reply {
            message_id: reply.message_id,
            text: reply.text,
        })
    }
}

/// Standard base64 with padding (A2A's `raw` parts).
fn base64_encode(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl GuestState {
    /// Asks the current task's client for input; the wait is not the guest's time.
    async fn ask(&mut self, prompt: &str) -> wasmtime::Result<super::Reply> {
        let Some(link) = self.task.clone() else {
            return Err(wasmtime::format_err!(
                "request-input: this call is not handling an A2A task, so there is no peer to ask"
            ));
        };
        tracing::info!(task_id = %link.task_id(), "guest asks its A2A client for input");
        let started = Instant::now();
        self.waited.begin();
        let answer = link.request_input(prompt).await;
        let waited = started.elapsed();
        self.guard.extend(waited);
        self.waited.end(waited);
        answer.map_err(|e| wasmtime::format_err!("{e}"))
    }
}

impl murmur::message::send::Host for GuestState {
    async fn send(
        &mut self,
        peer_url: String,
        message: murmur::message::send::Message,
    ) -> Result<murmur::message::send::TaskResult, String> {
        let uri: http::Uri = peer_url
            .parse()
            .map_err(|_| format!("'{peer_url}' is not a URL; give the peer's A2A base URL"))?;
        if !self.hooks.allowed(&uri) {
            let target = crate::policy::redact_url(&peer_url);
            tracing::warn!(session_id = %self.hooks.session_id, peer = %target,
                "A2A send denied: not in capabilities.network.allow");
            self.hooks.denied(&target);
            return Err(format!(
                "network policy: '{peer_url}' is not in capabilities.network.allow"
            ));
        }
        let outbox = self
            .outbox
            .clone()
            .ok_or("this daemon has no A2A gateway to send through")?;
        let traceparent = traceparent(self.task.as_ref(), &self.hooks.session_id);
        let sent = outbox
            .send(
                &peer_url,
                super::OutMessage {
                    message_id: message.message_id.clone(),
                    context_id: message.context_id,
                    text: message.text,
                    traceparent: traceparent.clone(),
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(session_id = %self.hooks.session_id, peer = %peer_url,
            task_id = %sent.task_id, %traceparent, "A2A message sent");
        if let Some(notes) = &self.hooks.notes {
            notes.push(super::Note {
                event: "a2a_send",
                fields: serde_json::json!({
                    "peer": peer_url, "message_id": message.message_id,
                    "peer_task_id": sent.task_id, "peer_context_id": sent.context_id,
                    "state": sent.state, "traceparent": traceparent,
                }),
            });
        }
        Ok(murmur::message::send::TaskResult {
            task_id: sent.task_id,
            context_id: sent.context_id,
            state: sent.state,
        })
    }
}

/// A W3C `traceparent` for an outgoing call: the current task's trace (the
/// one its client sent, else one named after the task), or the session's,
/// with a fresh span id.
fn traceparent(task: Option<&Arc<dyn super::TaskIo>>, session_id: &str) -> String {
    let trace_id = task
        .map(|t| t.trace_id())
        .unwrap_or_else(|| super::trace_id_of(session_id));
    // The last 16 hex digits of a v7 uuid are random.
    let span = uuid::Uuid::now_v7().simple().to_string();
    format!("00-{trace_id}-{}-01", &span[16..])
}

impl murmur::text::chunks::Host for GuestState {
    async fn emit_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, false).await;
        }
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) {
        self.log.write(Stream::Stdout, chunk.as_bytes());
        if let Some(task) = &self.task {
            task.chunk(&chunk, true).await;
        }
    }
}

impl murmur::task::task::Host for GuestState {
    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<String> {
        Ok(self.ask(&prompt).await?.text)
    }
}
