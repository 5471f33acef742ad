//! Daemon configuration: the YAML file, its embedded defaults, and the precedence
//! flags > environment > file > defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod a2a;
mod cluster;
mod filesystem;
mod inference;
mod listen;
mod log;
mod observe;
mod overrides;
mod retention;
mod schedules;
pub use cluster::{ClusterConfig, ClusterTls};
pub use filesystem::FilesystemConfig;
pub use inference::{InferenceConfig, KeyEnv, KeyEnvRefused};
pub use listen::HttpConfig;
pub use log::{LogFormat, LogSettings};
pub use observe::{MetricsConfig, OtlpProtocol, TelemetryConfig, UiConfig};
pub use overrides::Overrides;
pub use retention::{KeepBytes, KeepSessions, KeepTasks, Retention};
pub use schedules::SchedulesConfig;
#[cfg(test)]
mod shipped;
pub use a2a::{
    A2aConfig, ClientAuth, CorsSettings, GrpcSettings, LegacyTaskRetention, OAuth2Settings,
    PeerConfig, PushSettings, RouteAccessConfig, TlsSettings, api_key_header_allowed,
};

/// What is wrong with a configuration, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    /// A setting that is not valid: `field` names it (`pool.max_instances`,
    /// `a2a.routes.billing`), `message` says what to fix (naming it too).
    #[error("invalid configuration: {message}")]
    Invalid { field: String, message: String },
}

impl ConfigError {
    pub fn invalid(field: impl Into<String>, message: String) -> Self {
        Self::Invalid {
            field: field.into(),
            message,
        }
    }
}

/// The whole daemon configuration after precedence is applied.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Database, compiled-component cache, session workdirs.
    pub state_dir: PathBuf,
    /// Control API Unix socket.
    pub socket: PathBuf,
    /// A2A gateway listen address (`host:port`, port 0 picks a free one).
    pub a2a_listen: SocketAddr,
    /// How long a shutdown waits for sessions to stop before exiting anyway.
    pub shutdown_grace_secs: u64,
    pub pool: PoolConfig,
    /// Limits applied when a capsule's manifest names none.
    pub limits: DefaultLimits,
    pub logs: LogConfig,
    pub restart: RestartConfig,
    /// Where artifacts come from: a directory or an `http://` URL (default:
    /// `<state_dir>/registry`, where `roostctl publish` writes by default).
    pub registry: Option<String>,
    pub artifacts: ArtifactsConfig,
    pub sandbox: SandboxConfig,
    pub control: ControlConfig,
    pub a2a: A2aConfig,
    /// Nodes of a cluster over NATS JetStream (`cluster:`); unset: one host.
    pub cluster: ClusterConfig,
    pub store: StoreConfig,
    pub retention: Retention,
    /// Sessions with `lifecycle.hibernate_after` (`hibernation:`).
    pub hibernation: HibernationConfig,
    /// What roostd's outgoing HTTPS trusts (model servers through drivers,
    /// A2A peers, registries).
    pub tls: TlsConfig,
    /// roostd's own log.
    pub log: LogSettings,
    pub telemetry: TelemetryConfig,
    pub metrics: MetricsConfig,
    pub ui: UiConfig,
    /// What each TCP listener lets one client hold.
    pub http: HttpConfig,
    /// What a capsule's `capabilities.filesystem` may grant (`sandbox` is
    /// the jail; this is what a manifest may name).
    pub filesystem: FilesystemConfig,
    /// Which of roostd's variables a manifest may name as its model key.
    pub inference: InferenceConfig,
    /// How many schedules a capsule may declare.
    pub schedules: SchedulesConfig,
    /// What the file said that still works but should change (logged at
    /// start-up).
    #[serde(skip)]
    pub deprecations: Vec<String>,
    /// The file this config was read from, if any (no capsule is granted
    /// it).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `tls:`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// A PEM file of CA certificates trusted besides the system's store
    /// and the web roots (an internal CA in front of a model server).
    pub ca_file: Option<PathBuf>,
}

/// The database.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `full` (default): an acknowledged A2A task survives a power loss
    /// (each commit is synced; commits are grouped under load). `normal`:
    /// it survives roostd being killed, but a power loss can lose the last
    /// ~second of them.
    pub sync: crate::store::Durability,
}

/// Who may use the control API: the Unix socket (root, the daemon's own user,
/// `group`) and, optionally, a TCP listener guarded by a bearer token.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Members of this group are admitted (the socket is also group-owned
    /// by it under systemd).
    pub group: Option<String>,
    /// Also serve the control API over TCP here (port 0 picks one).
    pub tcp_listen: Option<SocketAddr>,
    /// File holding the bearer token TCP clients must send (required with
    /// `tcp_listen`; not readable by other users; at least 16 characters).
    pub token_file: Option<PathBuf>,
}

/// How native and shell tools are confined.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Run native and shell tools inside the jail (Landlock, seccomp,
    /// rlimits, no_new_privs, own session). Turning it off is for diagnosis only.
    pub jail_tools: bool,
    /// A capsule with native or shell tools on a host that cannot enforce all
    /// of the jail: `refuse` to start it (default) or `warn` and start it.
    pub unenforceable: Unenforceable,
    /// The jail helper to use when no `roost-jail` sits next to roostd's
    /// executable (absolute path; it must answer the helper's probe).
    pub jail_helper: Option<std::path::PathBuf>,
    /// When roostd runs as root, tools run as an unprivileged uid from this
    /// range, one per workdir (`null` keeps them root, and the tier says so).
    pub tool_uids: Option<crate::sandbox::identity::UidRange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unenforceable {
    Refuse,
    Warn,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            jail_tools: true,
            unenforceable: Unenforceable::Refuse,
            jail_helper: None,
            tool_uids: Some(crate::sandbox::identity::UidRange::default()),
        }
    }
}

/// Limits on artifact bundles.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactsConfig {
    /// Largest bundle (zip) accepted; its unpacked content may be 4x this.
    pub max_bundle_mb: u64,
}

impl Default for ArtifactsConfig {
    fn default() -> Self {
        Self { max_bundle_mb: 64 }
    }
}

/// `hibernation:`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HibernationConfig {
    /// Sessions that hibernate (`lifecycle.hibernate_after`) awake at once;
    /// past it the one idle the longest hibernates now, before its
    /// `hibernate_after` is up. `null`: no bound.
    pub max_awake: Option<u64>,
}

impl Default for HibernationConfig {
    fn default() -> Self {
        Self {
            max_awake: Some(10_000),
        }
    }
}

/// Sizing of wasmtime's pooling allocator (slots are reserved up front).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Component instances that may be live at once across all sessions.
    pub max_instances: u32,
    /// Largest linear memory any one guest may grow to; a capsule's
    /// `limits.memory_mb` above this is refused at start.
    pub max_memory_mb: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DefaultLimits {
    pub timeout_secs: u64,
    pub memory_mb: u64,
}

/// Guest stdout/stderr capture per session.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Size of `guest.log` before it is rotated to `guest.log.1`.
    pub max_bytes: u64,
}

/// Supervision backoff: `initial_backoff_ms × multiplier^n`, capped, reset after a
/// run that stayed up `reset_after_secs`; `max_restarts` consecutive restarts give up.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RestartConfig {
    pub initial_backoff_ms: u64,
    pub multiplier: f64,
    pub max_backoff_secs: u64,
    pub reset_after_secs: u64,
    pub max_restarts: u32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            state_dir: roost_wire::paths::default_state_dir(),
            socket: roost_wire::paths::default_socket(),
            a2a_listen: SocketAddr::from(([127, 0, 0, 1], 7420)),
            shutdown_grace_secs: 10,
            pool: PoolConfig::default(),
            limits: DefaultLimits::default(),
            logs: LogConfig::default(),
            restart: RestartConfig::default(),
            registry: None,
            artifacts: ArtifactsConfig::default(),
            sandbox: SandboxConfig::default(),
            control: ControlConfig::default(),
            a2a: A2aConfig::default(),
            cluster: ClusterConfig::default(),
            store: StoreConfig::default(),
            retention: Retention::default(),
            hibernation: HibernationConfig::default(),
            tls: TlsConfig::default(),
            log: LogSettings::default(),
            telemetry: TelemetryConfig::default(),
            metrics: MetricsConfig::default(),
            ui: UiConfig::default(),
            http: HttpConfig::default(),
            filesystem: FilesystemConfig::default(),
            inference: InferenceConfig::default(),
            schedules: SchedulesConfig::default(),
            deprecations: Vec::new(),
            source: None,
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_instances: 1000,
            max_memory_mb: 512,
        }
    }
}

impl Default for DefaultLimits {
    fn default() -> Self {
        Self {
            timeout_secs: 30,
            memory_mb: 128,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            max_bytes: 1024 * 1024,
        }
    }
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            initial_backoff_ms: 100,
            multiplier: 1.5,
            max_backoff_secs: 15,
            reset_after_secs: 30,
            max_restarts: 10,
        }
    }
}

impl DaemonConfig {
    /// The registry to stage artifacts from.
    pub fn registry_location(&self) -> String {
        self.registry
            .clone()
            .unwrap_or_else(|| self.state_dir.join("registry").display().to_string())
    }

    /// Loads the config file (the explicit one must exist; the default one may
    /// be absent) and applies overrides on top.
    pub fn load(overrides: Overrides) -> Result<Self, ConfigError> {
        let mut config = match &overrides.config {
            Some(path) => Self::from_file(path)?,
            None => {
                let path = roost_wire::paths::default_config();
                if path.exists() {
                    Self::from_file(&path)?
                } else {
                    Self::default()
                }
            }
        };
        config.source = overrides
            .config
            .clone()
            .or_else(|| Some(roost_wire::paths::default_config()).filter(|p| p.exists()))
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        overrides.apply(&mut config);
        config.validate()?;
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn from_yaml(text: &str) -> Result<Self, serde_yaml::Error> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut config: Self = serde_yaml::from_str(text)?;
        config.move_deprecated();
        Ok(config)
    }

    /// Moves keys that moved into their new place, noting each.
    fn move_deprecated(&mut self) {
        if let Some(old) = self.a2a.retention.take() {
            if let Some(secs) = old.max_age_secs {
                self.retention.tasks.max_age_secs = secs;
            }
            if let Some(count) = old.max_tasks {
                self.retention.tasks.max_count = count;
            }
            if let Some(secs) = old.interval_secs {
                self.retention.interval_secs = secs;
            }
            self.deprecations.push(
                "a2a.retention is deprecated: write retention: {interval_secs, tasks: {max_age_secs, max_count}} instead (max_tasks is now retention.tasks.max_count)".into(),
            );
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.state_dir.is_absolute() {
            return Err(ConfigError::invalid(
                "state_dir",
                format!(
                    "state_dir must be an absolute path, got {}",
                    self.state_dir.display()
                ),
            ));
        }
        if self.hibernation.max_awake == Some(0) {
            return Err(ConfigError::invalid(
                "hibernation.max_awake",
                "hibernation.max_awake must be at least 1 (null: no bound)".into(),
            ));
        }
        if self.pool.max_instances == 0 {
            return Err(ConfigError::invalid(
                "pool.max_instances",
                "pool.max_instances must be at least 1".into(),
            ));
        }
        if self.pool.max_memory_mb == 0 || self.pool.max_memory_mb > 64 * 1024 {
            return Err(ConfigError::invalid(
                "pool.max_memory_mb",
                "pool.max_memory_mb must be between 1 and 65536".into(),
            ));
        }
        if self.limits.memory_mb > self.pool.max_memory_mb {
            return Err(ConfigError::invalid(
                "limits.memory_mb",
                format!(
                    "limits.memory_mb ({}) exceeds pool.max_memory_mb ({})",
                    self.limits.memory_mb, self.pool.max_memory_mb
                ),
            ));
        }
        if self.limits.timeout_secs == 0 {
            return Err(ConfigError::invalid(
                "limits.timeout_secs",
                "limits.timeout_secs must be at least 1".into(),
            ));
        }
        if let Some(range) = &self.sandbox.tool_uids {
            range
                .validate()
                .map_err(|e| ConfigError::invalid("sandbox.tool_uids", e.to_string()))?;
        }
        self.log.check()?;
        self.telemetry.check()?;
        self.ui.check()?;
        self.http.check()?;
        self.filesystem.check()?;
        self.inference.check()?;
        self.schedules.check()?;
        self.cluster.check()?;
        if let Some(helper) = &self.sandbox.jail_helper
            && !helper.is_absolute()
        {
            return Err(ConfigError::invalid(
                "sandbox.jail_helper",
                format!(
                    "sandbox.jail_helper must be an absolute path, got {}",
                    helper.display()
                ),
            ));
        }
        if let Some(location) = &self.registry {
            crate::registry::open(location)
                .map_err(|e| ConfigError::invalid("registry", format!("registry: {e}")))?;
        }
        if self.control.tcp_listen.is_some() && self.control.token_file.is_none() {
            return Err(ConfigError::invalid("control.tcp_listen", 
                "control.tcp_listen needs control.token_file: the TCP control API is never served without a bearer token".into(),
            ));
        }
        if self.artifacts.max_bundle_mb == 0 || self.artifacts.max_bundle_mb > 1024 {
            return Err(ConfigError::invalid(
                "artifacts.max_bundle_mb",
                "artifacts.max_bundle_mb must be between 1 and 1024".into(),
            ));
        }
        if self.retention.interval_secs == 0 {
            return Err(ConfigError::invalid(
                "retention.interval_secs",
                "retention.interval_secs must be at least 1".into(),
            ));
        }
        self.a2a.validate()?;
        if self.restart.multiplier < 1.0 {
            return Err(ConfigError::invalid(
                "restart.multiplier",
                "restart.multiplier must be >= 1.0".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
