//! Staging: everything that can be checked before a session exists (manifest,
//! name, workdir, limits, compiled component). A staging error creates no row.

use crate::telemetry::{Kind, Span};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use roost_wire::api::StartRequest;

use crate::agent::{AgentPlan, Secret};
use crate::artifacts::{ArtifactError, StagedArtifacts};
use crate::manifest::{
    ApiKeySpec, CapsuleKind, CapsuleManifest, EnvRef, ManifestError, SystemPrompt, validate_name,
};
use crate::policy::CapabilityPolicy;
use crate::runtime::{PreparedCapsule, RuntimeError};

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
    #[error("invalid agent capsule {}: {message}", manifest.display())]
    Agent { manifest: PathBuf, message: String },
    /// A file the manifest names is outside the capsule directory (or a
    /// link) by the time it is read.
    #[error("invalid capsule {}: {message}", manifest.display())]
    CapsuleFile { manifest: PathBuf, message: String },
    #[error("the task is {size} bytes; a task may be at most {MAX_TASK_BYTES} bytes")]
    TaskTooLarge { size: usize },
    #[error(
        "invalid capsule {}: `schedules:` has {count} entries; this roostd lets a capsule \
         declare at most {max} (schedules.max_per_capsule in roostd's config)",
        manifest.display()
    )]
    TooManySchedules {
        manifest: PathBuf,
        count: usize,
        max: usize,
    },
    #[error(
        "this capsule has native or shell tools, but this host cannot enforce all of the tool \
         jail: missing {missing}. Run it on a host that can (see `roostctl doctor`), or set \
         sandbox.unenforceable: warn in roostd's config to accept less"
    )]
    Unenforceable { missing: String },
    #[error(
        "invalid capsule {}: `lifecycle` applies to agents and to script capsules that serve A2A \
         tasks, but this component does not export murmur:a2a/handler (@0.2.0 or @0.1.0); remove \
         `lifecycle` or export the handler",
        manifest.display()
    )]
    LifecycleWithoutHandler { manifest: PathBuf },
    #[error(
        "--lifecycle and --after-task apply to agents and to script capsules that serve A2A \
         tasks; {} is a script capsule that does not export murmur:a2a/handler (@0.2.0 or @0.1.0)",
        manifest.display()
    )]
    LifecycleOverrideWithoutTasks { manifest: PathBuf },
}

pub use crate::tasks::model::MAX_TASK_BYTES;

/// What staging reads: the daemon's settings and the shared, read-only
/// machinery it checks and compiles with (built once, in the supervisor).
pub struct StageCtx<'a> {
    pub config: &'a crate::config::DaemonConfig,
    pub runtime: &'a crate::runtime::Runtime,
    /// The registry as it is now (a reload may swap it).
    pub registry: std::sync::Arc<dyn crate::registry::Registry>,
    /// Who hears each step as it starts (`roostctl start` on a terminal).
    pub progress: Progress,
    pub bundles: &'a std::sync::Arc<crate::artifacts::BundleMemo>,
    pub jail: &'a crate::sandbox::Jail,
    pub support: &'a crate::sandbox::Support,
    /// What no capsule is handed, and the fence its grants are opened
    /// through (`staging::protected`, made once).
    pub protected: &'a crate::policy::Protected,
}

/// Where staging says what it is doing: nowhere, or to the client that
/// asked for progress (`POST /v1/sessions?progress=true`).
#[derive(Clone, Default)]
pub struct Progress(Option<tokio::sync::mpsc::UnboundedSender<roost_wire::api::StartProgress>>);

impl Progress {
    pub fn to(sender: tokio::sync::mpsc::UnboundedSender<roost_wire::api::StartProgress>) -> Self {
        Self(Some(sender))
    }

    /// A step as it starts: `read`, `compile`, `fetch`, `verify`, and what of.
    pub fn say(&self, step: &str, what: String) {
        if let Some(sender) = &self.0 {
            let _ = sender.send(roost_wire::api::StartProgress::Step {
                step: step.to_string(),
                what,
            });
        }
    }
}

/// What a session runs.
pub enum Program {
    Script(Arc<PreparedCapsule>),
    /// A script capsule that serves A2A tasks (`murmur:a2a/handler@0.1.0`).
    Handler(Arc<PreparedCapsule>, crate::manifest::Lifecycle),
    Agent(Arc<AgentPlan>),
}

impl Program {
    /// How the session takes A2A tasks (`None`: it takes none).
    pub fn lifecycle(&self) -> Option<&crate::manifest::Lifecycle> {
        match self {
            Self::Script(_) => None,
            Self::Handler(_, lifecycle) => Some(lifecycle),
            Self::Agent(plan) => Some(&plan.spec.lifecycle),
        }
    }
}

/// A capsule ready to launch.
pub struct Staged {
    pub request: StartRequest,
    pub manifest: CapsuleManifest,
    pub program: Program,
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
    /// Whether the capsule has native or shell tools (the jail applies).
    pub native_tools: bool,
    /// What the jail lacks on this host for it (empty: all of it holds).
    pub sandbox_missing: Vec<&'static str>,
}

/// What no capsule of this roostd is granted (its own files, its jail
/// helper for writing, system trees it does not allow).
pub fn protected(
    config: &crate::config::DaemonConfig,
    jail: &crate::sandbox::Jail,
) -> crate::policy::Protected {
    let helper = jail.helper().or(config.sandbox.jail_helper.as_deref());
    let helper = helper.map(|h| (h.to_path_buf(), "roostd's jail helper".to_string()));
    // The control socket and its directory may be read (nothing is there to
    // read) and lain beside, never held for writing (the socket could be
    // replaced).
    let socket = [
        Some((config.socket.clone(), "roostd's control socket".to_string())),
        config
            .socket
            .parent()
            .map(|dir| (dir.to_path_buf(), "roostd's control socket dir".to_string())),
    ];
    crate::policy::Protected::new(
        config.own_paths(),
        helper
            .into_iter()
            .chain(socket.into_iter().flatten())
            .collect(),
        Some(config.state_dir.join("sessions")),
        &config.filesystem.allow,
    )
}

/// Validates a start request, prepares its component and resolves, verifies and
/// compiles its artifacts (each cached per content hash). Writes nothing.
pub async fn stage(shared: &StageCtx<'_>, request: StartRequest) -> Result<Staged, StageError> {
    let mut span = Span::start("stage", Kind::Internal, None);
    span.set("roost.capsule.path", request.path.as_str());
    let staged = crate::telemetry::scope(span.traceparent(), stage_traced(shared, request)).await;
    match &staged {
        Ok(staged) => {
            span.set("roost.capsule", staged.manifest.name.as_str());
        }
        Err(error) => span.fail(error.to_string()),
    }
    staged
}

async fn stage_traced(shared: &StageCtx<'_>, request: StartRequest) -> Result<Staged, StageError> {
    let config = shared.config;
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
    if let Some(task) = &request.task
        && task.len() > MAX_TASK_BYTES
    {
        return Err(StageError::TaskTooLarge { size: task.len() });
    }
    shared.progress.say("read", path.display().to_string());
    let manifest = CapsuleManifest::load(&path)?;
    // A model key from roostd's environment only as its config allows, before
    // anything is fetched or compiled for the capsule.
    if let CapsuleKind::Agent(spec) = &manifest.kind {
        key_env_allowed(spec, &config.inference).map_err(|e| StageError::Agent {
            manifest: manifest.manifest_path.clone(),
            message: e.to_string(),
        })?;
    }
    if manifest.schedules.len() > config.schedules.max_per_capsule {
        return Err(StageError::TooManySchedules {
            manifest: manifest.manifest_path.clone(),
            count: manifest.schedules.len(),
            max: config.schedules.max_per_capsule,
        });
    }
    // What the capsule would be handed of this host: never roostd's own
    // files, never a system tree the operator did not allow.
    let protected = shared.protected;
    let checked = match &user_workdir {
        Some(dir) => protected.check_path("workdir", dir, crate::sandbox::fence::Access::Write),
        None => Ok(()),
    };
    checked
        .and_then(|()| protected.check(&manifest.policy))
        .map_err(|source| ManifestError::Policy {
            path: manifest.manifest_path.clone(),
            source,
        })?;
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
    let script =
        match &manifest.kind {
            CapsuleKind::Script { component, .. } => {
                shared
                    .progress
                    .say("compile", component.display().to_string());
                // Opened inside the capsule directory without following a link,
                // as the manifest's parse checked it; compiled from this handle.
                let file = crate::manifest::paths::open(&manifest.manifest_dir, component)
                    .map_err(|m| StageError::CapsuleFile {
                        manifest: manifest.manifest_path.clone(),
                        message: format!("`component` {m}"),
                    })?;
                Some(shared.runtime.prepare(component, file).await?)
            }
            CapsuleKind::Agent(_) => None,
        };
    let artifacts = crate::artifacts::stage(
        shared.runtime,
        shared.bundles,
        &*shared.registry,
        &manifest,
        config.artifacts.max_bundle_mb << 20,
        &|step, what| shared.progress.say(step, what),
    )
    .await?;
    let native_tools = !manifest.policy.shell_allow.is_empty()
        || artifacts
            .items
            .iter()
            .any(|i| i.implementation == Some(roost_wire::artifact::Implementation::Native));
    let (sandbox, missing) = crate::sandbox::assess(native_tools, shared.jail, shared.support);
    if !missing.is_empty() && config.sandbox.unenforceable == crate::config::Unenforceable::Refuse {
        return Err(StageError::Unenforceable {
            missing: missing.join("; "),
        });
    }
    let program = match (script, &manifest.kind) {
        (Some(prepared), CapsuleKind::Script { lifecycle, .. }) => {
            match (prepared.serves_a2a(), lifecycle) {
                (true, l) => {
                    Program::Handler(prepared, l.clone().unwrap_or_default().overridden(&request))
                }
                (false, None) if request.lifecycle.is_some() || request.after_task.is_some() => {
                    return Err(StageError::LifecycleOverrideWithoutTasks {
                        manifest: manifest.manifest_path.clone(),
                    });
                }
                (false, None) => Program::Script(prepared),
                (false, Some(_)) => {
                    return Err(StageError::LifecycleWithoutHandler {
                        manifest: manifest.manifest_path.clone(),
                    });
                }
            }
        }
        (None, CapsuleKind::Agent(spec)) => {
            let mut plan = agent_plan(
                spec,
                &artifacts,
                &manifest.manifest_path,
                &|name| std::env::var(name),
                &config.inference,
            )?;
            plan.spec.lifecycle = plan.spec.lifecycle.overridden(&request);
            Program::Agent(Arc::new(plan))
        }
        _ => unreachable!("scripts, and only scripts, are prepared above"),
    };
    Ok(Staged {
        sandbox,
        native_tools,
        sandbox_missing: missing,
        program,
        allowlist: manifest.tools.iter().cloned().collect(),
        artifacts,
        request,
        policy: Arc::new(CapabilityPolicy {
            fence: protected.fence(),
            ..manifest.policy.clone()
        }),
        manifest,
        user_workdir,
        timeout: Duration::from_secs(timeout_secs),
        memory_bytes: memory_mb << 20,
    })
}

/// Whether an agent's `inference.api_key: {env: NAME}`, if it names one,
/// names a variable `inference.key_env_allow` lets it send to its endpoint.
fn key_env_allowed(
    spec: &crate::manifest::AgentSpec,
    inference: &crate::config::InferenceConfig,
) -> Result<(), crate::config::KeyEnvRefused> {
    match &spec.api_key {
        Some(ApiKeySpec::Env(EnvRef { env: name })) => {
            inference.key_env(name, spec.endpoint.as_deref().unwrap_or_default())
        }
        _ => Ok(()),
    }
}

/// Resolves what an agent needs from its staged artifacts and the daemon's
/// environment: the compiled driver, the system prompt text, the API key.
fn agent_plan(
    spec: &crate::manifest::AgentSpec,
    artifacts: &StagedArtifacts,
    manifest_path: &Path,
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    inference: &crate::config::InferenceConfig,
) -> Result<AgentPlan, StageError> {
    let fail = |message: String| StageError::Agent {
        manifest: manifest_path.to_path_buf(),
        message,
    };
    let item = |name: &str| artifacts.items.iter().find(|i| i.name == name);
    let driver = item(&spec.driver).and_then(|i| i.tool()).ok_or_else(|| {
        fail(format!(
            "inference.driver.artifact '{}' is not a WASM driver component",
            spec.driver
        ))
    })?;
    let system_prompt = match &spec.system_prompt {
        SystemPrompt::None => None,
        SystemPrompt::Inline(text) => Some(text.clone()),
        SystemPrompt::File(path) => {
            // Read as the manifest's parse checked it: inside the capsule
            // directory, following no link (a swap since is refused too).
            let dir = manifest_path.parent().unwrap_or(Path::new("/"));
            let bytes = crate::manifest::paths::read(dir, path)
                .map_err(|m| fail(format!("`inference.system_prompt_file` {m}")))?;
            Some(String::from_utf8(bytes).map_err(|_| {
                fail(format!(
                    "inference.system_prompt_file {} is not UTF-8 text",
                    path.display()
                ))
            })?)
        }
        SystemPrompt::Artifact(name) => Some(
            item(name)
                .and_then(|i| i.skill_text())
                .ok_or_else(|| {
                    fail(format!(
                        "inference.system_prompt_artifact '{name}' has no skill.md to use as the \
                         prompt"
                    ))
                })?
                .to_string(),
        ),
    };
    let api_key = match &spec.api_key {
        None => None,
        Some(ApiKeySpec::Literal(key)) => Some(Secret::new(key.clone())),
        Some(ApiKeySpec::Env(EnvRef { env: name })) => {
            // Checked again (the config may change between): only a variable
            // the operator lists for it, to the endpoints it names.
            key_env_allowed(spec, inference).map_err(|e| fail(e.to_string()))?;
            Some(Secret::new(env(name).map_err(|_| {
                fail(format!(
                    "inference.api_key names the environment variable {name}, which is not set \
                     (or not UTF-8) in roostd's environment; set it for the daemon (e.g. an \
                     EnvironmentFile= in the systemd unit)"
                ))
            })?))
        }
    };
    let hooks = artifacts
        .items
        .iter()
        .filter_map(|i| i.hook().map(|(h, m)| (i.name.clone(), h, m.clone())))
        .collect();
    Ok(AgentPlan {
        spec: spec.clone(),
        driver,
        system_prompt,
        api_key,
        hooks,
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
