//! The cluster's artifact registry (`roostctl publish --cluster`): bundles
//! in the JetStream object store `roost-artifacts`, one index entry per
//! version in the KV bucket `roost-artifact-index`, written by
//! compare-and-set so two nodes publishing at once lose nothing. Every
//! node reads it behind its own registry (`registry::Layered`); what comes
//! out is verified against sha256 and `murmur.lock` as from any registry.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv, object_store};
use futures::StreamExt;
use roost_wire::artifact::registry::{Published, bundle_file};
use roost_wire::artifact::{ArtifactManifest, BundleRef, IndexEntry, RegistryIndex, sha256_hex};
use tokio::io::AsyncReadExt;

use super::Cluster;
use crate::registry::{Registry, RegistryError};

/// The object store bucket bundles are kept in.
pub const OBJECTS_BUCKET: &str = "roost-artifacts";
/// The KV bucket of index entries, one per `name@version`.
pub const INDEX_BUCKET: &str = "roost-artifact-index";

/// The largest index entry the bucket keeps (an entry is a few hundred
/// bytes per platform).
const MAX_ENTRY_BYTES: i32 = 1 << 20;

/// How often a publish tries again when another node wrote the same
/// version's entry between its read and its write.
const CAS_TRIES: usize = 8;

/// The cluster's buckets, opened when the node joins.
pub(super) struct Buckets {
    index: kv::Store,
    objects: object_store::ObjectStore,
}

/// Opens (or makes) both buckets, `replicas` copies each.
pub(super) async fn open(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<Buckets, Box<dyn std::error::Error + Send + Sync>> {
    let index = js
        .create_or_update_key_value(kv::Config {
            bucket: INDEX_BUCKET.into(),
            description: "roostd artifacts published to the cluster: one entry per version".into(),
            history: 1,
            max_value_size: MAX_ENTRY_BYTES,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    let objects = match js.get_object_store(OBJECTS_BUCKET).await {
        Ok(objects) => objects,
        Err(_) => {
            js.create_object_store(object_store::Config {
                bucket: OBJECTS_BUCKET.into(),
                description: Some("roostd artifact bundles published to the cluster".into()),
                num_replicas: replicas,
                ..Default::default()
            })
            .await?
        }
    };
    Ok(Buckets { index, objects })
}

/// The index key of `name@version`: names and versions never hold `_`,
/// and `+` (a version's build metadata) is not a KV key character.
fn key(name: &str, version: &str) -> String {
    format!("{name}/{}", version.replace('+', "_"))
}

/// The object a bundle is kept as: its hash is part of the name, so two
/// nodes publishing different bytes at once never overwrite each other's.
fn object_name(manifest: &ArtifactManifest, platform: &str, sha256: &str) -> String {
    format!(
        "{}/{}/{sha256}/{}",
        manifest.name,
        manifest.version,
        bundle_file(manifest, platform)
    )
}

/// The cluster's registry as this node reads and writes it.
pub struct ClusterRegistry(pub(super) Arc<Cluster>);

impl Cluster {
    /// The cluster's artifact registry (an error until joined).
    pub fn registry(self: &Arc<Self>) -> Arc<dyn Registry> {
        Arc::new(ClusterRegistry(Arc::clone(self)))
    }
}

impl ClusterRegistry {
    fn buckets(&self) -> Result<&Buckets, RegistryError> {
        self.0
            .joined
            .get()
            .map(|j| &j.artifacts)
            .ok_or_else(|| failed("this node has not joined the cluster yet"))
    }
}

fn failed(message: impl std::fmt::Display) -> RegistryError {
    RegistryError::Cluster(message.to_string())
}

#[async_trait::async_trait]
impl Registry for ClusterRegistry {
    fn location(&self) -> String {
        format!("the cluster's registry (JetStream bucket {OBJECTS_BUCKET})")
    }

    async fn index(&self) -> Result<RegistryIndex, RegistryError> {
        let buckets = self.buckets()?;
        let mut keys = buckets.index.keys().await.map_err(failed)?;
        let mut index = RegistryIndex::default();
        while let Some(key) = keys.next().await {
            let key = key.map_err(failed)?;
            let Some(value) = buckets.index.get(&key).await.map_err(failed)? else {
                continue;
            };
            let entry: IndexEntry = serde_json::from_slice(&value).map_err(|e| {
                failed(format!(
                    "index entry '{key}' is not one this roostd reads ({e}); was it written by \
                     another version?"
                ))
            })?;
            index.artifacts.push(entry);
        }
        index
            .artifacts
            .sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        // The checks every registry's index gets (format, relative bundle
        // paths), in the one place they are made.
        let bytes = serde_json::to_vec(&index).map_err(failed)?;
        Ok(RegistryIndex::parse(&bytes, &self.location())?)
    }

    async fn bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, RegistryError> {
        let buckets = self.buckets()?;
        let info = buckets
            .objects
            .info(&bundle.path)
            .await
            .map_err(|e| failed(format!("bundle {}: {e}", bundle.path)))?;
        if info.size as u64 > max_bytes {
            return Err(failed(format!(
                "bundle {} is {} bytes, over the limit of {max_bytes}",
                bundle.path, info.size
            )));
        }
        let object = buckets
            .objects
            .get(&bundle.path)
            .await
            .map_err(|e| failed(format!("bundle {}: {e}", bundle.path)))?;
        let mut bytes = Vec::with_capacity(info.size.min(max_bytes as usize));
        object
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| failed(format!("bundle {}: {e}", bundle.path)))?;
        if bytes.len() as u64 > max_bytes {
            return Err(failed(format!(
                "bundle {} is over the limit of {max_bytes} bytes",
                bundle.path
            )));
        }
        Ok(bytes)
    }

    async fn put(
        &self,
        manifest: &ArtifactManifest,
        bytes: Vec<u8>,
        platform: String,
    ) -> Result<(Published, String), RegistryError> {
        let buckets = self.buckets()?;
        let sha256 = sha256_hex(&bytes);
        let bundle = BundleRef {
            platform: platform.clone(),
            path: object_name(manifest, &platform, &sha256),
            sha256: sha256.clone(),
            size: bytes.len() as u64,
        };
        let key = key(&manifest.name, &manifest.version);
        let shown = format!("{OBJECTS_BUCKET}/{}", bundle.path);
        let mut stored = false;
        for _ in 0..CAS_TRIES {
            let entry = buckets.index.entry(key.as_str()).await.map_err(failed)?;
            let current = match &entry {
                Some(e) if e.operation == kv::Operation::Put => Some(
                    serde_json::from_slice::<IndexEntry>(&e.value)
                        .map_err(|e| failed(format!("index entry '{key}' cannot be read: {e}")))?,
                ),
                _ => None,
            };
            let mut next = match current {
                Some(current) => {
                    if let Some(existing) = current.admits(manifest, &platform, &sha256)? {
                        return Ok((
                            Published {
                                bundle: existing,
                                unchanged: true,
                            },
                            shown,
                        ));
                    }
                    current
                }
                None => IndexEntry::of(manifest),
            };
            // The bundle is stored before the index names it.
            if !stored {
                buckets
                    .objects
                    .put(bundle.path.as_str(), &mut bytes.as_slice())
                    .await
                    .map_err(|e| failed(format!("storing bundle {}: {e}", bundle.path)))?;
                stored = true;
            }
            next.bundles.push(bundle.clone());
            let value = serde_json::to_vec(&next).map_err(failed)?.into();
            let written = match &entry {
                Some(e) => buckets
                    .index
                    .update(key.as_str(), value, e.revision)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.kind() == kv::UpdateErrorKind::WrongLastRevision),
                None => buckets
                    .index
                    .create(key.as_str(), value)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.kind() == kv::CreateErrorKind::AlreadyExists),
            };
            match written {
                Ok(()) => {
                    return Ok((
                        Published {
                            bundle,
                            unchanged: false,
                        },
                        shown,
                    ));
                }
                // Another node wrote this version meanwhile: read it again.
                Err(true) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(false) => break,
            }
        }
        // Not named by the index: nothing reads it.
        let _ = buckets.objects.delete(bundle.path.as_str()).await;
        Err(failed(format!(
            "the index entry of {}@{} could not be written; try again",
            manifest.name, manifest.version
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kv_keys_and_tell_versions_apart() {
        assert_eq!(key("echo", "1.2.3"), "echo/1.2.3");
        assert_eq!(key("echo", "1.2.3+build.5"), "echo/1.2.3_build.5");
        assert_ne!(key("echo", "1.2.3-rc.1"), key("echo", "1.2.3"));
    }
}
