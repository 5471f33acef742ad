//! A session's control calls asked of a node that does not run it: carried
//! over `roost.control.<node>` to the node that does (the one the route
//! table names, else each other live node in turn), which answers them
//! through its own control API as if asked itself. So `roostctl wait`,
//! `stop`, `logs` or `trace` of a session placed on another node work from
//! any node.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::Cluster;

/// A control call carried to another node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forwarded {
    pub method: String,
    /// Path and query, as asked.
    pub path: String,
    pub content_type: Option<String>,
    /// Base64.
    pub body: String,
    /// Who asked, on which node (`uid 1000 (pid 42) on node b's control
    /// socket`): the answering node logs it with the call.
    #[serde(default)]
    pub caller: String,
}

/// That node's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answered {
    pub status: u16,
    pub content_type: Option<String>,
    /// Base64.
    pub body: String,
}

impl Forwarded {
    pub fn new(method: &str, path: &str, content_type: Option<String>, body: &[u8]) -> Self {
        Self {
            method: method.to_string(),
            path: path.to_string(),
            content_type,
            body: base64::engine::general_purpose::STANDARD.encode(body),
            caller: String::new(),
        }
    }

    /// The same call, saying who made it.
    pub fn by(self, caller: String) -> Self {
        Self { caller, ..self }
    }

    pub fn body(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .unwrap_or_default()
    }
}

impl Answered {
    pub fn new(status: u16, content_type: Option<String>, body: &[u8]) -> Self {
        Self {
            status,
            content_type,
            body: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    pub fn body(&self) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .unwrap_or_default()
    }
}

/// What answers control calls other nodes carry here (this node's control
/// API).
pub type Controls = Arc<dyn Fn(Forwarded) -> BoxFuture<'static, Answered> + Send + Sync>;

/// Carried control calls a node answers at once (each may wait up to
/// [`ANSWER_WITHIN`]).
const MAX_CARRIED: usize = 64;

/// The longest a carried call may take (`wait` polls up to 300 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(310);

fn subject(node: &str) -> String {
    format!("roost.control.{node}")
}

impl Cluster {
    /// Control calls other nodes carry here are answered by `controls`.
    pub fn serve_controls(&self, controls: Controls) {
        let _ = self.controls.set(controls);
    }

    /// Asks the node that runs session (or route) `id` — not this one —
    /// to answer `call`: the node the route table names, else each other
    /// live node in turn; the first answer other than `404`. `None`: no
    /// other node has it (or this node is not joined).
    pub async fn forward(&self, id: &str, call: &Forwarded) -> Option<(String, Answered)> {
        let joined = self.joined.get()?;
        let mut nodes: Vec<String> = Vec::new();
        if let Some(record) = self.route_record(id).await
            && record.node != self.node
        {
            nodes.push(record.node);
        }
        for node in self.nodes().await.unwrap_or_default() {
            if node.node != self.node && !nodes.contains(&node.node) {
                nodes.push(node.node);
            }
        }
        let body = serde_json::to_vec(call).ok()?;
        for node in nodes {
            let asked = async_nats::Request::new()
                .payload(body.clone().into())
                .timeout(Some(ANSWER_WITHIN));
            match joined.client.send_request(subject(&node), asked).await {
                Ok(reply) => match serde_json::from_slice::<Answered>(&reply.payload) {
                    Ok(answer) if answer.status != 404 => return Some((node, answer)),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(node, %error, "a node's answer to a carried control call cannot be read");
                    }
                },
                Err(error) => {
                    tracing::debug!(node, %error, "a node did not answer a carried control call");
                }
            }
        }
        None
    }
}

/// Answers the control calls other nodes carry here, until roostd stops.
pub(super) async fn serve(cluster: Arc<Cluster>, client: async_nats::Client) -> Result<(), String> {
    let max_payload = client.server_info().max_payload;
    let subject = subject(&cluster.node);
    let busy = refused(
        503,
        "busy",
        format!(
            "node {} answers {MAX_CARRIED} carried control calls at once; try again",
            cluster.node
        ),
    );
    let bound = super::Bound {
        most: MAX_CARRIED,
        busy: serde_json::to_vec(&busy).unwrap_or_default(),
    };
    super::answer_requests(
        cluster,
        client,
        subject,
        "carried control call",
        bound,
        move |cluster, body| async move {
            let answer = match serde_json::from_slice::<Forwarded>(&body) {
                Err(e) => refused(400, "bad_request", format!("invalid carried call: {e}")),
                Ok(call) => match cluster.controls.get() {
                    Some(controls) => controls(call).await,
                    None => refused(503, "starting", "this node is still starting".into()),
                },
            };
            let mut bytes = serde_json::to_vec(&answer).unwrap_or_default();
            if bytes.len() > max_payload {
                let too_big = refused(
                    502,
                    "answer_too_large",
                    format!(
                        "node {} has the session, but its answer ({} bytes) is more than NATS \
                         carries ({max_payload}); ask that node directly",
                        cluster.node,
                        bytes.len()
                    ),
                );
                bytes = serde_json::to_vec(&too_big).unwrap_or_default();
            }
            Some(bytes)
        },
    )
    .await
}

fn refused(status: u16, code: &str, message: String) -> Answered {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    Answered::new(
        status,
        Some("application/json".into()),
        body.to_string().as_bytes(),
    )
}
