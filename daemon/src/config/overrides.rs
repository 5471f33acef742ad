//! Values given on roostd's command line or through its environment, which
//! win over the file.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::DaemonConfig;

/// `None` = not given.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub a2a_listen: Option<SocketAddr>,
    pub registry: Option<String>,
    pub a2a_idle_timeout_secs: Option<u64>,
    pub metrics_listen: Option<SocketAddr>,
    pub ui_listen: Option<SocketAddr>,
    pub ui_token_file: Option<PathBuf>,
    /// `--cluster`: NATS servers (`cluster.servers`).
    pub cluster: Option<Vec<String>>,
    /// `--node` (`cluster.node`).
    pub node: Option<String>,
}

impl Overrides {
    /// Puts what was given over `config`.
    pub(super) fn apply(self, config: &mut DaemonConfig) {
        if let Some(dir) = self.state_dir {
            config.state_dir = dir;
        }
        if let Some(socket) = self.socket {
            config.socket = socket;
        }
        if let Some(addr) = self.a2a_listen {
            config.a2a_listen = addr;
        }
        if let Some(registry) = self.registry {
            config.registry = Some(registry);
        }
        if let Some(secs) = self.a2a_idle_timeout_secs {
            config.a2a.idle_timeout_secs = secs;
        }
        if let Some(addr) = self.metrics_listen {
            config.metrics.listen = Some(addr);
        }
        if let Some(addr) = self.ui_listen {
            config.ui.listen = Some(addr);
        }
        if let Some(path) = self.ui_token_file {
            config.ui.token_file = Some(path);
        }
        if let Some(servers) = self.cluster {
            config.cluster.servers = servers;
        }
        if let Some(node) = self.node {
            config.cluster.node = Some(node);
        }
    }
}
