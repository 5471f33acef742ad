//! `inference:`: which of roostd's environment variables a capsule's
//! `inference.api_key: {env: NAME}` may name, and the model endpoints each
//! may be sent to. Empty by default: a manifest names a key itself, or none;
//! roostd's environment (cloud credentials, its own secrets) is never a
//! manifest's to pick from.

use serde::{Deserialize, Serialize};

/// `inference:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceConfig {
    /// The variables a manifest may name as its model key.
    pub key_env_allow: Vec<KeyEnv>,
}

/// One variable a manifest may name: alone (sent to any endpoint the
/// capsule may reach), or bound to the endpoints it may be sent to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum KeyEnv {
    Name(String),
    Bound(BoundKeyEnv),
}

/// `{name: OPENAI_API_KEY, endpoints: [https://api.openai.com/v1]}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoundKeyEnv {
    pub name: String,
    /// Model endpoints (`inference.endpoint`) the key may go to: each
    /// admits itself and what lies below it at a `/`.
    pub endpoints: Vec<String>,
}

/// Why a manifest may not use a variable as its model key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyEnvRefused {
    #[error(
        "inference.api_key names the environment variable {name}, which roostd's \
         inference.key_env_allow does not list: the operator lists there the variables a \
         manifest may use as its model key (or give the key in the manifest itself)"
    )]
    NotListed { name: String },
    #[error(
        "roostd's inference.key_env_allow lets {name} go only to {endpoints}; \
         inference.endpoint {endpoint} is not one of them"
    )]
    Endpoint {
        name: String,
        endpoint: String,
        endpoints: String,
    },
}

impl KeyEnv {
    fn name(&self) -> &str {
        match self {
            Self::Name(name) | Self::Bound(BoundKeyEnv { name, .. }) => name,
        }
    }
}

impl InferenceConfig {
    /// Whether a manifest may send the variable `name` to `endpoint`.
    pub fn key_env(&self, name: &str, endpoint: &str) -> Result<(), KeyEnvRefused> {
        let entry = self
            .key_env_allow
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| KeyEnvRefused::NotListed {
                name: name.to_string(),
            })?;
        match entry {
            KeyEnv::Name(_) => Ok(()),
            KeyEnv::Bound(bound) if bound.endpoints.iter().any(|e| admits(e, endpoint)) => Ok(()),
            KeyEnv::Bound(bound) => Err(KeyEnvRefused::Endpoint {
                name: name.to_string(),
                endpoint: endpoint.to_string(),
                endpoints: bound.endpoints.join(", "),
            }),
        }
    }

    pub fn check(&self) -> Result<(), super::ConfigError> {
        let invalid = |message: String| {
            super::ConfigError::invalid(
                "inference.key_env_allow",
                format!("inference.key_env_allow: {message}"),
            )
        };
        for entry in &self.key_env_allow {
            let name = entry.name();
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                return Err(invalid(format!(
                    "{name:?} is not an environment variable name"
                )));
            }
            if let KeyEnv::Bound(bound) = entry {
                if bound.endpoints.is_empty() {
                    return Err(invalid(format!(
                        "{name} lists no endpoints (list them, or name the variable alone)"
                    )));
                }
                for endpoint in &bound.endpoints {
                    let host = endpoint
                        .strip_prefix("https://")
                        .or_else(|| endpoint.strip_prefix("http://"));
                    if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
                        return Err(invalid(format!(
                            "{name}: endpoint {endpoint} must be an http:// or https:// URL"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether the listed `allowed` URL admits `endpoint`: the same URL, or one
/// below it at a `/` (so `https://api.example.com` never admits
/// `https://api.example.com.evil.example`).
fn admits(allowed: &str, endpoint: &str) -> bool {
    let allowed = allowed.trim_end_matches('/');
    match endpoint.strip_prefix(allowed) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_names_only_listed_variables_for_their_endpoints() {
        let config: InferenceConfig = serde_yaml::from_str(
            "key_env_allow: [LOCAL_KEY, {name: OPENAI_API_KEY, endpoints: [\"https://api.openai.com/v1/\"]}]",
        )
        .expect("parse");
        config.check().expect("valid");
        // The controls: a variable alone goes anywhere; a bound one to its
        // endpoints and below them.
        config
            .key_env("LOCAL_KEY", "http://127.0.0.1:11434/v1")
            .expect("alone");
        for endpoint in [
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/chat",
        ] {
            config.key_env("OPENAI_API_KEY", endpoint).expect(endpoint);
        }
        let e = config
            .key_env("AWS_SECRET_ACCESS_KEY", "https://attacker.example/v1")
            .expect_err("not listed");
        assert!(
            e.to_string()
                .contains("inference.key_env_allow does not list"),
            "{e}"
        );
        for endpoint in [
            "https://api.openai.com.attacker.example/v1",
            "https://api.openai.com/v10",
            "https://api.openai.com@attacker.example/v1",
            "http://api.openai.com/v1",
        ] {
            let e = config
                .key_env("OPENAI_API_KEY", endpoint)
                .expect_err(endpoint);
            assert!(e.to_string().contains("is not one of them"), "{e}");
        }
        for bad in [
            "key_env_allow: [\"A=B\"]",
            "key_env_allow: [{name: K, endpoints: []}]",
            "key_env_allow: [{name: K, endpoints: [\"ftp://x\"]}]",
        ] {
            let config: InferenceConfig = serde_yaml::from_str(bad).expect("parse");
            assert!(config.check().is_err(), "{bad}");
        }
    }
}
