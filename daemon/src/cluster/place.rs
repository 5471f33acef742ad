//! Placing a session on a node of the cluster (`roostctl start`, `--node
//! NAME|auto`, `--label KEY=VALUE`): the node is picked (the one named, or
//! the live node not being drained with the most free capacity among those
//! with the labels: the others' load as their last heartbeat said, this
//! node's as it is now), and the start request is carried to it over
//! `roost.start.<node>`; that node starts it as if asked itself and
//! answers with the session, or the error its control API would have
//! given (a `StartProgress`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use roost_wire::api::{ErrorDetail, StartProgress, StartRequest};

use super::{Cluster, NodeRecord};

/// What starts a session placed on this node (the control API's start).
pub type Starter = Arc<dyn Fn(StartRequest) -> BoxFuture<'static, StartProgress> + Send + Sync>;

/// How long a placed start may take (staging compiles the component).
const START_WITHIN: Duration = Duration::from_secs(300);

fn subject(node: &str) -> String {
    format!("roost.start.{node}")
}

/// Why a session could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    #[error("no live node is named '{0}' (roostctl nodes lists them)")]
    NoNode(String),
    #[error("node '{node}' does not have the labels asked ({wanted}); it has {has}")]
    Labels {
        node: String,
        wanted: String,
        has: String,
    },
    #[error("no live node that is not being drained has the labels asked ({0})")]
    NoMatch(String),
    #[error("node '{0}' is being drained; choose another (or --node auto)")]
    Draining(String),
    #[error("node '{node}' did not answer the start: {why}")]
    Unanswered { node: String, why: String },
    #[error("the cluster's node registry: {0}")]
    Registry(String),
}

fn labels_text(labels: &BTreeMap<String, String>) -> String {
    let text: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if text.is_empty() {
        "none".into()
    } else {
        text.join(",")
    }
}

impl Cluster {
    /// The node a start asking for `node` (a name, or `auto`) and `labels`
    /// goes to.
    pub async fn placement(
        &self,
        node: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, PlaceError> {
        let mut nodes = self
            .nodes()
            .await
            .map_err(|e| PlaceError::Registry(e.to_string()))?;
        // This node's own load is known now, not as of its last heartbeat.
        if let Some(live) = self.load.get() {
            for n in nodes.iter_mut().filter(|n| n.node == self.node) {
                n.live_sessions = live();
            }
        }
        let fits = |n: &NodeRecord| labels.iter().all(|(k, v)| n.labels.get(k) == Some(v));
        match node {
            Some(name) if name != "auto" => {
                let found = nodes
                    .iter()
                    .find(|n| n.node == name)
                    .ok_or_else(|| PlaceError::NoNode(name.to_string()))?;
                if !fits(found) {
                    return Err(PlaceError::Labels {
                        node: name.to_string(),
                        wanted: labels_text(labels),
                        has: labels_text(&found.labels),
                    });
                }
                if found.draining {
                    return Err(PlaceError::Draining(name.to_string()));
                }
                Ok(name.to_string())
            }
            // The most free capacity; on a tie this node, then by name.
            _ => nodes
                .iter()
                .filter(|n| fits(n) && !n.draining)
                .max_by_key(|n| {
                    (
                        n.capacity.saturating_sub(n.live_sessions),
                        n.node == self.node,
                        std::cmp::Reverse(n.node.clone()),
                    )
                })
                .map(|n| n.node.clone())
                .ok_or_else(|| PlaceError::NoMatch(labels_text(labels))),
        }
    }

    /// Starts `request` on node `node` (not this one): the session, or the
    /// error that node's control API gave.
    pub async fn place(
        &self,
        node: &str,
        request: &StartRequest,
    ) -> Result<StartProgress, PlaceError> {
        let unanswered = |why: String| PlaceError::Unanswered {
            node: node.to_string(),
            why,
        };
        let joined = self
            .joined
            .get()
            .ok_or_else(|| unanswered("this node has not joined the cluster".into()))?;
        let body = serde_json::to_vec(request).unwrap_or_default();
        let asked = async_nats::Request::new()
            .payload(body.into())
            .timeout(Some(START_WITHIN));
        let answer = joined
            .client
            .send_request(subject(node), asked)
            .await
            .map_err(|e| match e.kind() {
                async_nats::RequestErrorKind::NoResponders => PlaceError::NoNode(node.to_string()),
                _ => unanswered(e.to_string()),
            })?;
        serde_json::from_slice(&answer.payload).map_err(|e| unanswered(e.to_string()))
    }

    /// Sessions other nodes place on this one are started by `starter`.
    pub fn serve_starts(&self, starter: Starter) {
        let _ = self.starts.set(starter);
    }
}

/// Starts other nodes place on this one at once (each stages a capsule).
const MAX_PLACED: usize = 16;

/// Answers start requests other nodes place on this one, until roostd
/// stops.
pub(super) async fn serve(cluster: Arc<Cluster>, client: async_nats::Client) -> Result<(), String> {
    let subject = subject(&cluster.node);
    let busy = refused(
        503,
        "busy",
        format!(
            "node {} starts {MAX_PLACED} placed sessions at once; try again",
            cluster.node
        ),
    );
    let bound = super::Bound {
        most: MAX_PLACED,
        busy: serde_json::to_vec(&busy).unwrap_or_default(),
    };
    super::answer_requests(
        cluster,
        client,
        subject,
        "placed start",
        bound,
        |cluster, body| async move {
            let answer = match serde_json::from_slice::<StartRequest>(&body) {
                Err(e) => refused(400, "bad_request", format!("invalid start request: {e}")),
                Ok(mut asked) => {
                    // Placed here: started here, not placed again.
                    asked.node = None;
                    asked.node_labels.clear();
                    match cluster.starts.get() {
                        Some(start) => start(asked).await,
                        None => refused(503, "starting", "this node is still starting".into()),
                    }
                }
            };
            Some(serde_json::to_vec(&answer).unwrap_or_default())
        },
    )
    .await
}

fn refused(status: u16, code: &str, message: String) -> StartProgress {
    StartProgress::Error {
        status,
        error: ErrorDetail {
            code: code.into(),
            message,
        },
    }
}
