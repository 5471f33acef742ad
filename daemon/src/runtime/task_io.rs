//! The A2A task a guest call works on, as the host interfaces see it: a
//! trait the runtime defines (`TaskIo`) and `tasks::TaskLink` implements
//! (the runtime knows no broker, inbox or event log), with what crosses it —
//! a client's reply to an input request, why one failed, how a handled
//! task ended.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// A client's answer to an input request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub message_id: String,
    pub text: String,
    /// Its parts (1.0 Part objects).
    pub parts: Vec<serde_json::Value>,
}

/// What a request for input asks: text, or parts (1.0 Part objects).
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Parts(Vec<serde_json::Value>),
}

/// How a request for input ended without an answer.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Nobody answered within the lifecycle's `input_timeout_secs` (the task failed).
    #[error("input-timeout")]
    Timeout,
    #[error("the task was canceled while it waited for input")]
    Canceled,
    #[error("the task store failed while asking for input; see roostd's log")]
    Store,
}

/// How a task's work ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done: the text is the task's answer artifact.
    Completed(String),
    /// Done, answered with a message (the text) instead of a task result.
    Reply(String),
    Failed(String),
    /// The agent declined the task.
    Rejected(String),
    /// Done, said with parts (`murmur:a2a@0.2.0`): the final status message
    /// and the artifacts, as 1.0 Part objects.
    CompletedWith(Box<Answer>),
    /// Done, answered with a message of these parts (1.0 Part objects).
    ReplyWith(Vec<serde_json::Value>),
    /// The client canceled it (the session goes on).
    Canceled,
    /// The session was stopped (the task fails).
    Stopped,
}

/// A task's answer said with parts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    /// The final status message (empty: none).
    pub message: Vec<serde_json::Value>,
    /// Each artifact's id and parts.
    pub artifacts: Vec<(String, Vec<serde_json::Value>)>,
}

/// One piece of one of the task's artifacts: text, or `part`, a 1.0 Part
/// object (data or file).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactUpdate {
    pub artifact_id: String,
    pub text: String,
    pub append: bool,
    pub last_chunk: bool,
    pub part: Option<serde_json::Value>,
}

/// The task a guest call works on.
#[async_trait::async_trait]
pub trait TaskIo: Send + Sync {
    fn task_id(&self) -> &str;
    fn context_id(&self) -> &str;
    /// Cancelled when the client cancels the task.
    fn cancel(&self) -> &CancellationToken;
    /// The task's W3C trace id: the client's, else one named after the task.
    fn trace_id(&self) -> String;
    /// The span the task's run continues (a W3C `traceparent`), when
    /// telemetry is on or the client sent one.
    fn traceparent(&self) -> Option<String> {
        None
    }
    /// Asks the task's client for input (the task goes to input-required).
    async fn request_input(&self, prompt: Prompt) -> Result<Reply, InputError>;
    /// A text chunk of the answer (or of the agent's thinking).
    async fn chunk(&self, text: &str, thinking: bool);
    async fn artifact(&self, update: ArtifactUpdate);
    /// A `working` status message of these parts (1.0 Part objects).
    async fn status(&self, parts: Vec<serde_json::Value>);
}

/// The task a session is working on now (set per task; tool calls read it).
pub type TaskSlot = Arc<Mutex<Option<Arc<dyn TaskIo>>>>;

/// A 32-hex-digit W3C trace id named after a roostd id (`tsk_<uuid>` gives
/// its uuid; anything else a hash of it).
pub fn trace_id_of(id: &str) -> String {
    let tail = id.rsplit('_').next().unwrap_or(id);
    if tail.len() == 32 && tail.bytes().all(|b| b.is_ascii_hexdigit()) {
        return tail.to_ascii_lowercase();
    }
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..16])
}
