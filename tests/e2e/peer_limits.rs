//! What a peer sends during a call is bounded the same way for every version
//! of `murmur:peer/call`: a peer that streams artifact after artifact of a
//! megabyte each, under new ids, ends the call with an error naming the
//! limit while roostd's memory stays flat, and a peer that streams thousands
//! of small chunks reaches the caller's task as a few status messages a
//! second. The controls: a peer that streams a few artifacts is answered
//! whole, and every chunk of the chatty peer reaches the answer.

use std::time::Instant;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};

use crate::a2a_peer2::{relay_at, said};
use crate::a2a_peers::call;
use crate::harness::{Daemon, TEST_CONFIG, capsule, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep, concurrency: 4}";
/// Each of the flood's artifacts, a little under a peer's largest event.
const BIG: usize = (1 << 20) - 4096;
const FLOOD: usize = 400;
const CHATTY: usize = 3000;

fn event(result: Value) -> Bytes {
    Bytes::from(format!(
        "data: {}\n\n",
        json!({"jsonrpc": "2.0", "id": 1, "result": result})
    ))
}

fn artifact(id: &str, text: &str, append: bool) -> Bytes {
    event(
        json!({"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "append": append,
        "artifact": {"artifactId": id, "parts": [{"text": text}]}}}),
    )
}

/// A peer that answers every message with a stream: `/big`, [`FLOOD`]
/// artifacts of [`BIG`] bytes under new ids; `/chatty`, [`CHATTY`] small
/// appends to one; `/few`, three small artifacts. Each ends completed.
async fn hostile_peer() -> u16 {
    let stream = |kind: &'static str| {
        let start = event(json!({"task": {"id": "t-1", "contextId": "c-1",
            "status": {"state": "TASK_STATE_WORKING"}}}));
        let end = event(json!({"statusUpdate": {"taskId": "t-1", "contextId": "c-1",
            "status": {"state": "TASK_STATE_COMPLETED"}}}));
        let body: Box<dyn Iterator<Item = Bytes> + Send> = match kind {
            "big" => {
                Box::new((0..FLOOD).map(|i| artifact(&format!("a{i}"), &"x".repeat(BIG), false)))
            }
            "chatty" => Box::new((0..CHATTY).map(|i| artifact("answer", &format!("c{i} "), i > 0))),
            _ => Box::new((0..3).map(|i| artifact(&format!("f{i}"), &format!("few{i} "), false))),
        };
        let all = std::iter::once(start)
            .chain(body)
            .chain(std::iter::once(end))
            .map(Ok::<_, std::convert::Infallible>);
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures::stream::iter(all)))
            .expect("response")
    };
    // Each handler reads the request first: a server that answers without
    // reading it closes with the body unread, and the kernel's reset can
    // take the answer with it (a flake the clean-clone CI met).
    let app = axum::Router::new()
        .route(
            "/big",
            axum::routing::post(move |_asked: axum::body::Bytes| async move { stream("big") }),
        )
        .route(
            "/chatty",
            axum::routing::post(move |_asked: axum::body::Bytes| async move { stream("chatty") }),
        )
        .route(
            "/few",
            axum::routing::post(move |_asked: axum::body::Bytes| async move { stream("few") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// roostd's peak resident set since the last reset, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM")
}

fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_peer_streams_is_bounded_for_every_version_of_call() {
    let port = hostile_peer().await;
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let allow = format!("capabilities: {{network: {{allow: [\"http://127.0.0.1:{port}\"]}}}}\n");
    for (name, guest) in [("caller", "caller"), ("relay", "relay")] {
        let dir = capsule(
            daemon.root.path(),
            name,
            guest,
            &format!("lifecycle: {SERVE}\n{allow}"),
        );
        daemon.client.start(&request(&dir)).await.expect("start");
    }
    let peer = format!("http://127.0.0.1:{port}");
    // The controls first (they warm roostd up): a few artifacts, whole.
    let (state, answer, _) = call(&addr, "few-1", &format!("{peer}/few 60 go")).await;
    assert_eq!(
        (state.as_str(), answer.as_str()),
        ("TASK_STATE_COMPLETED", "completed: few0 few1 few2 ")
    );
    let task = relay_at(
        &addr,
        "relay",
        &format!(
            "url={peer}/few\nendpoint=true\nbinding=jsonrpc\nversion=1.0\nstreaming=true\ntext=go"
        ),
        &[],
    )
    .await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");

    // The flood, through each version: the call ends naming the limit, and
    // roostd's peak memory stays well under what the flood sent.
    let pid = daemon.pid();
    reset_peak(pid);
    let before = peak_kib(pid);
    let (state, answer, _) = call(&addr, "big-1", &format!("{peer}/big 60 go")).await;
    assert_eq!(state, "TASK_STATE_FAILED", "{answer}");
    assert!(answer.contains("grew past 4 MiB"), "{answer}");
    let task = relay_at(
        &addr,
        "relay",
        &format!(
            "url={peer}/big\nendpoint=true\nbinding=jsonrpc\nversion=1.0\nstreaming=true\ntext=go"
        ),
        &[],
    )
    .await;
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(said(&task).contains("grew past 4 MiB"), "{task}");
    let grew = peak_kib(pid).saturating_sub(before);
    eprintln!("roostd's peak grew {grew} KiB while {FLOOD} artifacts of {BIG} bytes came, twice");
    assert!(
        grew < 64 << 10,
        "roostd held what the peer flooded: +{grew} KiB"
    );

    // Thousands of chunks: every one reaches the answer, a few status
    // messages a second reach the caller's task.
    let started = Instant::now();
    let (state, answer, shown) = call(&addr, "chatty-1", &format!("{peer}/chatty 60 go")).await;
    let took = started.elapsed();
    assert_eq!(state, "TASK_STATE_COMPLETED", "{answer}");
    let whole: String = (0..CHATTY).map(|i| format!("c{i} ")).collect();
    assert_eq!(answer, format!("completed: {whole}"));
    let most = (took.as_millis() / 100) as usize + 2;
    assert!(
        shown.len() <= most,
        "{} status messages stored in {took:?} (at most {most})",
        shown.len()
    );
    assert_eq!(
        shown.concat(),
        whole,
        "the text passed on is all there, joined"
    );
}
