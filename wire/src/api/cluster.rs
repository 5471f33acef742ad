//! The control API's wire types for a cluster: the nodes (in `/v1/health`),
//! every node's sessions (`GET /v1/cluster/sessions`) and draining a node
//! (`POST /v1/cluster/drain`).

use serde::{Deserialize, Serialize};

/// A node's view of its cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// This node's name.
    pub node: String,
    /// Every node whose heartbeat is current, by name (this one included).
    pub nodes: Vec<ClusterNode>,
    /// Why the node registry could not be read just now, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What `cluster.insecure` lets through (no authentication to NATS, no
    /// TLS beyond loopback), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure: Option<String>,
}

/// A node as the cluster's registry has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub node: String,
    /// Where its A2A gateway answers.
    pub gateway_url: String,
    /// Instances its pool holds.
    pub capacity: u64,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub version: String,
    /// Its live sessions at that heartbeat (its load).
    #[serde(default)]
    pub live_sessions: u64,
    /// How long ago its last heartbeat was written.
    pub heartbeat_age_ms: u64,
}

/// A session as the cluster's route table has it (`roostctl list --cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSession {
    /// The node that runs it (or ran it, when ended).
    pub node: String,
    pub id: String,
    /// Its route.
    pub name: String,
    pub capsule: String,
    pub version: String,
    /// When it started.
    pub started_at: String,
    /// `false`: it has ended (its tasks stay readable on its node).
    pub live: bool,
}

/// `GET /v1/cluster/sessions`: by node, then name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClusterSessionList {
    pub sessions: Vec<ClusterSession>,
}

/// `POST /v1/cluster/drain`: move node `node`'s sessions to other nodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    pub node: String,
    /// How long a session's running tasks may take to finish before they
    /// are stopped (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// A session `drain` moved, or could not.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DrainedSession {
    pub route: String,
    pub id: String,
    /// The node that runs it now (`None`: it was not moved; see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `POST /v1/cluster/drain` did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DrainReport {
    pub node: String,
    pub sessions: Vec<DrainedSession>,
}
