//! One POST over wasi:http, and reading its response body as it arrives.

use std::ops::ControlFlow;

use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, IncomingResponse, Method, OutgoingBody,
    OutgoingRequest, RequestOptions, Scheme, http_error_code,
};
use wasi::io::streams::StreamError;

const SECOND_NS: u64 = 1_000_000_000;
/// `blocking-write-and-flush` takes at most this many bytes at a time.
const WRITE_CHUNK: usize = 4096;
const READ_CHUNK: u64 = 64 * 1024;

/// The request parts of an absolute `http://` or `https://` URL.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: String,
}

fn split_url(url: &str) -> Result<Target<'_>, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("inference endpoint {url} is not an absolute URL"))?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        other => {
            return Err(format!(
                "inference endpoint {url} has scheme `{other}`: use http or https"
            ));
        }
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err(format!("inference endpoint {url} has no host"));
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path_with_query = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok(Target {
        https,
        authority,
        path_with_query,
    })
}

/// POSTs `body` to `url`; the response once its head has arrived.
pub fn post(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<IncomingResponse, String> {
    let request = outgoing_request(url, headers, body.len())?;
    let outgoing = request
        .body()
        .map_err(|()| "cannot open the request body".to_string())?;
    let future = outgoing_handler::handle(request, Some(options()))
        .map_err(|code| unreachable_message(url, &code))?;
    let sent = send_body(outgoing, body, url);
    // A refused request also breaks the body stream: the response says why.
    let response = wait_for(&future, url)?;
    sent.map(|()| response)
}

/// The request's head: `headers`, and the body's length (a strict HTTP/1.1
/// server — Python's `http.server`, many proxies — does not read a chunked
/// request body).
fn outgoing_request(
    url: &str,
    headers: &[(String, String)],
    body_len: usize,
) -> Result<OutgoingRequest, String> {
    let target = split_url(url)?;
    let fields = Fields::new();
    fields
        .append("content-length", body_len.to_string().as_bytes())
        .map_err(|e| format!("request header `content-length` was refused: {e:?}"))?;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        // Never show the value: it may be the API key.
        fields
            .append(name, value.as_bytes())
            .map_err(|e| format!("request header `{name}` was refused: {e:?}"))?;
    }
    let request = OutgoingRequest::new(fields);
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    if request.set_method(&Method::Post).is_err()
        || request.set_scheme(Some(&scheme)).is_err()
        || request.set_authority(Some(target.authority)).is_err()
        || request
            .set_path_with_query(Some(&target.path_with_query))
            .is_err()
    {
        return Err(format!(
            "inference endpoint {url} is not a valid request URL"
        ));
    }
    Ok(request)
}

/// Timeouts, best effort: a host may not support them.
fn options() -> RequestOptions {
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(30 * SECOND_NS));
    let _ = options.set_first_byte_timeout(Some(300 * SECOND_NS));
    let _ = options.set_between_bytes_timeout(Some(300 * SECOND_NS));
    options
}

fn send_body(outgoing: OutgoingBody, body: &[u8], url: &str) -> Result<(), String> {
    let stream = outgoing
        .write()
        .map_err(|()| "cannot write the request body".to_string())?;
    for chunk in body.chunks(WRITE_CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| stream_message(url, e, "sending the request to"))?;
    }
    drop(stream);
    OutgoingBody::finish(outgoing, None).map_err(|code| unreachable_message(url, &code))
}

fn wait_for(future: &FutureIncomingResponse, url: &str) -> Result<IncomingResponse, String> {
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => Ok(response),
        Some(Ok(Err(code))) => Err(unreachable_message(url, &code)),
        Some(Err(())) => Err(format!("the response from {url} was already taken")),
        None => Err(format!("the response from {url} is not ready")),
    }
}

/// Whether the response says it is one JSON document (not an event stream).
pub fn is_json(response: &IncomingResponse) -> bool {
    response
        .headers()
        .get("content-type")
        .first()
        .is_some_and(|value| {
            String::from_utf8_lossy(value)
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
}

/// Hands the body to `sink` as it arrives, until it ends or `sink` breaks.
pub fn read_body(
    response: IncomingResponse,
    url: &str,
    mut sink: impl FnMut(&[u8]) -> Result<ControlFlow<()>, String>,
) -> Result<(), String> {
    let body = response
        .consume()
        .map_err(|()| format!("the body from {url} was already taken"))?;
    let stream = body
        .stream()
        .map_err(|()| format!("the body from {url} was already taken"))?;
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(bytes) => {
                if sink(&bytes)?.is_break() {
                    break;
                }
            }
            Err(StreamError::Closed) => break,
            Err(e) => return Err(stream_message(url, e, "reading the answer from")),
        }
    }
    Ok(())
}

/// The body, or its first `limit` bytes.
pub fn read_to_end(response: IncomingResponse, url: &str, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    read_body(response, url, |bytes| {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(if body.len() >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    Ok(body)
}

/// Why `url` could not be asked at all.
fn unreachable_message(url: &str, code: &ErrorCode) -> String {
    match code {
        ErrorCode::HttpRequestDenied => format!(
            "request to {url} denied by capabilities.network.allow: allow the inference endpoint"
        ),
        other => format!("cannot reach {url}: {other:?}"),
    }
}

fn stream_message(url: &str, error: StreamError, doing: &str) -> String {
    match error {
        StreamError::Closed => format!("{doing} {url} failed: the connection was closed"),
        StreamError::LastOperationFailed(e) => match http_error_code(&e) {
            Some(ErrorCode::HttpRequestDenied) => {
                unreachable_message(url, &ErrorCode::HttpRequestDenied)
            }
            Some(code) => format!("{doing} {url} failed: {code:?}"),
            None => format!("{doing} {url} failed: {}", e.to_debug_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_request_parts() {
        assert_eq!(
            split_url("http://127.0.0.1:11434/v1/chat/completions"),
            Ok(Target {
                https: false,
                authority: "127.0.0.1:11434",
                path_with_query: "/v1/chat/completions".into(),
            })
        );
        assert_eq!(
            split_url("HTTPS://api.example.com?x=1#frag"),
            Ok(Target {
                https: true,
                authority: "api.example.com",
                path_with_query: "/?x=1".into(),
            })
        );
        assert!(split_url("ftp://x/y").is_err());
        assert!(split_url("localhost:8080/v1").is_err());
        assert!(split_url("http:///v1").is_err());
    }
}
