//! What a guest's A2A messages and calls ask of the gateway's client, and
//! what comes back: the [`Outbox`] port (implemented by `a2a::client`) and
//! its vocabulary — a message sent, a peer named by card or endpoint, the
//! interface a call speaks, the peer's task as a call leaves it — with no
//! HTTP here.

use super::catalog::PortError;

/// A message a guest sends to an A2A peer (`murmur:message/send`).
#[derive(Debug, Clone)]
pub struct OutMessage {
    pub message_id: String,
    pub context_id: Option<String>,
    pub text: String,
    /// The W3C `traceparent` of the call (the current task's trace).
    pub traceparent: String,
    /// The session that sends it: a peer on this daemon records it as the
    /// task's owner, as a client's token would.
    pub caller: String,
}

/// The task a peer made of a sent message.
#[derive(Debug, Clone, PartialEq)]
pub struct SentTask {
    pub task_id: String,
    pub context_id: String,
    /// 0.3 spelling (`submitted`, `completed`, …).
    pub state: String,
}

/// How a peer's task ended (`murmur:peer/call`).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerAnswer {
    pub task_id: String,
    pub context_id: String,
    /// 0.3 spelling: `completed`, `failed`, `canceled`, `rejected`,
    /// `input-required`.
    pub state: String,
    /// The answer's text, else the last status message.
    pub text: String,
}

/// An A2A binding (`murmur:peer@0.2.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerBinding {
    JsonRpc,
    HttpJson,
    Grpc,
}

/// Where a guest names a peer (`murmur:peer/call@0.2.0`'s `peer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTarget {
    /// The card's URL, the agent's base URL, or (`endpoint`) the interface.
    pub url: String,
    pub binding: Option<PeerBinding>,
    /// `Some(true)`: A2A 0.3; `Some(false)`: 1.0; `None`: the newest.
    pub v03: Option<bool>,
    pub endpoint: bool,
    pub tenant: Option<String>,
}

/// The interface a call speaks: from the peer's card, or as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInterface {
    /// Its URL (gRPC: `host:port`, or a URL).
    pub url: String,
    pub binding: PeerBinding,
    /// A2A 0.3 (else 1.0).
    pub v03: bool,
    /// gRPC 1.0's tenant.
    pub tenant: Option<String>,
}

/// What a call asks of a peer's interface. Messages and parts are A2A 1.0's
/// ProtoJSON (the binding's client writes its own version's).
#[derive(Debug, Clone)]
pub enum PeerOp {
    /// A `Message`; a `TaskPushNotificationConfig`-shaped push config.
    Send {
        message: serde_json::Value,
        streaming: bool,
        push: Option<serde_json::Value>,
    },
    Subscribe(String),
    Get(String),
    Cancel(String),
}

/// A peer's task as a call left it (1.0 Part objects).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerTask {
    pub task_id: String,
    pub context_id: String,
    /// 0.3 spelling (`completed`, `input-required`, …).
    pub state: String,
    /// Its latest status message's parts, or a message answer's.
    pub message: Vec<serde_json::Value>,
    /// Each artifact's id and parts, whole, in the order they came.
    pub artifacts: Vec<(String, Vec<serde_json::Value>)>,
}

/// A call on a peer's interface (`Outbox::exchange`).
#[derive(Debug, Clone)]
pub struct PeerCall {
    pub op: PeerOp,
    /// Return after the first event (the task as the peer took it).
    pub accepted_only: bool,
    pub wait: std::time::Duration,
    /// The W3C `traceparent` of the call.
    pub traceparent: String,
    /// The session that calls: with roostd's credentials for the peer, it
    /// follows, continues or cancels only tasks it sent there itself.
    pub caller: String,
}

/// Delivers guests' A2A messages (the gateway's client; peers hosted by this
/// daemon are reached in-process). The network policy is checked before.
#[async_trait::async_trait]
pub trait Outbox: Send + Sync {
    async fn send(&self, peer_url: &str, message: OutMessage) -> Result<SentTask, SendError>;
    /// Sends and waits up to `wait` for the peer's task to end or to need
    /// input; the text the peer streams meanwhile goes to `progress`, and
    /// what it sends is held to `peer_stream`'s limits.
    async fn call(
        &self,
        peer_url: &str,
        message: OutMessage,
        wait: std::time::Duration,
        progress: super::peer_stream::PeerProgress,
    ) -> Result<PeerAnswer, SendError>;
    /// The interface `target` names: read from its card, or as given. The
    /// caller checks the network policy for the card's URL before, and for
    /// the interface's before using it.
    async fn resolve(&self, target: &PeerTarget) -> Result<PeerInterface, SendError>;
    /// One call on a peer's interface, followed as it says; the text the
    /// peer streams meanwhile goes to `progress`.
    async fn exchange(
        &self,
        at: &PeerInterface,
        call: PeerCall,
        progress: super::peer_stream::PeerProgress,
    ) -> Result<PeerTask, SendError>;
}

/// Why a guest's message did not reach its peer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no live session is routed at /a2a/{0}")]
    NoRoute(String),
    /// A peer on this daemon did not take the task.
    #[error(transparent)]
    Local(PortError),
    #[error("A2A peer {peer}: {source}")]
    Remote {
        peer: String,
        #[source]
        source: PortError,
    },
    #[error(
        "the peer's task {task_id} did not end within {secs} s (it goes on; ask the peer for it \
         by that id, or call again with a longer timeout)"
    )]
    Deadline { task_id: String, secs: u64 },
}
