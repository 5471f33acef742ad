//! `filesystem:`: what a capsule's `capabilities.filesystem` may grant
//! beyond the default rule (never roostd's own state, secrets or a system
//! tree): an operator's explicit exceptions, never a manifest's.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `filesystem:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesystemConfig {
    /// Absolute paths a capsule may be granted (read-only or read-write)
    /// although they lie in a protected system tree (`/etc/ssl/certs`,
    /// say). A grant of such a path, or of a path below it, is allowed;
    /// roostd's state dir, socket dir, config file and token and key files
    /// stay refused whatever this says.
    pub allow: Vec<PathBuf>,
}

impl super::DaemonConfig {
    /// roostd's own files and directories, each with what it is: no
    /// capsule is granted a path that holds or lies in one (`policy`'s
    /// `Protected`). The jail helper and the control socket are apart: they
    /// may be read and lain beside, never held for writing.
    pub fn own_paths(&self) -> Vec<(PathBuf, String)> {
        let mut own = vec![(self.state_dir.clone(), "roostd's state dir".to_string())];
        let registry = self.registry_location();
        if !registry.contains("://") {
            own.push((PathBuf::from(registry), "roostd's registry".into()));
        }
        if let Some(file) = &self.source {
            own.push((file.clone(), "roostd's config file".into()));
        }
        let tokens = [
            ("a2a.token_file", self.a2a.token_file.as_ref()),
            ("control.token_file", self.control.token_file.as_ref()),
            ("ui.token_file", self.ui.token_file.as_ref()),
            (
                "telemetry.headers_file",
                self.telemetry.headers_file.as_ref(),
            ),
        ];
        for (what, file) in tokens {
            if let Some(file) = file {
                own.push((file.clone(), format!("roostd's {what}")));
            }
        }
        for (name, route) in &self.a2a.routes {
            if let Some(file) = &route.token_file {
                own.push((
                    file.clone(),
                    format!("roostd's a2a.routes.{name}.token_file"),
                ));
            }
            for (client, c) in &route.clients {
                own.push((
                    c.token_file.clone(),
                    format!("roostd's a2a.routes.{name}.clients.{client}.token_file"),
                ));
            }
        }
        for peer in &self.a2a.peers {
            let oauth2 = peer.oauth2.as_ref().map(|o| &o.client_secret_file);
            for file in [
                peer.token_file.as_ref(),
                peer.api_key_file.as_ref(),
                peer.client_key_file.as_ref(),
                peer.client_cert_file.as_ref(),
                peer.ca_file.as_ref(),
                oauth2,
            ]
            .into_iter()
            .flatten()
            {
                own.push((
                    file.clone(),
                    "a secret or trusted file of roostd's a2a.peers".into(),
                ));
            }
        }
        if let Some(tls) = &self.a2a.tls {
            own.push((tls.key_file.clone(), "roostd's a2a.tls.key_file".into()));
            own.push((tls.cert_file.clone(), "roostd's a2a.tls.cert_file".into()));
            if let Some(ca) = &tls.client_ca_file {
                own.push((ca.clone(), "roostd's a2a.tls.client_ca_file".into()));
            }
        }
        // Whom roostd trusts is its own too: a CA added to one of these
        // would let anyone past it.
        if let Some(ca) = &self.tls.ca_file {
            own.push((ca.clone(), "roostd's tls.ca_file".into()));
        }
        let cluster = &self.cluster;
        let tls = cluster.tls.as_ref();
        for (what, file) in [
            (
                "cluster.credentials_file",
                cluster.credentials_file.as_ref(),
            ),
            ("cluster.nkey_file", cluster.nkey_file.as_ref()),
            ("cluster.token_file", cluster.token_file.as_ref()),
            (
                "cluster.tls.key_file",
                tls.and_then(|t| t.key_file.as_ref()),
            ),
            (
                "cluster.tls.cert_file",
                tls.and_then(|t| t.cert_file.as_ref()),
            ),
            ("cluster.tls.ca_file", tls.and_then(|t| t.ca_file.as_ref())),
        ] {
            if let Some(file) = file {
                own.push((file.clone(), format!("roostd's {what}")));
            }
        }
        own
    }
}

impl FilesystemConfig {
    pub fn check(&self) -> Result<(), super::ConfigError> {
        for path in &self.allow {
            if !path.is_absolute() {
                return Err(super::ConfigError::invalid(
                    "filesystem.allow",
                    format!(
                        "filesystem.allow: {} must be an absolute path",
                        path.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}
