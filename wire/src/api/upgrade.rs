//! Upgrading a session in place on the wire: `POST /v1/sessions/{id}/upgrade`
//! and the versions a session has run (`GET /v1/sessions/{id}/versions`).

use serde::{Deserialize, Serialize};

/// `POST /v1/sessions/{id}/upgrade`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The new version's capsule directory or `murmur.yaml` (absolute);
    /// absent with `version` or `rollback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `name@version` of a version the session has run before (its
    /// history, `GET …/versions`): staged again from the start request it
    /// ran with, e.g. forward again after a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Back to the version it ran before the last upgrade.
    #[serde(default)]
    pub rollback: bool,
    /// How long tasks running on the old version may take to finish
    /// (default 300 s); then they are canceled, saying why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout_secs: Option<u64>,
    /// Allows another capsule name, or a version that is not newer.
    #[serde(default)]
    pub force: bool,
}

/// One version a session has run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionVersion {
    pub capsule: String,
    pub version: String,
    /// Its `murmur.yaml`.
    pub manifest: String,
    /// When the session began running it.
    pub since: String,
    /// `start`, `upgrade` or `rollback`.
    pub why: String,
}

/// `GET /v1/sessions/{id}/versions`: oldest first; the last is current.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionVersions {
    pub versions: Vec<SessionVersion>,
}
