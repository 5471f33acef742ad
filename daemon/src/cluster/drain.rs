//! Draining a node before maintenance (`roostctl drain NODE`): asked of
//! any node, carried to NODE over `roost.drain.<node>`; there each session
//! takes no more tasks, finishes those it runs, and ends with its queued
//! tasks still queued; its route record then names the least loaded other
//! node (`moving_from` this one), which brings the route's tasks in from
//! the journal and starts the session under the same id and name
//! (`failover.rs`). A draining node takes no new sessions and is no
//! node's choice for a route.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use roost_wire::api::{DrainReport, DrainRequest, DrainedSession};

use super::Cluster;
use super::routes::RouteRecord;
use crate::ids::SessionId;

/// How long a moved route may take to start on its new node.
const ARRIVE_WITHIN: Duration = Duration::from_secs(60);

fn subject(node: &str) -> String {
    format!("roost.drain.{node}")
}

/// A node's refusal of a drain (one is under way there).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Refused {
    refused: String,
}

/// Why a drain could not be asked or done.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("no live node is named '{0}' (roostctl nodes lists them)")]
    NoNode(String),
    #[error("node '{node}' did not answer the drain: {why}")]
    Unanswered { node: String, why: String },
    #[error("this node has not joined the cluster")]
    NotJoined,
}

impl Cluster {
    /// Drains node `request.node`: this one, or another asked over NATS.
    pub async fn drain(self: &Arc<Self>, request: DrainRequest) -> Result<DrainReport, DrainError> {
        let within = within(&request);
        if request.node == self.node {
            return Ok(self.drain_here(within).await);
        }
        let joined = self.joined.get().ok_or(DrainError::NotJoined)?;
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let asked = async_nats::Request::new()
            .payload(body.into())
            .timeout(Some(within + ARRIVE_WITHIN * 2));
        let answer = joined
            .client
            .send_request(subject(&request.node), asked)
            .await
            .map_err(|e| match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    DrainError::NoNode(request.node.clone())
                }
                _ => DrainError::Unanswered {
                    node: request.node.clone(),
                    why: e.to_string(),
                },
            })?;
        if let Ok(busy) = serde_json::from_slice::<Refused>(&answer.payload) {
            return Err(DrainError::Unanswered {
                node: request.node.clone(),
                why: busy.refused,
            });
        }
        serde_json::from_slice(&answer.payload).map_err(|e| DrainError::Unanswered {
            node: request.node.clone(),
            why: e.to_string(),
        })
    }

    /// Moves every session this node runs to another node.
    async fn drain_here(self: &Arc<Self>, within: Duration) -> DrainReport {
        self.draining.store(true, Ordering::Relaxed);
        tracing::warn!(node = %self.node, "draining: this node's sessions move to other nodes");
        let mut report = DrainReport {
            node: self.node.clone(),
            sessions: Vec::new(),
        };
        let mut mine = self.mine.all();
        mine.sort_by(|a, b| a.route.cmp(&b.route));
        for record in mine {
            let moved = self.move_one(&record, within).await;
            if let Err(why) = &moved {
                tracing::error!(route = %record.route, session_id = %record.session_id, why, "drain: not moved");
            }
            report.sessions.push(DrainedSession {
                route: record.route.clone(),
                id: record.session_id.clone(),
                to: moved.as_ref().ok().cloned(),
                error: moved.err(),
            });
        }
        report
    }

    /// Moves one session: ends it here (its running tasks finished), hands
    /// its route to the least loaded other node, waits until it runs there.
    async fn move_one(&self, record: &RouteRecord, within: Duration) -> Result<String, String> {
        let (Some(joined), Some(movers)) = (self.joined.get(), self.movers.get()) else {
            return Err("this node has not joined the cluster".into());
        };
        let nodes = self.nodes().await.map_err(|e| e.to_string())?;
        let target = nodes
            .iter()
            .filter(|n| n.node != self.node && !n.draining)
            .min_by_key(|n| (n.live_sessions, n.node.clone()))
            .map(|n| n.node.clone())
            .ok_or("no other live node to move it to")?;
        let id = SessionId::from(record.session_id.as_str());
        movers.adopt.drain(id, within).await?;
        self.mine.remove(&record.route, &record.session_id);
        // The route's record names the new node (compare-and-set: the
        // session's end, marked in the background, may come first or after).
        let bucket = joined.routes.bucket();
        let mut handed = false;
        for _ in 0..20 {
            let entry = bucket
                .entry(record.route.as_str())
                .await
                .map_err(|e| e.to_string())?
                .filter(|e| e.operation == kv::Operation::Put)
                .ok_or("its route record is gone")?;
            let mut held: RouteRecord =
                serde_json::from_slice(&entry.value).map_err(|e| e.to_string())?;
            if held.session_id != record.session_id || held.node != self.node {
                return Err(format!(
                    "route '{}' was claimed by node {} meanwhile",
                    held.route, held.node
                ));
            }
            held.node = target.clone();
            held.live = true;
            held.moving_from = Some(self.node.clone());
            if held.start.is_none() {
                held.start = record.start.clone();
            }
            let bytes = serde_json::to_vec(&held).unwrap_or_default();
            if bucket
                .update(record.route.as_str(), bytes.into(), entry.revision)
                .await
                .is_ok()
            {
                handed = true;
                break;
            }
        }
        if !handed {
            return Err("its route record kept changing".into());
        }
        // Running there: the new node's claim cleared `moving_from`.
        let began = Instant::now();
        loop {
            if let Ok(Some(entry)) = bucket.entry(record.route.as_str()).await
                && let Ok(held) = serde_json::from_slice::<RouteRecord>(&entry.value)
                && held.node == target
                && held.live
                && held.moving_from.is_none()
            {
                return Ok(target);
            }
            if began.elapsed() > ARRIVE_WITHIN {
                return Err(format!(
                    "handed to node {target}, which has not started it within {} s",
                    ARRIVE_WITHIN.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Answers drain requests for this node until roostd stops.
pub(super) async fn serve(cluster: Arc<Cluster>, client: async_nats::Client) -> Result<(), String> {
    let subject = subject(&cluster.node);
    let busy = Refused {
        refused: format!("a drain of node {} is already under way", cluster.node),
    };
    let bound = super::Bound {
        most: 1,
        busy: serde_json::to_vec(&busy).unwrap_or_default(),
    };
    super::answer_requests(
        cluster,
        client,
        subject,
        "drain",
        bound,
        |cluster, body| async move {
            let asked = serde_json::from_slice::<DrainRequest>(&body).ok()?;
            let report = cluster.drain_here(within(&asked)).await;
            Some(serde_json::to_vec(&report).unwrap_or_default())
        },
    )
    .await
}

/// How long a drain lets running tasks finish (default 60 s, 1 s to 1 h).
fn within(request: &DrainRequest) -> Duration {
    Duration::from_secs(request.timeout_secs.unwrap_or(60).clamp(1, 3600))
}
