//! One session's artifacts (`SessionArtifacts`): what `invoke` runs for a
//! name, and the artifact manager's list, describe, search, pull (with its
//! lock write) and remove; the runtime reaches it as a `Catalog`.

use super::stage::verify;
use super::*;

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
    /// Whether the session was staged as one that runs native or shell
    /// tools (its jail decision and tool uid were made for them); if not,
    /// a native tool cannot be pulled into it.
    native_allowed: bool,
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
            native_allowed: true,
        }
    }

    /// Whether native tools may be pulled (the session was staged with
    /// native or shell tools); on by default.
    pub fn native_tools(mut self, allowed: bool) -> Self {
        self.native_allowed = allowed;
        self
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

    pub fn describe(&self, name: &str, policy: &CapabilityPolicy) -> Result<Info, CatalogError> {
        let manifest = match self.items().iter().find(|i| i.name == name) {
            Some(item) => item.manifest.clone(),
            None if policy.shell_allow.iter().any(|b| b == name) => shell_manifest(name),
            None => return Err(CatalogError::NotInstalled(name.to_string())),
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
    pub async fn search(&self, query: &str) -> Result<Vec<Summary>, CatalogError> {
        let index = self
            .registry
            .index()
            .await
            .map_err(|e| CatalogError::Index(Box::new(e)))?;
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
    pub async fn fetch_for_pull(
        &self,
        name: &str,
        version: &str,
    ) -> Result<PullPlan, CatalogError> {
        validate_name(name).map_err(CatalogError::Name)?;
        validate_semver(version).map_err(CatalogError::Version)?;
        if self.declared.contains(name)
            && let Some(item) = self.items().iter().find(|i| i.name == name)
            && item.version != version
        {
            return Err(CatalogError::DeclaredVersion {
                name: name.to_string(),
                declared: item.version.clone(),
                requested: version.to_string(),
            });
        }
        let index = self
            .registry
            .index()
            .await
            .map_err(|e| CatalogError::Index(Box::new(e)))?;
        let resolved = registry::resolve(
            &*self.registry,
            &index,
            name,
            version,
            self.max_bundle_bytes,
        )
        .await
        .map_err(|source| CatalogError::Resolve {
            name: name.to_string(),
            version: version.to_string(),
            source: Box::new(source),
        })?;
        let sha256 = verify(name, version, &resolved.bytes, &resolved.bundle.sha256)?;
        check_pin(&self.lock_path, name, version, &sha256).await?;
        let label = format!("artifact `{name}@{version}`");
        let bundle = Bundle::read(&resolved.bytes, &label, self.max_bundle_bytes)?;
        bundle.expect(&label, name, version)?;
        if bundle.manifest.runtime == ArtifactRuntime::Hook {
            return Err(CatalogError::Hook(name.to_string()));
        }
        if bundle.manifest.payload_kind() == PayloadKind::Native && !self.native_allowed {
            return Err(CatalogError::NativeNotStaged(name.to_string()));
        }
        Ok(PullPlan { bundle, sha256 })
    }

    /// Installs a verified pull, then (only then) pins it in the lock, then
    /// makes it invocable.
    pub async fn complete_pull(
        &self,
        plan: PullPlan,
        component: Option<Arc<PreparedTool>>,
    ) -> Result<Summary, CatalogError> {
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
                return Err(CatalogError::NotCompiled(plan.label()));
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
            install_one(&root, &dir, &for_install).map_err(|source| CatalogError::Install {
                name: for_install.name.clone(),
                dir: dir.clone(),
                source,
            })?;
            let mut lock = MurmurLock::read(&lock_path)?.unwrap_or_default();
            lock.pin(LockEntry {
                name: for_install.name.clone(),
                version: for_install.version.clone(),
                sha256: for_install.sha256.clone().unwrap_or_default(),
            });
            if let Err(e) = lock.write_atomic(&lock_path) {
                let _ = crate::fsx::remove_tree(&root, &dir.join("tools").join(&for_install.name));
                return Err(CatalogError::LockWrite(e));
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
    pub async fn remove(&self, name: &str) -> Result<bool, CatalogError> {
        if self.declared.contains(name) {
            return Err(CatalogError::Declared(name.to_string()));
        }
        if !self.items().iter().any(|i| i.name == name) {
            return Ok(false);
        }
        let _writer = LOCK_WRITES.lock().await;
        let dir = self.dir.join("tools").join(name);
        let root = self.root.clone();
        let lock_path = self.lock_path.clone();
        let name_owned = name.to_string();
        blocking(move || {
            // Never through a link a tool may have put on the way.
            if let Err(source) = crate::fsx::remove_tree(&root, &dir) {
                return Err(CatalogError::Remove { path: dir, source });
            }
            if let Some(mut lock) = MurmurLock::read(&lock_path)?
                && lock.unpin(&name_owned)
            {
                lock.write_atomic(&lock_path)?;
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
pub(super) async fn check_pin(
    lock_path: &Path,
    name: &str,
    version: &str,
    sha256: &str,
) -> Result<(), CatalogError> {
    let path = lock_path.to_path_buf();
    let lock = blocking(move || Ok(MurmurLock::read(&path)?)).await?;
    if let Some(pinned) = lock.as_ref().and_then(|l| l.get(name))
        && (pinned.version != version || !pinned.sha256.eq_ignore_ascii_case(sha256))
    {
        return Err(CatalogError::Pinned {
            name: name.to_string(),
            pinned_version: pinned.version.clone(),
            pinned_sha256: pinned.sha256.clone(),
            version: version.to_string(),
            sha256: sha256.to_string(),
        });
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CatalogError> + Send + 'static,
) -> Result<T, CatalogError> {
    tokio::task::spawn_blocking(f).await?
}

#[async_trait::async_trait]
impl Catalog for SessionArtifacts {
    fn target(&self, name: &str, policy: &CapabilityPolicy) -> Target {
        SessionArtifacts::target(self, name, policy)
    }

    fn list(&self, policy: &CapabilityPolicy) -> Vec<Summary> {
        SessionArtifacts::list(self, policy)
    }

    fn describe(&self, name: &str, policy: &CapabilityPolicy) -> Result<Info, PortError> {
        Ok(SessionArtifacts::describe(self, name, policy)?)
    }

    async fn search(&self, query: &str) -> Result<Vec<Summary>, PortError> {
        Ok(SessionArtifacts::search(self, query).await?)
    }

    async fn pull(
        &self,
        name: &str,
        version: &str,
        compiler: &dyn Compiler,
    ) -> Result<Summary, PortError> {
        let plan = self.fetch_for_pull(name, version).await?;
        let component = match plan.component_bytes() {
            Some(bytes) => Some(
                compiler
                    .compile_tool(&plan.label(), bytes)
                    .await
                    .map_err(CatalogError::Compile)?,
            ),
            None => None,
        };
        Ok(self.complete_pull(plan, component).await?)
    }

    async fn remove(&self, name: &str) -> Result<bool, PortError> {
        Ok(SessionArtifacts::remove(self, name).await?)
    }

    fn capabilities_json(&self, policy: &CapabilityPolicy, allowlist: &HashSet<String>) -> String {
        SessionArtifacts::capabilities_json(self, policy, allowlist)
    }
}
