//! What can go wrong with artifacts: staging a capsule's (`ArtifactError`,
//! before anything is written) and a running session's artifact manager
//! (`CatalogError`: describe, search, pull, remove).

use std::path::PathBuf;

use roost_wire::artifact::{ArtifactRuntime, BundleError, LockError};

use crate::registry::RegistryError;
use crate::runtime::RuntimeError;

/// Why staging a capsule's artifacts failed; each names the artifact and the fix.
/// All of these are raised before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error(
        "{} has no entry for artifact `{name}`: add one, or delete the lock so roost pins \
         every artifact afresh",
        lock.display()
    )]
    LockMissingEntry { lock: PathBuf, name: String },
    #[error(
        "artifact `{name}`: murmur.yaml asks for version {requested} but murmur.lock pins \
         {pinned}; change one to match the other (or delete the lock entry to re-pin)"
    )]
    LockVersionMismatch {
        name: String,
        requested: String,
        pinned: String,
    },
    #[error(
        "artifact `{name}@{version}`: the registry's bundle has sha256 {actual} but murmur.lock \
         pins {pinned}; the published bytes are not the ones this capsule was locked to"
    )]
    LockHashMismatch {
        name: String,
        version: String,
        pinned: String,
        actual: String,
    },
    #[error(
        "artifact `{name}@{version}`: integrity check failed: the registry reports sha256 \
         {reported} but the bytes it served hash to {actual}"
    )]
    Integrity {
        name: String,
        version: String,
        reported: String,
        actual: String,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("artifact `{name}@{version}`: {source}")]
    Registry {
        name: String,
        version: String,
        #[source]
        source: Box<RegistryError>,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(
        "artifact `{name}@{version}`: murmur.yaml lists it as a {declared} but the bundle is a {actual}"
    )]
    RuntimeMismatch {
        name: String,
        version: String,
        declared: ArtifactRuntime,
        actual: ArtifactRuntime,
    },
    #[error(transparent)]
    Compile(#[from] RuntimeError),
    #[error("skill `{name}`: source {} does not exist", path.display())]
    SkillSourceMissing { name: String, path: PathBuf },
    #[error("skill `{name}`: {message}")]
    SkillOutside { name: String, message: String },
    #[error("skill `{name}`: directory {} has no skill.md", path.display())]
    SkillNoSkillMd { name: String, path: PathBuf },
    #[error("skill `{name}`: cannot read {}: {source}", path.display())]
    SkillRead {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why a run-time artifact-manager call failed; the capsule reads the text.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("artifact '{0}' is not installed")]
    NotInstalled(String),
    #[error("artifact name {0}")]
    Name(String),
    #[error("artifact version {0}")]
    Version(String),
    #[error(
        "'{name}' is declared in murmur.yaml at version {declared}; change it there to use {requested}"
    )]
    DeclaredVersion {
        name: String,
        declared: String,
        requested: String,
    },
    #[error(transparent)]
    Index(Box<RegistryError>),
    #[error("cannot pull {name}@{version}: {source}")]
    Resolve {
        name: String,
        version: String,
        #[source]
        source: Box<RegistryError>,
    },
    #[error(transparent)]
    Verify(#[from] ArtifactError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(
        "'{0}' is a hook; hooks are bound when a session is staged: declare it under \
         `artifacts:` in murmur.yaml"
    )]
    Hook(String),
    #[error(
        "'{0}' is a native tool, and this session was started with WASM tools only: its tool \
         jail and tool uid were decided for no native code. Declare a native tool (or \
         capabilities.shell.allow) in murmur.yaml and start the session again to pull native \
         tools at run time"
    )]
    NativeNotStaged(String),
    #[error(transparent)]
    Compile(#[from] RuntimeError),
    #[error("{0} was not compiled")]
    NotCompiled(String),
    #[error("cannot install {name} into {}: {source}", dir.display())]
    Install {
        name: String,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{0}; the pull was undone")]
    LockWrite(#[source] LockError),
    #[error(
        "murmur.lock conflict for '{name}': pinned {name}@{pinned_version} (sha256 \
         {pinned_sha256}), but the registry resolves {name}@{version} (sha256 {sha256}); \
         refusing to override a pinned artifact at run time"
    )]
    Pinned {
        name: String,
        pinned_version: String,
        pinned_sha256: String,
        version: String,
        sha256: String,
    },
    #[error(
        "'{0}' is declared in murmur.yaml; remove it from `artifacts:` there (a run-time \
         remove only undoes a pull)"
    )]
    Declared(String),
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("file task failed: {0}")]
    FileTask(#[from] tokio::task::JoinError),
}
