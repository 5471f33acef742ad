//! `POST /v1/registry?platform=P[&cluster=true]` (`roostctl publish
//! --to-daemon`, `--cluster`): an artifact bundle uploaded over the control
//! socket and published into roostd's own registry directory, which only
//! roostd's user can write under systemd, or into its cluster's registry
//! (which every node reads). The body is the zip `roostctl publish` packs,
//! bounded by `artifacts.max_bundle_mb` and checked as every bundle is.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use roost_wire::api::PublishReport;
use serde::Deserialize;

use super::{ApiError, ApiState};
use crate::registry::RegistryError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PublishQuery {
    platform: String,
    /// Into the cluster's registry rather than this node's.
    #[serde(default)]
    cluster: bool,
}

pub(super) async fn publish(
    State(state): State<ApiState>,
    query: Result<Query<PublishQuery>, QueryRejection>,
    body: Bytes,
) -> Result<Json<PublishReport>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if !roost_wire::artifact::valid_platform(&query.platform) {
        return Err(ApiError::bad_request(format!(
            "platform '{}' must be `any` or `<os>-<arch>` such as {}",
            query.platform,
            roost_wire::artifact::current_platform()
        )));
    }
    let max_bytes = state.host.config.artifacts.max_bundle_mb << 20;
    let registry = match (query.cluster, &state.host.cluster) {
        (false, _) => state.supervisor.registry(),
        (true, Some(cluster)) => cluster.registry(),
        (true, None) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_clustered",
                "--cluster publishes into a cluster's registry; this roostd is not a node of \
                 one (cluster.servers is unset; see docs/cluster.md). Publish into its own \
                 registry with --to-daemon",
            ));
        }
    };
    let done = crate::registry::publish(&*registry, body.to_vec(), query.platform, max_bytes)
        .await
        .map_err(refused)?;
    let m = &done.manifest;
    tracing::info!(
        artifact = %m.name,
        version = %m.version,
        platform = %done.published.bundle.platform,
        unchanged = done.published.unchanged,
        cluster = query.cluster,
        "published into {}",
        if query.cluster { "the cluster's registry" } else { "roostd's registry" }
    );
    Ok(Json(PublishReport {
        name: m.name.clone(),
        version: m.version.clone(),
        runtime: m.runtime.to_string(),
        platform: done.published.bundle.platform.clone(),
        path: done.path,
        sha256: done.published.bundle.sha256.clone(),
        size: done.published.bundle.size,
        unchanged: done.published.unchanged,
        kind: m.payload_kind_label().to_string(),
    }))
}

fn refused(e: RegistryError) -> ApiError {
    use roost_wire::artifact::LayoutError as L;
    let message = e.to_string();
    match e {
        RegistryError::ReadOnly(_) => {
            ApiError::new(StatusCode::CONFLICT, "read_only_registry", message)
        }
        RegistryError::Bundle(_) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_bundle", message)
        }
        RegistryError::Layout(L::AlreadyPublished { .. } | L::KindMismatch { .. }) => {
            ApiError::new(StatusCode::CONFLICT, "already_published", message)
        }
        RegistryError::Cluster(_) => {
            ApiError::new(StatusCode::BAD_GATEWAY, "cluster_unavailable", message)
        }
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "registry_error", message),
    }
}
