//! `telemetry:` (OTLP traces), `metrics:` (the Prometheus listener) and
//! `ui:` (the dashboard): how an operator watches roostd. All off by default.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `telemetry:`: spans exported over OTLP. Off while `otlp_endpoint` is unset
/// (no span is made then).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector: `http://HOST:4318` for http/protobuf (`/v1/traces` is
    /// added when the URL has no path), `http://HOST:4317` for grpc.
    pub otlp_endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// `service.name` of every span.
    pub service_name: String,
    /// The share of new traces kept (0.0–1.0); a trace a caller started
    /// follows the caller's sampling decision.
    pub sample_ratio: f64,
    /// `Name: value` lines sent with every export (a vendor's API key, say):
    /// mode 0600, or 0640 with roostd's group.
    pub headers_file: Option<PathBuf>,
    /// Put prompts, answers and tool arguments on spans. Off: spans carry
    /// sizes, counts and names only.
    pub capture_content: bool,
}

/// `telemetry.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: "roostd".into(),
            sample_ratio: 1.0,
            headers_file: None,
            capture_content: false,
        }
    }
}

impl TelemetryConfig {
    pub fn check(&self) -> Result<(), super::ConfigError> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(super::ConfigError::invalid(
                "telemetry.sample_ratio",
                format!(
                    "telemetry.sample_ratio must be between 0.0 and 1.0, got {}",
                    self.sample_ratio
                ),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(super::ConfigError::invalid(
                "telemetry.service_name",
                "telemetry.service_name must not be empty".into(),
            ));
        }
        if let Some(url) = &self.otlp_endpoint {
            let uri: http::Uri = url.parse().map_err(|e| {
                super::ConfigError::invalid(
                    "telemetry.otlp_endpoint",
                    format!("telemetry.otlp_endpoint '{url}': {e}"),
                )
            })?;
            if uri.scheme_str() != Some("http") || uri.host().is_none() {
                return Err(super::ConfigError::invalid(
                    "telemetry.otlp_endpoint",
                    format!(
                        "telemetry.otlp_endpoint '{url}': give an http:// URL with a host \
                     (http://127.0.0.1:4318; export to a TLS collector through a local agent)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `metrics:`: a listener that serves only `GET /metrics`, `/healthz` and
/// `/readyz`, so a scraper never reaches the control API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `HOST:PORT` (e.g. `127.0.0.1:9464`); unset: no listener.
    pub listen: Option<SocketAddr>,
}

/// `ui:`: the web dashboard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// `HOST:PORT` (e.g. `127.0.0.1:8470`); unset: no dashboard.
    pub listen: Option<SocketAddr>,
    /// The token the login page asks for (mode 0600, or 0640 with roostd's
    /// group). Required with `listen`.
    pub token_file: Option<PathBuf>,
    /// Mark the login cookie `Secure` (the dashboard is reached over HTTPS
    /// through a proxy). It is marked so anyway when the proxy sends
    /// `X-Forwarded-Proto: https` or `Forwarded: proto=https`.
    pub secure_cookie: bool,
}

impl UiConfig {
    pub fn check(&self) -> Result<(), super::ConfigError> {
        if self.listen.is_some() && self.token_file.is_none() {
            return Err(super::ConfigError::invalid(
                "ui.listen",
                "ui.listen needs ui.token_file: the dashboard is never served without a login"
                    .into(),
            ));
        }
        Ok(())
    }
}
