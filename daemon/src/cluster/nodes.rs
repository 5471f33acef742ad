//! The node registry: the `roost-nodes` key-value bucket, each node's
//! record (kept alive by its heartbeat; a dead node's expires), this
//! node's name, and the live nodes as the control API and the claim rule
//! read them.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use super::{Cluster, ClusterError};
use crate::config::ClusterConfig;

/// The key-value bucket nodes register in.
pub const NODES_BUCKET: &str = "roost-nodes";

/// What a node says of itself in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: String,
    /// This process (a restart under the same name is a new instance).
    pub instance: String,
    /// The host and state directory it runs from: a record with the same
    /// two is this node's own, left by the process before a restart.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub state_dir: String,
    /// Where its A2A gateway answers.
    pub gateway_url: String,
    /// Instances its pool holds (`pool.max_instances`).
    pub capacity: u64,
    pub labels: BTreeMap<String, String>,
    pub version: String,
    /// Live sessions at its latest heartbeat (its load).
    #[serde(default)]
    pub live_sessions: u64,
    /// Unix milliseconds of its latest heartbeat.
    pub heartbeat_ms: u64,
    /// Being drained (`roostctl drain`): no node moves a route to it.
    #[serde(default)]
    pub draining: bool,
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This host's name, as the kernel has it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The node's name: `cluster.node`, else the host's name.
pub fn node_name(config: &ClusterConfig) -> Result<String, ClusterError> {
    if let Some(node) = &config.node {
        return Ok(node.clone());
    }
    let host = host_name().to_ascii_lowercase();
    crate::manifest::validate_name(&host).map_err(|why| ClusterError::NoName {
        host: host.clone(),
        why,
    })?;
    Ok(host)
}

impl Cluster {
    /// Every node whose heartbeat is current, by name.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, ClusterError> {
        use futures::StreamExt;
        let read = |e: &dyn std::fmt::Display| ClusterError::Read(e.to_string());
        let Some(bucket) = self.joined.get().map(|j| &j.nodes) else {
            let why = self
                .trying
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            return Err(ClusterError::Read(
                why.unwrap_or_else(|| "not joined".into()),
            ));
        };
        let mut keys = bucket.keys().await.map_err(|e| read(&e))?;
        let mut nodes = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| read(&e))?;
            if let Some(value) = bucket.get(&key).await.map_err(|e| read(&e))?
                && let Ok(record) = serde_json::from_slice::<NodeRecord>(&value)
            {
                nodes.push(record);
            }
        }
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(nodes)
    }
}

pub(super) async fn put(bucket: &kv::Store, me: &NodeRecord) -> Result<u64, kv::PutError> {
    let value = serde_json::to_vec(me).unwrap_or_default();
    bucket.put(&me.node, value.into()).await
}

/// Puts the node's record again three times per lifetime, until the node
/// leaves. A failed beat is logged: a node cut off from NATS concludes
/// nothing about the others and keeps serving what it runs; when a beat
/// gets through again, its routes are written again.
pub(super) async fn heartbeat(
    cluster: std::sync::Arc<Cluster>,
    bucket: kv::Store,
    mut me: NodeRecord,
    ttl: Duration,
) {
    let every = (ttl / 3).max(Duration::from_millis(200));
    let mut failed = false;
    loop {
        tokio::select! {
            () = cluster.stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        me.heartbeat_ms = now_ms();
        me.live_sessions = cluster.load.get().map_or(0, |live| live());
        me.draining = cluster.draining.load(std::sync::atomic::Ordering::Relaxed);
        match put(&bucket, &me).await {
            Ok(_) if failed => {
                failed = false;
                tracing::info!(node = %me.node, "cluster heartbeat gets through again");
                cluster.claim_mine().await;
            }
            Ok(_) => {}
            Err(error) => {
                failed = true;
                tracing::warn!(node = %me.node, %error, "cluster heartbeat failed; trying again");
            }
        }
    }
}

/// The age of a heartbeat, in milliseconds.
pub fn heartbeat_age_ms(record: &NodeRecord) -> u64 {
    now_ms().saturating_sub(record.heartbeat_ms)
}
