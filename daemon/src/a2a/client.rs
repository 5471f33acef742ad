//! Outgoing A2A (`murmur:message/send`): a peer hosted by this daemon is
//! reached in-process through the broker (same durability as a request from
//! outside); any other gets a JSON-RPC 1.0 `SendMessage` over HTTP. Either way
//! the call returns once the peer has accepted the task.

use std::sync::Arc;

use serde_json::{Value, json};

use super::wire;
use crate::http_client::HttpError;
use crate::runtime::{OutMessage, Outbox, SendError, SentTask};
use crate::supervisor::Routes;
use crate::tasks::{Broker, NewTask};

/// Largest answer read from a peer.
const MAX_REPLY_BYTES: u64 = 1 << 20;

/// Why a peer elsewhere did not take a message.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("answered {0} without JSON")]
    NotJson(http::StatusCode),
    #[error("refused the message ({code}): {message}")]
    Refused { code: Value, message: String },
    #[error("answered {0} with neither a task nor a message")]
    NoTask(http::StatusCode),
}

/// Delivers guests' messages to peers.
pub struct Peers {
    /// `http://host:port` of this daemon's gateway.
    base: String,
    /// Live sessions on this daemon, by route (no database read).
    routes: Arc<Routes>,
    broker: Arc<Broker>,
}

impl Peers {
    pub fn new(base: String, routes: Arc<Routes>, broker: Arc<Broker>) -> Self {
        Self {
            base,
            routes,
            broker,
        }
    }

    /// The route of a peer URL that points at this daemon's gateway.
    fn local_route<'a>(&self, peer_url: &'a str) -> Option<&'a str> {
        let rest = peer_url.strip_prefix(&self.base)?.strip_prefix("/a2a/")?;
        let route = rest.trim_end_matches('/');
        (!route.is_empty() && !route.contains('/')).then_some(route)
    }

    async fn local(&self, route: &str, m: OutMessage) -> Result<SentTask, SendError> {
        let Some(session) = self.routes.get(route) else {
            return Err(SendError::NoRoute(route.to_string()));
        };
        let message = json!({
            "messageId": m.message_id, "contextId": m.context_id, "role": "ROLE_USER",
            "parts": [{"text": m.text}],
        });
        let (task, _) = self
            .broker
            .submit(NewTask {
                session_id: &session.id,
                route: &session.name,
                message_id: &m.message_id,
                context_id: m.context_id.as_deref(),
                text: &m.text,
                message_json: &message.to_string(),
                traceparent: Some(&m.traceparent),
                dedupe: true,
            })
            .await
            .map_err(|e| SendError::Local(Box::new(e)))?;
        Ok(SentTask {
            task_id: task.id.into(),
            context_id: task.context_id,
            state: task.state.as_str().to_string(),
        })
    }
}

#[async_trait::async_trait]
impl Outbox for Peers {
    async fn send(&self, peer_url: &str, m: OutMessage) -> Result<SentTask, SendError> {
        if let Some(route) = self.local_route(peer_url) {
            return self.local(route, m).await;
        }
        remote(peer_url, m)
            .await
            .map_err(|source| SendError::Remote {
                peer: peer_url.to_string(),
                source: Box::new(source),
            })
    }
}

/// `SendMessage` to a peer elsewhere, returning as soon as it has the task.
async fn remote(peer_url: &str, m: OutMessage) -> Result<SentTask, RemoteError> {
    let mut message = json!({
        "messageId": m.message_id, "role": "ROLE_USER", "parts": [{"text": m.text}],
    });
    if let Some(context) = &m.context_id {
        message["contextId"] = json!(context);
    }
    let request = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": true}},
    });
    let reply = crate::http_client::exchange(
        http::Method::POST,
        peer_url,
        &[
            ("content-type", "application/json"),
            ("a2a-version", "1.0"),
            ("traceparent", &m.traceparent),
        ],
        request.to_string().into_bytes(),
        MAX_REPLY_BYTES,
    )
    .await?;
    let body: Value =
        serde_json::from_slice(&reply.body).map_err(|_| RemoteError::NotJson(reply.status))?;
    if let Some(error) = body.get("error") {
        return Err(RemoteError::Refused {
            code: error["code"].clone(),
            message: error["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string(),
        });
    }
    let result = &body["result"];
    if let Some(task) = result.get("task") {
        let state = task["status"]["state"].as_str().unwrap_or_default();
        return Ok(SentTask {
            task_id: task["id"].as_str().unwrap_or_default().to_string(),
            context_id: task["contextId"].as_str().unwrap_or_default().to_string(),
            state: wire::parse_state(state)
                .map_or_else(|| state.to_string(), |s| s.as_str().to_string()),
        });
    }
    if let Some(message) = result.get("message") {
        // Answered with a message and no task: nothing is left to follow.
        return Ok(SentTask {
            task_id: message["taskId"].as_str().unwrap_or_default().to_string(),
            context_id: message["contextId"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            state: "completed".into(),
        });
    }
    Err(RemoteError::NoTask(reply.status))
}
