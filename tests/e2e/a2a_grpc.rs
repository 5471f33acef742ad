//! The gRPC binding, end to end, with a raw HTTP/2 client (the Python SDK's
//! gRPC client runs in `a2a_script`): the route named by `tenant`, the
//! default route for a client that names none, per-route tokens, and the
//! binding's errors for what a hostile or confused peer sends (malformed
//! frames, oversized messages, unknown methods, unknown routes).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prost::Message;
use roostd::a2a::grpc::pb;

use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// What a gRPC call answered: `grpc-status`, `grpc-message`, whether
/// `grpc-status-details-bin` came with it, and the response messages'
/// bytes (frames stripped).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: String,
    pub(crate) message: String,
    details: bool,
    pub(crate) messages: Vec<Bytes>,
}

/// One length-prefixed gRPC message.
pub(crate) fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

pub(crate) async fn call(
    addr: &str,
    method: &str,
    body: Vec<u8>,
    metadata: &[(&str, &str)],
) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 connection (prior knowledge)");
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("http://{addr}/lf.a2a.v1.A2AService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in metadata {
        req = req.header(*k, *v);
    }
    let response = send
        .send_request(req.body(Full::new(Bytes::from(body))).expect("request"))
        .await
        .expect("an answer");
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.expect("the body");
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let mut data = collected.to_bytes();
    // A trailers-only answer puts the status in the headers.
    let get = |name: &str| {
        trailers
            .get(name)
            .or_else(|| parts.headers.get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let mut messages = Vec::new();
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        messages.push(data.slice(5..5 + len));
        data = data.slice(5 + len..);
    }
    Answer {
        status: get("grpc-status"),
        message: get("grpc-message"),
        details: !get("grpc-status-details-bin").is_empty(),
        messages,
    }
}

pub(crate) fn send_request(tenant: &str, id: &str) -> Vec<u8> {
    let json = serde_json::json!({
        "tenant": tenant,
        "message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hello"}]},
    });
    let message: pb::SendMessageRequest = serde_json::from_value(json).expect("a request");
    frame(&message.encode_to_vec())
}

async fn daemon(a2a: &str) -> (Daemon, String) {
    let daemon = Daemon::start_with(&format!("{TEST_CONFIG}a2a: {a2a}\n"), &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    for name in ["conformance", "other"] {
        let dir = conformance(
            daemon.root.path(),
            name,
            "{task_acceptance: queue, after_task: sleep}",
            "",
        );
        daemon.client.start(&request(&dir)).await.expect("start");
    }
    (daemon, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_routes_by_tenant_and_answers_bad_input_with_the_bindings_errors() {
    let (daemon, addr) = daemon("{grpc: {default_route: conformance}}").await;

    // SendMessage to the route the tenant names: a completed task.
    let a = call(&addr, "SendMessage", send_request("other", "g-1"), &[]).await;
    assert_eq!(a.status, "0", "{a:?}");
    let answer = pb::SendMessageResponse::decode(a.messages[0].clone()).expect("a response");
    let task = serde_json::to_value(&answer).expect("json")["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let task_id = task["id"].as_str().expect("id").to_string();
    // GetTask on the same route finds it; on the default route it does not.
    let get = |tenant: &str| {
        let r = pb::GetTaskRequest {
            tenant: tenant.into(),
            id: task_id.clone(),
            ..Default::default()
        };
        frame(&r.encode_to_vec())
    };
    let a = call(&addr, "GetTask", get("other"), &[]).await;
    assert_eq!(a.status, "0", "{a:?}");
    let a = call(&addr, "GetTask", get(""), &[]).await;
    assert_eq!(
        (a.status.as_str(), a.details),
        ("5", true),
        "NOT_FOUND with ErrorInfo: {a:?}"
    );

    // A streamed send: events, then the end.
    let a = call(&addr, "SendStreamingMessage", send_request("", "g-2"), &[]).await;
    assert_eq!(a.status, "0", "{a:?}");
    let last =
        pb::StreamResponse::decode(a.messages.last().cloned().expect("events")).expect("an event");
    let last = serde_json::to_value(&last).expect("json");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last}"
    );

    // What a confused or hostile peer sends.
    let a = call(&addr, "SendMessage", send_request("nobody", "g-3"), &[]).await;
    assert_eq!(a.status, "5", "an unknown route: {a:?}");
    let a = call(&addr, "NoSuchMethod", send_request("", "g-4"), &[]).await;
    assert_eq!(a.status, "12", "UNIMPLEMENTED: {a:?}");
    let a = call(
        &addr,
        "SendMessage",
        vec![0, 0, 0, 0, 3, 0xff, 0xff, 0xff],
        &[],
    )
    .await;
    assert!(
        !a.status.is_empty() && a.status != "0",
        "a malformed message: {a:?}"
    );
    let a = call(&addr, "SendMessage", vec![0, 0, 0, 0, 9, 1, 2], &[]).await;
    assert!(
        !a.status.is_empty() && a.status != "0",
        "a cut-off frame: {a:?}"
    );
    let huge = frame(&vec![b'x'; 2 << 20]);
    let a = call(&addr, "SendMessage", huge, &[]).await;
    assert_eq!(
        a.status, "11",
        "OUT_OF_RANGE (tonic's code) over the size limit: {a:?}"
    );
    let a = call(
        &addr,
        "SendMessage",
        send_request("", "g-5"),
        &[("a2a-version", "0.3")],
    )
    .await;
    assert_eq!(a.status, "12", "0.3 is not served over gRPC: {a:?}");
    // None of it hurt: the next call is answered.
    let a = call(&addr, "SendMessage", send_request("", "g-6"), &[]).await;
    assert_eq!(a.status, "0", "{a:?}");
    assert!(daemon.client.health().await.is_ok());
    // Each refusal has its log line, also those tonic makes before any
    // handler runs (unknown method, malformed or oversized message).
    let log = daemon.log();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("A2A request refused") && l.contains("binding=\"grpc\""))
        .collect();
    for what in [
        "code=NotFound",
        "method=NoSuchMethod code=Unimplemented",
        "code=OutOfRange",
    ] {
        assert!(
            refused.iter().any(|l| l.contains(what)),
            "no refusal logged with {what}: {refused:#?}"
        );
    }
    // The six above and the unknown task's.
    assert_eq!(refused.len(), 7, "one line per refusal: {refused:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_takes_each_routes_token_and_needs_a_tenant_without_a_default() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("tempdir");
    let path = secrets.path().join("other.token");
    std::fs::write(&path, "other-route-token-0123456789").expect("token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_daemon, addr) = daemon(&format!(
        "{{routes: {{other: {{token_file: \"{}\"}}}}}}",
        path.display()
    ))
    .await;
    let a = call(&addr, "SendMessage", send_request("other", "t-1"), &[]).await;
    assert_eq!(a.status, "16", "UNAUTHENTICATED without the token: {a:?}");
    let wrong = [("authorization", "Bearer wrong-token-wrong-token")];
    let a = call(&addr, "SendMessage", send_request("other", "t-2"), &wrong).await;
    assert_eq!(a.status, "16", "{a:?}");
    let right = [("authorization", "Bearer other-route-token-0123456789")];
    let a = call(&addr, "SendMessage", send_request("other", "t-3"), &right).await;
    assert_eq!(a.status, "0", "{a:?}");
    // The control: the open route needs no token.
    let a = call(
        &addr,
        "SendMessage",
        send_request("conformance", "t-4"),
        &[],
    )
    .await;
    assert_eq!(a.status, "0", "{a:?}");
    let a = call(&addr, "SendMessage", send_request("", "t-5"), &[]).await;
    assert_eq!(a.status, "3", "no tenant and no default route: {a:?}");
    assert!(a.message.contains("tenant"), "{a:?}");
}
