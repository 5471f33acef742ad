//! Where artifacts come from: the [`Registry`] trait and its two implementations
//! over the same layout (`roost_wire::artifact::registry`), a local directory and
//! a read-only `http://` base URL (fetched with [`crate::http_client`]); and
//! [`Layered`], a node's own registry in front of its cluster's (whose
//! implementation is `cluster::artifacts`).

use std::path::PathBuf;
use std::sync::Arc;

use roost_wire::artifact::registry::{LayoutError, Published};
use roost_wire::artifact::{
    ArtifactManifest, BundleRef, INDEX_FILENAME, IndexEntry, LocalRegistry, RegistryIndex,
};

/// Index documents larger than this are refused.
const MAX_INDEX_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("registry {url}: {message}")]
    Http { url: String, message: String },
    #[error("registry '{0}' is neither an existing directory nor an http:// URL")]
    Location(String),
    #[error(
        "roostd's registry {0} is read-only (an http:// registry): publish to its source, \
         or give roostd a directory registry"
    )]
    ReadOnly(String),
    #[error(transparent)]
    Bundle(#[from] roost_wire::artifact::BundleError),
    #[error("the cluster's registry: {0}")]
    Cluster(String),
}

/// A source of published artifacts.
#[async_trait::async_trait]
pub trait Registry: Send + Sync {
    /// Where it is, for messages.
    fn location(&self) -> String;
    /// Every published version.
    async fn index(&self) -> Result<RegistryIndex, RegistryError>;
    /// The bytes of one bundle the index names.
    async fn bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, RegistryError>;
    /// Puts checked bundle bytes for `platform` in (the same bytes again
    /// are a no-op, other bytes for a published version are refused) and
    /// says where they are, for messages. Read-only registries refuse.
    async fn put(
        &self,
        _manifest: &ArtifactManifest,
        _bytes: Vec<u8>,
        _platform: String,
    ) -> Result<(Published, String), RegistryError> {
        Err(RegistryError::ReadOnly(self.location()))
    }
}

/// What [`publish`] put into the registry.
pub struct PublishedBundle {
    pub manifest: ArtifactManifest,
    pub published: Published,
    /// Where the bundle is (a file on this host, or an object of the
    /// cluster's bucket).
    pub path: String,
}

/// Publishes bundle bytes (`roostctl publish --to-daemon`, `--cluster`)
/// into `registry`, after the checks every bundle gets when it is
/// installed (size, zip entries, manifest); the same bytes again are a
/// no-op.
pub async fn publish(
    registry: &dyn Registry,
    bytes: Vec<u8>,
    platform: String,
    max_bytes: u64,
) -> Result<PublishedBundle, RegistryError> {
    let (manifest, bytes) = blocking(move || {
        let bundle = roost_wire::artifact::Bundle::read(&bytes, "the uploaded bundle", max_bytes)?;
        Ok((bundle.manifest, bytes))
    })
    .await?;
    let (published, path) = registry.put(&manifest, bytes, platform).await?;
    Ok(PublishedBundle {
        manifest,
        published,
        path,
    })
}

/// One artifact version resolved for this platform, with the hash the registry reports.
pub struct Resolved {
    pub entry: IndexEntry,
    pub bundle: BundleRef,
    pub bytes: Vec<u8>,
}

/// Resolves `name@version` for this platform (else the generic bundle) and fetches it.
pub async fn resolve(
    registry: &dyn Registry,
    index: &RegistryIndex,
    name: &str,
    version: &str,
    max_bytes: u64,
) -> Result<Resolved, RegistryError> {
    let platform = roost_wire::artifact::current_platform();
    let (entry, bundle) = index.resolve(name, version, &platform, &registry.location())?;
    let bytes = registry.bundle(bundle, max_bytes).await?;
    Ok(Resolved {
        entry: entry.clone(),
        bundle: bundle.clone(),
        bytes,
    })
}

/// Opens `--registry DIR|URL` (or `registry:`): an `http://` URL or a directory.
pub fn open(location: &str) -> Result<Arc<dyn Registry>, RegistryError> {
    if location.starts_with("http://") {
        return Ok(Arc::new(HttpRegistry::new(location)?));
    }
    if location.contains("://") {
        return Err(RegistryError::Http {
            url: location.to_string(),
            message: "only http:// registries are supported (put TLS in front with a local \
                      proxy, or mirror the registry to a directory)"
                .into(),
        });
    }
    Ok(Arc::new(DirRegistry(LocalRegistry::new(PathBuf::from(
        location,
    )))))
}

/// A registry directory (missing means empty, so a fresh daemon has one).
pub struct DirRegistry(pub LocalRegistry);

#[async_trait::async_trait]
impl Registry for DirRegistry {
    fn location(&self) -> String {
        self.0.root().display().to_string()
    }

    async fn index(&self) -> Result<RegistryIndex, RegistryError> {
        let local = self.0.clone();
        blocking(move || local.index().map_err(Into::into)).await
    }

    async fn bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, RegistryError> {
        let local = self.0.clone();
        let bundle = bundle.clone();
        blocking(move || local.read_bundle(&bundle, max_bytes).map_err(Into::into)).await
    }

    async fn put(
        &self,
        manifest: &ArtifactManifest,
        bytes: Vec<u8>,
        platform: String,
    ) -> Result<(Published, String), RegistryError> {
        let local = self.0.clone();
        let manifest = manifest.clone();
        blocking(move || {
            let published = local.publish(&manifest, &bytes, &platform)?;
            let path = local.root().join(&published.bundle.path);
            Ok((published, path.display().to_string()))
        })
        .await
    }
}

/// `own`, in front of the cluster's registry when roostd is a node of one.
pub fn layered(own: Arc<dyn Registry>, cluster: Option<&Arc<dyn Registry>>) -> Arc<dyn Registry> {
    match cluster {
        Some(cluster) => Arc::new(Layered {
            own,
            cluster: Arc::clone(cluster),
        }),
        None => own,
    }
}

/// A node's own registry in front of its cluster's: an index with the
/// versions of both (the node's own where both have a version), and a
/// bundle from the first that has it. Publishing (`--to-daemon`) goes to
/// the node's own.
pub struct Layered {
    pub own: Arc<dyn Registry>,
    pub cluster: Arc<dyn Registry>,
}

#[async_trait::async_trait]
impl Registry for Layered {
    fn location(&self) -> String {
        format!("{} and {}", self.own.location(), self.cluster.location())
    }

    async fn index(&self) -> Result<RegistryIndex, RegistryError> {
        let (own, cluster) = tokio::join!(self.own.index(), self.cluster.index());
        let mut index = own?;
        let cluster = match cluster {
            Ok(cluster) => cluster,
            Err(error) => {
                // The node's own versions still resolve while the cluster
                // cannot be read; a version only the cluster has is then
                // "not found", and the log says why.
                tracing::warn!(%error, "the cluster's registry cannot be read");
                return Ok(index);
            }
        };
        for entry in cluster.artifacts {
            match index.entry(&entry.name, &entry.version) {
                Some(own)
                    if own.bundles.iter().any(|b| {
                        entry
                            .bundles
                            .iter()
                            .any(|c| c.platform == b.platform && c.sha256 != b.sha256)
                    }) =>
                {
                    tracing::warn!(artifact = %entry.name, version = %entry.version,
                        "this version is in this node's registry and the cluster's with \
                         different bytes; this node's are used");
                }
                Some(_) => {}
                None => index.artifacts.push(entry),
            }
        }
        index
            .artifacts
            .sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        Ok(index)
    }

    async fn bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, RegistryError> {
        match self.own.bundle(bundle, max_bytes).await {
            Ok(bytes) => Ok(bytes),
            Err(own) => self
                .cluster
                .bundle(bundle, max_bytes)
                .await
                .map_err(|cluster| {
                    RegistryError::Location(format!(
                        "bundle {} is in neither registry: {own}; {cluster}",
                        bundle.path
                    ))
                }),
        }
    }

    async fn put(
        &self,
        manifest: &ArtifactManifest,
        bytes: Vec<u8>,
        platform: String,
    ) -> Result<(Published, String), RegistryError> {
        self.own.put(manifest, bytes, platform).await
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RegistryError> + Send + 'static,
) -> Result<T, RegistryError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RegistryError::Location(format!("registry task failed: {e}")))?
}

/// A read-only registry served over plain HTTP (`<base>/index.json`, `<base>/<path>`).
pub struct HttpRegistry {
    base: String,
}

impl HttpRegistry {
    pub fn new(base: &str) -> Result<Self, RegistryError> {
        let bad = |message: &str| RegistryError::Http {
            url: base.to_string(),
            message: message.to_string(),
        };
        let uri: http::Uri = base.parse().map_err(|_| bad("not a valid URL"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| bad("the URL has no host"))?
            .clone();
        let path = uri.path().trim_end_matches('/');
        Ok(Self {
            base: format!("http://{authority}{path}"),
        })
    }

    async fn get(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, RegistryError> {
        let url = format!("{}/{path}", self.base);
        let fail = |message: String| RegistryError::Http {
            url: url.clone(),
            message,
        };
        let reply =
            crate::http_client::exchange(http::Method::GET, &url, &[], Vec::new(), max_bytes)
                .await
                .map_err(|e| fail(e.to_string()))?;
        if !reply.status.is_success() {
            return Err(fail(format!("answered {}", reply.status)));
        }
        Ok(reply.body)
    }
}

#[async_trait::async_trait]
impl Registry for HttpRegistry {
    fn location(&self) -> String {
        self.base.clone()
    }

    async fn index(&self) -> Result<RegistryIndex, RegistryError> {
        let bytes = self.get(INDEX_FILENAME, MAX_INDEX_BYTES).await?;
        let location = format!("{}/{INDEX_FILENAME}", self.base);
        Ok(RegistryIndex::parse(&bytes, &location)?)
    }

    async fn bundle(&self, bundle: &BundleRef, max_bytes: u64) -> Result<Vec<u8>, RegistryError> {
        self.get(&bundle.path, max_bytes).await
    }
}
