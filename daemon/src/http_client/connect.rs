//! How a connection is made: straight to the server, or through the proxy
//! roostd's environment names (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`;
//! `CONNECT` for HTTPS, the absolute form for HTTP), plain or TLS against
//! the trust store (the web roots, the system's store, `tls.ca_file`).

use std::io;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{HttpError, Socket};

/// A proxy from roostd's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proxy {
    host: String,
    port: u16,
    /// `Proxy-Authorization` for the proxy URL's user info.
    pub(super) authorization: Option<String>,
}

/// roostd's proxies, read from its environment once.
#[derive(Debug, Default, PartialEq, Eq)]
struct Proxies {
    http: Option<Proxy>,
    https: Option<Proxy>,
    /// `NO_PROXY`: hosts (and their subdomains) reached directly; `*`: all.
    direct: Vec<String>,
}

impl Proxies {
    fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let get = |upper: &str| var(upper).or_else(|| var(&upper.to_ascii_lowercase()));
        Self {
            http: get("HTTP_PROXY").and_then(|u| proxy_of(&u)),
            https: get("HTTPS_PROXY").and_then(|u| proxy_of(&u)),
            direct: get("NO_PROXY")
                .unwrap_or_default()
                .split(',')
                .map(|e| e.trim().trim_start_matches("*.").trim_start_matches('.'))
                .map(|e| {
                    e.rsplit_once(':')
                        .filter(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
                        .map_or(e, |(h, _)| h)
                })
                .filter(|e| !e.is_empty())
                .map(str::to_ascii_lowercase)
                .collect(),
        }
    }

    /// The proxy for `host` (`tls`: an HTTPS target), unless `NO_PROXY`
    /// lists it, as curl reads it (list `localhost,127.0.0.1` for a model
    /// server on this host).
    fn for_target(&self, host: &str, tls: bool) -> Option<&Proxy> {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        let listed = self.direct.iter().any(|d| {
            d == "*"
                || host == *d
                || host
                    .strip_suffix(d.as_str())
                    .is_some_and(|s| s.ends_with('.'))
        });
        if listed {
            return None;
        }
        if tls {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        }
    }
}

/// `http://[user:pass@]host[:port][/]` (a bare `host:port` too).
fn proxy_of(url: &str) -> Option<Proxy> {
    let url = url.trim();
    if url.is_empty() {
        return None;
    }
    let rest = url.strip_prefix("http://").unwrap_or(url);
    if rest.contains("://") {
        tracing::warn!(proxy = %crate::policy::redact_url(url), "only http:// proxies are supported; this one is not used");
        return None;
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let parsed: http::uri::Authority = hostport.parse().ok()?;
    let authorization = userinfo.map(|u| {
        let decoded = super::percent_decode(&u.replace('+', "%2B"));
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(decoded)
        )
    });
    Some(Proxy {
        host: parsed.host().trim_matches(['[', ']']).to_string(),
        port: parsed.port_u16().unwrap_or(80),
        authorization,
    })
}

fn proxies() -> &'static Proxies {
    static PROXIES: OnceLock<Proxies> = OnceLock::new();
    PROXIES.get_or_init(|| {
        let p = Proxies::from_env(|name| std::env::var(name).ok());
        if p.http.is_some() || p.https.is_some() {
            tracing::info!(http = p.http.is_some(), https = p.https.is_some(), no_proxy = p.direct.len(), "outgoing HTTP goes through the proxy roostd's environment names (HTTP_PROXY, HTTPS_PROXY, NO_PROXY)");
        }
        p
    })
}

/// The proxy a plain HTTP request to `host` goes through (its request line
/// then names the whole URL): none for HTTPS (tunneled) or a checked address.
pub(super) fn plain_proxy(
    host: &str,
    tls: bool,
    addr: Option<std::net::SocketAddr>,
) -> Option<&'static Proxy> {
    (addr.is_none() && !tls)
        .then(|| proxies().for_target(host, false))
        .flatten()
}

/// Largest answer to a `CONNECT` read.
const MAX_CONNECT_HEAD: usize = 8 * 1024;

/// A connection to `host:port` (to `addr` when the caller resolved and
/// checked it: then never through a proxy, which would resolve the host
/// again), through the proxy [`plain_proxy`] names for plain HTTP; `tls`:
/// HTTPS, trusting and presenting what `identity` says (roostd's default
/// trust store and no client certificate when `None`).
pub(super) async fn connect(
    host: &str,
    port: u16,
    tls: bool,
    addr: Option<std::net::SocketAddr>,
    identity: Option<&ClientTls>,
) -> Result<Socket, HttpError> {
    let proxy = match addr {
        Some(_) => None,
        None => proxies().for_target(host, tls),
    };
    let tcp = match (addr, proxy) {
        (Some(addr), _) => TcpStream::connect(addr).await,
        (None, Some(p)) => TcpStream::connect((p.host.as_str(), p.port)).await,
        (None, None) => TcpStream::connect((host, port)).await,
    }
    .map_err(HttpError::Connect)?;
    // Heads and bodies go out as separate writes; do not let Nagle hold them.
    let _ = tcp.set_nodelay(true);
    if !tls {
        return Ok(Socket::Plain(tcp));
    }
    let config = identity.map_or_else(tls_config, |i| Arc::clone(&i.http1));
    Ok(Socket::Tls(Box::new(
        handshake(tcp, host, port, proxy, config).await?,
    )))
}

/// A TLS connection to `host:port` that speaks HTTP/2 (ALPN `h2`), for a
/// gRPC client: through `HTTPS_PROXY` unless `NO_PROXY` lists the host.
pub async fn connect_h2(
    host: &str,
    port: u16,
    identity: Option<&ClientTls>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let proxy = proxies().for_target(host, true);
    let tcp = match proxy {
        Some(p) => TcpStream::connect((p.host.as_str(), p.port)).await,
        None => TcpStream::connect((host, port)).await,
    }
    .map_err(HttpError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let config = match identity {
        Some(i) => Arc::clone(&i.h2),
        None => ClientTls::default_h2(),
    };
    handshake(tcp, host, port, proxy, config).await
}

async fn handshake(
    tcp: TcpStream,
    host: &str,
    port: u16,
    proxy: Option<&Proxy>,
    config: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, HttpError> {
    let tcp = match proxy {
        Some(p) => tunnel(tcp, host, port, p).await?,
        None => tcp,
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| HttpError::ServerName(host.to_string()))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(HttpError::Tls)
}

/// What one peer's HTTPS connections trust and present (`a2a.peers[]`:
/// `ca_file`, `client_cert_file` and `client_key_file`): roostd's trust
/// store plus the peer's CA, and its client certificate for mutual TLS.
/// Connections made with one are pooled apart from every other's, so a
/// request without it (a guest's, say) never rides a connection that
/// presented it.
#[derive(Clone)]
pub struct ClientTls {
    pub(super) id: u64,
    /// It presents a client certificate (an identity, not only trust).
    pub presents: bool,
    http1: Arc<rustls::ClientConfig>,
    h2: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("id", &self.id).finish()
    }
}

/// Why a peer's TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error(transparent)]
    Ca(#[from] CaFileError),
    #[error("client certificate {path}: {why}")]
    Certificate { path: String, why: String },
    #[error("client key {path}: {why}")]
    Key { path: String, why: String },
}

impl ClientTls {
    /// Trusts `ca_file`'s certificates besides roostd's store, and presents
    /// `identity` (certificate chain file, private key file) when a server
    /// asks for a client certificate.
    pub fn build(
        ca_file: Option<&std::path::Path>,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<Self, ClientTlsError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut roots = default_roots();
        if let Some(path) = ca_file {
            let certs = read_ca_file(path)?;
            roots.add_parsable_certificates(certs);
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let presents = identity.is_some();
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let shown = |p: &std::path::Path| p.display().to_string();
                let chain = crate::secrets::read_certificates(cert).map_err(|why| {
                    ClientTlsError::Certificate {
                        path: shown(cert),
                        why,
                    }
                })?;
                let key_der =
                    crate::secrets::read_private_key(key).map_err(|why| ClientTlsError::Key {
                        path: shown(key),
                        why,
                    })?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| ClientTlsError::Key {
                        path: shown(key),
                        why: format!("does not go with the certificate: {e}"),
                    })?
            }
        };
        let mut h2 = config.clone();
        h2.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            presents,
            http1: Arc::new(config),
            h2: Arc::new(h2),
        })
    }

    /// roostd's default trust, speaking HTTP/2.
    fn default_h2() -> Arc<rustls::ClientConfig> {
        static H2: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
        Arc::clone(H2.get_or_init(|| {
            let mut config = (*tls_config()).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(config)
        }))
    }
}

/// Asks the proxy for a tunnel to `host:port` (`CONNECT`).
async fn tunnel(
    mut tcp: TcpStream,
    host: &str,
    port: u16,
    proxy: &Proxy,
) -> Result<TcpStream, HttpError> {
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes())
        .await
        .map_err(HttpError::Write)?;
    // Byte by byte up to the blank line: what follows is the server's.
    let mut answer = Vec::with_capacity(256);
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= MAX_CONNECT_HEAD {
            return Err(HttpError::Proxy("its answer to CONNECT never ended".into()));
        }
        let mut byte = [0u8];
        if tcp.read(&mut byte).await.map_err(HttpError::Read)? == 0 {
            return Err(HttpError::Proxy(
                "it closed the connection on CONNECT".into(),
            ));
        }
        answer.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&answer);
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !code.starts_with('2') {
        let line = status.lines().next().unwrap_or_default().to_string();
        return Err(HttpError::Proxy(format!(
            "it refused the tunnel to {target}: {line}"
        )));
    }
    Ok(tcp)
}

/// The operator's CA certificates (`tls.ca_file`), set once at start-up.
static EXTRA_ROOTS: OnceLock<Vec<rustls::pki_types::CertificateDer<'static>>> = OnceLock::new();

/// Why `tls.ca_file` cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    Empty { path: String },
    #[error("{path}: a certificate is not valid PEM or DER: {why}")]
    Invalid { path: String, why: String },
}

/// Trusts the CA certificates in the PEM file at `path` for every outgoing
/// HTTPS connection, besides the system's store and the web roots (call
/// once, before the first connection); answers how many.
pub fn trust_ca_file(path: &std::path::Path) -> Result<usize, CaFileError> {
    let certs = read_ca_file(path)?;
    let added = certs.len();
    let _ = EXTRA_ROOTS.set(certs);
    Ok(added)
}

/// The parsable CA certificates of the PEM file at `path` (at least one).
pub fn read_ca_file(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, CaFileError> {
    use rustls::pki_types::pem::PemObject;
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| CaFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CaFileError::Invalid {
            path: shown.clone(),
            why: e.to_string(),
        })?;
    let mut store = rustls::RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certs.iter().cloned());
    if added == 0 {
        return Err(CaFileError::Empty { path: shown });
    }
    Ok(certs)
}

/// What outgoing HTTPS trusts, built once: the web PKI roots, the system's
/// store (as `SSL_CERT_FILE`/`SSL_CERT_DIR` or the distribution's bundle
/// say), and `tls.ca_file`.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    Arc::clone(CONFIG.get_or_init(|| {
        Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(default_roots())
                .with_no_client_auth(),
        )
    }))
}

/// The certificates every outgoing HTTPS connection trusts (read once).
fn default_roots() -> rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let system = rustls_native_certs::load_native_certs();
            for error in &system.errors {
                tracing::debug!(%error, "a certificate of the system's store was not read");
            }
            let (added, _) = roots.add_parsable_certificates(system.certs);
            let (extra, _) =
                roots.add_parsable_certificates(EXTRA_ROOTS.get().cloned().unwrap_or_default());
            tracing::debug!(
                system = added,
                ca_file = extra,
                "outgoing HTTPS trust store built"
            );
            roots
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Proxies {
        Proxies::from_env(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_environment_names_the_proxies_and_what_bypasses_them() {
        let p = env(&[
            ("HTTPS_PROXY", "http://u%40x:p%3Ass@proxy.corp:3128"),
            ("http_proxy", "proxy.corp:8080"),
            (
                "NO_PROXY",
                " .internal, models.example:8443,*.lab ,localhost,127.0.0.1,::1",
            ),
        ]);
        let https = p.https.as_ref().expect("https proxy");
        assert_eq!((https.host.as_str(), https.port), ("proxy.corp", 3128));
        assert_eq!(
            https.authorization.as_deref(),
            Some(
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("u@x:p:ss")
                )
                .as_str()
            )
        );
        assert_eq!(p.http.as_ref().map(|h| h.port), Some(8080));
        assert_eq!(p.for_target("api.example.com", true), Some(https));
        assert_eq!(
            p.for_target("api.example.com", false).map(|h| h.port),
            Some(8080)
        );
        for direct in [
            "vllm.internal",
            "internal",
            "models.example",
            "a.lab",
            "localhost",
            "127.0.0.1",
            "[::1]",
        ] {
            assert_eq!(p.for_target(direct, true), None, "{direct}");
        }
        assert_eq!(
            p.for_target("notinternal", true),
            Some(https),
            "a suffix at a dot only"
        );
        let all = env(&[("HTTPS_PROXY", "http://proxy:1"), ("NO_PROXY", "*")]);
        assert_eq!(all.for_target("anything.example", true), None);
        assert_eq!(env(&[("HTTPS_PROXY", "socks5://proxy:1")]).https, None);
        assert_eq!(env(&[]), Proxies::default());
    }
}
