//! The capsule manifest (`murmur.yaml`): parsing with unknown keys refused, validation,
//! and resolution of paths against the manifest's directory.

use std::path::{Path, PathBuf};

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
    artifacts: Option<serde_yaml::Value>,
    #[serde(default)]
    tools: Option<serde_yaml::Value>,
    #[serde(default)]
    inference: Option<serde_yaml::Value>,
    #[serde(default)]
    context: Option<serde_yaml::Value>,
    #[serde(default)]
    lifecycle: Option<serde_yaml::Value>,
    #[serde(default)]
    trace: Option<serde_yaml::Value>,
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
            ("artifacts", raw.artifacts.is_some()),
            ("tools", raw.tools.is_some()),
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
        Ok(Self {
            name: raw.name,
            version: raw.version,
            description: raw.description,
            manifest_path: manifest_path.to_path_buf(),
            manifest_dir,
            component: component_path,
            policy,
        })
    }
}

/// Capsule and session names: lowercase letters, digits and '-', starting with a
/// letter or digit, at most 63 characters (they appear in URLs and file names).
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "must be 1 to 63 characters, got {} ('{name}')",
            name.len()
        ));
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_start = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok_chars || !ok_start {
        return Err(format!(
            "'{name}' may contain only lowercase letters, digits and '-', and must start with a letter or digit"
        ));
    }
    Ok(())
}

/// `MAJOR.MINOR.PATCH` with optional `-pre` and `+build`, numbers without leading zeros.
fn validate_semver(version: &str) -> Result<(), String> {
    let bad = || format!("'{version}' is not a semantic version such as 1.2.3");
    let core = version.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 {
        return Err(bad());
    }
    for part in parts {
        if part.is_empty()
            || !part.bytes().all(|b| b.is_ascii_digit())
            || (part.len() > 1 && part.starts_with('0'))
        {
            return Err(bad());
        }
    }
    let rest = &version[core.len()..];
    if rest == "-" || rest == "+" || rest.ends_with('.') {
        return Err(bad());
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+');
    if !rest.bytes().all(allowed) {
        return Err(bad());
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
                "name: hello\nversion: 0.1.0\ncomponent: hello.wasm\ntools: [git]\n",
                "`tools` is not supported",
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
    fn semver_accepts_prerelease_and_build() {
        for ok in ["0.1.0", "1.2.3-alpha.1", "1.2.3+build.5", "10.20.30-rc.1+x"] {
            assert!(validate_semver(ok).is_ok(), "{ok}");
        }
        for bad in ["1", "1.2", "1.2.3-", "a.b.c", "1.2.3.4", "1.2.3-é"] {
            assert!(validate_semver(bad).is_err(), "{bad}");
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
