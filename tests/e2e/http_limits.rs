//! No client holds roostd's connections by being slow in a way the head
//! deadline does not see: an HTTP/2 connection with no open stream is
//! closed after the idle timeout (one that answers every ping too), a
//! request body that trickles in is cut off at its deadline, and one client
//! address holds at most its share of a listener's connections. The
//! controls: an HTTP/2 connection with an open stream stays, a body sent
//! whole is served, another address is served while one is at its share.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::a2a::{JSON, V1, http, message};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// An HTTP/2 connection (prior knowledge) to `addr`: its sender, and its
/// task, which ends when roostd closes it.
async fn h2(
    addr: &str,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 connection");
    (
        send,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

async fn until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_and_streams_are_not() {
    let config =
        format!("{TEST_CONFIG}http: {{max_connections: 8, header_read_timeout_secs: 2}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "sleepy",
        "{task_acceptance: queue, after_task: sleep, concurrency: 2}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");

    // The control: one connection with a stream open (a task that works
    // for a minute, streamed).
    let (mut streaming, streaming_conn) = h2(&addr).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                      "params": {"message": message("h2-sleep", "sleep")}});
    let req = http::Request::post(format!("http://{addr}/a2a/sleepy"))
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let response = streaming.send_request(req).await.expect("the stream");
    assert_eq!(response.status(), 200);
    let mut stream_body = response.into_body();
    // Seven that open and then hold nothing, answering roostd's pings.
    let mut idle = Vec::new();
    for _ in 0..7 {
        idle.push(h2(&addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The listener is full: a ninth connection is closed at once.
    let mut ninth = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(1), ninth.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0) | Err(_))), "full: {closed:?}");
    // The idle ones are closed after the idle timeout (and its grace).
    until(
        "the idle connections closed",
        Duration::from_secs(8),
        || idle.iter().all(|(_, conn)| conn.is_finished()),
    )
    .await;
    // The stream is still open, and its connection takes requests.
    assert!(
        !streaming_conn.is_finished(),
        "a connection with a stream open stays"
    );
    let first = tokio::time::timeout(Duration::from_millis(100), stream_body.frame()).await;
    assert!(
        !matches!(first, Ok(None) | Ok(Some(Err(_)))),
        "the stream is not cut: {first:?}"
    );
    let health = http::Request::get(format!("http://{addr}/healthz"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let answer = streaming
        .send_request(health)
        .await
        .expect("healthz over it");
    assert_eq!(answer.status(), 200);
    // And with the slots free again, a new client is served.
    let (status, _, body) = http(&addr, "GET", "/healthz", &[], "").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_is_cut_off_and_one_address_holds_its_share() {
    let config = format!(
        "{TEST_CONFIG}http: {{max_connections: 8, max_connections_per_client: 2, \
         header_read_timeout_secs: 10, body_read_timeout_secs: 2}}\n"
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "bodies",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");

    // A body that never arrives whole: answered and closed at its deadline.
    let started = Instant::now();
    let mut slow = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    slow.write_all(
        format!(
            "POST /a2a/bodies HTTP/1.1\r\nHost: {addr}\r\nA2A-Version: 1.0\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .expect("a head and a byte");
    let mut said = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(8), slow.read_to_end(&mut said)).await;
    assert!(read.is_ok(), "the connection was not closed");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
    let said = String::from_utf8_lossy(&said);
    assert!(said.starts_with("HTTP/1.1 4"), "{said}");
    // The control: the same request sent whole is served.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": {"message": message("whole", "hello")}});
    let (status, _, reply) =
        http(&addr, "POST", "/a2a/bodies", &[V1, JSON], &body.to_string()).await;
    assert_eq!(status, 200, "{reply}");

    // One address at its share: its third connection is closed at once,
    // and the log says why; another address is served meanwhile.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .expect("half a head");
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let closed = tokio::time::timeout(Duration::from_secs(1), third.read(&mut [0u8; 16])).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "past its share: {closed:?}"
    );
    assert!(
        daemon.log().contains("per-client connection limit reached"),
        "{}",
        daemon.log()
    );
    let other = tokio::net::TcpSocket::new_v4().expect("socket");
    other
        .bind("127.0.0.2:0".parse().expect("addr"))
        .expect("bind 127.0.0.2");
    let mut other = other
        .connect(addr.parse().expect("addr"))
        .await
        .expect("connect");
    other
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("request");
    let mut answer = Vec::new();
    other.read_to_end(&mut answer).await.expect("answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    drop(held);
}
