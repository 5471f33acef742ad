//! A capsule's artifacts: staging (resolve through the registry, verify sha256
//! and `murmur.lock`, read the bundle, compile once per hash), installation in
//! the session's `tools/` dir, and the per-session table behind tool dispatch and
//! the artifact manager (list, describe, search, pull, remove).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use roost_ctl::api::ArtifactRecord;
use roost_ctl::artifact::manifest::PayloadKind;
use roost_ctl::artifact::names::{validate_name, validate_semver};
use roost_ctl::artifact::{
    ARTIFACT_MANIFEST, ArtifactManifest, ArtifactRuntime, Bundle, BundleError, Implementation,
    LOCK_FILENAME, LockEntry, LockError, MurmurLock, sha256_hex,
};
use serde::Serialize;

use crate::manifest::{ArtifactRef, CapsuleManifest};
use crate::policy::CapabilityPolicy;
use crate::registry::{self, Registry, RegistryError};
use crate::runtime::{
    Catalog, Compiler, Info, PreparedHook, PreparedTool, Runtime, RuntimeError, Summary, Target,
};

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

/// Resolves, verifies and compiles every artifact `manifest` declares. Nothing
/// is written; any error leaves the capsule and the session dirs untouched.
pub async fn stage(
    runtime: &Runtime,
    memo: &Arc<BundleMemo>,
    registry: &dyn Registry,
    manifest: &CapsuleManifest,
    max_bundle_bytes: u64,
) -> Result<StagedArtifacts, ArtifactError> {
    let lock_path = manifest.manifest_dir.join(LOCK_FILENAME);
    let mut staged = StagedArtifacts {
        items: Vec::with_capacity(manifest.artifacts.len()),
        lock_path,
        new_lock: None,
    };
    if manifest.artifacts.is_empty() {
        return Ok(staged);
    }
    let lock = {
        let path = staged.lock_path.clone();
        tokio::task::spawn_blocking(move || MurmurLock::read(&path))
            .await
            .map_err(|e| LockError::Read {
                path: staged.lock_path.clone(),
                source: std::io::Error::other(e),
            })??
    };
    // Lock expectations first, in manifest order: no I/O, so these errors
    // come before any registry traffic.
    let mut pins = Vec::with_capacity(manifest.artifacts.len());
    for artifact in &manifest.artifacts {
        let pinned = match (&lock, &artifact.source) {
            (_, Some(_)) | (None, None) => None,
            (Some(lock), None) => {
                let entry =
                    lock.get(&artifact.name)
                        .ok_or_else(|| ArtifactError::LockMissingEntry {
                            lock: staged.lock_path.clone(),
                            name: artifact.name.clone(),
                        })?;
                if entry.version != artifact.version {
                    return Err(ArtifactError::LockVersionMismatch {
                        name: artifact.name.clone(),
                        requested: artifact.version.clone(),
                        pinned: entry.version.clone(),
                    });
                }
                Some(entry.sha256.clone())
            }
        };
        pins.push(pinned);
    }
    let index = if manifest.artifacts.iter().any(|a| a.source.is_none()) {
        let first = &manifest.artifacts[0];
        Some(
            registry
                .index()
                .await
                .map_err(|source| ArtifactError::Registry {
                    name: first.name.clone(),
                    version: first.version.clone(),
                    source: Box::new(source),
                })?,
        )
    } else {
        None
    };
    // Fetch, verify, read and compile all artifacts concurrently; report the
    // first failure in manifest order.
    let ctx = StageCtx {
        runtime,
        memo,
        registry,
        index: index.as_ref(),
        manifest,
        max_bundle_bytes,
    };
    let results = futures::future::join_all(
        manifest
            .artifacts
            .iter()
            .zip(pins)
            .map(|(artifact, pinned)| stage_one(&ctx, artifact, pinned)),
    )
    .await;
    let mut new_lock = MurmurLock::default();
    for result in results {
        let item = result?;
        if let Some(sha256) = &item.sha256 {
            new_lock.pin(LockEntry {
                name: item.name.clone(),
                version: item.version.clone(),
                sha256: sha256.clone(),
            });
        }
        staged.items.push(item);
    }
    if lock.is_none() && !new_lock.artifacts.is_empty() {
        staged.new_lock = Some(new_lock);
    }
    Ok(staged)
}

/// One artifact: a local skill, or fetched, verified against the registry's
/// hash and the pin, read as a bundle and compiled.
/// What every artifact of one stage shares.
struct StageCtx<'a> {
    runtime: &'a Runtime,
    memo: &'a Arc<BundleMemo>,
    registry: &'a dyn Registry,
    index: Option<&'a roost_ctl::artifact::RegistryIndex>,
    manifest: &'a CapsuleManifest,
    max_bundle_bytes: u64,
}

async fn stage_one(
    ctx: &StageCtx<'_>,
    artifact: &ArtifactRef,
    pinned: Option<String>,
) -> Result<Installed, ArtifactError> {
    if let Some(source) = &artifact.source {
        return local_skill(artifact, &ctx.manifest.manifest_dir, source).await;
    }
    let registry_err = |source| ArtifactError::Registry {
        name: artifact.name.clone(),
        version: artifact.version.clone(),
        source: Box::new(source),
    };
    let index = ctx
        .index
        .ok_or_else(|| registry_err(RegistryError::Location("registry index not loaded".into())))?;
    let max_bundle_bytes = ctx.max_bundle_bytes;
    let resolved = registry::resolve(
        ctx.registry,
        index,
        &artifact.name,
        &artifact.version,
        max_bundle_bytes,
    )
    .await
    .map_err(registry_err)?;
    let (name, version, declared) = (
        artifact.name.clone(),
        artifact.version.clone(),
        artifact.runtime,
    );
    let reported = resolved.bundle.sha256;
    let bytes = resolved.bytes;
    let for_task = Arc::clone(ctx.memo);
    // Hashing and unzipping are CPU work: off the async threads.
    let verified = tokio::task::spawn_blocking(move || {
        let sha256 = verify(&name, &version, &bytes, &reported)?;
        if let Some(pinned) = pinned
            && pinned != sha256
        {
            return Err(ArtifactError::LockHashMismatch {
                name,
                version,
                pinned,
                actual: sha256,
            });
        }
        let label = format!("artifact `{name}@{version}`");
        // Bytes with this hash were read, checked and compiled before.
        if let Some(known) = for_task.get(&sha256)
            && known.name == name
            && known.version == version
            && known.runtime == declared
        {
            return Ok(Verified::Known(known));
        }
        let bundle = Bundle::read(&bytes, &label, max_bundle_bytes)?;
        bundle.expect(&label, &name, &version)?;
        if bundle.manifest.runtime != declared {
            return Err(ArtifactError::RuntimeMismatch {
                name,
                version,
                declared,
                actual: bundle.manifest.runtime,
            });
        }
        Ok(Verified::Fresh {
            sha256,
            bundle,
            label,
        })
    })
    .await
    .map_err(|e| {
        registry_err(RegistryError::Location(format!(
            "verification task failed: {e}"
        )))
    })??;
    let (sha256, bundle, label) = match verified {
        Verified::Known(known) => return Ok(known),
        Verified::Fresh {
            sha256,
            bundle,
            label,
        } => (sha256, bundle, label),
    };
    let item = from_bundle(
        ctx.runtime,
        bundle,
        &label,
        Some(sha256.clone()),
        Origin::Declared,
    )
    .await?;
    ctx.memo.put(sha256, &item);
    Ok(item)
}

/// Bytes that passed the hash checks: seen (and compiled) before, or a bundle
/// read now.
enum Verified {
    Known(Installed),
    Fresh {
        sha256: String,
        bundle: Bundle,
        label: String,
    },
}

/// Verified, compiled artifacts by bundle sha256, for one Runtime: a later
/// stage of the same bytes (same hash, checked every time) skips unzipping and
/// compiling.
#[derive(Default)]
pub struct BundleMemo(Mutex<std::collections::HashMap<String, Installed>>);

/// Bound on remembered bundles; the memo starts over when it is full.
const MEMO_CAPACITY: usize = 1024;

impl BundleMemo {
    fn get(&self, sha256: &str) -> Option<Installed> {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(sha256).cloned()
    }

    fn put(&self, sha256: String, item: &Installed) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MEMO_CAPACITY {
            map.clear();
        }
        map.insert(sha256, item.clone());
    }
}

/// The registry-reported hash checked against the bytes; returns the hash.
fn verify(
    name: &str,
    version: &str,
    bytes: &[u8],
    reported: &str,
) -> Result<String, ArtifactError> {
    let actual = sha256_hex(bytes);
    if !actual.eq_ignore_ascii_case(reported) {
        return Err(ArtifactError::Integrity {
            name: name.to_string(),
            version: version.to_string(),
            reported: reported.to_string(),
            actual,
        });
    }
    Ok(actual)
}

async fn from_bundle(
    runtime: &Runtime,
    bundle: Bundle,
    label: &str,
    sha256: Option<String>,
    origin: Origin,
) -> Result<Installed, RuntimeError> {
    let manifest = bundle.manifest;
    let payload = match (manifest.runtime, manifest.payload_kind()) {
        (ArtifactRuntime::Hook, _) => {
            Payload::Hook(runtime.prepare_hook(label, bundle.payload).await?)
        }
        (_, PayloadKind::Component) => {
            Payload::Tool(runtime.prepare_tool(label, bundle.payload).await?)
        }
        (_, PayloadKind::Native) => Payload::Native(bundle.payload.into()),
        (_, PayloadKind::Skill) => {
            Payload::Skill(String::from_utf8_lossy(&bundle.payload).into_owned().into())
        }
    };
    Ok(Installed {
        name: manifest.name.clone(),
        version: manifest.version.clone(),
        runtime: manifest.runtime,
        implementation: (manifest.runtime == ArtifactRuntime::Tool)
            .then(|| manifest.implementation()),
        sha256,
        origin,
        manifest_yaml: bundle.manifest_yaml,
        manifest,
        payload,
    })
}

/// A skill whose `skill.md` comes from a path (file, or directory holding a
/// `skill.md` in any letter case) relative to the capsule dir.
async fn local_skill(
    artifact: &ArtifactRef,
    manifest_dir: &Path,
    source: &str,
) -> Result<Installed, ArtifactError> {
    let name = artifact.name.clone();
    let path = manifest_dir.join(source);
    let text = tokio::task::spawn_blocking({
        let name = name.clone();
        move || read_local_skill(&name, &path)
    })
    .await
    .map_err(|e| ArtifactError::SkillRead {
        name: name.clone(),
        path: manifest_dir.join(source),
        source: std::io::Error::other(e),
    })??;
    let manifest = ArtifactManifest {
        name: name.clone(),
        version: artifact.version.clone(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        description: format!("Local skill from {source}"),
        tags: vec!["skill".into()],
        input_schema: None,
        output_schema: None,
        hook: None,
    };
    Ok(Installed {
        name,
        version: artifact.version.clone(),
        runtime: ArtifactRuntime::Skill,
        implementation: None,
        sha256: None,
        origin: Origin::Local,
        manifest_yaml: serde_yaml::to_string(&manifest).unwrap_or_default(),
        manifest,
        payload: Payload::Skill(text.into()),
    })
}

fn read_local_skill(name: &str, path: &Path) -> Result<String, ArtifactError> {
    let read_err = |path: &Path| {
        let name = name.to_string();
        let path = path.to_path_buf();
        move |source| ArtifactError::SkillRead { name, path, source }
    };
    if !path.exists() {
        return Err(ArtifactError::SkillSourceMissing {
            name: name.to_string(),
            path: path.to_path_buf(),
        });
    }
    let file = if path.is_dir() {
        let mut found = None;
        for entry in std::fs::read_dir(path).map_err(read_err(path))? {
            let entry = entry.map_err(read_err(path))?;
            if entry
                .file_name()
                .to_string_lossy()
                .eq_ignore_ascii_case("skill.md")
            {
                found = Some(entry.path());
                break;
            }
        }
        found.ok_or_else(|| ArtifactError::SkillNoSkillMd {
            name: name.to_string(),
            path: path.to_path_buf(),
        })?
    } else {
        path.to_path_buf()
    };
    std::fs::read_to_string(&file).map_err(read_err(&file))
}

/// The generic manifest of an allow-listed shell binary.
fn shell_manifest(binary: &str) -> ArtifactManifest {
    ArtifactManifest {
        name: binary.to_string(),
        version: "0.0.0".into(),
        runtime: ArtifactRuntime::Tool,
        implementation: Some(Implementation::Native),
        description: format!(
            "Run `{binary}` (allow-listed in capabilities.shell.allow) in the workdir. \
             Input: {{\"command\": \"…\"}}."
        ),
        tags: vec!["shell".into()],
        input_schema: serde_yaml::from_str(
            "{type: object, properties: {command: {type: string}}, required: [command]}",
        )
        .ok(),
        output_schema: None,
        hook: None,
    }
}

/// Writes `tools/<name>/murmur.yaml`, the native binary (0755) or `skill.md`.
/// Into a fresh tool dir files are written directly; an existing one (a resume,
/// a pull over an older version) has its files replaced by rename, so a reader
/// or a still-running binary never sees a half-written file.
pub fn install_one(root: &Path, dir: &Path, item: &Installed) -> std::io::Result<()> {
    let tool_dir = dir.join("tools").join(&item.name);
    let fresh = !tool_dir.exists();
    crate::fsx::create_dir_all(root, &tool_dir)?;
    let write = |path: &Path, bytes: &[u8], mode: u32| {
        if fresh {
            write_new(root, path, bytes, mode)
        } else {
            crate::fsx::replace(root, path, bytes, mode)
        }
    };
    write(
        &tool_dir.join(ARTIFACT_MANIFEST),
        item.manifest_yaml.as_bytes(),
        0o644,
    )?;
    match &item.payload {
        Payload::Native(bytes) => write(&tool_dir.join(&item.name), bytes, 0o755)?,
        Payload::Skill(text) => write(&tool_dir.join("skill.md"), text.as_bytes(), 0o644)?,
        Payload::Tool(_) | Payload::Hook(_) => {}
    }
    Ok(())
}

/// Installs every staged artifact (a few at a time: on a real disk each file is
/// a journal round trip), then a generic manifest for each shell binary that
/// has none. `dir` lies below `root`, the session's workdir; no link below
/// `root` is followed ([`crate::fsx`]).
pub fn install(
    root: &Path,
    dir: &Path,
    items: &[Installed],
    shell_allow: &[String],
) -> std::io::Result<()> {
    crate::fsx::create_dir_all(root, &dir.join("tools"))?;
    let workers = items.len().clamp(1, 4);
    let chunk = items.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .try_for_each(|item| install_one(root, dir, item))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| std::io::Error::other("install thread panicked"))?
        })
    })?;
    for binary in shell_allow {
        let path = dir.join("tools").join(binary).join(ARTIFACT_MANIFEST);
        let yaml = serde_yaml::to_string(&shell_manifest(binary)).map_err(std::io::Error::other)?;
        crate::fsx::write_if_absent(root, &path, yaml.as_bytes(), 0o644)?;
    }
    Ok(())
}

/// A file in a tool dir roostd just made: exclusive, so nothing already there
/// (a planted link) is written through.
fn write_new(root: &Path, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = crate::fsx::create_new(root, path, mode)?;
    if mode & 0o111 != 0 {
        // Exactly `mode`, whatever the umask (an executable must stay runnable).
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    file.write_all(bytes)
}

/// A pull that has been fetched and verified but not yet installed.
pub struct PullPlan {
    bundle: Bundle,
    sha256: String,
}

impl PullPlan {
    pub fn label(&self) -> String {
        format!(
            "artifact `{}@{}`",
            self.bundle.manifest.name, self.bundle.manifest.version
        )
    }

    /// The component to compile, for WASM tools and drivers.
    pub fn component_bytes(&self) -> Option<Vec<u8>> {
        (self.bundle.manifest.payload_kind() == PayloadKind::Component)
            .then(|| self.bundle.payload.clone())
    }
}

/// Called with the session's artifact list whenever it changes.
pub type OnChange = Box<dyn Fn(Vec<ArtifactRecord>) + Send + Sync>;

/// One session's artifacts, shared by its capsule's host calls.
pub struct SessionArtifacts {
    items: Mutex<Vec<Installed>>,
    /// Names declared in murmur.yaml (which a run-time remove refuses).
    declared: HashSet<String>,
    registry: Arc<dyn Registry>,
    /// The session's workdir: no link below it is followed.
    root: PathBuf,
    dir: PathBuf,
    lock_path: PathBuf,
    max_bundle_bytes: u64,
    on_change: OnChange,
}

/// Serialises read-modify-write of lock files across all sessions.
static LOCK_WRITES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl SessionArtifacts {
    /// `dir` (the bookkeeping dir) lies below `root` (the session's workdir).
    pub fn new(
        items: Vec<Installed>,
        registry: Arc<dyn Registry>,
        root: PathBuf,
        dir: PathBuf,
        lock_path: PathBuf,
        max_bundle_bytes: u64,
        on_change: OnChange,
    ) -> Self {
        Self {
            declared: items.iter().map(|i| i.name.clone()).collect(),
            items: Mutex::new(items),
            registry,
            root,
            dir,
            lock_path,
            max_bundle_bytes,
            on_change,
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, Vec<Installed>> {
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn records(&self) -> Vec<ArtifactRecord> {
        self.items().iter().map(Installed::record).collect()
    }

    pub fn target(&self, name: &str, policy: &CapabilityPolicy) -> Target {
        if let Some(item) = self.items().iter().find(|i| i.name == name) {
            return match &item.payload {
                Payload::Tool(tool) => Target::Wasm(Arc::clone(tool)),
                Payload::Native(_) => Target::Native(self.dir.join("tools").join(name).join(name)),
                Payload::Skill(text) => Target::Skill(Arc::clone(text)),
                Payload::Hook(_) => Target::NotATool(item.runtime),
            };
        }
        if policy.shell_allow.iter().any(|b| b == name) {
            Target::Shell
        } else {
            Target::Missing
        }
    }

    /// Tools and skills (what a capsule or model may call), then shell binaries.
    pub fn list(&self, policy: &CapabilityPolicy) -> Vec<Summary> {
        let mut out: Vec<Summary> = self
            .items()
            .iter()
            .filter(|i| matches!(i.runtime, ArtifactRuntime::Tool | ArtifactRuntime::Skill))
            .map(|i| Summary {
                name: i.name.clone(),
                version: i.version.clone(),
                native: i.native(),
            })
            .collect();
        for binary in &policy.shell_allow {
            if !out.iter().any(|s| &s.name == binary) {
                out.push(Summary {
                    name: binary.clone(),
                    version: "0.0.0".into(),
                    native: true,
                });
            }
        }
        out
    }

    pub fn describe(&self, name: &str, policy: &CapabilityPolicy) -> Result<Info, String> {
        let manifest = match self.items().iter().find(|i| i.name == name) {
            Some(item) => item.manifest.clone(),
            None if policy.shell_allow.iter().any(|b| b == name) => shell_manifest(name),
            None => return Err(format!("artifact '{name}' is not installed")),
        };
        Ok(Info {
            native: manifest.runtime == ArtifactRuntime::Tool
                && manifest.implementation() == Implementation::Native,
            input_schema: manifest.input_schema_json(),
            output_schema: manifest.output_schema_json(),
            name: manifest.name,
            version: manifest.version,
            description: manifest.description,
            tags: manifest.tags,
        })
    }

    /// Registry entries whose name, description or tags match every word of `query`.
    pub async fn search(&self, query: &str) -> Result<Vec<Summary>, String> {
        let index = self.registry.index().await.map_err(|e| e.to_string())?;
        Ok(index
            .artifacts
            .iter()
            .filter(|entry| entry.matches(query))
            .map(|entry| Summary {
                name: entry.name.clone(),
                version: entry.version.clone(),
                native: entry.implementation == Some(Implementation::Native),
            })
            .collect())
    }

    /// Resolves and verifies `name@version` and checks it against the lock,
    /// writing nothing.
    pub async fn fetch_for_pull(&self, name: &str, version: &str) -> Result<PullPlan, String> {
        validate_name(name).map_err(|m| format!("artifact name {m}"))?;
        validate_semver(version).map_err(|m| format!("artifact version {m}"))?;
        if self.declared.contains(name)
            && let Some(item) = self.items().iter().find(|i| i.name == name)
            && item.version != version
        {
            return Err(format!(
                "'{name}' is declared in murmur.yaml at version {}; change it there to use {version}",
                item.version
            ));
        }
        let index = self.registry.index().await.map_err(|e| e.to_string())?;
        let resolved = registry::resolve(
            &*self.registry,
            &index,
            name,
            version,
            self.max_bundle_bytes,
        )
        .await
        .map_err(|e| format!("cannot pull {name}@{version}: {e}"))?;
        let sha256 = verify(name, version, &resolved.bytes, &resolved.bundle.sha256)
            .map_err(|e| e.to_string())?;
        check_pin(&self.lock_path, name, version, &sha256).await?;
        let label = format!("artifact `{name}@{version}`");
        let bundle = Bundle::read(&resolved.bytes, &label, self.max_bundle_bytes)
            .map_err(|e| e.to_string())?;
        bundle
            .expect(&label, name, version)
            .map_err(|e| e.to_string())?;
        if bundle.manifest.runtime == ArtifactRuntime::Hook {
            return Err(format!(
                "'{name}' is a hook; hooks are bound when a session is staged: declare it under \
                 `artifacts:` in murmur.yaml"
            ));
        }
        Ok(PullPlan { bundle, sha256 })
    }

    /// Installs a verified pull, then (only then) pins it in the lock, then
    /// makes it invocable.
    pub async fn complete_pull(
        &self,
        plan: PullPlan,
        component: Option<Arc<PreparedTool>>,
    ) -> Result<Summary, String> {
        let manifest = plan.bundle.manifest.clone();
        let payload = match (component, manifest.payload_kind()) {
            (Some(tool), _) => Payload::Tool(tool),
            (None, PayloadKind::Native) => Payload::Native(plan.bundle.payload.clone().into()),
            (None, PayloadKind::Skill) => Payload::Skill(
                String::from_utf8_lossy(&plan.bundle.payload)
                    .into_owned()
                    .into(),
            ),
            (None, PayloadKind::Component) => {
                return Err(format!("{} was not compiled", plan.label()));
            }
        };
        let item = Installed {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            runtime: manifest.runtime,
            implementation: (manifest.runtime == ArtifactRuntime::Tool)
                .then(|| manifest.implementation()),
            sha256: Some(plan.sha256.clone()),
            origin: if self.declared.contains(&manifest.name) {
                Origin::Declared
            } else {
                Origin::Pulled
            },
            manifest_yaml: plan.bundle.manifest_yaml.clone(),
            manifest,
            payload,
        };
        let _writer = LOCK_WRITES.lock().await;
        // The lock may have changed while the bundle was fetched.
        check_pin(&self.lock_path, &item.name, &item.version, &plan.sha256).await?;
        let dir = self.dir.clone();
        let root = self.root.clone();
        let lock_path = self.lock_path.clone();
        let for_install = item.clone();
        blocking(move || {
            install_one(&root, &dir, &for_install).map_err(|e| {
                format!(
                    "cannot install {} into {}: {e}",
                    for_install.name,
                    dir.display()
                )
            })?;
            let mut lock = MurmurLock::read(&lock_path)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            lock.pin(LockEntry {
                name: for_install.name.clone(),
                version: for_install.version.clone(),
                sha256: for_install.sha256.clone().unwrap_or_default(),
            });
            if let Err(e) = lock.write_atomic(&lock_path) {
                let _ = std::fs::remove_dir_all(dir.join("tools").join(&for_install.name));
                return Err(format!("{e}; the pull was undone"));
            }
            Ok(())
        })
        .await?;
        let summary = Summary {
            name: item.name.clone(),
            version: item.version.clone(),
            native: item.native(),
        };
        {
            let mut items = self.items();
            items.retain(|i| i.name != item.name);
            items.push(item);
        }
        (self.on_change)(self.records());
        Ok(summary)
    }

    /// Uninstalls an artifact pulled at run time and drops its lock entry.
    pub async fn remove(&self, name: &str) -> Result<bool, String> {
        if self.declared.contains(name) {
            return Err(format!(
                "'{name}' is declared in murmur.yaml; remove it from `artifacts:` there (a \
                 run-time remove only undoes a pull)"
            ));
        }
        if !self.items().iter().any(|i| i.name == name) {
            return Ok(false);
        }
        let _writer = LOCK_WRITES.lock().await;
        let dir = self.dir.join("tools").join(name);
        let lock_path = self.lock_path.clone();
        let name_owned = name.to_string();
        blocking(move || {
            if let Err(e) = std::fs::remove_dir_all(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(format!("cannot remove {}: {e}", dir.display()));
            }
            if let Some(mut lock) = MurmurLock::read(&lock_path).map_err(|e| e.to_string())?
                && lock.unpin(&name_owned)
            {
                lock.write_atomic(&lock_path).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .await?;
        self.items().retain(|i| i.name != name);
        (self.on_change)(self.records());
        Ok(true)
    }

    /// `diagnostics().capabilities`: what this session may do, as JSON.
    pub fn capabilities_json(
        &self,
        policy: &CapabilityPolicy,
        allowlist: &HashSet<String>,
    ) -> String {
        #[derive(Serialize)]
        struct Caps<'a> {
            tools: Vec<&'a str>,
            network_allow: Vec<String>,
            shell_allow: &'a [String],
            env_allow: &'a [String],
            timeout_secs: Option<u64>,
            memory_mb: Option<u64>,
            artifact_manager: [&'static str; 6],
        }
        let mut tools: Vec<&str> = allowlist.iter().map(String::as_str).collect();
        tools.sort_unstable();
        let caps = Caps {
            tools,
            network_allow: policy
                .network_allow
                .iter()
                .map(ToString::to_string)
                .collect(),
            shell_allow: &policy.shell_allow,
            env_allow: &policy.env_allow,
            timeout_secs: policy.limits.timeout_secs,
            memory_mb: policy.limits.memory_mb,
            artifact_manager: [
                "list",
                "describe",
                "search",
                "pull",
                "remove",
                "diagnostics",
            ],
        };
        serde_json::to_string(&caps).unwrap_or_default()
    }
}

/// Refuses a pull that would override a pin with another version or hash.
async fn check_pin(
    lock_path: &Path,
    name: &str,
    version: &str,
    sha256: &str,
) -> Result<(), String> {
    let path = lock_path.to_path_buf();
    let lock = blocking(move || MurmurLock::read(&path).map_err(|e| e.to_string())).await?;
    if let Some(pinned) = lock.as_ref().and_then(|l| l.get(name))
        && (pinned.version != version || !pinned.sha256.eq_ignore_ascii_case(sha256))
    {
        return Err(format!(
            "murmur.lock conflict for '{name}': pinned {name}@{} (sha256 {}), but the registry \
             resolves {name}@{version} (sha256 {sha256}); refusing to override a pinned artifact \
             at run time",
            pinned.version, pinned.sha256
        ));
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("file task failed: {e}"))?
}

#[async_trait::async_trait]
impl Catalog for SessionArtifacts {
    fn target(&self, name: &str, policy: &CapabilityPolicy) -> Target {
        SessionArtifacts::target(self, name, policy)
    }

    fn list(&self, policy: &CapabilityPolicy) -> Vec<Summary> {
        SessionArtifacts::list(self, policy)
    }

    fn describe(&self, name: &str, policy: &CapabilityPolicy) -> Result<Info, String> {
        SessionArtifacts::describe(self, name, policy)
    }

    async fn search(&self, query: &str) -> Result<Vec<Summary>, String> {
        SessionArtifacts::search(self, query).await
    }

    async fn pull(
        &self,
        name: &str,
        version: &str,
        compiler: &dyn Compiler,
    ) -> Result<Summary, String> {
        let plan = self.fetch_for_pull(name, version).await?;
        let component = match plan.component_bytes() {
            Some(bytes) => Some(
                compiler
                    .compile_tool(&plan.label(), bytes)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        self.complete_pull(plan, component).await
    }

    async fn remove(&self, name: &str) -> Result<bool, String> {
        SessionArtifacts::remove(self, name).await
    }

    fn capabilities_json(&self, policy: &CapabilityPolicy, allowlist: &HashSet<String>) -> String {
        SessionArtifacts::capabilities_json(self, policy, allowlist)
    }
}
