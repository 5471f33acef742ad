//! The NATS connection a node joins with: how it authenticates (an nkey,
//! a token or a credentials file, each private), TLS, and the names of its
//! reply inboxes.

use std::time::Duration;

use super::ClusterError;
use crate::config::ClusterConfig;

/// The credentials, nkey and token files and the TLS key hold secrets:
/// refused unless no other user can read them (as every token file roostd
/// is given).
pub(super) fn check_private(config: &ClusterConfig) -> Result<(), ClusterError> {
    let key = config.tls.as_ref().and_then(|t| t.key_file.as_ref());
    for (what, path) in [
        ("cluster.credentials_file", config.credentials_file.as_ref()),
        ("cluster.nkey_file", config.nkey_file.as_ref()),
        ("cluster.token_file", config.token_file.as_ref()),
        ("cluster.tls.key_file", key),
    ] {
        if let Some(path) = path {
            secret(what, path)?;
        }
    }
    Ok(())
}

/// The secret in `path` (named `what` in an error), trimmed: refused
/// unless no other user can read the file.
fn secret(what: &'static str, path: &std::path::Path) -> Result<String, ClusterError> {
    crate::secrets::read_private(path)
        .map(|text| text.trim().to_string())
        .map_err(|message| ClusterError::Private {
            what,
            path: path.to_path_buf(),
            message,
        })
}

pub(super) async fn connect(
    config: &ClusterConfig,
    node: &str,
) -> Result<async_nats::Client, ClusterError> {
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("roostd {node}"))
        .connection_timeout(Duration::from_secs(5));
    if let Some(path) = &config.credentials_file {
        options =
            options
                .credentials_file(path)
                .await
                .map_err(|source| ClusterError::Credentials {
                    path: path.clone(),
                    source,
                })?;
    }
    if let Some(path) = &config.nkey_file {
        let seed = secret("cluster.nkey_file", path)?;
        if !seed.starts_with("SU") {
            return Err(ClusterError::Private {
                what: "cluster.nkey_file",
                path: path.clone(),
                message: "holds no user nkey seed (one line starting SU…, as `roostctl cluster \
                          nats-config` writes)"
                    .into(),
            });
        }
        options = options.nkey(seed);
    }
    if let Some(path) = &config.token_file {
        options = options.token(secret("cluster.token_file", path)?);
    }
    if let Some(tls) = &config.tls {
        options = options.require_tls(true);
        if let Some(ca) = &tls.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    // Each node's replies come to inboxes under its own name, so a NATS
    // user per node may subscribe to its own only (`roostctl cluster
    // nats-config`).
    options = options.custom_inbox_prefix(inbox_prefix(node));
    async_nats::connect_with_options(config.servers.clone(), options)
        .await
        .map_err(|e| ClusterError::Connect {
            servers: config.servers.join(","),
            message: e.to_string(),
        })
}

/// Where node `node`'s replies arrive (`_INBOX_roost.<node>.…`).
pub fn inbox_prefix(node: &str) -> String {
    format!("_INBOX_roost.{node}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_credentials_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let creds = dir.path().join("nats.creds");
        std::fs::write(&creds, "-----BEGIN NATS USER JWT-----").expect("write");
        let config = ClusterConfig {
            servers: vec!["nats://127.0.0.1:4222".into()],
            credentials_file: Some(creds.clone()),
            ..ClusterConfig::default()
        };
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = check_private(&config).expect_err("world-readable");
        assert!(
            err.to_string().contains("cluster.credentials_file")
                && err.to_string().contains("chmod 600"),
            "{err}"
        );
        // The control: the same file, private, passes.
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        check_private(&config).expect("private");
    }
}
