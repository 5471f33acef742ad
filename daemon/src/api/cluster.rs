//! What the control API says of the cluster this roostd is a node of: its
//! nodes (in `/v1/health`) and every node's sessions as the route table
//! has them (`GET /v1/cluster/sessions`, `roostctl list --cluster`); and
//! draining a node (`POST /v1/cluster/drain`, `roostctl drain`).

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use roost_wire::api::{ClusterSession, ClusterSessionList, DrainReport, DrainRequest};
use serde::Deserialize;

use super::{ApiError, ApiState};

/// The nodes of the cluster as its registry has them now.
pub(super) async fn status(cluster: &crate::cluster::Cluster) -> roost_wire::api::ClusterStatus {
    let (nodes, error) = match cluster.nodes().await {
        Ok(nodes) => (nodes, None),
        Err(error) => (Vec::new(), Some(error.to_string())),
    };
    roost_wire::api::ClusterStatus {
        node: cluster.node().to_string(),
        nodes: nodes
            .iter()
            .map(|n| roost_wire::api::ClusterNode {
                node: n.node.clone(),
                gateway_url: n.gateway_url.clone(),
                capacity: n.capacity,
                labels: n.labels.clone(),
                version: n.version.clone(),
                live_sessions: n.live_sessions,
                heartbeat_age_ms: crate::cluster::heartbeat_age_ms(n),
            })
            .collect(),
        error,
        insecure: cluster.weakness().map(str::to_string),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SessionsQuery {
    /// Ended sessions too.
    #[serde(default)]
    all: bool,
}

fn not_clustered() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "not_clustered",
        "this roostd is not a node of a cluster (cluster.servers is unset; see docs/cluster.md)",
    )
}

/// `POST /v1/cluster/drain`: moves node `node`'s sessions to the other
/// nodes (this node's, or another's asked over NATS); answers once each has
/// moved or could not.
pub(super) async fn drain(
    State(state): State<ApiState>,
    body: Result<Json<DrainRequest>, JsonRejection>,
) -> Result<Json<DrainReport>, ApiError> {
    let Json(request) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Some(cluster) = &state.host.cluster else {
        return Err(not_clustered());
    };
    // The name becomes a NATS subject: only a node name.
    crate::manifest::validate_name(&request.node)
        .map_err(|why| ApiError::bad_request(format!("node: {why}")))?;
    cluster.drain(request).await.map(Json).map_err(|e| match e {
        crate::cluster::DrainError::NoNode(_) => ApiError::not_found(e.to_string()),
        _ => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "cluster_unavailable",
            e.to_string(),
        ),
    })
}

/// `GET /v1/cluster/sessions[?all=true]`: every node's live sessions (and
/// ended ones with `all`), by node then name, from this node's copy of the
/// route table (no request to any node).
pub(super) async fn sessions(
    State(state): State<ApiState>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> Result<Json<ClusterSessionList>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Some(cluster) = &state.host.cluster else {
        return Err(not_clustered());
    };
    let mut sessions: Vec<ClusterSession> = cluster
        .route_records()
        .into_iter()
        .filter(|r| query.all || r.live)
        .map(|r| ClusterSession {
            node: r.node,
            id: r.session_id,
            name: r.route,
            capsule: r.capsule,
            version: r.version,
            started_at: r.since,
            live: r.live,
        })
        .collect();
    sessions.sort_by(|a, b| (&a.node, &a.name).cmp(&(&b.node, &b.name)));
    Ok(Json(ClusterSessionList { sessions }))
}
