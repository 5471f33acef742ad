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
    /// A NATS credentials file (`.creds`: a user JWT and its seed).
    pub credentials_file: Option<PathBuf>,
    pub tls: Option<ClusterTls>,
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
            tls: None,
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
        }
        if let Some(node) = &self.node {
            crate::manifest::validate_name(node).map_err(|m| {
                ConfigError::invalid(
                    "cluster.node",
                    format!("cluster.node: '{node}' is not a node name: it {m}"),
                )
            })?;
        }
        let files = [("cluster.credentials_file", &self.credentials_file)]
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
