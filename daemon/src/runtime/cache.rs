//! Compiled components keyed by content sha256: once per hash for the life of the
//! process (in memory), and serialized under the state dir so a restart does not
//! recompile.

use crate::telemetry::{Kind, Span};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{PreparedComponent, RuntimeError};
use crate::metrics::Metrics;

/// Components larger than this are refused before they are read.
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// A path's identity as far as "did the bytes change" goes.
#[derive(Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

pub(crate) struct ComponentCache {
    dir: PathBuf,
    by_hash: Mutex<HashMap<String, Arc<OnceCell<Arc<PreparedComponent>>>>>,
    /// Skips re-hashing a file whose size and mtime did not change.
    by_path: Mutex<HashMap<PathBuf, (FileStamp, String)>>,
    metrics: Arc<Metrics>,
}

impl ComponentCache {
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub(crate) fn new(dir: PathBuf, metrics: Arc<Metrics>) -> Self {
        Self {
            dir,
            by_hash: Mutex::new(HashMap::new()),
            by_path: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The sha256 of a component file (opened by the caller, which decided
    /// what it may name) and, when it must be read, its bytes.
    fn hash_file(
        &self,
        path: &Path,
        file: &std::fs::File,
    ) -> Result<(String, Option<Vec<u8>>), RuntimeError> {
        let read_err = |source| RuntimeError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = file.metadata().map_err(read_err)?;
        if meta.len() > MAX_COMPONENT_BYTES {
            return Err(RuntimeError::TooLarge {
                path: path.to_path_buf(),
                size: meta.len(),
                max: MAX_COMPONENT_BYTES,
            });
        }
        let stamp = FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
        };
        if let Some((known, sha)) = lock(&self.by_path).get(path)
            && *known == stamp
        {
            return Ok((sha.clone(), None));
        }
        let bytes = read_all(file).map_err(read_err)?;
        let sha = hex::encode(Sha256::digest(&bytes));
        lock(&self.by_path).insert(path.to_path_buf(), (stamp, sha.clone()));
        Ok((sha, Some(bytes)))
    }

    /// The prepared component for the file at `path`, compiling (and running
    /// `prepare`) at most once per content hash.
    pub(crate) async fn get_file(
        &self,
        engine: &Engine,
        (path, file): (&Path, std::fs::File),
        prepare: impl FnOnce(String, Component) -> Result<PreparedComponent, RuntimeError>,
    ) -> Result<Arc<PreparedComponent>, RuntimeError> {
        let (sha, bytes) = self.hash_file(path, &file)?;
        let what = path.display().to_string();
        let source = Source::File(path.to_path_buf(), file, bytes);
        self.get(engine, sha, what, source, prepare).await
    }

    /// The prepared component for bytes taken from a verified bundle.
    pub(crate) async fn get_bytes(
        &self,
        engine: &Engine,
        what: &str,
        bytes: Vec<u8>,
        prepare: impl FnOnce(String, Component) -> Result<PreparedComponent, RuntimeError>,
    ) -> Result<Arc<PreparedComponent>, RuntimeError> {
        let sha = hex::encode(Sha256::digest(&bytes));
        self.get(engine, sha, what.to_string(), Source::Bytes(bytes), prepare)
            .await
    }

    async fn get(
        &self,
        engine: &Engine,
        sha: String,
        what: String,
        source: Source,
        prepare: impl FnOnce(String, Component) -> Result<PreparedComponent, RuntimeError>,
    ) -> Result<Arc<PreparedComponent>, RuntimeError> {
        let cell = Arc::clone(lock(&self.by_hash).entry(sha.clone()).or_default());
        if let Some(prepared) = cell.get() {
            self.metrics.cache_hit_memory();
            return Ok(Arc::clone(prepared));
        }
        let mut initialised_here = false;
        let prepared = cell
            .get_or_try_init(|| async {
                initialised_here = true;
                let mut span = Span::start("load component", Kind::Internal, None);
                span.set("roost.component", what.as_str());
                span.set("roost.component.sha256", sha.as_str());
                let compiled_before = self.metrics.components_compiled();
                let engine = engine.clone();
                let cached = self.dir.join(format!("{sha}.cwasm"));
                let metrics = Arc::clone(&self.metrics);
                let sha_for_task = sha.clone();
                let component = tokio::task::spawn_blocking(move || {
                    load_or_compile(&engine, &cached, &what, &sha_for_task, source, &metrics)
                })
                .await
                .map_err(|e| RuntimeError::Engine(format!("compile task failed: {e}")))
                .and_then(|loaded| loaded)
                .inspect_err(|e| span.fail(e.to_string()))?;
                span.set(
                    "roost.component.compiled",
                    self.metrics.components_compiled() > compiled_before,
                );
                drop(span);
                prepare(sha.clone(), component).map(Arc::new)
            })
            .await?;
        if !initialised_here {
            // Waited for a concurrent compile of the same hash.
            self.metrics.cache_hit_memory();
        }
        Ok(Arc::clone(prepared))
    }
}

/// Where the bytes of a component come from when it must be compiled.
enum Source {
    /// A file (its name, the open handle), with its bytes when they were
    /// already read for hashing.
    File(PathBuf, std::fs::File, Option<Vec<u8>>),
    Bytes(Vec<u8>),
}

/// A file's whole content from its start (the handle may have been read).
fn read_all(mut file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn load_or_compile(
    engine: &Engine,
    cached: &Path,
    what: &str,
    sha: &str,
    source: Source,
    metrics: &Metrics,
) -> Result<Component, RuntimeError> {
    if cached.is_file() {
        // SAFETY: files in the cache dir are written only by `persist` below from
        // `Component::serialize` on an Engine of this build; wasmtime checks the
        // header for version and configuration compatibility and errors otherwise,
        // in which case we recompile and overwrite.
        match unsafe { Component::deserialize_file(engine, cached) } {
            Ok(component) => {
                metrics.cache_hit_disk();
                return Ok(component);
            }
            Err(error) => tracing::warn!(
                path = %cached.display(),
                error = %error,
                "discarding incompatible compiled component"
            ),
        }
    }
    let bytes = match source {
        Source::Bytes(bytes) | Source::File(_, _, Some(bytes)) => bytes,
        Source::File(path, file, None) => read_all(&file).map_err(|e| RuntimeError::Read {
            path: path.clone(),
            source: e,
        })?,
    };
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != sha {
        return Err(RuntimeError::Compile {
            what: what.to_string(),
            message: "the file changed while it was being read; start again".into(),
        });
    }
    let component = Component::new(engine, &bytes).map_err(|e| RuntimeError::Compile {
        what: what.to_string(),
        message: format!("{e:#}"),
    })?;
    metrics.compiled();
    tracing::info!(sha256 = sha, component = what, "compiled component");
    if let Err(error) = persist(&component, cached) {
        tracing::warn!(path = %cached.display(), error = %error, "cannot persist compiled component");
    }
    Ok(component)
}

/// Writes atomically (temp file + rename) so a crash never leaves a torn artifact.
fn persist(component: &Component, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = component.serialize().map_err(|e| e.to_string())?;
    let dir = path.parent().ok_or("cache path has no parent")?;
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
