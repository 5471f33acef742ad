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

/// `murmur.yaml` exactly as written (sections this roostd does not run yet are
/// kept as raw YAML so they can be refused by name rather than as "unknown").
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
    inference: Option<serde_yaml::Value>,
    #[serde(default)]
    context: Option<serde_yaml::Value>,
    #[serde(default)]
    lifecycle: Option<serde_yaml::Value>,
    #[serde(default)]
    trace: Option<serde_yaml::Value>,
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

/// A validated script-capsule manifest with absolute paths.
#[derive(Debug, Clone)]
pub struct CapsuleManifest {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    /// Absolute path of `murmur.yaml`.
    pub manifest_path: PathBuf,
    /// Directory relative paths resolve against.
    pub manifest_dir: PathBuf,
    /// Absolute path of the capsule's component.
    pub component: PathBuf,
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
        for (field, present) in [
            ("inference", raw.inference.is_some()),
            ("context", raw.context.is_some()),
            ("lifecycle", raw.lifecycle.is_some()),
            ("trace", raw.trace.is_some()),
        ] {
            if present {
                return Err(invalid(
                    field,
                    "is not supported by this version of roostd (script capsules only); remove it"
                        .into(),
                ));
            }
        }
        validate_name(&raw.name).map_err(|m| invalid("name", m))?;
        validate_semver(&raw.version).map_err(|m| invalid("version", m))?;
        let manifest_dir = manifest_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let component = raw.component.ok_or_else(|| {
            invalid(
                "component",
                "is required for a script capsule: name the .wasm component, relative to the manifest"
                    .into(),
            )
        })?;
        if component.trim().is_empty() {
            return Err(invalid("component", "must not be empty".into()));
        }
        let component_path = manifest_dir.join(&component);
        if !component_path.is_file() {
            return Err(invalid(
                "component",
                format!(
                    "names {}, which is not a file (paths are relative to the manifest's directory)",
                    component_path.display()
                ),
            ));
        }
        let policy = CapabilityPolicy::from_manifest(raw.capabilities).map_err(|source| {
            ManifestError::Policy {
                path: manifest_path.to_path_buf(),
                source,
            }
        })?;
        validate_artifacts(&raw.artifacts).map_err(|m| invalid("artifacts", m))?;
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
            component: component_path,
            policy,
            artifacts: raw.artifacts,
            tools: raw.tools,
        })
    }
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
mod tests {
    use super::*;

    fn capsule_dir(manifest: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("hello.wasm"), b"\0asm").expect("write");
        std::fs::write(dir.path().join(MANIFEST_FILENAME), manifest).expect("write");
        dir
    }

    #[test]
    fn loads_a_minimal_manifest_from_its_directory() {
        let dir = capsule_dir("name: hello\nversion: 0.1.0\ncomponent: hello.wasm\n");
        let m = CapsuleManifest::load(dir.path()).expect("valid");
        assert_eq!(m.name, "hello");
        assert_eq!(m.component, dir.path().join("hello.wasm"));
        assert_eq!(m.policy.limits.timeout_secs, None);
    }

    #[test]
    fn unknown_key_is_named() {
        let dir = capsule_dir("name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ncolour: red\n");
        let err = CapsuleManifest::load(dir.path())
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains("unknown field `colour`"), "{err}");
    }

    #[test]
    fn nested_unknown_key_is_named() {
        let dir = capsule_dir(
            "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ncapabilities: {limits: {timeout: 3}}\n",
        );
        let err = CapsuleManifest::load(dir.path())
            .expect_err("must be refused")
            .to_string();
        assert!(err.contains("unknown field `timeout`"), "{err}");
    }

    #[test]
    fn bad_name_version_and_component_are_explained() {
        for (yaml, needle) in [
            (
                "name: Hello\nversion: 0.1.0\ncomponent: hello.wasm\n",
                "`name`",
            ),
            (
                "name: hello\nversion: 1.0\ncomponent: hello.wasm\n",
                "`version`",
            ),
            (
                "name: hello\nversion: 01.0.0\ncomponent: hello.wasm\n",
                "`version`",
            ),
            (
                "name: hello\nversion: 0.1.0\ncomponent: nope.wasm\n",
                "not a file",
            ),
            ("name: hello\nversion: 0.1.0\n", "`component` is required"),
            (
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ninference: {}\n",
                "`inference` is not supported",
            ),
            (
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ntools: [a/b]\n",
                "`tools` entry 'a/b'",
            ),
            (
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0, runtime: tool}]\n",
                "'e': version",
            ),
            (
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0.0, runtime: tool, source: x}]\n",
                "`source` is for skills only",
            ),
            (
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\nartifacts: [{name: e, version: 1.0.0, runtime: tool}, {name: e, version: 1.0.0, runtime: skill}]\n",
                "listed twice",
            ),
            ("name: [oops\n", "invalid"),
        ] {
            let dir = capsule_dir(yaml);
            let err = CapsuleManifest::load(dir.path())
                .expect_err("must be refused")
                .to_string();
            assert!(err.contains(needle), "{yaml:?}: {err}");
        }
    }

    #[test]
    fn missing_capsule_says_what_was_expected() {
        let err = CapsuleManifest::load(Path::new("/nonexistent/capsule"))
            .expect_err("must be refused")
            .to_string();
        assert!(
            err.contains("expected a directory containing murmur.yaml"),
            "{err}"
        );
    }
}
