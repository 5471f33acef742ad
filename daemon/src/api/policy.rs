//! `POST /v1/policy`: the effective policy a capsule would run under on this
//! host, before it runs (what `roostctl policy` prints).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use roost_wire::api::{PolicyLimits, PolicyReport, PolicyRequest};

use super::{ApiError, ApiState};
use crate::manifest::CapsuleManifest;

pub(super) async fn policy(
    State(state): State<ApiState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PolicyReport>, ApiError> {
    let body = body.map_err(|r| ApiError::bad_request(format!("cannot read request body: {r}")))?;
    let request: PolicyRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid policy request: {e}; expected {{\"path\": \"/abs/capsule\"}}"
        ))
    })?;
    let path = std::path::PathBuf::from(&request.path);
    if !path.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "path must be an absolute path, got '{}'",
            request.path
        )));
    }
    report(&state.host, path).await.map(Json)
}

/// The policy the capsule at `path` (absolute) runs under on this host.
pub(super) async fn report(
    host: &super::HostFacts,
    path: std::path::PathBuf,
) -> Result<PolicyReport, ApiError> {
    let manifest = tokio::task::spawn_blocking(move || CapsuleManifest::load(&path))
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_manifest",
                e.to_string(),
            )
        })?;
    let config = &host.config;
    let policy = &manifest.policy;
    let timeout_secs = policy
        .limits
        .timeout_secs
        .unwrap_or(config.limits.timeout_secs);
    let memory_mb = policy.limits.memory_mb.unwrap_or(config.limits.memory_mb);
    let rlimits = crate::tools::rlimits(
        policy,
        std::time::Duration::from_secs(timeout_secs),
        memory_mb << 20,
    );
    // Whether a declared tool is native is known only once its bundle is
    // read; any tool artifact counts here.
    let native_tools = !policy.shell_allow.is_empty()
        || manifest
            .artifacts
            .iter()
            .any(|a| a.runtime == roost_wire::artifact::ArtifactRuntime::Tool);
    let (native, missing) = crate::sandbox::assess(native_tools, &host.jail, &host.support);
    let refused = match crate::staging::protected(config, &host.jail).check(policy) {
        Err(e) => Some(e.to_string()),
        Ok(()) => (!missing.is_empty()
            && config.sandbox.unenforceable == crate::config::Unenforceable::Refuse)
            .then(|| format!("this host cannot enforce: {}", missing.join("; "))),
    };
    let paths = |v: &[std::path::PathBuf]| v.iter().map(|p| p.display().to_string()).collect();
    Ok(PolicyReport {
        capsule: manifest.name.clone(),
        version: manifest.version.clone(),
        manifest: manifest.manifest_path.display().to_string(),
        tools: manifest.tools.clone(),
        artifacts: manifest
            .artifacts
            .iter()
            .map(|a| format!("{}@{} ({})", a.name, a.version, a.runtime))
            .collect(),
        network_allow: policy
            .network_allow
            .iter()
            .map(ToString::to_string)
            .collect(),
        tool_tcp_ports: policy.tcp_connect_ports(),
        tool_udp: policy.tools_may_use_udp(),
        tool_unix_sockets: policy.unix_sockets,
        read_only: paths(&policy.read_only),
        read_write: paths(&policy.read_write),
        capsule_files: paths(&crate::manifest::paths::read_by_roostd(&manifest)),
        shell_allow: policy.shell_allow.clone(),
        shell_strip_env: policy.shell_strip_env.clone(),
        env_allow: policy.env_allow.clone(),
        limits: PolicyLimits {
            timeout_secs,
            memory_mb,
            tool_cpu_secs: rlimits.cpu_secs.unwrap_or(0),
            tool_processes: rlimits.processes.unwrap_or(0),
            tool_open_files: rlimits.open_files.unwrap_or(0),
            tool_output_bytes: rlimits.file_size_bytes.unwrap_or(0),
        },
        guests: format!(
            "wasmtime: WASI with only the workdir (and filesystem paths) preopened, \
             outgoing HTTP only through the allow-list, memory and deadline limits, \
             files up to {} bytes",
            policy.limits.file_size_bytes()
        ),
        native_tools: native,
        refused,
    })
}
