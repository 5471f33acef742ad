//! One request whose whole answer is wanted in memory (a card, a registry
//! index, a peer's JSON-RPC answer): sent with [`super::send`], read to at
//! most a given size, under a deadline that grows with that size.

use bytes::Bytes;
use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};

use super::{ClientTls, HttpError, TIMEOUT, Timeouts, send};

/// What an `exchange` returned.
pub struct HttpReply {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

/// Sends one request to `url` (`http://` or `https://`) and reads at most
/// `max_bytes` of the answer. The error says what went wrong, without the URL.
pub async fn exchange(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    max_bytes: u64,
) -> Result<HttpReply, HttpError> {
    exchange_as(method, url, headers, body, max_bytes, None).await
}

/// [`exchange`] with a peer's TLS settings (`identity`).
pub async fn exchange_as(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    max_bytes: u64,
    identity: Option<&ClientTls>,
) -> Result<HttpReply, HttpError> {
    let uri: http::Uri = url.parse().map_err(|_| HttpError::Uri("cannot parse it"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(HttpError::NotHttp);
    }
    let mut request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::USER_AGENT, "roostd");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(identity) = identity {
        request = request.extension(identity.clone());
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(HttpError::Request)?;
    let exchange = async {
        let timeouts = Timeouts {
            connect: TIMEOUT,
            first_byte: TIMEOUT,
            between_bytes: TIMEOUT,
        };
        let response = send(request, timeouts).await?;
        let status = response.status();
        let mut body = response.into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            if let Ok(data) = frame.into_data() {
                if (out.len() + data.len()) as u64 > max_bytes {
                    return Err(HttpError::TooLarge(max_bytes));
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(HttpReply { status, body: out })
    };
    let deadline = deadline_for(max_bytes);
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| HttpError::Timeout(deadline))?
}

/// The slowest transfer an `exchange` waits for to the end: a deadline of
/// [`TIMEOUT`] plus the time `max_bytes` take at this rate (besides the
/// [`TIMEOUT`] between any two reads).
const MIN_RATE: u64 = 512 * 1024;

/// How long an `exchange` reading at most `max_bytes` may take in all: a
/// 1 GiB bundle gets 35 minutes, a 1 MiB answer 32 s.
pub fn deadline_for(max_bytes: u64) -> Duration {
    TIMEOUT + Duration::from_secs(max_bytes / MIN_RATE)
}
