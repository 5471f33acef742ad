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
    /// Connections one client address (an IPv6 /64) holds at once on a
    /// listener, so one client cannot take every slot; raise it behind a
    /// reverse proxy, whose connections all come from one address. (Above
    /// `max_connections` it is `max_connections`.)
    pub max_connections_per_client: usize,
    /// A request's whole body must arrive within this long of its head.
    pub body_read_timeout_secs: u64,
    /// A2A streams (SSE, and gRPC server streams) open at once on one
    /// route; past it a new one is refused.
    pub max_streams_per_route: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout_secs: 30,
            max_connections: 1024,
            max_connections_per_client: 256,
            body_read_timeout_secs: 60,
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
        if self.max_connections > 1 << 20 {
            return Err(super::ConfigError::invalid(
                "http.max_connections",
                format!(
                    "http.max_connections must be at most 1048576, got {}",
                    self.max_connections
                ),
            ));
        }
        if self.max_connections_per_client == 0 {
            return Err(super::ConfigError::invalid(
                "http.max_connections_per_client",
                "http.max_connections_per_client must be at least 1".into(),
            ));
        }
        if !(1..=3600).contains(&self.body_read_timeout_secs) {
            return Err(super::ConfigError::invalid(
                "http.body_read_timeout_secs",
                format!(
                    "http.body_read_timeout_secs must be between 1 and 3600, got {}",
                    self.body_read_timeout_secs
                ),
            ));
        }
        Ok(())
    }
}
