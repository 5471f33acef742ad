//! The capsule manifest (`murmur.yaml`): parsing with unknown keys refused, validation,
//! and resolution of paths against the manifest's directory.

use std::path::{Path, PathBuf};

use std::collections::HashSet;

use roost_wire::artifact::ArtifactRuntime;
pub use roost_wire::artifact::names::validate_name;
use roost_wire::artifact::names::validate_semver;
use serde::Deserialize;

use crate::policy::{Capabilities, CapabilityPolicy, PolicyError};

pub mod a2a;
mod agent;
mod parsed;
pub mod paths;
mod schedules;
pub use a2a::CardSpec;
pub use agent::*;
pub use schedules::ManifestSchedule;

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
#[derive(Debug, Clone, Deserialize)]
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
    /// What the agent card says (any capsule: both kinds serve A2A).
    #[serde(default)]
    a2a: CardSpec,
    /// Tasks the capsule's route fires itself, at times.
    #[serde(default)]
    schedules: Vec<ManifestSchedule>,
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
    /// `a2a:`, what the agent card says; its description defaults to the
    /// manifest's.
    pub card: CardSpec,
    /// `schedules:`, written for its route when its session starts.
    pub schedules: Vec<ManifestSchedule>,
}

impl CapsuleManifest {
    /// Loads a manifest from a capsule directory or a `murmur.yaml` path (absolute).
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let manifest_path = if path.is_dir() {
            path.join(MANIFEST_FILENAME)
        } else {
            path.to_path_buf()
        };
        // The capsule's `murmur.yaml` itself is not followed if it is a
        // link (the directory is the operator's word, the links on the way
        // to it resolved here, once; what is in it, the author's, read
        // without following any: `fsx`).
        let manifest_path = match (manifest_path.parent(), manifest_path.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir)
                .map(|dir| dir.join(name))
                .unwrap_or(manifest_path),
            _ => manifest_path,
        };
        let dir = manifest_path.parent().unwrap_or(Path::new("/"));
        let read_err = |source: std::io::Error| {
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
        };
        let file = crate::fsx::open_read(dir, &manifest_path).map_err(read_err)?;
        let metadata = file.metadata().map_err(read_err)?;
        if metadata.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge {
                path: manifest_path,
                size: metadata.len(),
            });
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &file, &mut text).map_err(read_err)?;
        Self::parse(&text, &manifest_path)
    }

    /// Parses and validates manifest text read from `manifest_path`.
    pub fn parse(text: &str, manifest_path: &Path) -> Result<Self, ManifestError> {
        // The same text parses to the same value: one parse per text kept.
        static PARSED: parsed::Parsed<RawManifest> = parsed::Parsed::new();
        let raw = PARSED
            .get(text, |t| serde_yaml::from_str::<RawManifest>(t))
            .map_err(|e| ManifestError::Parse {
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
        validate_artifacts(&raw.artifacts).map_err(|(field, m)| invalid(&field, m))?;
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
                    if l.conversation_mode.is_some() {
                        return Err(invalid(
                            "lifecycle.conversation_mode",
                            "applies to agent capsules (with `inference:`) only; remove it".into(),
                        ));
                    }
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
                    l.check_hibernation()
                        .map_err(|(field, m)| invalid(field, m))?;
                }
                CapsuleKind::Script {
                    component: script_component(&component, &manifest_dir)
                        .map_err(|e| invalid("component", e.to_string()))?,
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
                offered_or_refused(&spec, &raw.artifacts, &policy, &raw.tools)
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
        schedules::check(&raw.schedules, crate::store::now_ms())
            .map_err(|(field, m)| invalid(&field, m))?;
        let mut card = raw.a2a;
        card.validate().map_err(|(field, m)| invalid(&field, m))?;
        if card.description.is_none() {
            card.description.clone_from(&raw.description);
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
            card,
            schedules: raw.schedules,
        })
    }
}

/// An agent's shell binaries and skills are offered to the model only when
/// `tools:` lists them; one it does not list is refused rather than
/// silently not offered (the seed offers them).
fn offered_or_refused(
    spec: &AgentSpec,
    artifacts: &[ArtifactRef],
    policy: &CapabilityPolicy,
    tools: &[String],
) -> Result<(), (&'static str, String)> {
    let listed = |name: &str| tools.iter().any(|t| t == name);
    if let Some(binary) = policy.shell_allow.iter().find(|b| !listed(b)) {
        return Err((
            "tools",
            format!(
                "does not list '{binary}', which capabilities.shell.allow allows: add it to \
                 `tools:` to offer it to the model, or remove it from shell.allow"
            ),
        ));
    }
    let prompt = match &spec.system_prompt {
        SystemPrompt::Artifact(name) => Some(name.as_str()),
        _ => None,
    };
    if let Some(skill) = artifacts.iter().find(|a| {
        a.runtime == ArtifactRuntime::Skill && !listed(&a.name) && prompt != Some(a.name.as_str())
    }) {
        return Err((
            "tools",
            format!(
                "does not list the skill '{}': add it to `tools:` to offer it to the model, or \
                 remove it from `artifacts:`",
                skill.name
            ),
        ));
    }
    Ok(())
}

fn script_component(component: &str, manifest_dir: &Path) -> Result<PathBuf, paths::PathError> {
    let path = paths::inside(manifest_dir, component)?;
    paths::open(manifest_dir, &path)?;
    Ok(path)
}

/// Checks `artifacts:`; `Err((field, what to change))`, the field naming
/// the entry (`artifacts[2].source`).
fn validate_artifacts(artifacts: &[ArtifactRef]) -> Result<(), (String, String)> {
    let mut seen = HashSet::new();
    for (i, a) in artifacts.iter().enumerate() {
        let at = |f: &str| format!("artifacts[{i}].{f}");
        validate_name(&a.name).map_err(|m| (at("name"), format!("name {m}")))?;
        if !seen.insert(a.name.as_str()) {
            return Err((at("name"), format!("'{}' is listed twice", a.name)));
        }
        match (&a.source, a.runtime) {
            (Some(source), ArtifactRuntime::Skill) => {
                // Spelled inside the capsule directory (read at staging,
                // following no link).
                paths::inside(Path::new("/capsule"), source)
                    .map_err(|m| (at("source"), format!("'{}': `source` {m}", a.name)))?;
                if a.version.trim().is_empty() {
                    return Err((
                        at("version"),
                        format!("'{}': `version` must not be empty", a.name),
                    ));
                }
            }
            (Some(_), runtime) => {
                return Err((
                    at("source"),
                    format!(
                        "'{}': `source` is for skills only; a {runtime} comes from the registry",
                        a.name
                    ),
                ));
            }
            (None, _) => validate_semver(&a.version)
                .map_err(|m| (at("version"), format!("'{}': version {m}", a.name)))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
