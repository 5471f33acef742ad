//! `http:`: how every TCP listener of roostd (the A2A gateway, the control
//! API over TCP, the dashboard, the metrics listener) bounds its clients.

use serde::{Deserialize, Serialize};

/// `http:`: what one client connection may hold.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A connection must send a whole request head within this long of
    /// opening, or of its last answer (so it is also how long an idle
    /// keep-alive connection is kept); else it is closed.
    pub header_read_timeout_secs: u64,
    /// Connections each listener holds at once; past it a new one is
    /// closed at once (and roostd logs that the limit was reached).
    pub max_connections: usize,
    /// A2A streams (SSE, and gRPC server streams) open at once on one
    /// route; past it a new one is refused.
    pub max_streams_per_route: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout_secs: 30,
            max_connections: 1024,
            max_streams_per_route: 256,
        }
    }
}

impl HttpConfig {
    pub fn check(&self) -> Result<(), super::ConfigError> {
        if !(1..=300).contains(&self.header_read_timeout_secs) {
            return Err(super::ConfigError::invalid(
                "http.header_read_timeout_secs",
                format!(
                    "http.header_read_timeout_secs must be between 1 and 300, got {}",
                    self.header_read_timeout_secs
                ),
            ));
        }
        if self.max_connections == 0 || self.max_streams_per_route == 0 {
            return Err(super::ConfigError::invalid(
                "http.max_connections",
                "http.max_connections and http.max_streams_per_route must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
