//! Every part in, every part out (`murmur:a2a@0.2.0`), end to end: the
//! `parts` test capsule gets text, bytes, a URL and JSON data with their
//! media types, filenames and metadata, and answers with them as a final
//! status message, an artifact, both, a message reply, or a working status
//! while it holds the task; on JSON-RPC (1.0 and 0.3), HTTP+JSON and gRPC. A
//! 0.1.0 capsule sent the same message gets it as text, as before.

use base64::Engine as _;
use prost::Message as _;
use roostd::a2a::grpc::pb;
use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, rpc};
use crate::a2a_grpc::{call, frame};
use crate::harness::{Daemon, TEST_CONFIG, capsule, conformance, request};

const SERVE: &str = "lifecycle: {task_acceptance: queue, after_task: sleep, concurrency: 4}\n";
const BYTES: &[u8] = b"\x00\x01\x02instruction\xff";

/// The parts every test sends after its command: bytes, a URL, data, each
/// with what describes it (1.0 ProtoJSON).
fn payload() -> Vec<Value> {
    vec![
        json!({
            "raw": base64::engine::general_purpose::STANDARD.encode(BYTES),
            "mediaType": "application/x-protobuf",
            "filename": "instruction.bin",
            "metadata": {"hop": 1.5},
        }),
        json!({"url": "https://example.test/a.png", "mediaType": "image/png", "filename": "a.png"}),
        json!({"data": {"k": [1.5, 2.5]}, "metadata": {"note": "json"}}),
    ]
}

fn message(id: &str, command: &str) -> Value {
    let mut parts = vec![json!({"text": command})];
    parts.extend(payload());
    json!({"messageId": id, "role": "ROLE_USER", "parts": parts})
}

async fn daemon() -> (Daemon, String) {
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = capsule(daemon.root.path(), "parts", "parts", SERVE);
    daemon
        .client
        .start(&request(&dir))
        .await
        .unwrap_or_else(|e| panic!("start parts: {e}\n{}", daemon.log()));
    (daemon, addr)
}

async fn send(addr: &str, version: Option<&str>, id: &str, command: &str) -> Value {
    // 0.3 names the method differently.
    let method = if version.is_some() {
        "SendMessage"
    } else {
        "message/send"
    };
    let reply = rpc(
        addr,
        "parts",
        version,
        method,
        json!({"message": message(id, command)}),
    )
    .await;
    reply["result"].clone()
}

/// The parts the capsule echoed: all of `payload`, unchanged.
fn echoed(parts: &Value) -> Vec<Value> {
    parts.as_array().expect("parts").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_gets_every_part_and_answers_with_parts_on_every_binding() {
    let (daemon, addr) = daemon().await;

    // JSON-RPC 1.0: a status message and an artifact.
    let task = &send(&addr, Some("1.0"), "p-1", "both").await["task"];
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{task}\n{}",
        daemon.log()
    );
    let said = echoed(&task["status"]["message"]["parts"]);
    assert_eq!(said[0], json!({"text": "got 4 parts"}), "{task}");
    assert_eq!(said[1..], payload()[..], "{task}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    assert_eq!(task["artifacts"][0]["artifactId"], "echo");
    assert_eq!(echoed(&task["artifacts"][0]["parts"]), payload(), "{task}");
    // The task's history keeps the client's message whole.
    assert_eq!(
        echoed(&task["history"][0]["parts"])[1..],
        payload()[..],
        "{task}"
    );

    // Only a status message; only an artifact.
    let task = &send(&addr, Some("1.0"), "p-2", "message").await["task"];
    assert_eq!(
        echoed(&task["status"]["message"]["parts"])[1..],
        payload()[..]
    );
    assert!(task.get("artifacts").is_none(), "{task}");
    let task = &send(&addr, Some("1.0"), "p-3", "artifact").await["task"];
    assert!(task["status"].get("message").is_none(), "{task}");
    assert_eq!(echoed(&task["artifacts"][0]["parts"]), payload());

    // A message reply.
    let reply = &send(&addr, Some("1.0"), "p-4", "reply").await["message"];
    assert_eq!(echoed(&reply["parts"])[1..], payload()[..], "{reply}");

    // A failure says why.
    let task = &send(&addr, Some("1.0"), "p-5", "fail").await["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "failed on purpose"
    );

    // 0.3: the same parts in 0.3's shapes.
    let task = send(&addr, None, "p-6", "both").await;
    assert_eq!(task["status"]["state"], "completed", "{task}");
    let said = echoed(&task["status"]["message"]["parts"]);
    assert_eq!(said[0], json!({"kind": "text", "text": "got 4 parts"}));
    assert_eq!(
        said[1],
        json!({"kind": "file", "metadata": {"hop": 1.5}, "file": {
            "bytes": base64::engine::general_purpose::STANDARD.encode(BYTES),
            "mimeType": "application/x-protobuf", "name": "instruction.bin"}})
    );
    assert_eq!(
        said[2],
        json!({"kind": "file", "file": {"uri": "https://example.test/a.png",
            "mimeType": "image/png", "name": "a.png"}})
    );
    assert_eq!(
        said[3],
        json!({"kind": "data", "data": {"k": [1.5, 2.5]}, "metadata": {"note": "json"}})
    );

    // A 0.3 client's file parts reach the capsule as the same parts.
    let m03 = json!({"messageId": "p-7", "role": "user", "kind": "message", "parts": [
        {"kind": "text", "text": "message"},
        {"kind": "file", "file": {"bytes": base64::engine::general_purpose::STANDARD.encode(BYTES),
            "mimeType": "application/x-protobuf", "name": "instruction.bin"}},
    ]});
    let task = &rpc(
        &addr,
        "parts",
        Some("1.0"),
        "SendMessage",
        json!({"message": m03}),
    )
    .await["result"]["task"];
    assert_eq!(
        task["status"]["message"]["parts"][1],
        json!({"raw": base64::engine::general_purpose::STANDARD.encode(BYTES),
            "mediaType": "application/x-protobuf", "filename": "instruction.bin"}),
        "{task}"
    );

    // HTTP+JSON.
    let body = json!({"message": message("p-8", "both")}).to_string();
    let (status, _, body) =
        http(&addr, "POST", "/a2a/parts/message:send", &[V1, JSON], &body).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        echoed(&v["task"]["status"]["message"]["parts"])[1..],
        payload()[..],
        "{v}"
    );

    // gRPC: the bytes arrive as bytes, and come back as bytes (numbers in
    // data and metadata are protobuf doubles: the payload uses fractions).
    let request: pb::SendMessageRequest =
        serde_json::from_value(json!({"tenant": "parts", "message": message("p-9", "both")}))
            .expect("a request");
    let a = call(&addr, "SendMessage", frame(&request.encode_to_vec()), &[]).await;
    assert_eq!(a.status, "0", "{a:?}");
    let answer = pb::SendMessageResponse::decode(a.messages[0].clone()).expect("a response");
    let answer = serde_json::to_value(&answer).expect("json");
    assert_eq!(
        echoed(&answer["task"]["status"]["message"]["parts"])[1..],
        payload()[..],
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_an_input_request_reaches_the_capsule_with_every_part() {
    let (daemon, addr) = daemon().await;
    let asked = send(&addr, Some("1.0"), "a-1", "ask").await["task"].clone();
    assert_eq!(
        asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let prompt = &asked["status"]["message"]["parts"];
    assert_eq!(prompt[0]["text"], "send the rest", "{asked}");
    assert_eq!(prompt.as_array().map(Vec::len), Some(4), "{asked}");
    // The answer: every payload part, on the task.
    let mut answer = json!({"messageId": "a-2", "role": "ROLE_USER", "parts": payload(),
        "taskId": asked["id"], "contextId": asked["contextId"]});
    answer["parts"]
        .as_array_mut()
        .expect("parts")
        .insert(0, json!({"text": "here"}));
    let done = rpc(
        &addr,
        "parts",
        Some("1.0"),
        "SendMessage",
        json!({"message": answer}),
    )
    .await;
    let task = &done["result"]["task"];
    let what = format!("{task}\n{}", daemon.log());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{what}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"], "got 4 parts back",
        "{what}"
    );
    let mut sent = vec![json!({"text": "here"})];
    sent.extend(payload());
    assert_eq!(task["artifacts"][0]["parts"], json!(sent), "{what}");
    // The history keeps the answer as sent.
    let got = rpc(
        &addr,
        "parts",
        Some("1.0"),
        "GetTask",
        json!({"id": task["id"]}),
    )
    .await;
    let history = got["result"]["history"].as_array().expect("history");
    let answered = history
        .iter()
        .find(|m| m["messageId"] == "a-2")
        .unwrap_or_else(|| panic!("the answer in the history: {got}"));
    assert_eq!(answered["parts"], json!(sent), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_task_streams_its_working_message_and_ends_when_canceled() {
    let (daemon, addr) = daemon().await;
    let blocking =
        json!({"message": message("h-1", "hold"), "configuration": {"returnImmediately": true}});
    let task =
        rpc(&addr, "parts", Some("1.0"), "SendMessage", blocking).await["result"]["task"].clone();
    let id = task["id"].as_str().expect("task id").to_string();
    // The working status message the capsule sent, read back with the task.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let held = loop {
        let t =
            rpc(&addr, "parts", Some("1.0"), "GetTask", json!({"id": id})).await["result"].clone();
        if t["status"]["message"]["parts"][0]["text"] == "held" {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never held: {t}\n{}",
            daemon.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(held["status"]["state"], "TASK_STATE_WORKING", "{held}");
    assert_eq!(
        echoed(&held["status"]["message"]["parts"])[1..],
        payload()[..]
    );
    let canceled = rpc(&addr, "parts", Some("1.0"), "CancelTask", json!({"id": id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_1_capsule_gets_the_same_message_as_text() {
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        daemon.root.path(),
        "conformance",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let reply = rpc(
        &addr,
        "conformance",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("t-1", "echo")}),
    )
    .await;
    let text = reply.to_string();
    assert!(
        text.contains("[file instruction.bin (application/x-protobuf), 20 base64 characters]")
            && text.contains("[file https://example.test/a.png]")
            && text.contains(r#"{\"k\":[1.5,2.5]}"#),
        "{reply}"
    );
}
