//! Idle connections kept for the next request to the same server (HTTP/1.1
//! keep-alive), so an agent's next turn skips the connect and the TLS
//! handshake: at most [`PER_SERVER`] per server, each for at most [`IDLE`];
//! one the server has closed (or sent anything on) is dropped, not reused.
//! A connection goes back only after its response was read to the end.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::ReadBuf;

use super::{Conn, Socket};

/// Idle connections kept per server.
const PER_SERVER: usize = 4;
/// How long an idle connection is kept (below the usual keep-alive
/// timeouts of model servers and proxies).
const IDLE: Duration = Duration::from_secs(30);
/// Servers with idle connections, at most.
const SERVERS: usize = 256;

/// Where a connection goes: scheme, host and port (through the proxy, if
/// roostd's environment names one for it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Server {
    pub(super) tls: bool,
    pub(super) host: String,
    pub(super) port: u16,
    /// The peer TLS settings its connections were made with (0: roostd's
    /// default trust, no client certificate).
    pub(super) identity: u64,
}

type Idle = HashMap<Server, Vec<(Conn, Instant)>>;

fn pool() -> std::sync::MutexGuard<'static, Idle> {
    static POOL: OnceLock<Mutex<Idle>> = OnceLock::new();
    POOL.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// An idle connection to `server` that is still open, if there is one.
pub(super) fn take(server: &Server) -> Option<Conn> {
    let mut idle = pool();
    let conns = idle.get_mut(server)?;
    while let Some((conn, since)) = conns.pop() {
        if since.elapsed() < IDLE && open(&conn) {
            return Some(conn);
        }
    }
    None
}

/// Keeps `conn` for the next request to `server` (if it is clean and open,
/// and there is room).
pub(super) fn give(server: Server, mut conn: Conn) {
    if !conn.buf.is_empty() || !open(&conn) {
        return;
    }
    // An idle connection, and a request waiting on it later, hold no
    // buffer until bytes arrive.
    conn.buf = bytes::BytesMut::new();
    let mut idle = pool();
    idle.retain(|_, conns| {
        conns.retain(|(_, since)| since.elapsed() < IDLE);
        !conns.is_empty()
    });
    if idle.len() >= SERVERS && !idle.contains_key(&server) {
        return;
    }
    let conns = idle.entry(server).or_default();
    if conns.len() < PER_SERVER {
        conns.push((conn, Instant::now()));
    }
}

/// Nothing to read and not closed: the server still holds it open for us.
fn open(conn: &Conn) -> bool {
    let tcp = match &conn.stream {
        Socket::Plain(s) => s,
        Socket::Tls(s) => s.get_ref().0,
    };
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    matches!(tcp.poll_peek(&mut cx, &mut buf), Poll::Pending)
}

#[cfg(test)]
/// How many idle connections are kept for `server` (tests).
pub(super) fn idle(server: &Server) -> usize {
    pool().get(server).map_or(0, Vec::len)
}
