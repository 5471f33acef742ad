//! A capsule's artifacts: what one is once staged or installed (here);
//! staging (`stage.rs`: resolve through the registry, verify sha256 and
//! `murmur.lock`, read the bundle, compile once per hash; local skills in
//! `skills.rs`), installation in the session's `tools/` dir (`install.rs`),
//! and the per-session table behind tool dispatch and the artifact manager
//! (`session.rs`: list, describe, search, pull, remove); their errors
//! (`error.rs`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use roost_wire::api::ArtifactRecord;
use roost_wire::artifact::manifest::PayloadKind;
use roost_wire::artifact::names::{validate_name, validate_semver};
use roost_wire::artifact::{
    ARTIFACT_MANIFEST, ArtifactManifest, ArtifactRuntime, Bundle, Implementation, LOCK_FILENAME,
    LockEntry, LockError, MurmurLock, sha256_hex,
};
use serde::Serialize;

use crate::manifest::{ArtifactRef, CapsuleManifest};
use crate::policy::CapabilityPolicy;
use crate::registry::{self, Registry, RegistryError};
use crate::runtime::{
    Catalog, Compiler, Info, PortError, PreparedHook, PreparedTool, Runtime, RuntimeError, Summary,
    Target,
};

mod error;
mod install;
mod session;
mod skills;
mod stage;

pub use error::{ArtifactError, CatalogError};
use install::shell_manifest;
pub use install::{install, install_one};
pub use session::{OnChange, PullPlan, SessionArtifacts};
pub use stage::{BundleMemo, stage};

/// Where an installed artifact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `artifacts:` in murmur.yaml, from the registry.
    Declared,
    /// `artifacts:` in murmur.yaml, a skill with a local `source:`.
    Local,
    /// Pulled at run time through the artifact manager.
    Pulled,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Self::Declared => "registry",
            Self::Local => "local",
            Self::Pulled => "pulled",
        }
    }
}

#[derive(Clone)]
enum Payload {
    Tool(Arc<PreparedTool>),
    Hook(Arc<PreparedHook>),
    Native(Arc<[u8]>),
    Skill(Arc<str>),
}

/// One artifact of a session, staged or installed.
#[derive(Clone)]
pub struct Installed {
    pub name: String,
    pub version: String,
    pub runtime: ArtifactRuntime,
    pub implementation: Option<Implementation>,
    /// sha256 of the bundle (none for local skills).
    pub sha256: Option<String>,
    pub origin: Origin,
    /// The artifact manifest as published (generated for local skills).
    pub manifest: ArtifactManifest,
    manifest_yaml: String,
    payload: Payload,
}

impl Installed {
    fn native(&self) -> bool {
        self.implementation == Some(Implementation::Native)
    }

    pub fn record(&self) -> ArtifactRecord {
        ArtifactRecord {
            name: self.name.clone(),
            version: self.version.clone(),
            runtime: self.runtime.to_string(),
            implementation: self.implementation.map(|i| i.as_str().to_string()),
            sha256: self.sha256.clone(),
            origin: self.origin.as_str().to_string(),
        }
    }

    /// The component of a WASM tool or driver.
    pub fn tool(&self) -> Option<Arc<PreparedTool>> {
        match &self.payload {
            Payload::Tool(tool) => Some(Arc::clone(tool)),
            _ => None,
        }
    }

    /// The guidance text of a skill.
    pub fn skill_text(&self) -> Option<Arc<str>> {
        match &self.payload {
            Payload::Skill(text) => Some(Arc::clone(text)),
            _ => None,
        }
    }

    /// The hook component and its bindings, for hook artifacts.
    pub fn hook(&self) -> Option<(Arc<PreparedHook>, &ArtifactManifest)> {
        match &self.payload {
            Payload::Hook(hook) => Some((Arc::clone(hook), &self.manifest)),
            _ => None,
        }
    }
}

/// The result of staging: every artifact ready to install, and the lock to
/// write after a successful stage when the capsule had none.
pub struct StagedArtifacts {
    pub items: Vec<Installed>,
    pub lock_path: PathBuf,
    pub new_lock: Option<MurmurLock>,
}

#[cfg(test)]
mod tests;
