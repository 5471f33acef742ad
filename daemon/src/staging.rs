//! Staging: everything that can be checked before a session exists (manifest,
//! name, workdir, limits, compiled component). A staging error creates no row.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use roost_ctl::api::StartRequest;

use crate::artifacts::{ArtifactError, StagedArtifacts};
use crate::manifest::{CapsuleManifest, ManifestError, validate_name};
use crate::policy::CapabilityPolicy;
use crate::runtime::{PreparedCapsule, RuntimeError};
use crate::supervisor::Shared;

/// Why a start request was refused; each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("{field} must be an absolute path, got '{value}'")]
    RelativePath { field: &'static str, value: String },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("invalid name: {0}")]
    Name(String),
    #[error("workdir {} does not exist or is not a directory: create it first", path.display())]
    Workdir { path: PathBuf },
    #[error(
        "capabilities.limits.memory_mb ({requested}) exceeds this daemon's pool.max_memory_mb \
         ({max}); lower the capsule's limit or raise the daemon's"
    )]
    MemoryLimit { requested: u64, max: u64 },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error(
        "this capsule has native or shell tools, but this host cannot enforce all of the tool \
         jail: missing {missing}. Run it on a host that can (see `roostctl doctor`), or set \
         sandbox.unenforceable: warn in roostd's config to accept less"
    )]
    Unenforceable { missing: String },
}

/// A capsule ready to launch.
pub struct Staged {
    pub request: StartRequest,
    pub manifest: CapsuleManifest,
    pub prepared: Arc<PreparedCapsule>,
    /// The directory the capsule should see, when the request names one.
    pub user_workdir: Option<PathBuf>,
    pub policy: Arc<CapabilityPolicy>,
    pub timeout: Duration,
    pub memory_bytes: u64,
    /// Verified, compiled artifacts, installed when the session dir exists.
    pub artifacts: StagedArtifacts,
    /// `tools:`, the names `invoke` accepts.
    pub allowlist: HashSet<String>,
    /// What the tool jail enforces for this session (recorded with it).
    pub sandbox: String,
}

/// Validates a start request, prepares its component and resolves, verifies and
/// compiles its artifacts (each cached per content hash). Writes nothing.
pub async fn stage(shared: &Shared, request: StartRequest) -> Result<Staged, StageError> {
    let config = &shared.config;
    let path = absolute("path", &request.path)?;
    let user_workdir = request
        .workdir
        .as_deref()
        .map(|w| absolute("workdir", w))
        .transpose()?;
    if let Some(name) = &request.name {
        validate_name(name).map_err(StageError::Name)?;
    }
    if let Some(dir) = &user_workdir
        && !dir.is_dir()
    {
        return Err(StageError::Workdir { path: dir.clone() });
    }
    let manifest = CapsuleManifest::load(&path)?;
    let memory_mb = manifest
        .policy
        .limits
        .memory_mb
        .unwrap_or(config.limits.memory_mb);
    if memory_mb > config.pool.max_memory_mb {
        return Err(StageError::MemoryLimit {
            requested: memory_mb,
            max: config.pool.max_memory_mb,
        });
    }
    let timeout_secs = manifest
        .policy
        .limits
        .timeout_secs
        .unwrap_or(config.limits.timeout_secs);
    let prepared = shared.runtime.prepare(&manifest.component).await?;
    let artifacts = crate::artifacts::stage(
        &shared.runtime,
        &shared.bundles,
        &*shared.registry,
        &manifest,
        config.artifacts.max_bundle_mb << 20,
    )
    .await?;
    let native_tools = !manifest.policy.shell_allow.is_empty()
        || artifacts
            .items
            .iter()
            .any(|i| i.implementation == Some(roost_ctl::artifact::Implementation::Native));
    let (sandbox, missing) =
        crate::sandbox::assess(native_tools, shared.jail_helper.is_some(), &shared.support);
    if !missing.is_empty() && config.sandbox.unenforceable == crate::config::Unenforceable::Refuse {
        return Err(StageError::Unenforceable {
            missing: missing.join("; "),
        });
    }
    Ok(Staged {
        sandbox,
        allowlist: manifest.tools.iter().cloned().collect(),
        artifacts,
        request,
        policy: Arc::new(manifest.policy.clone()),
        manifest,
        prepared,
        user_workdir,
        timeout: Duration::from_secs(timeout_secs),
        memory_bytes: memory_mb << 20,
    })
}

fn absolute(field: &'static str, value: &str) -> Result<PathBuf, StageError> {
    let path = Path::new(value);
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Err(StageError::RelativePath {
            field,
            value: value.to_string(),
        })
    }
}

/// Where a session's files go: with a user workdir the capsule sees it and
/// bookkeeping goes to `<dir>/.murmur/<id>/`; otherwise both are
/// `<state>/sessions/<id>/` (as upstream).
pub fn session_dirs(
    state_dir: &Path,
    user_workdir: Option<&Path>,
    session_id: &str,
) -> (PathBuf, PathBuf) {
    match user_workdir {
        Some(dir) => (dir.to_path_buf(), dir.join(".murmur").join(session_id)),
        None => {
            let dir = state_dir.join("sessions").join(session_id);
            (dir.clone(), dir)
        }
    }
}
