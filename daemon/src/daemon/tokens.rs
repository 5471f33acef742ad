//! The bearer tokens roostd reads from files: the TCP control API's, the
//! A2A gateway's and its routes', what it sends to peers (tokens, API keys,
//! OAuth 2 secrets, TLS settings), the dashboard's. Read at start-up, by
//! `roostd --check-config`, and again on SIGHUP.

use std::collections::HashMap;
use std::sync::Arc;

use super::DaemonError;
use crate::config::DaemonConfig;

/// Every token the config names.
#[derive(Clone)]
pub struct Tokens {
    /// `control.token_file`, when `control.tcp_listen` is set.
    pub control: Option<Arc<str>>,
    /// `a2a.token_file`.
    pub a2a: Option<Arc<str>>,
    /// `a2a.routes.<name>.token_file`.
    pub routes: HashMap<String, crate::a2a::access::RouteToken>,
    /// `a2a.peers[i]`, its secrets read.
    pub peers: Vec<Arc<crate::a2a::client::PeerCredential>>,
    /// `ui.token_file`, when `ui.listen` is set.
    pub ui: Option<Arc<str>>,
}

impl Tokens {
    /// Reads every token file the config names, each checked as [`read_token`] says.
    pub fn read(config: &DaemonConfig) -> Result<Self, DaemonError> {
        let control = match &config.control.tcp_listen {
            Some(_) => Some(read_token(
                config.control.token_file.as_deref(),
                "control.token_file",
            )?),
            None => None,
        };
        let a2a = match &config.a2a.token_file {
            Some(path) => Some(read_token(Some(path), "a2a.token_file")?),
            None => None,
        };
        let mut routes = HashMap::new();
        for (name, route) in &config.a2a.routes {
            let token = match &route.token_file {
                Some(file) => Some(read_token(
                    Some(file),
                    &format!("a2a.routes.{name}.token_file"),
                )?),
                None => None,
            };
            let mut clients = Vec::new();
            for (client, c) in &route.clients {
                let what = format!("a2a.routes.{name}.clients.{client}.token_file");
                let t = read_token(Some(&c.token_file), &what)?;
                if clients
                    .iter()
                    .any(|(_, other): &(String, Arc<str>)| *other == t)
                    || token.as_ref() == Some(&t)
                {
                    return Err(DaemonError::Control(format!(
                        "{what}: the same token as another of route '{name}': each client needs \
                         its own"
                    )));
                }
                clients.push((client.clone(), t));
            }
            let own = crate::a2a::access::RouteToken {
                token,
                accept_global: route.accept_global_token,
                clients,
            };
            routes.insert(name.clone(), own);
        }
        let mut peers = Vec::new();
        for (i, peer) in config.a2a.peers.iter().enumerate() {
            peers.push(Arc::new(peer_credential(peer, i)?));
        }
        let ui = match &config.ui.listen {
            Some(_) => Some(read_token(
                config.ui.token_file.as_deref(),
                "ui.token_file",
            )?),
            None => None,
        };
        Ok(Self {
            control,
            a2a,
            routes,
            peers,
            ui,
        })
    }
}

/// One `a2a.peers[]` entry's secrets and TLS settings, read and checked.
fn peer_credential(
    peer: &crate::config::PeerConfig,
    i: usize,
) -> Result<crate::a2a::client::PeerCredential, DaemonError> {
    use crate::a2a::client::{ApiKey, OAuth2, PeerCredential};
    let at = |field: &str| format!("a2a.peers[{i}].{field}");
    let token = match &peer.token_file {
        Some(file) => Some(read_token(Some(file), &at("token_file"))?),
        None => None,
    };
    let api_key = match &peer.api_key_file {
        Some(file) => Some(ApiKey {
            header: peer.api_key_header.as_ref().map(|h| h.to_ascii_lowercase()),
            key: read_secret(file, &at("api_key_file"))?,
        }),
        None => None,
    };
    let oauth2 = match &peer.oauth2 {
        Some(o) => Some(OAuth2::new(
            o.token_url.clone(),
            o.client_id.clone(),
            read_secret(&o.client_secret_file, &at("oauth2.client_secret_file"))?,
            o.scopes.clone(),
        )),
        None => None,
    };
    let identity = peer
        .client_cert_file
        .as_deref()
        .zip(peer.client_key_file.as_deref());
    let tls = match (&peer.ca_file, identity) {
        (None, None) => None,
        (ca, identity) => Some(
            crate::http_client::ClientTls::build(ca.as_deref(), identity)
                .map_err(|e| DaemonError::Control(format!("{}: {e}", at("tls"))))?,
        ),
    };
    Ok(PeerCredential {
        prefix: peer.url.clone(),
        token,
        api_key,
        oauth2,
        tls,
    })
}

/// A secret (an API key, a client secret) from a file other users cannot
/// read, as [`read_token`] checks it, of any length but not empty and
/// fit for a header.
fn read_secret(path: &std::path::Path, what: &str) -> Result<Arc<str>, DaemonError> {
    let fail = |why: String| DaemonError::Control(format!("{what} {}: {why}", path.display()));
    let text = crate::secrets::read_private(path).map_err(fail)?;
    let secret = text.trim();
    if secret.is_empty() || http::HeaderValue::from_str(secret).is_err() {
        return Err(fail(
            "holds no secret, or one with characters a header cannot carry".into(),
        ));
    }
    Ok(Arc::from(secret))
}

/// A bearer token from a file other users cannot read: no access for
/// others, no write for the group, and group read only when the file's
/// group is roostd's own (`root:roost 0640` under the shipped unit, where
/// roostd runs as group `roost`). At least 16 characters.
pub fn read_token(path: Option<&std::path::Path>, what: &str) -> Result<Arc<str>, DaemonError> {
    let path = path.ok_or_else(|| DaemonError::Control(format!("{what} is required")))?;
    let fail = |why: String| DaemonError::Control(format!("{what} {}: {why}", path.display()));
    let token = crate::secrets::read_private(path).map_err(fail)?;
    let token = token.trim();
    if token.len() < 16 {
        return Err(fail("the token must be at least 16 characters".into()));
    }
    Ok(Arc::from(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_token_file_may_be_group_readable_only_by_roostds_own_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").expect("write");
        let with_mode = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            read_token(Some(&path), "a2a.token_file")
        };
        assert_eq!(&*with_mode(0o600).expect("0600"), "0123456789abcdef0123");
        // The file's group is the test's own group: 0640 is accepted.
        assert!(with_mode(0o640).is_ok());
        for refused in [0o644, 0o660, 0o604] {
            let err = with_mode(refused).expect_err("refused").to_string();
            assert!(err.contains("chmod 600"), "{refused:o}: {err}");
        }
        // Group read with another group: refused (chown needs root).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&path, None, Some(65534)).expect("chgrp");
            assert!(with_mode(0o640).is_err());
            assert!(with_mode(0o600).is_ok());
        }
    }
}
