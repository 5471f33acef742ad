//! Staging a capsule's artifacts: resolved through the registry, verified
//! against the registry's sha256 and `murmur.lock`, read as bundles and
//! compiled (once per hash: [`BundleMemo`]); nothing is written.

use super::skills::local_skill;
use super::*;

/// Resolves, verifies and compiles every artifact `manifest` declares. Nothing
/// is written; any error leaves the capsule and the session dirs untouched.
/// `say(step, what)` hears each step as it starts (`fetch`, `verify`,
/// `compile`, with `name@version`).
pub async fn stage(
    runtime: &Runtime,
    memo: &Arc<BundleMemo>,
    registry: &dyn Registry,
    manifest: &CapsuleManifest,
    max_bundle_bytes: u64,
    say: &(dyn Fn(&str, String) + Sync),
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
        let (dir, path) = (manifest.manifest_dir.clone(), staged.lock_path.clone());
        // Read inside the capsule directory, following no link: a lock
        // that is a symlink (a tool can plant one where the workdir is the
        // capsule) is not read, and the new lock replaces the link.
        tokio::task::spawn_blocking(move || match crate::fsx::read(&dir, &path) {
            Ok(bytes) => MurmurLock::parse(&String::from_utf8_lossy(&bytes))
                .map(Some)
                .map_err(|message| LockError::Parse { path, message }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(_) if path.is_symlink() => {
                tracing::warn!(path = %path.display(), "murmur.lock is a symlink: not followed; a new lock replaces it");
                Ok(None)
            }
            Err(source) => Err(LockError::Read { path, source }),
        })
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
    let ctx = StageRun {
        runtime,
        memo,
        registry,
        index: index.as_ref(),
        manifest,
        max_bundle_bytes,
        say,
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
struct StageRun<'a> {
    runtime: &'a Runtime,
    memo: &'a Arc<BundleMemo>,
    registry: &'a dyn Registry,
    index: Option<&'a roost_wire::artifact::RegistryIndex>,
    manifest: &'a CapsuleManifest,
    max_bundle_bytes: u64,
    say: &'a (dyn Fn(&str, String) + Sync),
}

async fn stage_one(
    ctx: &StageRun<'_>,
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
    let what = format!("{}@{}", artifact.name, artifact.version);
    (ctx.say)("fetch", what.clone());
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
    (ctx.say)("verify", what.clone());
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
    (ctx.say)("compile", what);
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
    pub(super) fn get(&self, sha256: &str) -> Option<Installed> {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(sha256).cloned()
    }

    pub(super) fn put(&self, sha256: String, item: &Installed) {
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
pub(super) fn verify(
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
