//! `cluster:`: join other roostd nodes over NATS JetStream. Unset (no
//! servers), roostd is one host exactly as without it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `cluster:` (`--cluster`, `--node`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// NATS servers, `nats://HOST:PORT` (or `tls://…`); empty: no cluster.
    pub servers: Vec<String>,
    /// This node's name, unique in the cluster (default: the host's name).
    pub node: Option<String>,
    /// How roostd proves itself to NATS: one of a credentials file
    /// (`.creds`: a user JWT and its seed, NATS's operator mode), an nkey
    /// seed file (`SU…`, as `roostctl cluster nats-config` makes one per
    /// node) or a token file. One is required unless `insecure`.
    pub credentials_file: Option<PathBuf>,
    pub nkey_file: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub tls: Option<ClusterTls>,
    /// `true`: join without authentication, or without TLS to a server
    /// that is not on loopback (a test cluster). roostd warns at start and
    /// in `roostctl status` and `doctor`: any NATS client then has this
    /// node's authority.
    pub insecure: bool,
    /// Shown with the node (`roostctl status`), e.g. `{zone: a}`.
    pub labels: BTreeMap<String, String>,
    /// A node whose heartbeat is this old has left the cluster. Every node
    /// of a cluster must use the same value (it is the node registry's
    /// entry lifetime).
    pub node_ttl_secs: u64,
    /// Copies JetStream keeps of the cluster's state (1 on one NATS server;
    /// 3 on three).
    pub replicas: usize,
    /// `true`: roostd is READY only once joined (it retries while NATS
    /// cannot be reached). `false`: it serves its own capsules at once and
    /// joins when it can (`roostctl status` says how that goes).
    pub required: bool,
}

/// TLS to the NATS servers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterTls {
    /// CA that signed the servers' certificates.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key, for servers that verify clients.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            node: None,
            credentials_file: None,
            nkey_file: None,
            token_file: None,
            tls: None,
            insecure: false,
            labels: BTreeMap::new(),
            node_ttl_secs: 3,
            replicas: 1,
            required: true,
        }
    }
}

impl ClusterConfig {
    /// Whether roostd joins a cluster.
    pub fn enabled(&self) -> bool {
        !self.servers.is_empty()
    }

    pub fn check(&self) -> Result<(), ConfigError> {
        for server in &self.servers {
            let ok = ["nats://", "tls://"].iter().any(|scheme| {
                server
                    .strip_prefix(scheme)
                    .is_some_and(|rest| !rest.is_empty() && !rest.contains(['/', ' ']))
            });
            if !ok {
                return Err(ConfigError::invalid(
                    "cluster.servers",
                    format!(
                        "cluster.servers: '{server}' is not a NATS server URL: write \
                         nats://HOST:PORT (or tls://HOST:PORT)"
                    ),
                ));
            }
            if server.contains('@') {
                return Err(ConfigError::invalid(
                    "cluster.servers",
                    format!(
                        "cluster.servers: '{server}' holds a user or token, which the config \
                         file is no place for: write nats://HOST:PORT and put the secret in \
                         cluster.token_file, cluster.nkey_file or cluster.credentials_file"
                    ),
                ));
            }
        }
        let given = self.authentication();
        if given.len() > 1 {
            return Err(ConfigError::invalid(
                "cluster",
                format!(
                    "cluster: give one way to authenticate to NATS, not {}",
                    given.join(" and ")
                ),
            ));
        }
        if self.enabled() && given.is_empty() && !self.insecure {
            return Err(ConfigError::invalid(
                "cluster",
                "cluster: NATS without authentication gives any NATS client this node's \
                 authority (start capsules, read sessions' logs, inject tasks, drain nodes); give \
                 cluster.nkey_file, cluster.token_file or cluster.credentials_file (`roostctl \
                 cluster nats-config` makes a server config and one nkey per node), or set \
                 cluster.insecure: true for a test cluster"
                    .into(),
            ));
        }
        if let Some(server) = self.plain_remote_server()
            && !self.insecure
        {
            return Err(ConfigError::invalid(
                "cluster.tls",
                format!(
                    "cluster.tls: {server} is not on loopback and would be reached without TLS \
                     (secrets and every task in clear on the network); set cluster.tls (ca_file \
                     for the servers' CA) or write tls://, or set cluster.insecure: true for a \
                     test cluster"
                ),
            ));
        }
        if let Some(node) = &self.node {
            crate::manifest::validate_name(node).map_err(|m| {
                ConfigError::invalid(
                    "cluster.node",
                    format!("cluster.node: '{node}' is not a node name: it {m}"),
                )
            })?;
        }
        let files = [
            ("cluster.credentials_file", &self.credentials_file),
            ("cluster.nkey_file", &self.nkey_file),
            ("cluster.token_file", &self.token_file),
        ]
        .into_iter()
        .chain(self.tls.iter().flat_map(|t| {
            [
                ("cluster.tls.ca_file", &t.ca_file),
                ("cluster.tls.cert_file", &t.cert_file),
                ("cluster.tls.key_file", &t.key_file),
            ]
        }));
        for (field, path) in files {
            if let Some(path) = path
                && !path.is_absolute()
            {
                return Err(ConfigError::invalid(
                    field,
                    format!("{field} must be an absolute path, got {}", path.display()),
                ));
            }
        }
        if let Some(tls) = &self.tls
            && tls.cert_file.is_some() != tls.key_file.is_some()
        {
            return Err(ConfigError::invalid(
                "cluster.tls",
                "cluster.tls: give cert_file and key_file together".into(),
            ));
        }
        if !(1..=3600).contains(&self.node_ttl_secs) {
            return Err(ConfigError::invalid(
                "cluster.node_ttl_secs",
                format!(
                    "cluster.node_ttl_secs must be between 1 and 3600, got {}",
                    self.node_ttl_secs
                ),
            ));
        }
        if !(1..=5).contains(&self.replicas) {
            return Err(ConfigError::invalid(
                "cluster.replicas",
                format!(
                    "cluster.replicas must be between 1 and 5 (JetStream's limit), got {}",
                    self.replicas
                ),
            ));
        }
        Ok(())
    }

    /// The ways to authenticate the config gives, by field.
    fn authentication(&self) -> Vec<&'static str> {
        [
            ("cluster.credentials_file", self.credentials_file.is_some()),
            ("cluster.nkey_file", self.nkey_file.is_some()),
            ("cluster.token_file", self.token_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }

    /// A server reached in clear that is not on this host.
    fn plain_remote_server(&self) -> Option<&str> {
        if self.tls.is_some() {
            return None;
        }
        self.servers
            .iter()
            .find(|s| s.starts_with("nats://") && !on_loopback(s))
            .map(String::as_str)
    }

    /// What `cluster.insecure` lets through, as `status` and `doctor` say
    /// it; `None` when nothing.
    pub fn weakness(&self) -> Option<String> {
        if !self.enabled() {
            return None;
        }
        let mut weak = Vec::new();
        if self.authentication().is_empty() {
            weak.push("no authentication to NATS".to_string());
        }
        if let Some(server) = self.plain_remote_server() {
            weak.push(format!("no TLS to {server}"));
        }
        (!weak.is_empty()).then(|| {
            format!(
                "cluster.insecure: {}: any NATS client has this node's authority",
                weak.join(", ")
            )
        })
    }
}

/// Whether a `nats://HOST:PORT` URL names this host's loopback.
fn on_loopback(server: &str) -> bool {
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(config: &ClusterConfig) -> Option<String> {
        match config.check() {
            Ok(()) => None,
            Err(ConfigError::Invalid { field, .. }) => Some(field),
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn a_cluster_section_is_checked_naming_the_field() {
        let good = ClusterConfig {
            servers: vec![
                "nats://10.0.0.1:4222".into(),
                "tls://nats.example:4222".into(),
            ],
            node: Some("node-1".into()),
            credentials_file: Some("/etc/roost/nats.creds".into()),
            tls: Some(ClusterTls::default()),
            ..ClusterConfig::default()
        };
        assert_eq!(field(&good), None);
        assert!(!ClusterConfig::default().enabled() && good.enabled());
        for (bad, named) in [
            (
                ClusterConfig {
                    servers: vec!["http://10.0.0.1:4222".into()],
                    ..good.clone()
                },
                "cluster.servers",
            ),
            (
                ClusterConfig {
                    node: Some("Node 1".into()),
                    ..good.clone()
                },
                "cluster.node",
            ),
            (
                ClusterConfig {
                    credentials_file: Some("nats.creds".into()),
                    ..good.clone()
                },
                "cluster.credentials_file",
            ),
            (
                ClusterConfig {
                    tls: Some(ClusterTls {
                        cert_file: Some("/c.pem".into()),
                        ..ClusterTls::default()
                    }),
                    ..good.clone()
                },
                "cluster.tls",
            ),
            (
                ClusterConfig {
                    nkey_file: Some("/etc/roost/node.nk".into()),
                    ..good.clone()
                },
                "cluster",
            ),
            (
                ClusterConfig {
                    servers: vec!["nats://roost:hunter2@10.0.0.1:4222".into()],
                    ..good.clone()
                },
                "cluster.servers",
            ),
            (
                ClusterConfig {
                    credentials_file: None,
                    token_file: Some("token".into()),
                    ..good.clone()
                },
                "cluster.token_file",
            ),
            (
                ClusterConfig {
                    replicas: 7,
                    ..good.clone()
                },
                "cluster.replicas",
            ),
            (
                ClusterConfig {
                    node_ttl_secs: 0,
                    ..good.clone()
                },
                "cluster.node_ttl_secs",
            ),
        ] {
            assert_eq!(field(&bad).as_deref(), Some(named), "{bad:?}");
        }
    }

    #[test]
    fn a_cluster_without_authentication_or_tls_beyond_loopback_is_refused_unless_insecure() {
        let open = ClusterConfig {
            servers: vec!["nats://127.0.0.1:4222".into()],
            ..ClusterConfig::default()
        };
        let err = open.check().expect_err("no authentication");
        assert!(
            err.to_string().contains("cluster.nkey_file")
                && err.to_string().contains("cluster.insecure: true"),
            "{err}"
        );
        // The control: a token on loopback joins, and says nothing is weak.
        let token = ClusterConfig {
            token_file: Some("/etc/roost/nats.token".into()),
            ..open.clone()
        };
        token.check().expect("a token on loopback");
        assert_eq!(token.weakness(), None);
        // Beyond loopback in clear: refused, naming cluster.tls.
        for server in ["nats://10.0.0.2:4222", "nats://nats.example:4222"] {
            let remote = ClusterConfig {
                servers: vec![server.into()],
                ..token.clone()
            };
            assert_eq!(field(&remote).as_deref(), Some("cluster.tls"), "{server}");
            // TLS, or tls://, opens it.
            let tls = ClusterConfig {
                tls: Some(ClusterTls::default()),
                ..remote.clone()
            };
            assert_eq!(field(&tls), None);
            let scheme = ClusterConfig {
                servers: vec![server.replace("nats://", "tls://")],
                ..remote.clone()
            };
            assert_eq!(field(&scheme), None);
        }
        for server in [
            "nats://localhost:4222",
            "nats://[::1]:4222",
            "nats://127.0.0.9:4222",
        ] {
            let local = ClusterConfig {
                servers: vec![server.into()],
                ..token.clone()
            };
            assert_eq!(field(&local), None, "{server}");
        }
        // `insecure` lets both through, and says what is weak.
        let insecure = ClusterConfig {
            servers: vec!["nats://10.0.0.2:4222".into()],
            insecure: true,
            ..ClusterConfig::default()
        };
        insecure.check().expect("insecure");
        let weak = insecure.weakness().expect("weak");
        assert!(
            weak.contains("no authentication") && weak.contains("no TLS to nats://10.0.0.2:4222"),
            "{weak}"
        );
        assert_eq!(ClusterConfig::default().weakness(), None);
    }

    #[test]
    fn the_clusters_secrets_are_roostds_own_files_no_grant_reaches() {
        let mut config = super::super::DaemonConfig {
            cluster: ClusterConfig {
                servers: vec!["nats://127.0.0.1:4222".into()],
                credentials_file: Some("/etc/roost/nats.creds".into()),
                tls: Some(ClusterTls {
                    key_file: Some("/etc/roost/nats-key.pem".into()),
                    cert_file: Some("/etc/roost/nats-cert.pem".into()),
                    ca_file: None,
                }),
                ..ClusterConfig::default()
            },
            ..super::super::DaemonConfig::default()
        };
        let own: Vec<PathBuf> = config.own_paths().into_iter().map(|(p, _)| p).collect();
        for secret in ["/etc/roost/nats.creds", "/etc/roost/nats-key.pem"] {
            assert!(own.contains(&PathBuf::from(secret)), "{secret}: {own:?}");
        }
        // The control: without a cluster, none of them is listed.
        config.cluster = ClusterConfig::default();
        let own: Vec<PathBuf> = config.own_paths().into_iter().map(|(p, _)| p).collect();
        assert!(!own.contains(&PathBuf::from("/etc/roost/nats.creds")));
    }
}
