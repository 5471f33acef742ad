//! `murmur:message/send`: a guest's message to an A2A peer, checked against
//! the network allow-list, delivered through the [`Outbox`](super::super::Outbox)
//! with the current task's trace.

use std::sync::Arc;

use super::super::bindings::murmur;
use super::super::{Note, OutMessage, TaskIo, trace_id_of};
use super::GuestState;

impl murmur::message::send::Host for GuestState {
    async fn send(
        &mut self,
        peer_url: String,
        message: murmur::message::send::Message,
    ) -> Result<murmur::message::send::TaskResult, String> {
        let peer_url = peer_address(&peer_url)?;
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
                OutMessage {
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
            notes.push(Note {
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
fn traceparent(task: Option<&Arc<dyn TaskIo>>, session_id: &str) -> String {
    let trace_id = task
        .map(|t| t.trace_id())
        .unwrap_or_else(|| trace_id_of(session_id));
    // The last 16 hex digits of a v7 uuid are random.
    let span = uuid::Uuid::now_v7().simple().to_string();
    format!("00-{trace_id}-{}-01", &span[16..])
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
