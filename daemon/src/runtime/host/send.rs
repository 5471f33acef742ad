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
