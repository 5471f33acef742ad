//! SIGHUP: roostd's config file read again (by the binary, which also
//! applies `log.level`) and applied here where that is safe while sessions
//! run: the tokens (re-read from their files even when their paths did not
//! change), the retention rules, the registry. Everything else that changed
//! is logged as needing a restart and keeps its running value.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::Tokens;
use crate::config::{DaemonConfig, Retention};

/// What a reload reaches in the running daemon.
pub struct Handles {
    pub access: Arc<crate::a2a::access::Access>,
    /// The TCP control API's token, when it listens.
    pub control_token: Option<Arc<crate::api::TokenCell>>,
    /// The dashboard's login token, when it listens.
    pub ui_token: Option<Arc<crate::api::TokenCell>>,
    pub peers: Arc<crate::a2a::client::Peers>,
    pub retention: watch::Sender<Retention>,
    pub supervisor: crate::supervisor::Supervisor,
    /// The cluster's artifact registry, behind which a reloaded registry
    /// is layered (a node of a cluster).
    pub cluster_registry: Option<Arc<dyn crate::registry::Registry>>,
    /// The gateway's TLS (`a2a.tls`), whose files are read again.
    pub gateway_tls: Option<Arc<crate::api::tls::ServerTls>>,
}

/// Applies each config the binary sends until it stops sending.
pub async fn serve(
    mut configs: mpsc::Receiver<DaemonConfig>,
    handles: Handles,
    mut running: DaemonConfig,
) {
    while let Some(new) = configs.recv().await {
        running = apply(&handles, running, new);
    }
}

/// Keys that are applied on reload; any other change needs a restart.
const RELOADED: &[&str] = &[
    "log.level",
    "registry",
    "retention.interval_secs",
    "retention.tasks",
    "retention.sessions",
    "a2a.token_file",
    "a2a.routes",
    "a2a.peers",
    "a2a.tls",
    "control.token_file",
    "ui.token_file",
];

/// Applies `new` over `running`; answers the configuration now in force.
fn apply(h: &Handles, mut running: DaemonConfig, new: DaemonConfig) -> DaemonConfig {
    let mut applied = Vec::new();
    match Tokens::read(&new) {
        Ok(tokens) => {
            h.access.replace(tokens.a2a, tokens.routes);
            h.peers.set_credentials(tokens.peers);
            // A new control.tcp_listen needs a restart, its token with it.
            if let (Some(cell), Some(token)) = (&h.control_token, tokens.control) {
                cell.set(token);
            }
            if let (Some(cell), Some(token)) = (&h.ui_token, tokens.ui) {
                cell.set(token);
            }
            running.a2a.token_file = new.a2a.token_file.clone();
            running.a2a.routes = new.a2a.routes.clone();
            running.a2a.peers = new.a2a.peers.clone();
            running.control.token_file = new.control.token_file.clone();
            applied.push("tokens (re-read)".to_string());
        }
        Err(error) => {
            tracing::error!(%error, "tokens not reloaded: the running ones stay");
        }
    }
    // The gateway's certificate: read again whenever roostd reloads (a
    // renewed file at the same path included); new connections use it.
    // Turning TLS on or off needs a restart.
    match (&h.gateway_tls, &new.a2a.tls) {
        (Some(serving), Some(tls)) => match serving.reload(tls) {
            Ok(()) => {
                running.a2a.tls = Some(tls.clone());
                applied.push("a2a.tls (re-read)".into());
            }
            Err(error) => {
                tracing::error!(%error, "a2a.tls not reloaded: the running certificate stays")
            }
        },
        (None, None) => {}
        (serving, _) => tracing::warn!(
            serving_tls = serving.is_some(),
            "a2a.tls was turned {}: that takes effect when roostd restarts",
            if serving.is_some() { "off" } else { "on" }
        ),
    }
    let retention = Retention {
        trace: running.retention.trace.clone(),
        tool_output: running.retention.tool_output.clone(),
        ..new.retention.clone()
    };
    if json(&retention) != json(&running.retention) {
        h.retention.send_replace(retention.clone());
        running.retention = retention;
        applied.push("retention".into());
    }
    if new.registry_location() != running.registry_location() {
        match crate::registry::open(&new.registry_location()) {
            Ok(registry) => {
                h.supervisor.set_registry(crate::registry::layered(
                    registry,
                    h.cluster_registry.as_ref(),
                ));
                running.registry = new.registry.clone();
                applied.push(format!("registry ({})", new.registry_location()));
            }
            Err(error) => tracing::error!(%error, "registry not reloaded: the running one stays"),
        }
    }
    if new.log.level != running.log.level {
        running.log.level = new.log.level.clone();
        applied.push("log.level".into());
    }
    let restart = needs_restart(&running, &new);
    if !restart.is_empty() {
        tracing::warn!(
            changed = %restart.join(", "),
            "these changes take effect when roostd restarts (systemctl restart roostd)"
        );
    }
    tracing::info!(applied = %applied.join(", "), "configuration reloaded");
    running
}

fn json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Dotted keys whose value in `new` differs from `running`, except those
/// a reload applies.
pub fn needs_restart(running: &DaemonConfig, new: &DaemonConfig) -> Vec<String> {
    let mut out = Vec::new();
    diff("", &json(running), &json(new), &mut out);
    out.retain(|key| {
        !RELOADED
            .iter()
            .any(|r| key == r || key.starts_with(&format!("{r}.")))
    });
    out
}

fn diff(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (key, value) in y {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                diff(&path, x.get(key).unwrap_or(&Value::Null), value, out);
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_reload_cannot_apply_is_said_to_need_a_restart() {
        let running = DaemonConfig::default();
        let new = DaemonConfig::from_yaml(
            "a2a_listen: 127.0.0.1:9999\npool: {max_instances: 7}\nlog: {level: debug, format: json}\n\
             retention: {interval_secs: 5, trace: {max_bytes: 10}}\nregistry: /srv/reg\n\
             a2a: {peers: [{url: 'https://p.example', token_file: /t}], push: {enabled: false}}\n",
        )
        .expect("config");
        let mut changed = needs_restart(&running, &new);
        changed.sort();
        assert_eq!(
            changed,
            [
                "a2a.push.enabled",
                "a2a_listen",
                "log.format",
                "pool.max_instances",
                "retention.trace.max_bytes"
            ]
        );
        assert!(needs_restart(&running, &running.clone()).is_empty());
    }
}
