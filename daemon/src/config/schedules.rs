//! `schedules:`: how many schedules a capsule may declare in its own
//! `murmur.yaml` (every scheduler wake reads them and each tick is written
//! to the store, so a manifest is held to a number the operator chooses).
//! Schedules the operator adds (`roostctl schedule add`) are not counted.

use serde::{Deserialize, Serialize};

/// `schedules:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulesConfig {
    /// Most `schedules:` entries one capsule declares; a manifest with more
    /// is refused at its start, naming this setting.
    pub max_per_capsule: usize,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        Self {
            max_per_capsule: 64,
        }
    }
}

impl SchedulesConfig {
    pub fn check(&self) -> Result<(), super::ConfigError> {
        if self.max_per_capsule > 10_000 {
            return Err(super::ConfigError::invalid(
                "schedules.max_per_capsule",
                format!(
                    "schedules.max_per_capsule must be at most 10000, got {}",
                    self.max_per_capsule
                ),
            ));
        }
        Ok(())
    }
}
