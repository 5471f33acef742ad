//! The registry layout, the same on disk and over HTTP:
//!
//! ```text
//! <root>/index.json                                   every published version
//! <root>/<name>/<version>/<name>-<version>.zip          the generic bundle
//! <root>/<name>/<version>/<name>-<version>-<os>-<arch>.zip   a platform variant
//! ```
//!
//! The index records each bundle's sha256 and size; it is the only place a
//! reader learns a hash from. [`LocalRegistry`] reads and publishes a directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::{ArtifactManifest, ArtifactRuntime, Implementation};
use super::sha256_hex;

pub const INDEX_FILENAME: &str = "index.json";
/// Platform of a bundle that runs anywhere (WASM components, skills).
pub const GENERIC_PLATFORM: &str = "any";
const INDEX_FORMAT: u32 = 1;

/// `<os>-<arch>` of this build, e.g. `linux-x86_64`.
pub fn current_platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

/// A platform a bundle may be published for: `any`, or `<os>-<arch>` of
/// plain characters.
pub fn valid_platform(p: &str) -> bool {
    p == GENERIC_PLATFORM
        || p.split_once('-').is_some_and(|(os, arch)| {
            !os.is_empty()
                && !arch.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("registry {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("registry index {location} is invalid: {message}")]
    Index { location: String, message: String },
    #[error("{name}@{version} is not in the registry ({location}); publish it or fix the version")]
    NotFound {
        name: String,
        version: String,
        location: String,
    },
    #[error("{name}@{version} has no bundle for platform {platform} and no generic one")]
    NoPlatform {
        name: String,
        version: String,
        platform: String,
    },
    #[error(
        "{name}@{version} ({platform}) is already published with sha256 {existing}; these bytes \
         hash to {new}. Published versions never change: bump the version"
    )]
    AlreadyPublished {
        name: String,
        version: String,
        platform: String,
        existing: String,
        new: String,
    },
    #[error("{name}@{version} is already published as a {existing}; a variant cannot be a {new}")]
    KindMismatch {
        name: String,
        version: String,
        existing: String,
        new: String,
    },
    #[error("registry index names bundle path '{path}', which is not a plain relative path")]
    BadPath { path: String },
}

/// One bundle file of a published version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleRef {
    pub platform: String,
    /// Relative to the registry root, always `/`-separated.
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

/// One published version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub runtime: ArtifactRuntime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub bundles: Vec<BundleRef>,
}

impl IndexEntry {
    /// A new version's entry, without bundles yet.
    pub fn of(manifest: &ArtifactManifest) -> Self {
        Self {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            runtime: manifest.runtime,
            implementation: manifest.implementation,
            description: manifest.description.clone(),
            tags: manifest.tags.clone(),
            bundles: Vec::new(),
        }
    }

    /// Whether this published version takes a bundle of `manifest` for
    /// `platform` with hash `sha256`: `Some` when it has those very bytes
    /// (nothing to do), `None` when the platform is new; refused when the
    /// kind differs or the platform has other bytes.
    pub fn admits(
        &self,
        manifest: &ArtifactManifest,
        platform: &str,
        sha256: &str,
    ) -> Result<Option<BundleRef>, LayoutError> {
        if self.runtime != manifest.runtime || self.implementation != manifest.implementation {
            return Err(LayoutError::KindMismatch {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                existing: kind(self.runtime, self.implementation),
                new: kind(manifest.runtime, manifest.implementation),
            });
        }
        match self.bundles.iter().find(|b| b.platform == platform) {
            Some(existing) if existing.sha256 == sha256 => Ok(Some(existing.clone())),
            Some(existing) => Err(LayoutError::AlreadyPublished {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                platform: platform.to_string(),
                existing: existing.sha256.clone(),
                new: sha256.to_string(),
            }),
            None => Ok(None),
        }
    }

    /// The bundle for `platform`, else the generic one.
    pub fn bundle_for(&self, platform: &str) -> Option<&BundleRef> {
        self.bundles
            .iter()
            .find(|b| b.platform == platform)
            .or_else(|| self.bundles.iter().find(|b| b.platform == GENERIC_PLATFORM))
    }

    /// Whether a search query matches this entry's name, description or tags
    /// (case-insensitive substring; every word of the query must match).
    pub fn matches(&self, query: &str) -> bool {
        let hay =
            format!("{} {} {}", self.name, self.description, self.tags.join(" ")).to_lowercase();
        query
            .split_whitespace()
            .all(|word| hay.contains(&word.to_lowercase()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryIndex {
    pub format: u32,
    #[serde(default)]
    pub artifacts: Vec<IndexEntry>,
}

impl Default for RegistryIndex {
    fn default() -> Self {
        Self {
            format: INDEX_FORMAT,
            artifacts: Vec::new(),
        }
    }
}

impl RegistryIndex {
    /// Parses index bytes read from `location`.
    pub fn parse(bytes: &[u8], location: &str) -> Result<Self, LayoutError> {
        let index: Self = serde_json::from_slice(bytes).map_err(|e| LayoutError::Index {
            location: location.to_string(),
            message: e.to_string(),
        })?;
        if index.format != INDEX_FORMAT {
            return Err(LayoutError::Index {
                location: location.to_string(),
                message: format!("format {} is not supported", index.format),
            });
        }
        for bundle in index.artifacts.iter().flat_map(|a| &a.bundles) {
            check_relative(&bundle.path)?;
        }
        Ok(index)
    }

    pub fn entry(&self, name: &str, version: &str) -> Option<&IndexEntry> {
        self.artifacts
            .iter()
            .find(|a| a.name == name && a.version == version)
    }

    /// The bundle of `name@version` for `platform` (else generic).
    pub fn resolve(
        &self,
        name: &str,
        version: &str,
        platform: &str,
        location: &str,
    ) -> Result<(&IndexEntry, &BundleRef), LayoutError> {
        let entry = self
            .entry(name, version)
            .ok_or_else(|| LayoutError::NotFound {
                name: name.to_string(),
                version: version.to_string(),
                location: location.to_string(),
            })?;
        let bundle = entry
            .bundle_for(platform)
            .ok_or_else(|| LayoutError::NoPlatform {
                name: name.to_string(),
                version: version.to_string(),
                platform: platform.to_string(),
            })?;
        Ok((entry, bundle))
    }
}

fn check_relative(path: &str) -> Result<(), LayoutError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path.split('/').any(|p| p == ".." || p.is_empty());
    if bad {
        return Err(LayoutError::BadPath {
            path: path.to_string(),
        });
    }
    Ok(())
}

/// What `publish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub bundle: BundleRef,
    /// The same bytes were already published; nothing changed.
    pub unchanged: bool,
}

/// A registry in a local directory.
#[derive(Debug, Clone)]
pub struct LocalRegistry {
    root: PathBuf,
}

impl LocalRegistry {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> LayoutError {
        let path = path.to_path_buf();
        move |source| LayoutError::Io { path, source }
    }

    /// The index (empty when nothing was published yet).
    pub fn index(&self) -> Result<RegistryIndex, LayoutError> {
        let path = self.root.join(INDEX_FILENAME);
        match std::fs::read(&path) {
            Ok(bytes) => RegistryIndex::parse(&bytes, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RegistryIndex::default()),
            Err(e) => Err(self.io(&path)(e)),
        }
    }

    /// The bytes of a bundle the index names, refusing files over `max_bytes`.
    pub fn read_bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, LayoutError> {
        check_relative(&bundle.path)?;
        let path = self.root.join(&bundle.path);
        let meta = std::fs::metadata(&path).map_err(self.io(&path))?;
        if meta.len() > max_bytes {
            return Err(self.io(&path)(std::io::Error::other(format!(
                "bundle is {} bytes, over the limit of {max_bytes}",
                meta.len()
            ))));
        }
        std::fs::read(&path).map_err(self.io(&path))
    }

    /// Publishes bundle bytes for `platform` (`any` for a generic bundle). The
    /// same bytes again are a no-op; different bytes for a published version
    /// are refused. The bundle file is written before the index names it.
    pub fn publish(
        &self,
        manifest: &ArtifactManifest,
        bytes: &[u8],
        platform: &str,
    ) -> Result<Published, LayoutError> {
        std::fs::create_dir_all(&self.root).map_err(self.io(&self.root))?;
        let _guard = DirLock::acquire(&self.root).map_err(self.io(&self.root))?;
        let mut index = self.index()?;
        let sha256 = sha256_hex(bytes);
        let bundle = BundleRef {
            platform: platform.to_string(),
            path: format!(
                "{}/{}/{}",
                manifest.name,
                manifest.version,
                bundle_file(manifest, platform)
            ),
            sha256: sha256.clone(),
            size: bytes.len() as u64,
        };
        check_relative(&bundle.path)?;
        let position = index
            .artifacts
            .iter()
            .position(|a| a.name == manifest.name && a.version == manifest.version);
        if let Some(i) = position
            && let Some(existing) = index.artifacts[i].admits(manifest, platform, &sha256)?
        {
            return Ok(Published {
                bundle: existing,
                unchanged: true,
            });
        }
        let path = self.root.join(&bundle.path);
        write_atomic(&path, bytes).map_err(self.io(&path))?;
        match position {
            Some(i) => index.artifacts[i].bundles.push(bundle.clone()),
            None => {
                let mut entry = IndexEntry::of(manifest);
                entry.bundles.push(bundle.clone());
                index.artifacts.push(entry);
            }
        }
        index
            .artifacts
            .sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        let text = serde_json::to_vec_pretty(&index)
            .map_err(|e| self.io(&self.root)(std::io::Error::other(e)))?;
        let index_path = self.root.join(INDEX_FILENAME);
        write_atomic(&index_path, &text).map_err(self.io(&index_path))?;
        Ok(Published {
            bundle,
            unchanged: false,
        })
    }
}

/// The file name of a bundle of `manifest` for `platform`.
pub fn bundle_file(manifest: &ArtifactManifest, platform: &str) -> String {
    if platform == GENERIC_PLATFORM {
        format!("{}-{}.zip", manifest.name, manifest.version)
    } else {
        format!("{}-{}-{platform}.zip", manifest.name, manifest.version)
    }
}

fn kind(runtime: ArtifactRuntime, implementation: Option<Implementation>) -> String {
    match implementation {
        Some(i) => format!("{} {runtime}", i.as_str()),
        None => runtime.to_string(),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// An exclusive `flock` on `<root>/.publish.lock`, so concurrent publishers
/// never lose each other's index entries.
struct DirLock(std::fs::File);

impl DirLock {
    fn acquire(root: &Path) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(".publish.lock"))?;
        // SAFETY: flock on a descriptor we own; released when the file closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(file))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::bundle::write_zip;

    fn manifest(name: &str, version: &str) -> ArtifactManifest {
        ArtifactManifest::parse(&format!(
            "name: {name}\nversion: {version}\nruntime: tool\ndescription: Echo text back\ntags: [text, demo]\n"
        ))
        .expect("manifest")
    }

    #[test]
    fn publish_resolve_and_refuse_changed_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let reg = LocalRegistry::new(dir.path());
        let m = manifest("echo", "1.0.0");
        let bytes = write_zip(&[("a", b"1", 0o644)]).expect("zip");
        let first = reg.publish(&m, &bytes, GENERIC_PLATFORM).expect("publish");
        assert!(!first.unchanged);
        assert!(
            reg.publish(&m, &bytes, GENERIC_PLATFORM)
                .expect("again")
                .unchanged
        );
        let other = write_zip(&[("a", b"2", 0o644)]).expect("zip");
        let err = reg
            .publish(&m, &other, GENERIC_PLATFORM)
            .expect_err("changed bytes")
            .to_string();
        assert!(err.contains("bump the version"), "{err}");

        let native = write_zip(&[("b", b"3", 0o644)]).expect("zip");
        reg.publish(&m, &native, &current_platform())
            .expect("variant");
        let index = reg.index().expect("index");
        let (_, chosen) = index
            .resolve("echo", "1.0.0", &current_platform(), "test")
            .expect("resolve");
        assert_eq!(chosen.sha256, sha256_hex(&native), "own platform first");
        let (_, generic) = index
            .resolve("echo", "1.0.0", "plan9-mips", "test")
            .expect("fallback");
        assert_eq!(generic.sha256, sha256_hex(&bytes), "else the generic one");
        assert_eq!(reg.read_bundle(generic, 1 << 20).expect("read"), bytes);
        let err = index
            .resolve("echo", "9.9.9", "any", "test")
            .expect_err("missing")
            .to_string();
        assert!(err.contains("echo@9.9.9 is not in the registry"), "{err}");
    }

    #[test]
    fn search_matches_name_description_and_tags() {
        let entry = IndexEntry {
            name: "echo".into(),
            version: "1.0.0".into(),
            runtime: ArtifactRuntime::Tool,
            implementation: None,
            description: "Echo text back".into(),
            tags: vec!["demo".into()],
            bundles: vec![],
        };
        assert!(entry.matches("ECHO"));
        assert!(entry.matches("text demo"));
        assert!(!entry.matches("git"));
    }

    #[test]
    fn index_with_escaping_path_is_refused() {
        let text = br#"{"format":1,"artifacts":[{"name":"x","version":"1.0.0","runtime":"tool","bundles":[{"platform":"any","path":"../../etc/passwd","sha256":"00","size":1}]}]}"#;
        let err = RegistryIndex::parse(text, "test")
            .expect_err("bad path")
            .to_string();
        assert!(err.contains("not a plain relative path"), "{err}");
    }
}
