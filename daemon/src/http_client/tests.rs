//! Unit tests of `http_client.rs`.

use super::*;
use std::sync::Arc;

use http_body_util::{Empty, Full, StreamBody};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

thread_local! {
    /// Heads parsed and socket reads made on this thread (the client's, in
    /// a current-thread test).
    pub(super) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(super) static FILLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

const SECS: Duration = Duration::from_secs(5);
const TIMEOUTS: Timeouts = Timeouts {
    connect: SECS,
    first_byte: SECS,
    between_bytes: SECS,
};

/// A one-connection server: reads the request (head and, if it has a
/// length or is chunked, the body), sends `parts` with a pause between
/// them, then closes. Yields the raw request it read.
async fn serve(parts: Vec<&'static [u8]>) -> (String, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = socket.read(&mut chunk).await.expect("read");
            seen.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&seen).to_string();
            let Some(end) = text.find("\r\n\r\n") else {
                assert!(n > 0, "request head incomplete: {text:?}");
                continue;
            };
            let head = text[..end].to_ascii_lowercase();
            let body = &text[end + 4..];
            let done = if let Some(l) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                body.len() >= l.trim().parse::<usize>().expect("length")
            } else if head.contains("transfer-encoding: chunked") {
                body.ends_with("0\r\n\r\n")
            } else {
                true
            };
            if done || n == 0 {
                break;
            }
        }
        for part in parts {
            socket.write_all(part).await.expect("write");
            socket.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seen
    });
    (url, task)
}

fn get(url: &str) -> http::Request<Empty<Bytes>> {
    http::Request::get(format!("{url}/path?q=1"))
        .body(Empty::new())
        .expect("request")
}

async fn body_of(response: http::Response<ResponseBody>) -> Result<Vec<u8>, HttpError> {
    let mut body = response.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        out.extend_from_slice(&frame?.into_data().unwrap_or_default());
    }
    assert!(body.is_end_stream());
    Ok(out)
}

#[tokio::test]
async fn a_chunked_body_split_across_reads_is_decoded_and_trailers_skipped() {
    let (url, peer) = serve(vec![
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5;ext=1\r\nhel",
        b"lo\r\n",
        b"7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n",
    ])
    .await;
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-a"], "1");
    assert_eq!(body_of(response).await.expect("body"), b"hello, world");
    let request = String::from_utf8(peer.await.expect("server")).expect("utf8");
    assert!(
        request.starts_with("GET /path?q=1 HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("host: 127.0.0.1:"), "{request}");
    assert!(!request.contains("content-length"), "{request}");
}

#[tokio::test]
async fn a_length_body_ends_at_its_length_and_a_short_one_is_incomplete() {
    let (url, _server) = serve(vec![
        b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nab",
        b"cdEXTRA",
    ])
    .await;
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(body_of(response).await.expect("body"), b"abcd");

    let (url, _server) = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"]).await;
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    assert!(matches!(
        body_of(response).await,
        Err(HttpError::Incomplete)
    ));
}

#[tokio::test]
async fn a_body_without_framing_runs_until_close_and_head_has_none() {
    let (url, _server) = serve(vec![b"HTTP/1.1 200 OK\r\n\r\nall ", b"of it"]).await;
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    assert_eq!(body_of(response).await.expect("body"), b"all of it");

    let (url, _server) = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"]).await;
    let head = http::Request::head(&url)
        .body(Empty::<Bytes>::new())
        .expect("request");
    let response = send(head, TIMEOUTS).await.expect("send");
    assert_eq!(body_of(response).await.expect("body"), b"");
}

#[tokio::test]
async fn a_streamed_request_body_is_sent_chunked_and_a_sized_one_with_its_length() {
    let (url, peer) = serve(vec![b"HTTP/1.1 204 No Content\r\n\r\n"]).await;
    let frames = futures::stream::iter([
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"abc"))),
        Ok(Frame::data(Bytes::from_static(b"defghijklmnopq"))),
    ]);
    let request = http::Request::post(&url)
        .body(StreamBody::new(frames))
        .expect("request");
    let response = send(request, TIMEOUTS).await.expect("send");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let request = String::from_utf8(peer.await.expect("server")).expect("utf8");
    assert!(
        request.contains("transfer-encoding: chunked\r\n"),
        "{request}"
    );
    assert!(
        request.ends_with("\r\n\r\n3\r\nabc\r\ne\r\ndefghijklmnopq\r\n0\r\n\r\n"),
        "{request}"
    );

    let (url, peer) = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]).await;
    let request = http::Request::post(&url)
        .body(Full::new(Bytes::from_static(b"{\"a\":1}")))
        .expect("request");
    send(request, TIMEOUTS).await.expect("send");
    let request = String::from_utf8(peer.await.expect("server")).expect("utf8");
    assert!(
        request.ends_with("content-length: 7\r\n\r\n{\"a\":1}"),
        "{request}"
    );
}

#[tokio::test]
async fn malformed_heads_and_chunks_are_errors_that_say_so() {
    let (url, _server) = serve(vec![b"HTTP/1.1 2000 What\r\n\r\n"]).await;
    let err = send(get(&url), TIMEOUTS).await.expect_err("bad status");
    assert!(matches!(err, HttpError::Protocol(_)), "{err}");

    let (url, _server) = serve(vec![
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ])
    .await;
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    let err = body_of(response).await.expect_err("bad chunk");
    assert_eq!(err.to_string(), "malformed response: bad chunk size");

    let (url, _server) = serve(vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ])
    .await;
    let err = send(get(&url), TIMEOUTS).await.expect_err("conflict");
    assert!(
        err.to_string().contains("conflicting Content-Length"),
        "{err}"
    );

    let (url, _server) = serve(vec![b"HTTP/1.1 200 OK\r\n"]).await;
    let err = send(get(&url), TIMEOUTS).await.expect_err("cut head");
    assert!(matches!(err, HttpError::Incomplete), "{err}");
}

#[tokio::test]
async fn a_silent_server_trips_the_first_byte_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let held = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
    let quick = Timeouts {
        first_byte: Duration::from_millis(200),
        ..TIMEOUTS
    };
    let err = send(get(&url), quick).await.expect_err("timeout");
    assert!(matches!(err, HttpError::FirstByteTimeout(_)), "{err}");
    held.abort();
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_parsed_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let mut head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".to_vec();
    for i in 0..100 {
        head.extend_from_slice(format!("x-filler-{i}: {}\r\n", "v".repeat(60)).as_bytes());
    }
    head.extend_from_slice(b"\r\nok");
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut request = vec![0u8; 4096];
        let _ = socket.read(&mut request).await.expect("read");
        socket.set_nodelay(true).expect("nodelay");
        for byte in head {
            socket.write_all(&[byte]).await.expect("write");
            tokio::task::yield_now().await;
        }
    });
    PARSES.with(|n| n.set(0));
    FILLS.with(|n| n.set(0));
    let response = send(get(&url), TIMEOUTS).await.expect("send");
    let (parses, fills) = (PARSES.with(|n| n.get()), FILLS.with(|n| n.get()));
    assert_eq!(response.headers().len(), 101);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(&body[..], b"ok");
    // The control: the head did come in many reads (each of which used to
    // parse the whole head so far).
    assert!(fills > 100, "only {fills} reads: the drip did not happen");
    assert!(parses <= 2, "{parses} parses for {fills} reads");
    server.await.expect("server");
}

#[test]
fn a_large_download_gets_a_deadline_to_match() {
    assert_eq!(deadline_for(1 << 20), TIMEOUT + Duration::from_secs(2));
    assert_eq!(
        deadline_for(1 << 30),
        TIMEOUT + Duration::from_secs(2048),
        "1 GiB at 512 KiB/s"
    );
    assert!(ends_head(b"HTTP/1.1 200 OK\r\n\r\n", 0));
    assert!(ends_head(b"HTTP/1.1 200 OK\n\n", 0));
    assert!(ends_head(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n", 20));
    assert!(!ends_head(b"HTTP/1.1 200 OK\r\nA: b\r\n", 0));
    assert!(!ends_head(b"HTTP/1.1 200 OK\r\n\r\n", 19), "nothing new");
}

#[test]
fn limits_hold_however_the_bytes_are_split() {
    let mut big_head = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..100 {
        big_head.extend_from_slice(format!("x-{i}: {}\r\n", "v".repeat(700)).as_bytes());
    }
    big_head.extend_from_slice(b"content-length: 0\r\n\r\n");
    assert!(big_head.len() > MAX_HEAD_BYTES);
    let long_line = format!(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;{}\r\nhello\r\n0\r\n\r\n",
        "e".repeat(MAX_LINE + 10)
    );
    for (response, want) in [
        (big_head.clone(), "larger than"),
        (long_line.into_bytes(), "chunk line too long"),
    ] {
        let whole = read_response(&[&response], false, 1 << 20).expect_err("refused");
        let drip: Vec<&[u8]> = response.chunks(1).collect();
        let dripped = read_response(&drip, false, 1 << 20).expect_err("refused");
        assert!(whole.to_string().contains(want), "{whole}");
        assert_eq!(whole.to_string(), dripped.to_string());
    }
    let ok = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let whole = read_response(&[ok], false, 16).expect("whole");
    let drip: Vec<&[u8]> = ok.chunks(1).collect();
    assert_eq!(read_response(&drip, false, 16).expect("dripped").2, whole.2);
    assert_eq!(whole.2, b"abc");
    assert!(matches!(
        read_response(&[ok], false, 2),
        Err(HttpError::TooLarge(2))
    ));
}

#[test]
fn a_garbage_status_line_is_refused_as_soon_as_it_is_in() {
    // Found by the fuzz target `http_response`: a head that never ends was
    // refused in one read and waited on to the end when dripped.
    let found: &[u8] = b"\n\r\nHTTP/1.1 103 Early\0HTTP/1 Hints\r.0 \nl";
    let drip: Vec<&[u8]> = found.chunks(1).collect();
    assert!(read_response(&[found], false, 1024).is_err());
    assert!(read_response(&drip, false, 1024).is_err());
    // Garbage then silence: refused when its first line is in, not after
    // 64 KiB or the deadline.
    let garbage: &[u8] = b"SSH-2.0-OpenSSH_9.6\r\n";
    let mut buf = BytesMut::from(garbage);
    let err = head_step(&mut buf, &mut HeadScan::default()).expect_err("refused");
    assert!(err.to_string().contains("malformed"), "{err}");
}

/// How a test server answers each request on a connection.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    KeepAlive,
    /// `Connection: close`, then closed.
    Close,
    /// HTTP/1.0 without `keep-alive` (so it closes), closed a moment later.
    Http10,
}

/// A keep-alive server: answers each request on a connection with `ok`
/// as `how` says, counting the connections.
async fn keep_alive(how: Answer) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&chunk[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let answer = match how {
                            Answer::Close => {
                                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                            }
                            Answer::KeepAlive => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                            Answer::Http10 => "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        };
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        match how {
                            Answer::KeepAlive => {}
                            Answer::Close => return,
                            Answer::Http10 => {
                                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn a_connection_read_to_the_end_serves_the_next_request_to_its_server() {
    use std::sync::atomic::Ordering;
    let (url, accepted) = keep_alive(Answer::KeepAlive).await;
    for _ in 0..3 {
        let reply = exchange(Method::GET, &format!("{url}/"), &[], Vec::new(), 1024)
            .await
            .expect("answered");
        assert_eq!(reply.body, b"ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection, reused");
    // A response cut short (its body not read) gives nothing back.
    let response = send(get(&url), TIMEOUTS).await.expect("head");
    drop(response);
    let reply = exchange(Method::GET, &format!("{url}/"), &[], Vec::new(), 1024)
        .await
        .expect("answered");
    assert_eq!(reply.body, b"ok");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the unread one was not kept"
    );

    // `Connection: close`: never kept.
    let (url, accepted) = keep_alive(Answer::Close).await;
    for _ in 0..2 {
        exchange(Method::GET, &format!("{url}/"), &[], Vec::new(), 1024)
            .await
            .expect("answered");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    let server = pool::Server {
        tls: false,
        host: "127.0.0.1".into(),
        port: url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port"),
        identity: 0,
    };
    assert_eq!(pool::idle(&server), 0);

    // HTTP/1.0 without keep-alive closes after its answer, if not at once:
    // never kept (a second request on it would meet the close).
    let (url, accepted) = keep_alive(Answer::Http10).await;
    for _ in 0..3 {
        let reply = exchange(Method::GET, &format!("{url}/"), &[], Vec::new(), 1024)
            .await
            .expect("answered");
        assert_eq!(reply.body, b"ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3, "a connection each");
}
