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

impl FilesystemConfig {
    pub fn check(&self) -> Result<(), String> {
        for path in &self.allow {
            if !path.is_absolute() {
                return Err(format!(
                    "filesystem.allow: {} must be an absolute path",
                    path.display()
                ));
            }
        }
        Ok(())
    }
}
