//! `log:`: roostd's own log (not the guests' output, which is `logs:`).

use serde::{Deserialize, Serialize};

/// How much roostd logs, and how. `RUST_LOG` in roostd's environment wins
/// over `level`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// A level (`error`, `warn`, `info`, `debug`, `trace`) or directives as
    /// `RUST_LOG` takes them (`info,roostd::a2a=debug`). SIGHUP applies a
    /// change.
    pub level: String,
    /// `text` (default), `json` (one object per line, span fields such as
    /// `session_id`, `capsule` and `task_id` at the top level) or `journald`
    /// (native fields and priorities). A change needs a restart.
    pub format: LogFormat,
}

/// `log.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
    Journald,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

impl LogSettings {
    /// Whether `level` is one `tracing`'s filter takes; the error says why not.
    pub fn check(&self) -> Result<(), super::ConfigError> {
        tracing_subscriber::EnvFilter::try_new(&self.level)
            .map(drop)
            .map_err(|e| {
                super::ConfigError::invalid("log.level", format!("log.level '{}': {e}", self.level))
            })
    }
}
