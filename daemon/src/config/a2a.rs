//! The `a2a:` section of roostd's config: who may call the gateway (its
//! token and each route's), the URL agent cards advertise, how long a
//! session waits for its next task.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The A2A gateway's access, what its cards advertise, and how long a
/// session waits for its next task.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// File holding a bearer token every A2A request (but the agent card)
    /// must send; declared in the agent cards' security schemes. Not
    /// readable by other users; at least 16 characters.
    pub token_file: Option<PathBuf>,
    /// A token per route (session name): the route takes its own token,
    /// and roostd's `token_file` only with `accept_global_token: true`.
    pub routes: BTreeMap<String, RouteAccessConfig>,
    /// The base URL agent cards advertise (`https://agents.example.com`,
    /// no trailing `/a2a`): what clients reach roostd by, e.g. behind a
    /// proxy. Default: the listen address, and with a wildcard listen
    /// address the host a client asked for.
    pub public_url: Option<String>,
    /// Sign agent cards (`signatures`: a JWS, ES256, over the canonical
    /// card) with the key in `<state_dir>/keys/card-signing.p8`, made on
    /// first start; the public keys are served at `/.well-known/jwks.json`.
    pub sign_cards: bool,
    /// Push notifications (A2A `…PushNotificationConfig`).
    pub push: PushSettings,
    /// The gRPC binding, on the gateway's port.
    pub grpc: GrpcSettings,
    /// Which web pages may call the gateway from a browser.
    pub cors: CorsSettings,
    /// A `SendMessage` whose `messageId` the route already has a task for
    /// answers that task and runs nothing (a client's retry is safe). Off:
    /// every `SendMessage` makes a task, for clients that reuse message
    /// ids (the A2A TCK does).
    pub dedupe_message_ids: bool,
    /// Deprecated: `retention.tasks` and `retention.interval_secs` (still
    /// accepted, with a warning).
    pub retention: Option<LegacyTaskRetention>,
    /// How long a session that takes tasks and ends after them waits for
    /// one before it ends (`--a2a-idle-timeout-secs`, or upstream's
    /// `MURMUR_A2A_TIMEOUT_SECS` in roostd's environment; default 30).
    pub idle_timeout_secs: u64,
    /// The credentials roostd sends to A2A peers elsewhere when a guest
    /// sends them a message (`murmur:message/send`): the entry whose `url`
    /// is the longest prefix of the peer's URL.
    pub peers: Vec<PeerConfig>,
    /// What agent cards say to a client that names no protocol version:
    /// `exact` (default), A2A 1.0's card exactly; `merged`, with 0.3's
    /// members beside 1.0's, for 0.3 clients. A capsule's `a2a.card_compat`
    /// overrides it for its route.
    pub card_compat: crate::manifest::a2a::CardCompat,
    /// The gateway serves HTTPS (and gRPC over TLS) itself with this
    /// certificate; its cards then say `https`. Re-read on SIGHUP.
    pub tls: Option<TlsSettings>,
    /// A header (`X-API-Key`) in which the gateway also takes a token, as
    /// an API key: cards then name it (an API-key security scheme beside
    /// the bearer one), for clients that send keys rather than bearers.
    pub api_key_header: Option<String>,
}

/// `a2a.tls`: the gateway's certificate, and whether it asks clients for
/// theirs (mutual TLS).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain, the gateway's own certificate first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1), not readable by other
    /// users (the same rules as a token file).
    pub key_file: PathBuf,
    /// PEM CA certificates a client certificate must chain to: set, the
    /// gateway asks every client for one.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: `required` (default), a client without a
    /// certificate the CA signed is refused in the handshake; `optional`,
    /// one without any certificate is let through (one with a bad
    /// certificate is still refused).
    #[serde(default)]
    pub client_auth: ClientAuth,
}

/// `a2a.tls.client_auth`.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    #[default]
    Required,
    Optional,
}

/// `a2a.peers[]`: what roostd sends to one peer (never a capsule's own
/// secret: capsules name the peer, roostd adds its credentials). Secret
/// files follow the rules of `a2a.token_file`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// The peer's A2A URL, or a prefix of such URLs ending in `/`
    /// (`https://agents.example.com/`).
    pub url: String,
    /// File holding the bearer token sent as `Authorization: Bearer …`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// File holding an API key, sent in the header the peer's card names
    /// (its API-key security scheme, `location: header`), else in
    /// `api_key_header`, else in `X-API-Key`.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// The header the API key goes in, whatever the card says.
    #[serde(default)]
    pub api_key_header: Option<String>,
    /// OAuth 2 client credentials: a token fetched from `token_url` (never
    /// from a URL the peer's card names: the secret goes only where the
    /// operator said) and sent as a bearer token until it expires.
    #[serde(default)]
    pub oauth2: Option<OAuth2Settings>,
    /// PEM CA certificates trusted for this peer besides roostd's store.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain presented to the peer (mutual TLS),
    /// with `client_key_file`.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
}

/// `a2a.peers[].oauth2`: the client-credentials grant (RFC 6749 §4.4).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Settings {
    /// The authorization server's token endpoint.
    pub token_url: String,
    pub client_id: String,
    /// File holding the client secret (sent with HTTP Basic, as RFC 6749
    /// requires every server to accept).
    pub client_secret_file: PathBuf,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            token_file: None,
            routes: BTreeMap::new(),
            public_url: None,
            sign_cards: true,
            push: PushSettings::default(),
            grpc: GrpcSettings::default(),
            cors: CorsSettings::default(),
            dedupe_message_ids: true,
            peers: Vec::new(),
            retention: None,
            idle_timeout_secs: 30,
            card_compat: Default::default(),
            tls: None,
            api_key_header: None,
        }
    }
}

/// `a2a.push`: whether clients may ask for push notifications, and where
/// they may go besides public addresses.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushSettings {
    /// Off: the card says `pushNotifications: false` and the config
    /// methods answer PushNotificationNotSupported.
    pub enabled: bool,
    /// Hosts (as a push URL names them: `hooks.internal`, `10.0.0.7`,
    /// `127.0.0.1`) that push notifications may reach although they are,
    /// or resolve to, loopback, private or reserved addresses (refused
    /// otherwise: the SSRF guard).
    pub allow: Vec<String>,
    /// Configs one task may have: each event is delivered once per config,
    /// so this bounds how many requests one event makes.
    pub max_configs_per_task: u32,
    /// Deliveries in flight at once to one receiving host; the rest wait
    /// their turn without holding up deliveries to other hosts.
    pub max_in_flight_per_host: usize,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            allow: Vec::new(),
            max_configs_per_task: 10,
            max_in_flight_per_host: 4,
        }
    }
}

/// `a2a.grpc`: the gRPC binding (`lf.a2a.v1.A2AService`), served on the
/// gateway's port (HTTP/2); a request names its route in `tenant`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcSettings {
    pub enabled: bool,
    /// The route of a request whose `tenant` is empty (a client that does
    /// not read the card's interface); without it such a request is
    /// refused.
    pub default_route: Option<String>,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            default_route: None,
        }
    }
}

/// `a2a.cors`: a request that carries an `Origin` header (a web page's) is
/// refused unless its origin is listed here; listed origins get CORS
/// answers (preflights included).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsSettings {
    /// Origins as a browser sends them: `https://app.example.com`,
    /// `http://localhost:5173` (scheme, host, port; no path).
    pub allow_origins: Vec<String>,
}

/// `a2a.routes.<name>`: one route's credentials.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteAccessConfig {
    /// File holding the route's bearer token (the same rules as
    /// `a2a.token_file`): one caller, whose tasks all callers with it share.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// A token per client of the route (`<client>: {token_file}`): each
    /// client reads, lists, continues and de-duplicates only its own tasks
    /// and contexts; another's are "not found".
    #[serde(default)]
    pub clients: BTreeMap<String, ClientAccessConfig>,
    /// Whether roostd's `a2a.token_file` token opens this route too
    /// (default false: only the route's own).
    #[serde(default)]
    pub accept_global_token: bool,
}

/// `a2a.routes.<name>.clients.<client>`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAccessConfig {
    /// File holding the client's bearer token (the same rules as
    /// `a2a.token_file`).
    pub token_file: PathBuf,
}

/// `a2a.retention` as it was before `retention:`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyTaskRetention {
    pub max_age_secs: Option<u64>,
    pub max_tasks: Option<u64>,
    pub interval_secs: Option<u64>,
}

impl A2aConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.public_url {
            crate::manifest::a2a::url(url).map_err(|e| {
                ConfigError::invalid("a2a.public_url", format!("a2a.public_url: {e}"))
            })?;
            if url.contains(['?', '#']) {
                return Err(ConfigError::invalid(
                    "a2a.public_url",
                    format!("a2a.public_url: '{url}' must not have a query or fragment"),
                ));
            }
        }
        if self.push.max_configs_per_task == 0 || self.push.max_in_flight_per_host == 0 {
            return Err(ConfigError::invalid(
                "a2a.push.max_configs_per_task",
                "a2a.push.max_configs_per_task and a2a.push.max_in_flight_per_host must be at \
                 least 1 (turn push notifications off with a2a.push.enabled: false)"
                    .into(),
            ));
        }
        for origin in &self.cors.allow_origins {
            let (scheme, host) = origin.split_once("://").unwrap_or_default();
            if !matches!(scheme, "http" | "https")
                || host.is_empty()
                || host.contains(['/', '?', '#', '*', ' '])
            {
                return Err(ConfigError::invalid(
                    "a2a.cors.allow_origins",
                    format!(
                        "a2a.cors.allow_origins: '{origin}' is not an origin: write \
                     scheme://host[:port] as a browser sends it (https://app.example.com), no \
                     path and no wildcard"
                    ),
                ));
            }
        }
        for (i, peer) in self.peers.iter().enumerate() {
            peer.validate(i)?;
        }
        if let Some(header) = &self.api_key_header
            && !api_key_header_allowed(header)
        {
            return Err(ConfigError::invalid(
                "a2a.api_key_header",
                format!(
                    "a2a.api_key_header '{header}' cannot carry a key: name a header such as \
                     X-API-Key (not one HTTP itself or the bearer token uses)"
                ),
            ));
        }
        if let Some(tls) = &self.tls
            && tls.client_ca_file.is_none()
            && tls.client_auth == ClientAuth::Optional
        {
            return Err(ConfigError::invalid(
                "a2a.tls.client_auth",
                "a2a.tls.client_auth needs a2a.tls.client_ca_file (the CA client certificates \
                 must chain to)"
                    .into(),
            ));
        }
        for (name, route) in &self.routes {
            crate::manifest::validate_name(name).map_err(|m| {
                ConfigError::invalid(
                    "a2a.routes",
                    format!("a2a.routes: '{name}' is not a session name: it {m}"),
                )
            })?;
            if route.token_file.is_none() && route.clients.is_empty() {
                return Err(ConfigError::invalid(
                    format!("a2a.routes.{name}"),
                    format!("a2a.routes.{name} needs token_file or clients (a token per client)"),
                ));
            }
            for client in route.clients.keys() {
                crate::manifest::validate_name(client).map_err(|m| {
                    ConfigError::invalid(
                        format!("a2a.routes.{name}.clients"),
                        format!(
                            "a2a.routes.{name}.clients: '{client}' is not a client name: it {m}"
                        ),
                    )
                })?;
            }
            if route.accept_global_token && self.token_file.is_none() {
                return Err(ConfigError::invalid(
                    format!("a2a.routes.{name}.accept_global_token"),
                    format!(
                        "a2a.routes.{name}.accept_global_token needs a2a.token_file (there is no \
                     global token to accept)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl PeerConfig {
    fn validate(&self, i: usize) -> Result<(), ConfigError> {
        let at = format!("a2a.peers[{i}]");
        let invalid = |m: String| ConfigError::invalid(&at, format!("{at}: {m}"));
        crate::manifest::a2a::url(&self.url).map_err(|m| invalid(format!("url {m}")))?;
        let bearers = usize::from(self.token_file.is_some()) + usize::from(self.oauth2.is_some());
        if bearers > 1 {
            return Err(invalid(
                "token_file and oauth2 both make the Authorization header: give one".into(),
            ));
        }
        if bearers == 0
            && self.api_key_file.is_none()
            && self.client_cert_file.is_none()
            && self.ca_file.is_none()
        {
            return Err(invalid(
                "gives no credential: set token_file, api_key_file, oauth2, \
                 client_cert_file with client_key_file, or ca_file"
                    .into(),
            ));
        }
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Err(invalid(
                "client_cert_file and client_key_file go together (mutual TLS)".into(),
            ));
        }
        if let Some(header) = &self.api_key_header
            && !api_key_header_allowed(header)
        {
            return Err(invalid(format!(
                "api_key_header '{header}' cannot carry a key: name a header such as X-API-Key \
                 (not one HTTP itself or the bearer token uses)"
            )));
        }
        if let Some(oauth2) = &self.oauth2 {
            crate::manifest::a2a::url(&oauth2.token_url)
                .map_err(|m| invalid(format!("oauth2.token_url {m}")))?;
            if oauth2.client_id.is_empty() {
                return Err(invalid("oauth2.client_id is empty".into()));
            }
        }
        Ok(())
    }
}

/// Whether an API key may go in header `name`: a header token, and not one
/// that frames the request, names its host or carries the bearer token
/// (a card that names such a header gets `X-API-Key` instead).
pub fn api_key_header_allowed(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    http::HeaderName::from_bytes(name.as_bytes()).is_ok()
        && !matches!(
            lower.as_str(),
            "host"
                | "content-length"
                | "content-type"
                | "transfer-encoding"
                | "connection"
                | "keep-alive"
                | "te"
                | "trailer"
                | "upgrade"
                | "proxy-authorization"
                | "authorization"
                | "cookie"
                | "a2a-version"
                | "a2a-extensions"
        )
        && !lower.starts_with(':')
}

#[cfg(test)]
mod tests {
    use super::super::DaemonConfig;

    #[test]
    fn routes_and_the_public_url_are_checked() {
        let ok = DaemonConfig::from_yaml(
            "a2a: {public_url: 'https://agents.example/', routes: {billing: {token_file: /t}}}",
        )
        .expect("parses");
        ok.validate().expect("valid");
        assert!(!ok.a2a.routes["billing"].accept_global_token);
        for (yaml, says) in [
            ("a2a: {public_url: 'agents.example'}", "a2a.public_url"),
            ("a2a: {public_url: 'http://a/?x=1'}", "query"),
            (
                "a2a: {routes: {billing: {token_file: /t, accept_global_token: true}}}",
                "needs a2a.token_file",
            ),
            (
                "a2a: {routes: {'no/slash': {token_file: /t}}}",
                "not a session name",
            ),
        ] {
            let config = DaemonConfig::from_yaml(yaml).expect("parses");
            let e = config.validate().expect_err(yaml).to_string();
            assert!(e.contains(says), "{yaml}: {e}");
        }
        assert!(DaemonConfig::from_yaml("a2a: {routes: {b: {token: x}}}").is_err());
    }

    #[test]
    fn peers_and_tls_are_checked() {
        for (yaml, says) in [
            (
                "a2a: {peers: [{url: 'https://p.example/'}]}",
                "gives no credential",
            ),
            (
                "a2a: {peers: [{url: 'https://p.example/', token_file: /t, oauth2: \
                 {token_url: 'https://auth.example/token', client_id: c, client_secret_file: /s}}]}",
                "both make the Authorization",
            ),
            (
                "a2a: {peers: [{url: 'https://p.example/', client_cert_file: /c}]}",
                "go together",
            ),
            (
                "a2a: {peers: [{url: 'https://p.example/', api_key_file: /k, api_key_header: Host}]}",
                "cannot carry a key",
            ),
            (
                "a2a: {tls: {cert_file: /c, key_file: /k, client_auth: optional}}",
                "needs a2a.tls.client_ca_file",
            ),
        ] {
            let config = DaemonConfig::from_yaml(yaml).expect("parses");
            let e = config.validate().expect_err(yaml).to_string();
            assert!(e.contains(says), "{yaml}: {e}");
        }
        let ok = DaemonConfig::from_yaml(
            "a2a: {tls: {cert_file: /c, key_file: /k, client_ca_file: /ca}, peers: \
             [{url: 'https://p.example/', api_key_file: /k, ca_file: /ca, \
             client_cert_file: /c, client_key_file: /k}]}",
        )
        .expect("parses");
        ok.validate().expect("valid");
        assert_eq!(
            ok.a2a.tls.map(|t| t.client_auth),
            Some(super::ClientAuth::Required)
        );
    }
}
