//! What the host tells the driver through the environment (`MURMUR_INFERENCE_*`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::error::Category;

pub const ENDPOINT_VAR: &str = "MURMUR_INFERENCE_ENDPOINT";
pub const MODEL_VAR: &str = "MURMUR_INFERENCE_MODEL";
pub const API_KEY_VAR: &str = "MURMUR_INFERENCE_API_KEY";
pub const CONFIG_VAR: &str = "MURMUR_INFERENCE_DRIVER_CONFIG";

/// `inference.driver.config`, as JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DriverConfig {
    /// Stream the answer (server-sent events); `false` asks for one JSON response.
    pub stream: bool,
    pub temperature: Option<f64>,
    /// Overrides the request's `limits.max_output_tokens`.
    pub max_tokens: Option<u64>,
    /// The server keeps conversations (`previous_response_id`).
    pub continuation: bool,
    /// Which API: `chat_completions` (`POST <endpoint>/chat/completions`) or
    /// `responses` (`POST <endpoint>/responses`, the server keeps the
    /// conversation: each turn sends only what is new, with
    /// `previous_response_id`).
    pub api: Api,
    /// Extra request headers; they replace the driver's own of the same name.
    pub headers: BTreeMap<String, String>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            stream: true,
            temperature: None,
            max_tokens: None,
            continuation: false,
            api: Api::ChatCompletions,
            headers: BTreeMap::new(),
        }
    }
}

impl DriverConfig {
    /// Parses the variable's text; empty, absent or `null` means the defaults.
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        let text = text.map(str::trim).unwrap_or_default();
        if text.is_empty() || text == "null" {
            return Ok(Self::default());
        }
        serde_json::from_str(text).map_err(|e| match e.classify() {
            Category::Syntax | Category::Eof => format!("{CONFIG_VAR} is not valid JSON: {e}"),
            _ => format!(
                "{CONFIG_VAR} is not a valid driver config: {e} \
                 (a JSON object with stream, temperature, max_tokens, continuation, api, headers)"
            ),
        })
    }
}

/// The API the driver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    ChatCompletions,
    Responses,
}

/// The model server and how to talk to it.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The endpoint without a trailing slash, e.g. `http://127.0.0.1:11434/v1`.
    pub endpoint: String,
    /// `inference.model`, used when the request names none.
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub config: DriverConfig,
}

impl Settings {
    /// Reads the settings from this component's environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (a variable's value, if set).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let non_empty = |name: &str| {
            lookup(name)
                .map(|value| value.trim().to_string())
                .filter(|value| !value.is_empty())
        };
        let endpoint = non_empty(ENDPOINT_VAR)
            .map(|endpoint| endpoint.trim_end_matches('/').to_string())
            .filter(|endpoint| !endpoint.is_empty())
            .ok_or_else(|| {
                format!("{ENDPOINT_VAR} is not set: set inference.endpoint in murmur.yaml")
            })?;
        Ok(Self {
            endpoint,
            model: non_empty(MODEL_VAR),
            api_key: non_empty(API_KEY_VAR),
            config: DriverConfig::parse(lookup(CONFIG_VAR).as_deref())?,
        })
    }

    /// `<endpoint>/chat/completions`, or `<endpoint>/responses`.
    pub fn url(&self) -> String {
        match self.config.api {
            Api::ChatCompletions => format!("{}/chat/completions", self.endpoint),
            Api::Responses => format!("{}/responses", self.endpoint),
        }
    }

    /// Request headers: JSON in, events or JSON out, the key if any, then the
    /// config's `headers` (replacing ours of the same name).
    pub fn headers(&self, stream: bool) -> Vec<(String, String)> {
        let accept = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), accept.to_string()),
        ];
        if let Some(key) = &self.api_key {
            headers.push(("authorization".to_string(), format!("Bearer {key}")));
        }
        for (name, value) in &self.config.headers {
            headers.retain(|(ours, _)| !ours.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value.clone()));
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
    }

    #[test]
    fn defaults_and_trailing_slash() {
        let s = settings(&[(ENDPOINT_VAR, "http://127.0.0.1:11434/v1/")]).expect("valid");
        assert_eq!(s.url(), "http://127.0.0.1:11434/v1/chat/completions");
        assert_eq!(s.config, DriverConfig::default());
        assert!(s.config.stream);
        assert_eq!(s.api_key, None);
    }

    #[test]
    fn mistakes_name_the_variable() {
        let err = settings(&[]).expect_err("no endpoint");
        assert!(err.contains(ENDPOINT_VAR), "{err}");
        for config in ["{nope", r#"{"strem": false}"#, "[1]"] {
            let err =
                settings(&[(ENDPOINT_VAR, "http://x"), (CONFIG_VAR, config)]).expect_err(config);
            assert!(err.starts_with(CONFIG_VAR), "{err}");
        }
    }

    #[test]
    fn headers_key_and_overrides() {
        let s = settings(&[
            (ENDPOINT_VAR, "https://api.example.com/v1"),
            (API_KEY_VAR, "sk-1"),
            (
                CONFIG_VAR,
                r#"{"headers": {"Accept": "*/*", "x-org": "o"}}"#,
            ),
        ])
        .expect("valid");
        let headers = s.headers(true);
        let get = |name: &str| {
            headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("authorization"), ["Bearer sk-1"]);
        assert_eq!(get("accept"), ["*/*"]);
        assert_eq!(get("x-org"), ["o"]);
        assert_eq!(get("content-type"), ["application/json"]);
        let keyless = settings(&[(ENDPOINT_VAR, "http://x"), (API_KEY_VAR, "  ")]).expect("valid");
        assert!(
            keyless
                .headers(false)
                .iter()
                .all(|(n, _)| n != "authorization")
        );
    }

    #[test]
    fn config_keys() {
        let config = DriverConfig::parse(Some(
            r#"{"stream": false, "temperature": 0.2, "max_tokens": 512,
                "continuation": true, "headers": {"x-team": "a"}}"#,
        ))
        .expect("valid");
        assert!(!config.stream && config.continuation);
        assert_eq!(config.temperature, Some(0.2));
        assert_eq!(config.max_tokens, Some(512));
        assert_eq!(config.headers.get("x-team").map(String::as_str), Some("a"));
    }
}
