//! The capability policy a capsule declares (`capabilities:`): validation at load
//! time, and the decisions derived from it (guest environment, outgoing HTTP).

use serde::Deserialize;

mod grants;
mod redact;
pub use crate::sandbox::fence;
pub use grants::Protected;
pub use redact::{redact_secrets, redact_url};

/// A policy entry that cannot be honoured, naming the entry.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "capabilities.network.allow entry '{rule}' is invalid: {reason} \
         (expected scheme://host[:port], e.g. https://api.example.com or http://127.0.0.1:*)"
    )]
    NetworkRule { rule: String, reason: String },
    #[error(
        "capabilities.env.allow entry '{name}' looks like a credential; credentials are never \
         passed to guests (remove it, or give the capsule the value another way)"
    )]
    CredentialEnv { name: String },
    #[error("capabilities.env.allow entry '{name}' is not a valid environment variable name")]
    EnvName { name: String },
    #[error(
        "capabilities.env.allow entry '{name}' is reserved: MURMUR_* variables are set by roostd"
    )]
    ReservedEnv { name: String },
    #[error("capabilities.filesystem.scope '{scope}' is not supported: use 'workdir'")]
    FilesystemScope { scope: String },
    #[error("capabilities.filesystem.{field} entry '{path}' {reason}")]
    FilesystemPath {
        field: &'static str,
        path: String,
        reason: &'static str,
    },
    #[error(
        "{field} entry '{path}' overlaps {what}: a capsule is never handed roostd's own files, \
         and system trees only where roostd's config allows them"
    )]
    ProtectedPath {
        field: String,
        path: String,
        what: String,
    },
    #[error("{field}: {error}")]
    GrantOpen {
        field: String,
        #[source]
        error: fence::FenceError,
    },
    #[error("capabilities.shell.allow entry '{name}' must be a bare binary name without '/'")]
    ShellName { name: String },
    #[error("capabilities.limits.{field} must be at least 1")]
    ZeroLimit { field: &'static str },
}

/// `capabilities:` as written in `murmur.yaml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(default)]
    pub network: NetworkSection,
    #[serde(default)]
    pub filesystem: FilesystemSection,
    #[serde(default)]
    pub shell: ShellSection,
    #[serde(default)]
    pub env: EnvSection,
    #[serde(default)]
    pub limits: Limits,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    #[serde(default)]
    pub allow: Vec<String>,
    /// Native and shell tools may open Unix sockets (refused by default: a
    /// Unix socket is a way out of the jail to whatever listens on one).
    #[serde(default)]
    pub unix_sockets: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSection {
    #[serde(default)]
    pub scope: Option<String>,
    /// Extra directories or files the capsule and its tools may read.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Extra directories or files they may also write.
    #[serde(default)]
    pub read_write: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellSection {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub strip_env: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `capabilities.limits`; `None` means "the daemon's default".
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// CPU seconds a native or shell tool may use (default: the timeout + 1).
    #[serde(default)]
    pub cpu_secs: Option<u64>,
    /// Processes a tool may run at once (RLIMIT_NPROC; root is exempt).
    #[serde(default)]
    pub processes: Option<u64>,
    /// Descriptors a tool may hold open.
    #[serde(default)]
    pub open_files: Option<u64>,
    /// Largest file a tool or WASM guest may write, in bytes (default
    /// [`DEFAULT_FILE_SIZE`]).
    #[serde(default)]
    pub output_bytes: Option<u64>,
    /// Most files, directories and links the capsule's WASM guests may
    /// create in its workdir and grants, net of those they remove, while
    /// roostd runs (default [`DEFAULT_FILES`]).
    #[serde(default)]
    pub files: Option<u64>,
}

/// Largest file a tool or WASM guest may write when the capsule names none.
pub const DEFAULT_FILE_SIZE: u64 = 256 << 20;
/// Most entries a capsule's guests may create when it names no number.
pub const DEFAULT_FILES: u64 = 100_000;

impl Limits {
    /// Largest file a tool (RLIMIT_FSIZE) or a WASM guest (`runtime::files`)
    /// may write.
    pub fn file_size_bytes(&self) -> u64 {
        self.output_bytes.unwrap_or(DEFAULT_FILE_SIZE)
    }

    /// Most entries a WASM guest may create (`runtime::files`).
    pub fn files(&self) -> u64 {
        self.files.unwrap_or(DEFAULT_FILES)
    }
}

/// The validated policy.
#[derive(Debug, Clone, Default)]
pub struct CapabilityPolicy {
    pub network_allow: Vec<NetworkRule>,
    pub env_allow: Vec<String>,
    pub shell_allow: Vec<String>,
    pub shell_strip_env: Vec<String>,
    pub limits: Limits,
    /// Extra paths (absolute, existing) beyond the workdir.
    pub read_only: Vec<std::path::PathBuf>,
    pub read_write: Vec<std::path::PathBuf>,
    /// `network.unix_sockets`: tools may open `AF_UNIX` sockets.
    pub unix_sockets: bool,
    /// roostd's own files, which the workdir and every extra path are held
    /// against each time they are opened (set at staging; empty in tests
    /// and benches that stage nothing).
    pub fence: std::sync::Arc<fence::Fence>,
}

impl CapabilityPolicy {
    pub fn from_manifest(caps: Capabilities) -> Result<Self, PolicyError> {
        let network_allow = caps
            .network
            .allow
            .iter()
            .map(|rule| NetworkRule::parse(rule))
            .collect::<Result<Vec<_>, _>>()?;
        for name in &caps.env.allow {
            validate_env_allow(name)?;
        }
        if let Some(scope) = caps.filesystem.scope
            && scope != "workdir"
        {
            return Err(PolicyError::FilesystemScope { scope });
        }
        for name in &caps.shell.allow {
            if name.is_empty() || name.contains('/') {
                return Err(PolicyError::ShellName { name: name.clone() });
            }
        }
        let read_only = scope_paths("read_only", &caps.filesystem.read_only)?;
        let read_write = scope_paths("read_write", &caps.filesystem.read_write)?;
        for (field, value) in [
            ("cpu_secs", caps.limits.cpu_secs),
            ("processes", caps.limits.processes),
            ("open_files", caps.limits.open_files),
            ("output_bytes", caps.limits.output_bytes),
            ("files", caps.limits.files),
        ] {
            if value == Some(0) {
                return Err(PolicyError::ZeroLimit { field });
            }
        }
        if caps.limits.timeout_secs == Some(0) {
            return Err(PolicyError::ZeroLimit {
                field: "timeout_secs",
            });
        }
        if caps.limits.memory_mb == Some(0) {
            return Err(PolicyError::ZeroLimit { field: "memory_mb" });
        }
        Ok(Self {
            network_allow,
            env_allow: caps.env.allow,
            shell_allow: caps.shell.allow,
            shell_strip_env: caps.shell.strip_env,
            limits: caps.limits,
            read_only,
            read_write,
            unix_sockets: caps.network.unix_sockets,
            fence: std::sync::Arc::default(),
        })
    }

    /// The guest's environment from the daemon's: only allow-listed names that
    /// are set. Identity variables are added later by the runtime, after these.
    pub fn guest_env(&self, lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
        self.env_allow
            .iter()
            .filter_map(|name| lookup(name).map(|value| (name.clone(), value)))
            .collect()
    }

    /// TCP ports native and shell tools may connect to: the union of the
    /// allow-list's ports (Landlock filters by port, not host); `None` when a
    /// rule allows any port.
    pub fn tcp_connect_ports(&self) -> Option<Vec<u16>> {
        let mut ports = Vec::new();
        for rule in &self.network_allow {
            ports.extend(rule.tcp_ports()?);
        }
        ports.sort_unstable();
        ports.dedup();
        Some(ports)
    }

    /// Whether tools may open UDP sockets: only when the allow-list names a DNS
    /// port (53) or any port, so they can resolve names.
    pub fn tools_may_use_udp(&self) -> bool {
        self.tcp_connect_ports()
            .is_none_or(|ports| ports.contains(&53))
    }

    /// Whether an outgoing request to `scheme://host:port` is allowed (deny by default).
    pub fn allows_url(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.network_allow
            .iter()
            .any(|rule| rule.matches(scheme, host, port))
    }
}

/// `filesystem.read_only` / `read_write` entries: absolute, no `..`, existing.
fn scope_paths(
    field: &'static str,
    entries: &[String],
) -> Result<Vec<std::path::PathBuf>, PolicyError> {
    entries
        .iter()
        .map(|entry| {
            let bad = |reason| PolicyError::FilesystemPath {
                field,
                path: entry.clone(),
                reason,
            };
            let path = std::path::Path::new(entry);
            if !path.is_absolute() {
                return Err(bad("must be an absolute path"));
            }
            if path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(bad("must not contain '..'"));
            }
            if !path.exists() {
                return Err(bad("does not exist on this host"));
            }
            Ok(path.to_path_buf())
        })
        .collect()
}

fn validate_env_allow(name: &str) -> Result<(), PolicyError> {
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(PolicyError::EnvName {
            name: name.to_string(),
        });
    }
    if name.to_ascii_uppercase().starts_with("MURMUR_") {
        return Err(PolicyError::ReservedEnv {
            name: name.to_string(),
        });
    }
    if is_credential_name(name) {
        return Err(PolicyError::CredentialEnv {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Whether an environment variable name looks like it holds a secret.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const MARKERS: [&str; 9] = [
        "API_KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "PRIVATE_KEY",
        "ACCESS_KEY",
    ];
    MARKERS.iter().any(|m| upper.contains(m)) || upper.ends_with("_KEY") || upper == "KEY"
}

/// One `capabilities.network.allow` rule: `scheme://host[:port]` where the scheme
/// may be `*`, the host `*` or `*.suffix`, and the port `*` (default: the scheme's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRule {
    scheme: Pattern,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    Suffix(String),
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortPattern {
    Any,
    Exact(u16),
    SchemeDefault,
}

impl NetworkRule {
    pub fn parse(rule: &str) -> Result<Self, PolicyError> {
        let err = |reason: &str| PolicyError::NetworkRule {
            rule: rule.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = rule
            .split_once("://")
            .ok_or_else(|| err("missing scheme"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "*" => Pattern::Any,
            s @ ("http" | "https") => Pattern::Exact(s.to_string()),
            _ => return Err(err("scheme must be http, https or *")),
        };
        let authority = rest.split('/').next().unwrap_or_default();
        if rest.len() > authority.len() && rest[authority.len()..] != *"/" {
            return Err(err("paths are not supported; allow the host"));
        }
        if authority.contains('@') {
            return Err(err("user info is not allowed"));
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| err("malformed host:port"))?;
        if host.is_empty() {
            return Err(err("missing host"));
        }
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            HostPattern::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(err("wildcards are allowed only as a leading '*.'"));
            }
            HostPattern::Suffix(format!(".{suffix}"))
        } else if host.contains('*') {
            return Err(err("wildcards are allowed only as a leading '*.'"));
        } else {
            HostPattern::Exact(host)
        };
        let port = match port {
            None => {
                if scheme == Pattern::Any {
                    PortPattern::Any
                } else {
                    PortPattern::SchemeDefault
                }
            }
            Some("*") => PortPattern::Any,
            Some(p) => PortPattern::Exact(p.parse().map_err(|_| err("port must be 0-65535 or *"))?),
        };
        Ok(Self { scheme, host, port })
    }

    /// The TCP ports this rule lets a connection reach: `None` means any port.
    pub fn tcp_ports(&self) -> Option<Vec<u16>> {
        match (&self.port, &self.scheme) {
            (PortPattern::Any, _) => None,
            (PortPattern::Exact(p), _) => Some(vec![*p]),
            (PortPattern::SchemeDefault, Pattern::Exact(s)) => {
                Some(default_port(s).into_iter().collect())
            }
            (PortPattern::SchemeDefault, Pattern::Any) => None,
        }
    }

    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme = scheme.to_ascii_lowercase();
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let scheme_ok = match &self.scheme {
            Pattern::Any => true,
            Pattern::Exact(s) => *s == scheme,
        };
        let host_ok = match &self.host {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h.trim_start_matches('[').trim_end_matches(']') == host,
            HostPattern::Suffix(s) => host.ends_with(s.as_str()),
        };
        let port_ok = match self.port {
            PortPattern::Any => true,
            PortPattern::Exact(p) => p == port,
            PortPattern::SchemeDefault => default_port(&scheme) == Some(port),
        };
        scheme_ok && host_ok && port_ok
    }
}

impl std::fmt::Display for NetworkRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.scheme {
            Pattern::Any => f.write_str("*")?,
            Pattern::Exact(s) => f.write_str(s)?,
        }
        f.write_str("://")?;
        match &self.host {
            HostPattern::Any => f.write_str("*")?,
            HostPattern::Exact(h) => f.write_str(h)?,
            HostPattern::Suffix(s) => write!(f, "*{s}")?,
        }
        match self.port {
            PortPattern::Any => f.write_str(":*"),
            PortPattern::Exact(p) => write!(f, ":{p}"),
            PortPattern::SchemeDefault => Ok(()),
        }
    }
}

/// The port a URL of `scheme` uses when it names none.
pub fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Splits `host[:port]`, keeping bracketed IPv6 literals intact.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &authority[..end + 2];
        let after = &rest[end + 1..];
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None => Some((authority, None)),
    }
}

#[cfg(test)]
mod tests;
