//! The ITK agent capsule (`examples/itk-agent`), end to end on roostd: the
//! A2A Integration Test Kit's nested `Instruction`s (protobuf, written here
//! by the field numbers of the ITK's `protos/instruction.proto`) followed
//! through a chain of roostd-hosted agents over each transport, streaming,
//! with a push config, and with the resubscribe behaviour (a held task, a
//! disconnect, a new subscription, a cancel). The ITK's own runner and
//! reference agents are `scripts/itk`'s (docs/a2a.md, "The A2A ITK").

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::a2a::rpc;
use crate::harness::{Daemon, TEST_CONFIG, itk_agent, request};

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(field: u64, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(field << 3 | 2, &mut out);
    varint(b.len() as u64, &mut out);
    out.extend_from_slice(b);
    out
}

fn flag(field: u64, on: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if on {
        varint(field << 3, &mut out);
        out.push(1);
    }
    out
}

/// `Instruction { return_response { response, hold_task } }`.
fn respond(response: &str, hold: bool) -> Vec<u8> {
    bytes(2, &[bytes(1, response.as_bytes()), flag(2, hold)].concat())
}

/// `Instruction { steps { instructions } }`.
fn steps(all: &[Vec<u8>]) -> Vec<u8> {
    bytes(
        3,
        &all.iter().map(|i| bytes(1, i)).collect::<Vec<_>>().concat(),
    )
}

/// `Instruction { call_agent { … } }`; `behavior`: 5 send_message, 6
/// push_notification (with `push_url`), 7 resubscribe.
fn call(
    transport: &str,
    card: &str,
    then: &[u8],
    streaming: bool,
    behavior: u64,
    push_url: &str,
) -> Vec<u8> {
    let behavior = if behavior == 6 {
        bytes(6, &bytes(1, push_url.as_bytes()))
    } else {
        bytes(behavior, &[])
    };
    let c = [
        bytes(1, transport.as_bytes()),
        bytes(2, card.as_bytes()),
        bytes(3, then),
        flag(4, streaming),
        behavior,
    ]
    .concat();
    bytes(1, &c)
}

/// The agent `route`'s answer to an instruction, sent as the ITK's runner
/// sends it (a raw part of type application/x-protobuf).
async fn run(addr: &str, route: &str, instruction: &[u8]) -> Value {
    let raw = base64::engine::general_purpose::STANDARD.encode(instruction);
    let message = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
        "parts": [{"raw": raw, "mediaType": "application/x-protobuf", "filename": "instruction.bin"}]});
    rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message}),
    )
    .await["result"]["task"]
        .clone()
}

fn said(task: &Value) -> String {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn itk_daemon() -> (Daemon, String) {
    let config = format!("{TEST_CONFIG}a2a: {{push: {{allow: [127.0.0.1]}}}}\n");
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    for name in ["itk-a", "itk-b"] {
        let dir = itk_agent(daemon.root.path(), name);
        daemon
            .client
            .start(&request(&dir))
            .await
            .unwrap_or_else(|e| panic!("start {name}: {e}\n{}", daemon.log()));
    }
    (daemon, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_itk_traversal_goes_through_roostd_agents_on_every_transport() {
    let (daemon, addr) = itk_daemon().await;
    let card = |route: &str| format!("http://{addr}/a2a/{route}");
    for transport in ["JSONRPC", "HTTP+JSON", "GRPC"] {
        for streaming in [false, true] {
            // a -> b -> a: roostd's agent first, in the middle and last.
            let inner = steps(&[
                call(
                    transport,
                    &card("itk-a"),
                    &respond("a-last", false),
                    streaming,
                    5,
                    "",
                ),
                respond("b-middle", false),
            ]);
            let outer = steps(&[
                call(transport, &card("itk-b"), &inner, streaming, 5, ""),
                respond("a-first", false),
            ]);
            let task = run(&addr, "itk-a", &outer).await;
            let what = format!(
                "{transport} streaming={streaming}: {task}\n{}",
                daemon.log()
            );
            assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{what}");
            assert_eq!(said(&task), "a-last\nb-middle\na-first", "{what}");
        }
    }
    // Not an instruction: the task fails, saying so.
    let task = run(&addr, "itk-a", b"\xff\xff").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert!(said(&task).contains("instruction"), "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_task_is_subscribed_to_again_and_canceled() {
    let (daemon, addr) = itk_daemon().await;
    let held = call(
        "JSONRPC",
        &format!("http://{addr}/a2a/itk-b"),
        &respond("b-held", true),
        true,
        7,
        "",
    );
    let task = run(&addr, "itk-a", &steps(&[held, respond("a-done", false)])).await;
    let what = format!("{task}\n{}", daemon.log());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{what}");
    assert_eq!(said(&task), "b-held\n\na-done", "{what}");
    // b's held task was canceled once its answer was read.
    let listed = rpc(&addr, "itk-b", Some("1.0"), "ListTasks", json!({})).await;
    let states: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["status"]["state"].as_str())
        .collect();
    assert_eq!(states, ["TASK_STATE_CANCELED"], "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_config_goes_to_the_called_agent_and_its_updates_arrive() {
    let (daemon, addr) = itk_daemon().await;
    // The ITK's notification server, as a receiver of our own.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Value)>();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut raw = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    raw.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&raw).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if body.len() >= len {
                            let _ = s
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                                .await;
                            let _ = tx.send((
                                head.to_string(),
                                serde_json::from_str(body).unwrap_or(Value::Null),
                            ));
                            break;
                        }
                    }
                }
            });
        }
    });
    let pushed = call(
        "JSONRPC",
        &format!("http://{addr}/a2a/itk-b"),
        &respond("b-push", false),
        false,
        6,
        &format!("127.0.0.1:{port}"),
    );
    let task = run(&addr, "itk-a", &pushed).await;
    assert_eq!(said(&task), "b-push", "{task}\n{}", daemon.log());
    // b's updates reach the receiver at /notifications with the token, the
    // last saying b-push.
    let mut last = Value::Null;
    while last["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED" {
        let (head, body) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("a notification in time")
            .expect("the receiver runs");
        assert!(head.starts_with("POST /notifications "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("x-a2a-notification-token: itk-token"),
            "{head}"
        );
        last = body;
    }
    assert_eq!(
        last["statusUpdate"]["status"]["message"]["parts"][0]["text"], "b-push",
        "{last}"
    );
}
