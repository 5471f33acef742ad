//! roostd's one outgoing HTTP/1.1 client: guests' wasi-http requests (through
//! `runtime::http`), registry fetches and A2A messages to peers. Connections
//! are made as `connect.rs` says (proxy, TLS trust) and kept alive between
//! requests to the same server (`pool.rs`); written for a daemon that keeps
//! hundreds of requests parked on slow model servers, so a request waiting
//! for its answer holds a socket and its parse state, and no buffer until
//! bytes arrive.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

mod body;
mod connect;
mod exchange;
mod pool;
pub use body::ResponseBody;
use body::framing;
use connect::connect;
pub use connect::{
    CaFileError, ClientTls, ClientTlsError, connect_h2, read_ca_file, trust_ca_file,
};
pub use exchange::{HttpReply, deadline_for, exchange, exchange_as};

/// Longest wait to connect, for the head, and between two reads of an
/// `exchange`; its whole deadline grows with what it may read
/// ([`deadline_for`]).
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response head (status line and headers) read.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most response headers read.
const MAX_HEADERS: usize = 128;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 8 * 1024;
/// Longest chunk-size or trailer line accepted in a chunked body.
const MAX_LINE: usize = 4 * 1024;

/// Why an outgoing request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("not a valid URL: {0}")]
    Uri(&'static str),
    #[error("cannot connect: {0}")]
    Connect(io::Error),
    #[error("no connection within {0:?}")]
    ConnectTimeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("`{0}` is not a valid TLS server name")]
    ServerName(String),
    #[error("no response within {0:?}")]
    FirstByteTimeout(Duration),
    #[error("no response bytes for {0:?}")]
    ReadTimeout(Duration),
    #[error("the connection closed before the response was complete")]
    Incomplete,
    #[error(
        "the response head is larger than {MAX_HEAD_BYTES} bytes or has over {MAX_HEADERS} headers"
    )]
    HeadTooLarge,
    #[error("malformed response: {0}")]
    Protocol(String),
    #[error("the request body failed: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot send the request: {0}")]
    Write(io::Error),
    #[error("cannot read the response: {0}")]
    Read(io::Error),
    #[error("only http:// and https:// URLs are supported")]
    NotHttp,
    #[error("cannot build the request: {0}")]
    Request(#[source] http::Error),
    #[error("body over {0} bytes")]
    TooLarge(u64),
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    #[error("the proxy (HTTPS_PROXY or HTTP_PROXY in roostd's environment): {0}")]
    Proxy(String),
}

/// A query value: `%XX` escapes and `+` for a space; a `%` without two hex
/// digits after it is kept as it is.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escaped = (b == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match (b, escaped) {
            (_, Some((hi, lo))) => {
                out.push((hi * 16 + lo) as u8);
                i += 2;
            }
            (b'+', None) => out.push(b' '),
            (b, None) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Deadlines of one request: to connect, to the response head (sending the
/// request included), and between response body bytes.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub between_bytes: Duration,
}

/// Sends `request` (an absolute `http://` or `https://` URI) on a new
/// connection and returns the response once its head has arrived; the body
/// streams from the socket as it is read.
pub async fn send<B>(
    request: http::Request<B>,
    timeouts: Timeouts,
) -> Result<http::Response<ResponseBody>, HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    send_via(request, timeouts, None).await
}

/// [`send`], connecting to `addr` (an address the caller resolved and
/// checked) instead of resolving the URI's host again; the host still names
/// the server (`Host`, TLS server name).
pub async fn send_via<B>(
    request: http::Request<B>,
    timeouts: Timeouts,
    addr: Option<std::net::SocketAddr>,
) -> Result<http::Response<ResponseBody>, HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = request.into_parts();
    let tls = match parts.uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(HttpError::Uri("the scheme must be http or https")),
    };
    let authority = parts
        .uri
        .authority()
        .ok_or(HttpError::Uri("no host"))?
        .clone();
    let host = authority.host().trim_matches(['[', ']']);
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    // Connecting and writing are boxed, and the request's parts are dropped
    // once written: what stays while the answer is awaited is small.
    // An idle connection to the same server is reused (never for a
    // caller-checked address: that check is per request).
    // A peer's TLS settings ride on the request (`a2a.peers[]`).
    let identity = parts.extensions.get::<ClientTls>().cloned();
    let server = addr.is_none().then(|| pool::Server {
        tls,
        host: host.to_string(),
        port,
        identity: identity.as_ref().map_or(0, |i| i.id),
    });
    let proxy = connect::plain_proxy(host, tls, addr);
    let mut conn = match server.as_ref().and_then(pool::take) {
        Some(conn) => conn,
        None => {
            let stream = tokio::time::timeout(
                timeouts.connect,
                Box::pin(connect(host, port, tls, addr, identity.as_ref())),
            )
            .await
            .map_err(|_| HttpError::ConnectTimeout(timeouts.connect))??;
            Conn {
                stream,
                buf: BytesMut::new(),
            }
        }
    };
    let head_only = parts.method == Method::HEAD;
    let exchange = async {
        Box::pin(write_request(
            &mut conn.stream,
            parts,
            authority.as_str(),
            body,
            proxy,
        ))
        .await?;
        read_head(&mut conn).await
    };
    let (status, headers) = tokio::time::timeout(timeouts.first_byte, exchange)
        .await
        .map_err(|_| HttpError::FirstByteTimeout(timeouts.first_byte))??;
    let framing = framing(head_only, status, &headers)?;
    // Kept for the next request once read to the end, unless the server
    // ends it (`Connection: close`, or a body that runs to the close).
    let closes = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
    let reuse = server.filter(|_| !closes && framing != body::Framing::UntilClose);
    let mut response = http::Response::new(ResponseBody {
        conn: Some(conn),
        framing,
        timeout: timeouts.between_bytes,
        sleep: None,
        reuse,
        failed: false,
    });
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

enum Socket {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Socket {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.write_all(bytes).await,
            Socket::Tls(s) => s.write_all(bytes).await,
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.flush().await,
            Socket::Tls(s) => s.flush().await,
        }
    }
}

/// How the request body is framed on the wire.
#[derive(PartialEq)]
enum Upload {
    AsIs,
    Chunked,
}

async fn write_request<B>(
    stream: &mut Socket,
    parts: http::request::Parts,
    authority: &str,
    mut body: B,
    proxy: Option<&connect::Proxy>,
) -> Result<(), HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    if proxy.is_some() {
        // Through a proxy, plain HTTP names the whole URL.
        head.extend_from_slice(b"http://");
        head.extend_from_slice(authority.as_bytes());
    }
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(auth) = proxy.and_then(|p| p.authorization.as_deref()) {
        header_line(&mut head, "proxy-authorization", auth.as_bytes());
    }
    if !parts.headers.contains_key(HOST) {
        header_line(&mut head, HOST.as_str(), authority.as_bytes());
    }
    for (name, value) in &parts.headers {
        // The framing is this client's to choose.
        if name != TRANSFER_ENCODING {
            header_line(&mut head, name.as_str(), value.as_bytes());
        }
    }
    let upload = if parts.headers.contains_key(CONTENT_LENGTH) {
        Upload::AsIs
    } else if let Some(len) = body.size_hint().exact() {
        let sends_body = !matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::CONNECT
        );
        if len > 0 || sends_body {
            header_line(
                &mut head,
                CONTENT_LENGTH.as_str(),
                len.to_string().as_bytes(),
            );
        }
        Upload::AsIs
    } else {
        header_line(&mut head, TRANSFER_ENCODING.as_str(), b"chunked");
        Upload::Chunked
    };
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await.map_err(HttpError::Write)?;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| HttpError::Body(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers are not sent
        };
        if data.is_empty() {
            continue;
        }
        if upload == Upload::Chunked {
            let size = format!("{:x}\r\n", data.len());
            stream
                .write_all(size.as_bytes())
                .await
                .map_err(HttpError::Write)?;
            stream.write_all(&data).await.map_err(HttpError::Write)?;
            stream.write_all(b"\r\n").await.map_err(HttpError::Write)?;
        } else {
            stream.write_all(&data).await.map_err(HttpError::Write)?;
        }
    }
    if upload == Upload::Chunked {
        stream
            .write_all(b"0\r\n\r\n")
            .await
            .map_err(HttpError::Write)?;
    }
    stream.flush().await.map_err(HttpError::Write)
}

fn header_line(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// The socket and what has been read from it but not yet consumed.
struct Conn {
    stream: Socket,
    buf: BytesMut,
}

impl Conn {
    /// Reads more bytes into `buf`; `Ok(0)` at end of stream. A plain socket
    /// is read only once it is readable, so an idle wait allocates nothing.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        #[cfg(test)]
        tests::FILLS.with(|n| n.set(n.get() + 1));
        let len = self.buf.len();
        match &mut self.stream {
            Socket::Plain(s) => loop {
                ready!(s.poll_read_ready(cx))?;
                self.buf.resize(len + READ_CHUNK, 0);
                let read = s.try_read(&mut self.buf[len..]);
                self.buf.truncate(len + *read.as_ref().unwrap_or(&0));
                match read {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    other => return Poll::Ready(other),
                }
            },
            Socket::Tls(s) => {
                self.buf.resize(len + READ_CHUNK, 0);
                let mut target = ReadBuf::new(&mut self.buf[len..]);
                let polled = Pin::new(&mut **s).poll_read(cx, &mut target);
                let n = target.filled().len();
                self.buf.truncate(len + n);
                ready!(polled)?;
                Poll::Ready(Ok(n))
            }
        }
    }
}

/// Reads the response head, skipping interim (1xx) responses.
async fn read_head(conn: &mut Conn) -> Result<(StatusCode, HeaderMap), HttpError> {
    let mut scan = HeadScan::default();
    loop {
        if let Some(head) = head_step(&mut conn.buf, &mut scan)? {
            return Ok(head);
        }
        let n = poll_fn(|cx| conn.poll_fill(cx))
            .await
            .map_err(HttpError::Read)?;
        if n == 0 {
            return Err(HttpError::Incomplete);
        }
    }
}

/// How far a head has been looked at.
#[derive(Default)]
struct HeadScan {
    /// Bytes of the buffer searched for the end of the head.
    scanned: usize,
    /// Its status line is in (and was parsed once).
    status_line: bool,
}

/// The final response head at the front of `buf`, taken off it, once it is
/// all there (interim 1xx heads are taken off and skipped). Each byte is
/// looked at once for the blank line that ends a head (`scan`: how many
/// were), and the head is parsed once that line is there: a server that
/// sends its head a byte at a time costs linear work, not a parse per read
/// (two parses at most: when its status line is in, and at its end).
fn head_step(
    buf: &mut BytesMut,
    scan: &mut HeadScan,
) -> Result<Option<(StatusCode, HeaderMap)>, HttpError> {
    loop {
        // Parsed at the end of the head, and once when the status line is
        // in (garbage is refused then, not after 64 KiB or the deadline).
        let status_line = !scan.status_line && buf[scan.scanned..].contains(&b'\n');
        scan.status_line |= status_line;
        if (status_line || ends_head(buf, scan.scanned))
            && let Some((len, status, headers)) = parse_head(buf)?
        {
            // However the bytes came in: one read or a byte at a time.
            if len > MAX_HEAD_BYTES {
                return Err(HttpError::HeadTooLarge);
            }
            buf.advance(len);
            *scan = HeadScan::default();
            if status.is_informational() {
                if status == StatusCode::SWITCHING_PROTOCOLS {
                    return Err(HttpError::Protocol("unexpected protocol switch".into()));
                }
                continue;
            }
            return Ok(Some((status, headers)));
        }
        scan.scanned = buf.len();
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HttpError::HeadTooLarge);
        }
        return Ok(None);
    }
}

/// A whole response as it arrives in `pieces`, through the same head and
/// body code as [`send`] (for the fuzz target `http_response` and tests):
/// the final status and headers and the body, or the error `send` and its
/// body would give. `head_only`: the answer to a HEAD request.
#[doc(hidden)]
pub fn read_response(
    pieces: &[&[u8]],
    head_only: bool,
    max_body: usize,
) -> Result<(StatusCode, HeaderMap, Vec<u8>), HttpError> {
    let mut buf = BytesMut::new();
    let mut pieces = pieces.iter();
    let mut scan = HeadScan::default();
    let (status, headers) = loop {
        if let Some(head) = head_step(&mut buf, &mut scan)? {
            break head;
        }
        buf.extend_from_slice(pieces.next().ok_or(HttpError::Incomplete)?);
    };
    let mut framing = framing(head_only, status, &headers)?;
    let mut out = Vec::new();
    loop {
        match body::decode(&mut framing, &mut buf)? {
            Some(Some(data)) => {
                if out.len() + data.len() > max_body {
                    return Err(HttpError::TooLarge(max_body as u64));
                }
                out.extend_from_slice(&data);
            }
            Some(None) => return Ok((status, headers, out)),
            None => match pieces.next() {
                Some(piece) => buf.extend_from_slice(piece),
                None if framing == body::Framing::UntilClose => {
                    return Ok((status, headers, out));
                }
                None => return Err(HttpError::Incomplete),
            },
        }
    }
}

type Head = (usize, StatusCode, HeaderMap);

/// Whether `buf` has a blank line (`\n\n` or `\n\r\n`, as httparse ends a
/// head) ending at or after `from`: only the bytes from `from` on are new.
fn ends_head(buf: &[u8], from: usize) -> bool {
    (from..buf.len()).any(|i| {
        buf[i] == b'\n'
            && i >= 1
            && (buf[i - 1] == b'\n' || (i >= 2 && buf[i - 1] == b'\r' && buf[i - 2] == b'\n'))
    })
}

/// A complete head at the start of `buf`, if there is one.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, HttpError> {
    #[cfg(test)]
    tests::PARSES.with(|n| n.set(n.get() + 1));
    if buf.is_empty() {
        return Ok(None);
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadTooLarge),
        Err(e) => return Err(HttpError::Protocol(e.to_string())),
    };
    let status = response
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| HttpError::Protocol("bad status code".into()))?;
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for h in response.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| HttpError::Protocol(format!("bad header name `{}`", h.name)))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| HttpError::Protocol(format!("bad value of header `{}`", h.name)))?;
        headers.append(name, value);
    }
    // HTTP/1.0 closes after each answer unless it says keep-alive: read as
    // saying close, so the connection is never kept for another request.
    let keeps = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("keep-alive"))
        });
    if response.version == Some(0) && !keeps {
        headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(Some((len, status, headers)))
}

#[cfg(test)]
mod tests;
