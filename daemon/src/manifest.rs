//! The capsule manifest (`murmur.yaml`): parsing with unknown keys refused, validation,
//! and resolution of paths against the manifest's directory.

use std::path::{Path, PathBuf};

use std::collections::HashSet;

use roost_ctl::artifact::ArtifactRuntime;
pub use roost_ctl::artifact::names::validate_name;
use roost_ctl::artifact::names::validate_semver;
use serde::Deserialize;

use crate::policy::{Capabilities, CapabilityPolicy, PolicyError};

/// File name of a capsule manifest inside a capsule directory.
pub const MANIFEST_FILENAME: &str = "murmur.yaml";
/// Manifests are small; anything larger is a mistake (or an attack on the parser).
const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// A manifest problem, always naming the file and what to change.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("no capsule at {}: expected a directory containing {MANIFEST_FILENAME} or the path of a {MANIFEST_FILENAME}", path.display())]
    NotFound { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {size} bytes; a manifest may be at most {MAX_MANIFEST_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    #[error("invalid {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("invalid {}: `{field}` {message}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("invalid {}: {source}", path.display())]
    Policy {
        path: PathBuf,
        #[source]
        source: PolicyError,
    },
}

/// `murmur.yaml` exactly as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    version: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    component: Option<String>,
    #[serde(default)]
    capabilities: Capabilities,
    #[serde(default)]
    artifacts: Vec<ArtifactRef>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    inference: Option<RawInference>,
    #[serde(default)]
    context: Option<RawContext>,
    #[serde(default)]
    lifecycle: Option<Lifecycle>,
    #[serde(default)]
    trace: Option<TraceSpec>,
}

/// One entry of `artifacts:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRef {
    pub name: String,
    pub version: String,
    pub runtime: ArtifactRuntime,
    /// Skills only: a `skill.md` file or a directory holding one, relative to
    /// the manifest (no registry, no lock entry).
    #[serde(default)]
    pub source: Option<String>,
}

/// `inference.api_key`: a literal, or the name of one of roostd's environment
/// variables (`{env: NAME}`) so the secret stays out of the file.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub enum ApiKeySpec {
    Literal(String),
    Env(EnvRef),
}

/// `{env: NAME}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvRef {
    pub env: String,
}

impl std::fmt::Debug for ApiKeySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Literal(_) => f.write_str("ApiKeySpec::Literal(<redacted>)"),
            Self::Env(r) => write!(f, "ApiKeySpec::Env({})", r.env),
        }
    }
}

/// `inference.driver`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverRef {
    /// A `runtime: driver` entry of `artifacts:`.
    pub artifact: String,
    /// Passed to the driver as `MURMUR_INFERENCE_DRIVER_CONFIG`: a string as
    /// written, or a mapping as JSON.
    #[serde(default)]
    pub config: Option<serde_yaml::Value>,
}

/// `inference.compaction`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionSpec {
    /// Fraction of `context.max_tokens` past which the context is compacted.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Model that writes the summary (default: `inference.model`).
    #[serde(default)]
    pub model: Option<String>,
}

/// `inference.budget`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Tokens in + out over the whole session; the session fails past it.
    #[serde(default)]
    pub max_total_tokens: Option<u64>,
}

/// `inference:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInference {
    #[serde(default)]
    transport: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    model: String,
    #[serde(default)]
    api_key: Option<ApiKeySpec>,
    #[serde(default)]
    driver: Option<DriverRef>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    system_prompt_file: Option<String>,
    #[serde(default)]
    system_prompt_artifact: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    compaction: Option<CompactionSpec>,
    #[serde(default)]
    budget: Option<BudgetSpec>,
}

/// `context:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContext {
    #[serde(default)]
    max_tokens: Option<u64>,
}

/// Whether and how a session takes tasks (`lifecycle.task_acceptance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskAcceptance {
    /// Runs a pre-seeded `task.md` if there is one; takes no A2A tasks.
    None,
    /// One task (`task.md`, or the first A2A task), then the session ends.
    #[default]
    Single,
    /// Task after task, up to `queue_depth` waiting.
    Queue,
}

/// What a `queue` session does after a task (`lifecycle.after_task`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterTask {
    #[default]
    Exit,
    Sleep,
}

/// `lifecycle:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    #[serde(default)]
    pub task_acceptance: TaskAcceptance,
    #[serde(default)]
    pub after_task: AfterTask,
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    #[serde(default = "default_input_timeout")]
    pub input_timeout_secs: u64,
    /// How many tasks run at once (script capsules that serve A2A tasks
    /// only; an agent runs one at a time).
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            task_acceptance: TaskAcceptance::default(),
            after_task: AfterTask::default(),
            queue_depth: default_queue_depth(),
            input_timeout_secs: default_input_timeout(),
            concurrency: default_concurrency(),
        }
    }
}

fn default_queue_depth() -> u32 {
    8
}

fn default_concurrency() -> u32 {
    1
}

fn default_input_timeout() -> u64 {
    300
}

/// `trace:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    #[serde(default)]
    pub include_tool_output: bool,
}

/// Where an agent's system prompt comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SystemPrompt {
    None,
    Inline(String),
    /// Absolute path (resolved against the manifest dir), read at stage time.
    File(PathBuf),
    /// A skill artifact whose `skill.md` is the prompt.
    Artifact(String),
}

/// A validated agent capsule: everything the host-run loop needs.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub transport: String,
    pub endpoint: Option<String>,
    pub model: String,
    pub api_key: Option<ApiKeySpec>,
    pub driver: String,
    /// `MURMUR_INFERENCE_DRIVER_CONFIG`.
    pub driver_config: Option<String>,
    pub system_prompt: SystemPrompt,
    pub max_turns: u32,
    pub compaction_threshold: f64,
    pub compaction_model: Option<String>,
    pub max_total_tokens: Option<u64>,
    /// `context.max_tokens` (0: unknown, no compaction).
    pub context_tokens: u64,
    pub lifecycle: Lifecycle,
    pub trace: TraceSpec,
}

/// Default `inference.max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 20;
/// Default `inference.compaction.threshold`.
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.98;

/// What runs: a script capsule's component, or the host-run agent loop.
#[derive(Debug, Clone)]
pub enum CapsuleKind {
    /// Absolute path of the capsule's component; `lifecycle` when the
    /// component serves A2A tasks (`murmur:a2a/handler@0.1.0`).
    Script {
        component: PathBuf,
        lifecycle: Option<Lifecycle>,
    },
    Agent(Box<AgentSpec>),
}

/// A validated capsule manifest with absolute paths.
#[derive(Debug, Clone)]
pub struct CapsuleManifest {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    /// Absolute path of `murmur.yaml`.
    pub manifest_path: PathBuf,
    /// Directory relative paths resolve against.
    pub manifest_dir: PathBuf,
    pub kind: CapsuleKind,
    pub policy: CapabilityPolicy,
    /// `artifacts:` in order.
    pub artifacts: Vec<ArtifactRef>,
    /// `tools:`, the names `invoke` accepts.
    pub tools: Vec<String>,
}

impl CapsuleManifest {
    /// Loads a manifest from a capsule directory or a `murmur.yaml` path (absolute).
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let manifest_path = if path.is_dir() {
            path.join(MANIFEST_FILENAME)
        } else {
            path.to_path_buf()
        };
        let metadata = std::fs::metadata(&manifest_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                ManifestError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                ManifestError::Read {
                    path: manifest_path.clone(),
                    source,
                }
            }
        })?;
        if metadata.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge {
                path: manifest_path,
                size: metadata.len(),
            });
        }
        let text =
            std::fs::read_to_string(&manifest_path).map_err(|source| ManifestError::Read {
                path: manifest_path.clone(),
                source,
            })?;
        Self::parse(&text, &manifest_path)
    }

    /// Parses and validates manifest text read from `manifest_path`.
    pub fn parse(text: &str, manifest_path: &Path) -> Result<Self, ManifestError> {
        let raw: RawManifest = serde_yaml::from_str(text).map_err(|e| ManifestError::Parse {
            path: manifest_path.to_path_buf(),
            message: e.to_string(),
        })?;
        let invalid = |field: &str, message: String| ManifestError::Invalid {
            path: manifest_path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        validate_name(&raw.name).map_err(|m| invalid("name", m))?;
        validate_semver(&raw.version).map_err(|m| invalid("version", m))?;
        let manifest_dir = manifest_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let policy = CapabilityPolicy::from_manifest(raw.capabilities).map_err(|source| {
            ManifestError::Policy {
                path: manifest_path.to_path_buf(),
                source,
            }
        })?;
        validate_artifacts(&raw.artifacts).map_err(|m| invalid("artifacts", m))?;
        let kind = match (raw.component, raw.inference) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "inference",
                    "cannot be combined with `component`: a capsule is either a script \
                     (`component`) or an agent (`inference`); remove one"
                        .into(),
                ));
            }
            (Some(component), None) => {
                for (field, present) in [
                    ("context", raw.context.is_some()),
                    ("trace", raw.trace.is_some()),
                ] {
                    if present {
                        return Err(invalid(
                            field,
                            "applies to agent capsules (with `inference:`) only; remove it".into(),
                        ));
                    }
                }
                if let Some(l) = &raw.lifecycle {
                    if l.queue_depth == 0 {
                        return Err(invalid(
                            "lifecycle.queue_depth",
                            "must be at least 1".into(),
                        ));
                    }
                    if l.concurrency == 0 {
                        return Err(invalid(
                            "lifecycle.concurrency",
                            "must be at least 1".into(),
                        ));
                    }
                }
                CapsuleKind::Script {
                    component: script_component(&component, &manifest_dir)
                        .map_err(|m| invalid("component", m))?,
                    lifecycle: raw.lifecycle,
                }
            }
            (None, Some(inference)) => {
                let sections = AgentSections {
                    inference,
                    context: raw.context.unwrap_or_default(),
                    lifecycle: raw.lifecycle.unwrap_or_default(),
                    trace: raw.trace.unwrap_or_default(),
                };
                let spec = agent_spec(sections, &raw.artifacts, &policy, &manifest_dir)
                    .map_err(|(field, m)| invalid(field, m))?;
                CapsuleKind::Agent(Box::new(spec))
            }
            (None, None) => {
                return Err(invalid(
                    "component",
                    "is required for a script capsule: name the .wasm component, relative to \
                     the manifest (or add an `inference:` section for an agent capsule)"
                        .into(),
                ));
            }
        };
        for tool in &raw.tools {
            if tool.is_empty() || tool.contains('/') || tool.chars().any(char::is_whitespace) {
                return Err(invalid(
                    "tools",
                    format!(
                        "entry '{tool}' must be an artifact or binary name (no '/', no spaces)"
                    ),
                ));
            }
        }
        Ok(Self {
            name: raw.name,
            version: raw.version,
            description: raw.description,
            manifest_path: manifest_path.to_path_buf(),
            manifest_dir,
            kind,
            policy,
            artifacts: raw.artifacts,
            tools: raw.tools,
        })
    }
}

fn script_component(component: &str, manifest_dir: &Path) -> Result<PathBuf, String> {
    if component.trim().is_empty() {
        return Err("must not be empty".into());
    }
    let path = manifest_dir.join(component);
    if !path.is_file() {
        return Err(format!(
            "names {}, which is not a file (paths are relative to the manifest's directory)",
            path.display()
        ));
    }
    Ok(path)
}

/// The agent sections of a manifest, as written.
struct AgentSections {
    inference: RawInference,
    context: RawContext,
    lifecycle: Lifecycle,
    trace: TraceSpec,
}

/// Validates an agent capsule's sections; errors name the field to fix.
fn agent_spec(
    s: AgentSections,
    artifacts: &[ArtifactRef],
    policy: &CapabilityPolicy,
    manifest_dir: &Path,
) -> Result<AgentSpec, (&'static str, String)> {
    let inf = s.inference;
    let transport = inf.transport.unwrap_or_else(|| "http".into());
    if transport != "http" {
        return Err((
            "inference.transport",
            format!("'{transport}' is not supported; use http (drivers speak wasi:http)"),
        ));
    }
    if inf.model.trim().is_empty() {
        return Err(("inference.model", "must not be empty".into()));
    }
    let endpoint = inf.endpoint.as_deref().ok_or((
        "inference.endpoint",
        "is required: the model server's base URL, e.g. http://127.0.0.1:11434/v1".to_string(),
    ))?;
    check_endpoint(endpoint, policy).map_err(|m| ("inference.endpoint", m))?;
    if let Some(ApiKeySpec::Env(EnvRef { env })) = &inf.api_key
        && (env.is_empty() || env.contains('='))
    {
        return Err((
            "inference.api_key",
            "`env` must name an environment variable of roostd".into(),
        ));
    }
    let driver = inf.driver.ok_or((
        "inference.driver",
        "is required: name the driver artifact, e.g. driver: {artifact: openai-driver}, and \
         list it under `artifacts:` with runtime: driver"
            .to_string(),
    ))?;
    declared(artifacts, &driver.artifact, ArtifactRuntime::Driver)
        .map_err(|m| ("inference.driver.artifact", m))?;
    let driver_config = match driver.config {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::String(text)) => Some(text),
        Some(value) => Some(
            serde_json::to_string(&value)
                .map_err(|e| ("inference.driver.config", format!("cannot be JSON: {e}")))?,
        ),
    };
    let prompts = [
        inf.system_prompt.is_some(),
        inf.system_prompt_file.is_some(),
        inf.system_prompt_artifact.is_some(),
    ];
    if prompts.iter().filter(|p| **p).count() > 1 {
        return Err((
            "inference.system_prompt",
            "give one of system_prompt, system_prompt_file and system_prompt_artifact".into(),
        ));
    }
    let system_prompt = if let Some(text) = inf.system_prompt {
        SystemPrompt::Inline(text)
    } else if let Some(file) = inf.system_prompt_file {
        let path = manifest_dir.join(&file);
        if !path.is_file() {
            return Err((
                "inference.system_prompt_file",
                format!(
                    "names {}, which is not a readable file (paths are relative to the \
                     manifest's directory)",
                    path.display()
                ),
            ));
        }
        SystemPrompt::File(path)
    } else if let Some(name) = inf.system_prompt_artifact {
        declared(artifacts, &name, ArtifactRuntime::Skill)
            .map_err(|m| ("inference.system_prompt_artifact", m))?;
        SystemPrompt::Artifact(name)
    } else {
        SystemPrompt::None
    };
    let max_turns = inf.max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    if max_turns == 0 {
        return Err(("inference.max_turns", "must be at least 1".into()));
    }
    let compaction = inf.compaction.unwrap_or_default();
    let threshold = compaction.threshold.unwrap_or(DEFAULT_COMPACTION_THRESHOLD);
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err((
            "inference.compaction.threshold",
            format!("{threshold} must be greater than 0 and at most 1"),
        ));
    }
    let max_total_tokens = inf.budget.and_then(|b| b.max_total_tokens);
    if max_total_tokens == Some(0) {
        return Err((
            "inference.budget.max_total_tokens",
            "must be at least 1".into(),
        ));
    }
    if s.lifecycle.concurrency != 1 {
        return Err((
            "lifecycle.concurrency",
            "an agent runs one task at a time (its context carries over); remove it".into(),
        ));
    }
    if s.lifecycle.queue_depth == 0 {
        return Err(("lifecycle.queue_depth", "must be at least 1".into()));
    }
    Ok(AgentSpec {
        transport,
        endpoint: inf.endpoint,
        model: inf.model,
        api_key: inf.api_key,
        driver: driver.artifact,
        driver_config,
        system_prompt,
        max_turns,
        compaction_threshold: threshold,
        compaction_model: compaction.model,
        max_total_tokens,
        context_tokens: s.context.max_tokens.unwrap_or(0),
        lifecycle: s.lifecycle,
        trace: s.trace,
    })
}

/// `name` must be listed under `artifacts:` with `runtime`.
fn declared(artifacts: &[ArtifactRef], name: &str, runtime: ArtifactRuntime) -> Result<(), String> {
    match artifacts.iter().find(|a| a.name == name) {
        Some(a) if a.runtime == runtime => Ok(()),
        Some(a) => Err(format!(
            "'{name}' is listed under `artifacts:` as a {}, but must be a {runtime}",
            a.runtime
        )),
        None => Err(format!(
            "'{name}' is not listed under `artifacts:`; add {{name: {name}, version: …, runtime: \
             {runtime}}}"
        )),
    }
}

/// The endpoint must be an http(s) URL the capsule's network policy allows
/// (the driver reaches it through wasi:http, which enforces the same rules).
fn check_endpoint(endpoint: &str, policy: &CapabilityPolicy) -> Result<(), String> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("'{endpoint}' is not a URL: {e}"))?;
    let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!("'{endpoint}' must start with http:// or https://"));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("'{endpoint}' has no host"))?;
    let port = uri
        .port_u16()
        .or_else(|| crate::policy::default_port(&scheme))
        .unwrap_or(0);
    if !policy.allows_url(&scheme, host, port) {
        return Err(format!(
            "'{endpoint}' is not allowed by capabilities.network.allow, so the driver could \
             not reach it; add \"{scheme}://{host}:{port}\" to network.allow"
        ));
    }
    Ok(())
}

fn validate_artifacts(artifacts: &[ArtifactRef]) -> Result<(), String> {
    let mut seen = HashSet::new();
    for a in artifacts {
        validate_name(&a.name).map_err(|m| format!("name {m}"))?;
        if !seen.insert(a.name.as_str()) {
            return Err(format!("'{}' is listed twice", a.name));
        }
        match (&a.source, a.runtime) {
            (Some(source), ArtifactRuntime::Skill) => {
                if source.trim().is_empty() {
                    return Err(format!("'{}': `source` must not be empty", a.name));
                }
                if a.version.trim().is_empty() {
                    return Err(format!("'{}': `version` must not be empty", a.name));
                }
            }
            (Some(_), runtime) => {
                return Err(format!(
                    "'{}': `source` is for skills only; a {runtime} comes from the registry",
                    a.name
                ));
            }
            (None, _) => {
                validate_semver(&a.version).map_err(|m| format!("'{}': version {m}", a.name))?
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
