//! `murmur:message/send` and `murmur:peer/call`: a guest's message to an A2A
//! peer, checked against the network allow-list, delivered through the
//! [`Outbox`](super::super::Outbox) with the current task's trace; `call`
//! also waits for the peer's answer, passing on what it streams.

use crate::telemetry::{Kind, Span};
use std::sync::Arc;

use super::super::bindings::murmur;
use super::super::{Note, OutMessage, TaskIo, trace_id_of};
use super::GuestState;

impl GuestState {
    /// The peer a guest named, as a URL the network policy allows (else the
    /// error the guest gets, logged and noted as a denial).
    /// Whether the capsule may reach `url` (`capabilities.network.allow`);
    /// a refusal is logged and noted as the other sends' are.
    pub(super) fn may_reach(&mut self, url: &str) -> Result<(), String> {
        let uri: http::Uri = policy_url(url).parse().map_err(|_| {
            format!("'{url}' is not a URL; give the peer's A2A URL (or its card's)")
        })?;
        if uri.host().is_none() {
            return Err(format!("'{url}' names no host"));
        }
        if self.hooks.allowed(&uri) {
            return Ok(());
        }
        let target = crate::policy::redact_url(url);
        tracing::warn!(session_id = %self.hooks.session_id, peer = %target,
            "A2A send or call denied: not in capabilities.network.allow");
        self.hooks.denied(&target);
        Err(format!(
            "network policy: '{target}' is not in capabilities.network.allow"
        ))
    }

    fn allowed_peer(&mut self, given: &str) -> Result<String, String> {
        let peer_url = peer_address(given)?;
        self.may_reach(&peer_url)?;
        Ok(peer_url)
    }

    /// What a send and a call start from: the allowed peer URL, the outbox,
    /// and the message with the current task's trace.
    fn outgoing(
        &mut self,
        peer_url: &str,
        message: murmur::message::send::Message,
    ) -> Result<(String, Arc<dyn super::super::Outbox>, OutMessage, Span), String> {
        let peer_url = self.allowed_peer(peer_url)?;
        let outbox = self
            .outbox
            .clone()
            .ok_or_else(|| "this daemon has no A2A gateway to send through".to_string())?;
        // A client span under the caller's task (or whatever runs now); the
        // peer continues it.
        let parent = self
            .task
            .as_ref()
            .and_then(|t| t.traceparent())
            .or_else(crate::telemetry::current);
        let mut span = Span::start("a2a send", Kind::Client, parent.as_deref());
        span.set("roost.peer", peer_url.as_str());
        span.set("a2a.message.id", message.message_id.as_str());
        let message = OutMessage {
            message_id: message.message_id,
            context_id: message.context_id,
            text: message.text,
            traceparent: span
                .traceparent()
                .unwrap_or_else(|| traceparent(self.task.as_ref(), &self.hooks.session_id)),
            caller: self.hooks.session_id.to_string(),
        };
        Ok((peer_url, outbox, message, span))
    }

    /// Logs a send (or why it failed) and notes it for the trace, with
    /// the caller's task; the outcome, with the error as the guest sees it.
    /// Waits for `call`; the text the peer streams meanwhile reaches the
    /// caller's own task as it comes, and what came with the end before the
    /// answer.
    /// What comes faster than `peer_stream::STORED_EVERY` is joined into
    /// one status message; the buffer between is bounded.
    pub(super) async fn passing_on<T>(
        &mut self,
        call: impl std::future::Future<Output = T>,
        mut streamed: crate::runtime::peer_stream::ProgressRx,
    ) -> T {
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                biased;
                Some(text) = streamed.next() => {
                    if let Some(task) = &self.task {
                        task.chunk(&text, true).await;
                    }
                }
                answer = &mut call => break answer,
            }
        };
        if let (Some(text), Some(task)) = (streamed.rest(), &self.task) {
            task.chunk(&text, true).await;
        }
        answer
    }

    pub(super) fn record<T>(
        &self,
        what: &'static str,
        peer_url: &str,
        message_id: &str,
        outcome: Result<T, super::super::SendError>,
        fields_of: impl FnOnce(&T) -> serde_json::Value,
    ) -> Result<T, String> {
        let (mut fields, result) = match outcome {
            Ok(done) => {
                let fields = fields_of(&done);
                tracing::info!(session_id = %self.hooks.session_id, peer = %peer_url,
                    task_id = %fields["peer_task_id"].as_str().unwrap_or_default(),
                    traceparent = %fields["traceparent"].as_str().unwrap_or_default(),
                    "A2A message sent");
                (fields, Ok(done))
            }
            Err(error) => {
                let error = error.to_string();
                tracing::warn!(session_id = %self.hooks.session_id, peer = %peer_url,
                    error = %error, "A2A message not sent");
                (serde_json::json!({"error": error}), Err(error))
            }
        };
        if let Some(notes) = &self.hooks.notes {
            fields["peer"] = serde_json::json!(peer_url);
            fields["message_id"] = serde_json::json!(message_id);
            if let Some(task) = &self.task {
                fields["caller_task_id"] = serde_json::json!(task.task_id());
            }
            notes.push(Note {
                event: what,
                fields,
            });
        }
        result
    }
}

impl murmur::message::send::Host for GuestState {
    async fn send(
        &mut self,
        peer_url: String,
        message: murmur::message::send::Message,
    ) -> Result<murmur::message::send::TaskResult, String> {
        let (peer_url, outbox, message, mut span) = self.outgoing(&peer_url, message)?;
        let (message_id, traceparent) = (message.message_id.clone(), message.traceparent.clone());
        let sent = outbox.send(&peer_url, message).await;
        if let Err(error) = &sent {
            span.fail(error.to_string());
        }
        drop(span);
        let sent = self.record("a2a_send", &peer_url, &message_id, sent, |sent| {
            serde_json::json!({
                "peer_task_id": sent.task_id, "peer_context_id": sent.context_id,
                "state": sent.state, "traceparent": traceparent,
            })
        })?;
        Ok(murmur::message::send::TaskResult {
            task_id: sent.task_id,
            context_id: sent.context_id,
            state: sent.state,
        })
    }
}

impl murmur::peer0_1_0::call::Host for GuestState {
    async fn call(
        &mut self,
        peer_url: String,
        message: murmur::message::send::Message,
        timeout_secs: u32,
    ) -> Result<murmur::peer0_1_0::call::Answer, String> {
        let (peer_url, outbox, message, mut span) = self.outgoing(&peer_url, message)?;
        let (message_id, traceparent) = (message.message_id.clone(), message.traceparent.clone());
        let (progress, streamed) = crate::runtime::peer_stream::progress();
        let call = outbox.call(
            &peer_url,
            message,
            crate::runtime::peer_stream::wait(timeout_secs),
            progress,
        );
        let answer = self.passing_on(call, streamed).await;
        if let Err(error) = &answer {
            span.fail(error.to_string());
        }
        drop(span);
        let answer = self.record("a2a_call", &peer_url, &message_id, answer, |a| {
            serde_json::json!({
                "peer_task_id": a.task_id, "peer_context_id": a.context_id,
                "state": a.state, "answer_bytes": a.text.len(), "traceparent": traceparent,
            })
        })?;
        Ok(murmur::peer0_1_0::call::Answer {
            task_id: answer.task_id,
            context_id: answer.context_id,
            state: answer.state,
            text: answer.text,
        })
    }
}

/// A W3C `traceparent` for an outgoing call: the current task's trace (the
/// one its client sent, else one named after the task), or the session's,
/// with a fresh span id.
pub(super) fn traceparent(task: Option<&Arc<dyn TaskIo>>, session_id: &str) -> String {
    let trace_id = task
        .map(|t| t.trace_id())
        .unwrap_or_else(|| trace_id_of(session_id));
    // The last 16 hex digits of a v7 uuid are random.
    let span = uuid::Uuid::now_v7().simple().to_string();
    format!("00-{trace_id}-{}-01", &span[16..])
}

/// The URL a policy check reads for an interface: gRPC's `host:port` as
/// `http://host:port`.
fn policy_url(url: &str) -> String {
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// The URL a guest names a peer by: an `http://` or `https://` URL as it
/// is, or the seed's `host:port` (a peer that serves A2A at its root) as
/// `http://host:port/`.
fn peer_address(given: &str) -> Result<String, String> {
    let given = given.trim();
    if given.starts_with("http://") || given.starts_with("https://") {
        return Ok(given.to_string());
    }
    if given.contains("://") {
        return Err(format!(
            "'{given}': a peer is reached over http:// or https://, or named host:port"
        ));
    }
    let authority: http::uri::Authority = given.parse().map_err(|_| {
        format!("'{given}' is neither a URL nor host:port; give the peer's A2A URL")
    })?;
    if authority.port_u16().is_none() || authority.as_str().contains('@') {
        return Err(format!(
            "'{given}' is neither a URL nor host:port; give the peer's A2A URL"
        ));
    }
    Ok(format!("http://{authority}/"))
}

#[cfg(test)]
mod tests {
    use super::peer_address;

    #[test]
    fn a_peer_is_a_url_or_the_seeds_host_and_port() {
        assert_eq!(
            peer_address("https://agents.example/a2a/x").as_deref(),
            Ok("https://agents.example/a2a/x")
        );
        assert_eq!(
            peer_address("localhost:8080").as_deref(),
            Ok("http://localhost:8080/")
        );
        assert_eq!(
            peer_address("127.0.0.1:9100").as_deref(),
            Ok("http://127.0.0.1:9100/")
        );
        for bad in ["ftp://x/", "just-a-name", "user@host:80", "host:port"] {
            assert!(peer_address(bad).is_err(), "{bad}");
        }
    }
}
