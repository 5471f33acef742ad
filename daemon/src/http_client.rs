//! roostd's one outgoing HTTP/1.1 client (plain `http://`): registry fetches
//! and A2A messages to peers. Bounded bodies, one deadline per exchange.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

/// One exchange may take at most this long.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// What an exchange returned.
pub struct Reply {
    pub status: http::StatusCode,
    pub body: Vec<u8>,
}

/// Sends one request to `url` (`http://` only) and reads at most `max_bytes`
/// of the answer. The error says what went wrong, without the URL.
pub async fn exchange(
    method: http::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    max_bytes: u64,
) -> Result<Reply, String> {
    let uri: http::Uri = url.parse().map_err(|_| "not a valid URL".to_string())?;
    if uri.scheme_str() != Some("http") {
        return Err("only http:// URLs are supported (roostd has no TLS client)".into());
    }
    let authority = uri.authority().ok_or("the URL has no host")?.clone();
    let host = authority.host().trim_matches(['[', ']']).to_string();
    let port = authority.port_u16().unwrap_or(80);
    let exchange = async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = http::Request::builder()
            .method(method)
            .uri(target)
            .header(http::header::HOST, authority.as_str())
            .header(http::header::USER_AGENT, "roostd");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(bytes::Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let limit = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| format!("body over {max_bytes} bytes or unreadable: {e}"))?;
        Ok(Reply {
            status,
            body: body.to_bytes().to_vec(),
        })
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {}s", TIMEOUT.as_secs()))?
}
