//! How every TCP listener of roostd is served (the A2A gateway, the control
//! API over TCP, the dashboard, the metrics listener): a cap on the
//! connections one listener holds and on those one client address holds,
//! a deadline for each request head and each request body, a connection
//! with no open request (HTTP/1 or HTTP/2) closed after the idle timeout
//! (`conn.rs`), and, on a loopback address, only requests whose `Host`
//! names loopback (a DNS-rebinding page names its own host); TLS, for a
//! listener that has it (the gateway's `a2a.tls`), in the same deadline as
//! the head. One accept loop, so no listener can forget a rule.

mod conn;
pub use conn::BodyTimedOut;

/// Whether reading a request body failed because it did not arrive within
/// `http.body_read_timeout_secs` (else: too large, or the client went).
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        at = e.source();
    }
    false
}

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;

/// What one listener lets its clients hold (`http:` in roostd's config).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    /// Connections one client address (an IPv6 /64) holds at once.
    pub max_connections_per_client: usize,
    /// For a request head; also how long a connection with no open request
    /// is kept, and how long one being closed may take to close.
    pub header_read_timeout: Duration,
    /// For a request's whole body, from its head.
    pub body_read_timeout: Duration,
}

impl From<&crate::config::HttpConfig> for Limits {
    fn from(c: &crate::config::HttpConfig) -> Self {
        Self {
            max_connections: c.max_connections,
            max_connections_per_client: c.max_connections_per_client.min(c.max_connections),
            header_read_timeout: Duration::from_secs(c.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(c.body_read_timeout_secs),
        }
    }
}

/// Serves `router` on `listener` until `stop`, as the module says. `name`
/// is the listener's, for the log; `hosts` are names besides loopback that
/// a loopback listener answers to (the host of `a2a.public_url`); `tls`:
/// connections are TLS, accepted with its config of the moment.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    name: &'static str,
    limits: Limits,
    hosts: Vec<String>,
    tls: Option<Arc<super::tls::ServerTls>>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let router = if local.ip().is_loopback() {
        router.layer(middleware::from_fn_with_state(
            Arc::new(HostRule { extra: hosts }),
            loopback_host,
        ))
    } else {
        router
    };
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let clients = Arc::new(conn::Clients::default());
    let full = FullLog::default();
    let crowded = FullLog::default();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, say: wait a moment rather than spin.
                    tracing::warn!(listener = name, %error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = clients.take(peer.ip(), limits.max_connections_per_client) else {
            crowded.refused(name, Full::Client(limits.max_connections_per_client), peer);
            drop(stream);
            continue;
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            full.refused(name, Full::Listener(limits.max_connections), peer);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(conn::Activity::new());
        let service = TowerToHyperService::new(conn::Tracked {
            router: router.clone(),
            activity: Arc::clone(&activity),
            body_timeout: limits.body_read_timeout,
        });
        let deadline = limits.header_read_timeout;
        let builder = builder.clone();
        let stop = stop.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            let _held = (permit, slot);
            // A client that sends nothing at all is not seen by hyper's
            // head deadline (it waits to tell HTTP/1 from HTTP/2 first).
            let mut byte = [0u8; 1];
            match tokio::time::timeout(deadline, stream.peek(&mut byte)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let stream = match acceptor {
                None => Either::Left(stream),
                Some(acceptor) => {
                    match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => Either::Right(tls),
                        Ok(Err(error)) => {
                            tracing::debug!(listener = name, %peer, %error, "TLS handshake refused");
                            return;
                        }
                        Err(_) => return,
                    }
                }
            };
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            tokio::pin!(connection);
            // Closed gracefully when roostd stops, or when nothing has been
            // open on it for the idle timeout (then it has that long again
            // to go, or is dropped: a client that never finishes its
            // HTTP/2 preface does not hold its slot).
            let mut stopping = false;
            let mut closing: Option<tokio::time::Instant> = None;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    _ = stop.cancelled(), if !stopping => {
                        stopping = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    _ = conn::idle(&activity, deadline), if closing.is_none() && !stopping => {
                        closing = Some(tokio::time::Instant::now() + deadline);
                        connection.as_mut().graceful_shutdown();
                    }
                    _ = tokio::time::sleep_until(closing.unwrap_or_else(tokio::time::Instant::now)),
                        if closing.is_some() => {
                        // A request that began as it was told to go may
                        // finish; an idle one is dropped.
                        if activity.open() == 0 {
                            break;
                        }
                        closing = Some(tokio::time::Instant::now() + deadline);
                    }
                }
            }
        });
    }
    // Every connection's task has its permit until it ends.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
    Ok(())
}

/// Which limit refused a connection.
#[derive(Clone, Copy)]
enum Full {
    Listener(usize),
    Client(usize),
}

/// Logs "limit reached" at most every ten seconds, with how many were
/// refused since.
#[derive(Default)]
struct FullLog {
    refused: AtomicU64,
    last: std::sync::Mutex<Option<Instant>>,
}

impl FullLog {
    fn refused(&self, name: &str, full: Full, peer: SocketAddr) {
        let count = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *last = Some(Instant::now());
            self.refused.store(0, Ordering::Relaxed);
            match full {
                Full::Listener(max) => tracing::warn!(
                    listener = name,
                    max_connections = max,
                    refused = count,
                    %peer,
                    "connection limit reached: new connections are closed at once \
                     (http.max_connections)"
                ),
                Full::Client(max) => tracing::warn!(
                    listener = name,
                    max_connections_per_client = max,
                    refused = count,
                    %peer,
                    "per-client connection limit reached: this client's new connections \
                     are closed at once (http.max_connections_per_client)"
                ),
            }
        }
    }
}

/// The names a loopback listener answers to besides loopback ones.
struct HostRule {
    extra: Vec<String>,
}

/// Whether `host` (a `Host` header or an HTTP/2 authority, port and all)
/// names a loopback address: `localhost` (and `*.localhost`, which
/// browsers resolve to loopback themselves), `127.0.0.0/8`, `[::1]`.
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn host_only(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(_) => host.split(']').next().map_or(host, |h| &h[1..]),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    }
}

async fn loopback_host(
    State(rule): State<Arc<HostRule>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request.uri().authority().map(|a| a.as_str()).or_else(|| {
        request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
    });
    let allowed = host.is_none_or(|h| {
        is_loopback_host(h)
            || rule
                .extra
                .iter()
                .any(|e| e.eq_ignore_ascii_case(host_only(h)))
    });
    if allowed {
        return next.run(request).await;
    }
    tracing::warn!(
        host = host.unwrap_or_default(),
        path = %request.uri().path(),
        "request to a loopback listener naming another host refused (DNS rebinding?)"
    );
    let body = serde_json::json!({"error": {
        "code": "host_not_allowed",
        "message": "this listener is on a loopback address and answers only requests whose \
                    Host is localhost, 127.0.0.1 or [::1] (or a2a.public_url's host)",
    }});
    (StatusCode::MISDIRECTED_REQUEST, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses_are_told_apart_from_others() {
        for host in [
            "localhost",
            "localhost:7420",
            "LOCALHOST.",
            "app.localhost:80",
            "127.0.0.1:7420",
            "127.3.4.5",
            "[::1]:7420",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:7420",
            "localhost.attacker.example",
            "10.0.0.1:7420",
            "[::ffff:127.0.0.1]:1",
            "0.0.0.0:7420",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert_eq!(host_only("agents.example:443"), "agents.example");
        assert_eq!(host_only("[2001:db8::1]:443"), "2001:db8::1");
    }
}
