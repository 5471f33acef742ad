//! Outgoing A2A (`murmur:message/send`): a peer hosted by this daemon is
//! reached in-process through the broker (same durability, tokens and
//! owners as a request from outside); any other gets JSON-RPC over HTTP or HTTPS — 1.0's
//! `SendMessage`, or 0.3's `message/send` when its card says 0.3 — with the
//! token roostd's config has for it (`a2a.peers`). Either way the call
//! returns once the peer has accepted the task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use credentials::Auth;
pub use credentials::{ApiKey, MIN_LIFETIME_SECS, OAuth2, PeerCredential, read_token_answer};
pub use exchange::{read_grpc, read_stream};

use super::wire::{self, Dialect};
use crate::http_client::HttpError;
use crate::runtime::{
    OutMessage, Outbox, PeerAnswer, PeerCall, PeerInterface, PeerTarget, PeerTask, SendError,
    SentTask,
};
use crate::supervisor::Routes;
use crate::tasks::{Broker, NewTask};

mod call;
mod credentials;
mod exchange;
mod follow;
mod normal;
mod resolve;

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
    Refused { code: i64, message: String },
    #[error(
        "answered {status}: {}",
        if *configured {
            "it refused the token roostd has for it (a2a.peers in roostd's config)"
        } else {
            "it wants credentials; give roostd a token for it (a2a.peers in roostd's config)"
        }
    )]
    Unauthorized {
        status: http::StatusCode,
        configured: bool,
    },
    #[error("answered {0} with neither a task nor a message")]
    NoTask(http::StatusCode),
    #[error("its stream ended before its task did")]
    StreamEnded,
    #[error("its stream is not server-sent events of JSON-RPC answers: {0}")]
    NotAStream(String),
    /// The caller's wait ran out (`Outbox::call` says so with the wait).
    #[error("its task {task_id} did not end in time")]
    Deadline { task_id: String },
    #[error("agent card: {0}")]
    Card(String),
    #[error("gRPC: {0}")]
    Grpc(String),
    #[error("OAuth 2 (a2a.peers[].oauth2 in roostd's config): {0}")]
    OAuth2(String),
    #[error("{0}; roostd stopped reading (what a call holds of a peer is bounded: docs/a2a.md)")]
    Limit(crate::runtime::peer_stream::PeerLimit),
}

/// Delivers guests' messages to peers.
pub struct Peers {
    /// `http://host:port` of this daemon's gateway.
    base: String,
    /// Live sessions on this daemon, by route (no database read).
    routes: Arc<Routes>,
    broker: Arc<Broker>,
    /// The gateway's tokens: a message to a route of this daemon needs its
    /// token as a request from outside would.
    access: Arc<super::access::Access>,
    /// `a2a.dedupe_message_ids`.
    dedupe: bool,
    /// `a2a.peers`, longest URL prefix first (replaced when roostd
    /// reloads its config).
    credentials: std::sync::RwLock<Vec<Arc<PeerCredential>>>,
    /// The API-key header each entry's peer card names, once read.
    api_key_headers: Mutex<HashMap<String, String>>,
    /// The peer tasks each session sent with roostd's credentials.
    owned: Mutex<credentials::Owned>,
    /// The dialect each peer speaks, once known (its card, or a 1.0 send it
    /// did not know).
    dialects: Mutex<HashMap<String, Dialect>>,
}

/// Peers whose dialect is remembered at most (then it is learned again).
const MAX_KNOWN_PEERS: usize = 1024;

impl Peers {
    pub fn new(
        base: String,
        routes: Arc<Routes>,
        broker: Arc<Broker>,
        local: LocalGateway,
        credentials: Vec<Arc<PeerCredential>>,
    ) -> Self {
        let peers = Self {
            base,
            routes,
            broker,
            access: local.access,
            dedupe: local.dedupe,
            credentials: std::sync::RwLock::default(),
            api_key_headers: Mutex::default(),
            owned: Mutex::default(),
            dialects: Mutex::default(),
        };
        peers.set_credentials(credentials);
        peers
    }

    /// What roostd sends to peers from now on (`a2a.peers`, re-read on SIGHUP).
    pub fn set_credentials(&self, mut credentials: Vec<Arc<PeerCredential>>) {
        credentials.sort_by_key(|c| std::cmp::Reverse(c.prefix.len()));
        *self
            .credentials
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = credentials;
        if let Ok(mut headers) = self.api_key_headers.lock() {
            headers.clear();
        }
    }

    fn known_dialect(&self, peer_url: &str) -> Option<Dialect> {
        self.dialects.lock().ok()?.get(peer_url).copied()
    }

    /// The dialect a peer speaks: as learned, else as its card says (1.0
    /// without one).
    async fn dialect_of(&self, peer_url: &str) -> Dialect {
        match self.known_dialect(peer_url) {
            Some(d) => d,
            None => {
                let d = self.card_dialect(peer_url).await.unwrap_or(Dialect::V10);
                self.learn_dialect(peer_url, d);
                d
            }
        }
    }

    fn learn_dialect(&self, peer_url: &str, dialect: Dialect) {
        if let Ok(mut known) = self.dialects.lock() {
            if known.len() >= MAX_KNOWN_PEERS {
                known.clear();
            }
            known.insert(peer_url.to_string(), dialect);
        }
    }

    /// The route of a peer URL that points at this daemon's gateway.
    fn local_route<'a>(&self, peer_url: &'a str) -> Option<&'a str> {
        let rest = peer_url.strip_prefix(&self.base)?.strip_prefix("/a2a/")?;
        let route = rest.trim_end_matches('/');
        (!route.is_empty() && !route.contains('/')).then_some(route)
    }

    /// A message to a route of this daemon: an A2A request like any other,
    /// taken in-process. It needs the route's token, which roostd presents
    /// only as `a2a.peers` says for this URL (never on its own authority);
    /// its owner is the sending session (`session:<name>`, no client's), so
    /// contexts, tasks and retried message ids stay that session's own.
    async fn local(
        &self,
        peer_url: &str,
        route: &str,
        m: OutMessage,
    ) -> Result<SentTask, SendError> {
        let Some(session) = self.routes.get(route) else {
            return Err(SendError::NoRoute(route.to_string()));
        };
        let refused = |source: RemoteError| SendError::Remote {
            peer: crate::policy::redact_url(peer_url),
            source: Box::new(source),
        };
        let given = self.credential_for(peer_url).and_then(|c| {
            c.token
                .clone()
                .or_else(|| c.api_key.as_ref().map(|k| Arc::clone(&k.key)))
        });
        let rules = self.access.snapshot();
        if rules.caller(&session.name, given.as_deref()).is_none() {
            return Err(refused(RemoteError::Unauthorized {
                status: http::StatusCode::UNAUTHORIZED,
                configured: given.is_some(),
            }));
        }
        let owner = self.owner_of(&m.caller);
        if let Some(context) = m.context_id.as_deref()
            && let Some(first) = self
                .broker
                .context_owner(&session.name, context)
                .await
                .map_err(|e| SendError::Local(Box::new(e)))?
            && first != owner
        {
            return Err(refused(RemoteError::Refused {
                code: -32602,
                message: format!(
                    "contextId '{context}' is another client's at this agent: send your own \
                     (or none, for a new one)"
                ),
            }));
        }
        let message = json!({
            "messageId": m.message_id, "contextId": m.context_id, "role": "ROLE_USER",
            "parts": [{"text": m.text}],
        });
        let (task, _) = self
            .broker
            .submit(NewTask {
                session_id: &session.id,
                route: &session.name,
                owner: &owner,
                message_id: &m.message_id,
                context_id: m.context_id.as_deref(),
                text: &m.text,
                message_json: &message.to_string(),
                parts: message["parts"].as_array().map_or(&[], Vec::as_slice),
                traceparent: Some(&m.traceparent),
                dedupe: self.dedupe,
                tick: None,
            })
            .await
            .map_err(|e| SendError::Local(Box::new(e)))?;
        Ok(SentTask {
            task_id: task.id.into(),
            context_id: task.context_id,
            state: task.state.as_str().to_string(),
        })
    }

    /// The owner a session's messages to this daemon's routes are recorded
    /// with: its name (`:` is in no client's name, and `""` is the routes'
    /// one-token callers'), so it keeps its conversations across restarts.
    fn owner_of(&self, session_id: &str) -> String {
        let name = self
            .routes
            .get(session_id)
            .map_or_else(|| session_id.to_string(), |r| r.name);
        format!("session:{name}")
    }
}

/// What a message to a route of this daemon is checked against, as a
/// request to its gateway would be.
pub struct LocalGateway {
    pub access: Arc<super::access::Access>,
    /// `a2a.dedupe_message_ids`.
    pub dedupe: bool,
}

#[async_trait::async_trait]
impl Outbox for Peers {
    async fn send(&self, peer_url: &str, m: OutMessage) -> Result<SentTask, SendError> {
        if let Some(route) = self.local_route(peer_url) {
            return self.local(peer_url, route, m).await;
        }
        self.remote(peer_url, &m)
            .await
            .map_err(|source| SendError::Remote {
                peer: peer_url.to_string(),
                source: Box::new(source),
            })
    }

    async fn call(
        &self,
        peer_url: &str,
        m: OutMessage,
        wait: Duration,
        progress: crate::runtime::peer_stream::PeerProgress,
    ) -> Result<PeerAnswer, SendError> {
        if let Some(route) = self.local_route(peer_url) {
            return self.call_local(peer_url, route, m, wait, progress).await;
        }
        match self.call_remote(peer_url, &m, wait, progress).await {
            Err(RemoteError::Deadline { task_id }) => Err(SendError::Deadline {
                task_id,
                secs: wait.as_secs(),
            }),
            other => other.map_err(|source| SendError::Remote {
                peer: peer_url.to_string(),
                source: Box::new(source),
            }),
        }
    }

    async fn resolve(&self, target: &PeerTarget) -> Result<PeerInterface, SendError> {
        self.resolve_card(target)
            .await
            .map_err(|source| SendError::Remote {
                peer: crate::policy::redact_url(&target.url),
                source: Box::new(source),
            })
    }

    async fn exchange(
        &self,
        at: &PeerInterface,
        call: PeerCall,
        progress: crate::runtime::peer_stream::PeerProgress,
    ) -> Result<PeerTask, SendError> {
        let secs = call.wait.as_secs();
        match self.exchange_remote(at, call, progress).await {
            Err(RemoteError::Deadline { task_id }) => Err(SendError::Deadline { task_id, secs }),
            other => other.map_err(|source| SendError::Remote {
                peer: crate::policy::redact_url(&at.url),
                source: Box::new(source),
            }),
        }
    }
}

impl Peers {
    /// A message to a peer elsewhere, in the dialect it speaks: its card's,
    /// else 1.0, and 0.3 once a 1.0 `SendMessage` was unknown to it.
    async fn remote(&self, peer_url: &str, m: &OutMessage) -> Result<SentTask, RemoteError> {
        let dialect = self.dialect_of(peer_url).await;
        let auth = self.auth_for(peer_url).await?;
        let sent = match remote(peer_url, m, dialect, &auth).await {
            Err(RemoteError::Refused { code, .. }) if dialect == Dialect::V10 && code == -32601 => {
                tracing::info!(peer = %peer_url, "the peer does not know A2A 1.0's SendMessage; sending 0.3's message/send");
                self.learn_dialect(peer_url, Dialect::V03);
                (Dialect::V03, remote(peer_url, m, Dialect::V03, &auth).await)
            }
            other => (dialect, other),
        };
        if let (d, Ok(task)) = &sent {
            let dialect = match d {
                Dialect::V10 => "1.0",
                Dialect::V03 => "0.3",
            };
            tracing::debug!(peer = %peer_url, dialect, task_id = %task.task_id, credentials = auth.configured(), "A2A message taken by a peer elsewhere");
        }
        sent.1
    }
}

impl Peers {
    /// The dialect a peer's agent card says it speaks (`None`: no card):
    /// 1.0 when an interface says 1.x, else 0.3 when the card is 0.3's.
    async fn card_dialect(&self, peer_url: &str) -> Option<Dialect> {
        let base = peer_url.trim_end_matches('/');
        let origin_end = base
            .find("://")
            .map(|i| i + 3)
            .and_then(|i| base[i..].find('/').map(|j| i + j))
            .unwrap_or(base.len());
        let mut urls = vec![format!("{base}{CARD_PATH}")];
        if origin_end < base.len() {
            urls.push(format!("{}{CARD_PATH}", &base[..origin_end]));
        }
        for url in urls {
            let Ok(card) = self.read_card(&url).await else {
                continue;
            };
            let says_1x = card["supportedInterfaces"].as_array().is_some_and(|i| {
                i.iter().any(|i| {
                    i["protocolVersion"]
                        .as_str()
                        .is_some_and(|v| v.starts_with("1."))
                })
            });
            let says_03 = card["protocolVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("0."))
                || card["supportedInterfaces"].as_array().is_some_and(|i| {
                    !i.is_empty()
                        && i.iter().all(|i| {
                            i["protocolVersion"]
                                .as_str()
                                .is_some_and(|v| v.starts_with("0."))
                        })
                });
            return Some(if !says_1x && says_03 {
                Dialect::V03
            } else {
                Dialect::V10
            });
        }
        None
    }
}

/// Where an agent card is, under an agent's URL or at its origin.
const CARD_PATH: &str = "/.well-known/agent-card.json";

/// A guest's message as the dialect writes it: one text part, the role user.
fn message_json(m: &OutMessage, dialect: Dialect) -> Value {
    let mut message = match dialect {
        Dialect::V10 => {
            json!({"messageId": m.message_id, "role": "ROLE_USER", "parts": [{"text": m.text}]})
        }
        Dialect::V03 => json!({"kind": "message", "messageId": m.message_id, "role": "user",
                   "parts": [{"kind": "text", "text": m.text}]}),
    };
    if let Some(context) = &m.context_id {
        message["contextId"] = json!(context);
    }
    message
}

/// The headers of a JSON-RPC request to a peer.
fn rpc_headers<'a>(m: &'a OutMessage, dialect: Dialect, auth: &'a Auth) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        ("content-type", "application/json"),
        ("traceparent", m.traceparent.as_str()),
    ];
    if dialect == Dialect::V10 {
        headers.push(("a2a-version", "1.0"));
    }
    headers.extend(auth.pairs());
    headers
}

/// One send to a peer elsewhere, returning as soon as it has the task:
/// 1.0's `SendMessage` (`returnImmediately`) or 0.3's `message/send`
/// (`blocking: false`), with the peer's token if roostd has one for it.
async fn remote(
    peer_url: &str,
    m: &OutMessage,
    dialect: Dialect,
    auth: &Auth,
) -> Result<SentTask, RemoteError> {
    let (method, configuration) = match dialect {
        Dialect::V10 => ("SendMessage", json!({"returnImmediately": true})),
        Dialect::V03 => ("message/send", json!({"blocking": false})),
    };
    let request = json!({
        "jsonrpc": "2.0", "id": 1, "method": method,
        "params": {"message": message_json(m, dialect), "configuration": configuration},
    });
    let headers = rpc_headers(m, dialect, auth);
    let reply = crate::http_client::exchange_as(
        http::Method::POST,
        peer_url,
        &headers,
        request.to_string().into_bytes(),
        MAX_REPLY_BYTES,
        auth.tls.as_ref(),
    )
    .await?;
    if reply.status == http::StatusCode::UNAUTHORIZED || reply.status == http::StatusCode::FORBIDDEN
    {
        return Err(RemoteError::Unauthorized {
            status: reply.status,
            configured: auth.configured(),
        });
    }
    let body: Value =
        serde_json::from_slice(&reply.body).map_err(|_| RemoteError::NotJson(reply.status))?;
    if let Some(error) = body.get("error") {
        return Err(RemoteError::Refused {
            code: error["code"].as_i64().unwrap_or_default(),
            message: error["message"]
                .as_str()
                .unwrap_or("no message")
                .to_string(),
        });
    }
    let result = &body["result"];
    // 1.0 wraps the answer (`task` or `message`); 0.3 is it, with a `kind`.
    let (task, message) = match result["kind"].as_str() {
        Some("task") => (Some(result), None),
        Some("message") => (None, Some(result)),
        _ => (result.get("task"), result.get("message")),
    };
    if let Some(task) = task {
        let state = task["status"]["state"].as_str().unwrap_or_default();
        return Ok(SentTask {
            task_id: task["id"].as_str().unwrap_or_default().to_string(),
            context_id: task["contextId"].as_str().unwrap_or_default().to_string(),
            state: wire::parse_state(state)
                .map_or_else(|| state.to_string(), |s| s.as_str().to_string()),
        });
    }
    if let Some(message) = message {
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
