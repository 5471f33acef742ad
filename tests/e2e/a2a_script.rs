//! Script capsules as A2A agents, end to end: the conformance capsule
//! (`examples/a2a-conformance`) driven by the official Python SDK client on
//! all three bindings (JSON-RPC, HTTP+JSON, gRPC), input requests answered and timed out, messages sent from
//! one capsule to another in the same daemon and to a peer elsewhere.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message, rpc};
use crate::harness::{Daemon, TEST_CONFIG, code, conformance, repo, request};

const SERVE: &str = "{task_acceptance: queue, after_task: sleep, queue_depth: 64, concurrency: 16}";

async fn daemon() -> (Daemon, String) {
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    (daemon, addr)
}

async fn start(daemon: &Daemon, name: &str, lifecycle: &str, extra: &str) {
    let dir = conformance(daemon.root.path(), name, lifecycle, extra);
    daemon
        .client
        .start(&request(&dir))
        .await
        .unwrap_or_else(|e| panic!("start {name}: {e}\n{}", daemon.log()));
}

/// `SendMessage` (blocking) of `text`, with extra message fields.
async fn send(addr: &str, route: &str, id: &str, text: &str, extra: Value) -> Value {
    let mut m = message(id, text);
    if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
        m.extend(extra);
    }
    let reply = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": m}),
    )
    .await;
    reply["result"]["task"].clone()
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The text of a message's or artifact's parts, joined.
fn parts_text(parts: &Value) -> String {
    parts
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

fn answer(task: &Value) -> String {
    parts_text(&task["artifacts"][0]["parts"])
}

/// The task as GetTask answers it (its `result`).
async fn get_task(addr: &str, route: &str, id: &str) -> Value {
    rpc(addr, route, Some("1.0"), "GetTask", json!({"id": id})).await["result"].clone()
}

/// Polls GetTask until `done` holds for the task (or a minute passes:
/// then it fails, saying the task never did `what`).
async fn until(
    addr: &str,
    route: &str,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let task = get_task(addr, route, id).await;
        if done(&task) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} never {what}: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls GetTask until the task's state is `want` (or a minute passes).
async fn until_state(addr: &str, route: &str, id: &str, want: &str) -> Value {
    until(addr, route, id, &format!("reached {want}"), |task| {
        state(task) == want
    })
    .await
}

/// The interpreter with the official A2A SDK: `ROOST_A2A_PYTHON`, else the
/// venv `scripts/python-sdk` makes.
pub(crate) fn sdk_python() -> std::path::PathBuf {
    let path = std::env::var_os("ROOST_A2A_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            repo()
                .join("target")
                .join("a2a-sdk-venv")
                .join("bin")
                .join("python")
        });
    assert!(
        path.is_file(),
        "no Python with the A2A SDK at {}: run scripts/python-sdk (scripts/test does) or set \
         ROOST_A2A_PYTHON",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_a_script_capsule_on_all_three_bindings() {
    let python = sdk_python();
    let (daemon, addr) = daemon().await;
    start(&daemon, "conformance", SERVE, "").await;
    for binding in ["jsonrpc", "http_json", "grpc"] {
        let out = tokio::process::Command::new(&python)
            .arg(repo().join("tests").join("a2a-sdk").join("client.py"))
            .args(["--url", &format!("http://{addr}/a2a/conformance")])
            .args(["--binding", binding])
            .kill_on_drop(true)
            .output()
            .await
            .expect("run the SDK client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("10 passed, 0 failed"),
            "SDK client on {binding}:\n{stdout}\n{stderr}\n{}",
            daemon.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_is_answered_on_the_task_or_times_out() {
    let (daemon, addr) = daemon().await;
    start(
        &daemon,
        "asker",
        "{task_acceptance: queue, after_task: sleep, concurrency: 4, input_timeout_secs: 2}",
        "",
    )
    .await;

    // Asked, answered with a follow-up on the task, completed.
    let task = send(&addr, "asker", "m-ask", "ask", json!({})).await;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "what next?");
    let id = task["id"].as_str().expect("task id").to_string();
    let context = task["contextId"].clone();
    let done = send(
        &addr,
        "asker",
        "m-blue",
        "blue",
        json!({"taskId": id, "contextId": context}),
    )
    .await;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["id"], id.as_str());
    assert_eq!(answer(&done), "echo: blue");
    let texts: Vec<&str> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(texts, ["ask", "what next?", "blue"]);

    // A follow-up on a task that does not wait is refused and changes nothing.
    let again = rpc(
        &addr,
        "asker",
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": "m-late", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "x"}]}}),
    )
    .await;
    assert_eq!(again["error"]["code"], -32004, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("has ended"),
        "{again}"
    );

    // Nobody answers: the task fails with input-timeout; the session goes on.
    let task = send(&addr, "asker", "m-ask2", "ask", json!({})).await;
    let id = task["id"].as_str().expect("task id").to_string();
    let failed = until_state(&addr, "asker", &id, "TASK_STATE_FAILED").await;
    assert_eq!(
        failed["status"]["message"]["parts"][0]["text"],
        "input-timeout"
    );
    let late = send(&addr, "asker", "m-late2", "too late", json!({"taskId": id})).await;
    assert!(late.is_null(), "a late answer must be refused");
    let next = send(&addr, "asker", "m-next", "still here", json!({})).await;
    assert_eq!(answer(&next), "echo: still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_needs_the_handler_export() {
    let (daemon, _) = daemon().await;
    let dir = crate::harness::capsule(
        daemon.root.path(),
        "plain",
        "hello",
        "lifecycle: {task_acceptance: queue}\n",
    );
    let err = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("a run-only capsule with a lifecycle is refused");
    assert_eq!(code(&err), "invalid_manifest");
    assert!(
        err.to_string()
            .contains("murmur:a2a/handler (@0.2.0 or @0.1.0)"),
        "{err}"
    );
}

/// A one-request A2A peer: answers every POST with a submitted task and
/// hands back what it was sent.
async fn remote_peer() -> (String, tokio::sync::oneshot::Receiver<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        // roostd asks for the peer's card first (it has none: 404), then
        // sends; each on a connection of its own.
        loop {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then a Content-Length body.
            loop {
                let n = stream.read(&mut buf).await.expect("read");
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= len || n == 0 {
                        break;
                    }
                }
            }
            if raw.starts_with(b"GET ") {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
                continue;
            }
            let body = json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {
                "id": "remote-1", "contextId": "remote-ctx",
                "status": {"state": "TASK_STATE_SUBMITTED"}}}})
            .to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(reply.as_bytes()).await.expect("write");
            let _ = tx.send(String::from_utf8_lossy(&raw).into_owned());
            break;
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsules_send_to_peers_in_the_same_daemon_and_elsewhere_with_their_trace() {
    let (daemon, addr) = daemon().await;
    let (peer, seen) = remote_peer().await;
    let network =
        format!("capabilities:\n  network:\n    allow: [\"http://{addr}\", \"http://{peer}\"]\n");
    start(&daemon, "sender", SERVE, &network).await;
    start(&daemon, "receiver", SERVE, "").await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");

    // In-process: the receiver gets a durable task of its own and answers it.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": message("fwd-1", &format!("forward http://{addr}/a2a/receiver hello receiver"))}})
    .to_string();
    let (status, _, reply) = http(
        &addr,
        "POST",
        "/a2a/sender",
        &[JSON, V1, ("traceparent", &traceparent)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).expect("json");
    let sent = answer(&reply["result"]["task"]);
    let mut words = sent.split_whitespace();
    assert_eq!(words.next(), Some("sent"), "{reply}");
    let peer_task = words.next().expect("peer task id").to_string();
    // The state the peer accepted it in: `working` when its session was
    // waiting for a task (it goes straight there), else `submitted`.
    assert!(
        matches!(words.next(), Some("submitted" | "working")),
        "{reply}"
    );
    // The task is the sending session's own: a client of the receiver's
    // route (here, one without a token) does not see it.
    let theirs = rpc(
        &addr,
        "receiver",
        Some("1.0"),
        "GetTask",
        json!({"id": peer_task}),
    )
    .await;
    assert_eq!(theirs["error"]["code"], -32001, "{theirs}");

    // Elsewhere: JSON-RPC 1.0 SendMessage over HTTP, in the sender's trace.
    let (status, _, reply) = http(
        &addr,
        "POST",
        "/a2a/sender",
        &[JSON, V1, ("traceparent", &traceparent)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
            "message": message("fwd-2", &format!("forward http://{peer}/a2a/far hi there"))}})
        .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).expect("json");
    assert_eq!(
        answer(&reply["result"]["task"]),
        "sent remote-1 submitted",
        "{reply}"
    );
    let request = tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .expect("the peer was called")
        .expect("request");
    let lower = request.to_ascii_lowercase();
    assert!(request.starts_with("POST /a2a/far HTTP/1.1"), "{request}");
    assert!(lower.contains("a2a-version: 1.0"), "{request}");
    let sent_parent = lower
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent in {request}"));
    let parts: Vec<&str> = sent_parent.trim().split('-').collect();
    assert_eq!(parts.len(), 4, "{sent_parent}");
    assert_eq!(parts[1], trace_id, "the peer continues the client's trace");
    assert_ne!(parts[2], "00f067aa0ba902b7", "with a span of its own");
    let body: Value = serde_json::from_str(request.split_once("\r\n\r\n").map_or("", |(_, b)| b))
        .expect("JSON-RPC body");
    assert_eq!(body["method"], "SendMessage");
    assert_eq!(body["params"]["message"]["parts"][0]["text"], "hi there");
    assert!(
        daemon.log().contains("A2A message sent"),
        "the send is logged"
    );

    // Not in the allow-list: refused before anything is sent.
    let denied = send(
        &addr,
        "sender",
        "fwd-3",
        "forward http://127.0.0.1:9/a2a/x hi",
        json!({}),
    )
    .await;
    assert_eq!(state(&denied), "TASK_STATE_FAILED", "{denied}");
    assert!(
        denied["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("network policy"),
        "{denied}"
    );

    // The script capsule's trace has each send, with the task it was for,
    // and the refusal.
    let sessions = daemon.client.list(false).await.expect("list");
    let sender = sessions
        .iter()
        .find(|s| s.name == "sender")
        .expect("sender");
    let trace = String::from_utf8(
        daemon
            .client
            .trace(&sender.id)
            .await
            .expect("trace")
            .to_vec(),
    )
    .expect("utf-8");
    let events: Vec<Value> = trace
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let sends: Vec<&Value> = events.iter().filter(|e| e["event"] == "a2a_send").collect();
    assert_eq!(sends.len(), 2, "{trace}");
    assert_eq!(sends[0]["message_id"], "fwd-1-fwd");
    assert_eq!(sends[0]["peer_task_id"], peer_task.as_str());
    assert_eq!(sends[1]["peer_task_id"], "remote-1");
    assert!(
        sends.iter().all(|e| e["caller_task_id"].is_string()),
        "{trace}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "denied" && e["kind"] == "network"),
        "{trace}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_tasks_beyond_the_retention_bound_are_pruned_and_live_ones_kept() {
    let config = format!(
        "{TEST_CONFIG}a2a: {{retention: {{max_tasks: 2, max_age_secs: 0, interval_secs: 1}}}}\n"
    );
    let daemon = Daemon::start_with(&config, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    start(&daemon, "keeper", SERVE, "").await;
    let waiting = send(&addr, "keeper", "m-wait", "ask", json!({})).await;
    assert_eq!(state(&waiting), "TASK_STATE_INPUT_REQUIRED");
    let mut ids = Vec::new();
    for i in 0..5 {
        let task = send(
            &addr,
            "keeper",
            &format!("m-{i}"),
            &format!("t{i}"),
            json!({}),
        )
        .await;
        assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
        ids.push(task["id"].as_str().expect("id").to_string());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let kept = loop {
        let list =
            rpc(&addr, "keeper", Some("1.0"), "ListTasks", json!({})).await["result"].clone();
        if list["totalSize"] == 3 {
            break list;
        }
        assert!(Instant::now() < deadline, "never pruned to 3 tasks: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut left: Vec<&str> = kept["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    left.sort_unstable();
    let mut want = vec![waiting["id"].as_str().expect("id"), &ids[3], &ids[4]];
    want.sort_unstable();
    assert_eq!(
        left, want,
        "the newest two ended tasks and the live one stay"
    );
    let gone = rpc(
        &addr,
        "keeper",
        Some("1.0"),
        "GetTask",
        json!({"id": ids[0]}),
    )
    .await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    assert!(daemon.log().contains("ended A2A tasks and sessions pruned"));
    assert!(
        daemon.log().contains("a2a.retention is deprecated"),
        "the old key still works, with a warning"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_input_is_not_the_capsules_time_and_cancel_ends_the_wait() {
    let (daemon, addr) = daemon().await;
    start(
        &daemon,
        "patient",
        "{task_acceptance: queue, after_task: sleep, concurrency: 4, input_timeout_secs: 60}",
        "capabilities:\n  limits: {timeout_secs: 1}\n",
    )
    .await;
    // Answered after more than twice the capsule's 1 s deadline.
    let task = send(&addr, "patient", "m-1", "ask", json!({})).await;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let done = send(
        &addr,
        "patient",
        "m-2",
        "late but fine",
        json!({"taskId": task["id"]}),
    )
    .await;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(answer(&done), "echo: late but fine");

    // Canceled while it waits: the answer to CancelTask is the canceled task.
    let task = send(&addr, "patient", "m-3", "ask", json!({})).await;
    let canceled = rpc(
        &addr,
        "patient",
        Some("1.0"),
        "CancelTask",
        json!({"id": task["id"]}),
    )
    .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );

    // A reply instead of a task result, also kept with the task.
    let reply = rpc(
        &addr,
        "patient",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("tck-message-response-1", "hi")}),
    )
    .await;
    let m = &reply["result"]["message"];
    assert_eq!(m["role"], "ROLE_AGENT", "{reply}");
    assert_eq!(m["parts"][0]["text"], "Direct message response");
    let kept = rpc(
        &addr,
        "patient",
        Some("1.0"),
        "GetTask",
        json!({"id": m["taskId"]}),
    )
    .await;
    assert_eq!(
        kept["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{kept}"
    );
    assert_eq!(
        kept["result"]["status"]["message"]["parts"][0]["text"],
        "Direct message response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_task_session_that_times_out_on_input_ends_failed() {
    let (daemon, addr) = daemon().await;
    let dir = conformance(
        daemon.root.path(),
        "once",
        "{task_acceptance: single, input_timeout_secs: 1}",
        "",
    );
    let session = daemon.client.start(&request(&dir)).await.expect("start");
    let task = send(&addr, "once", "m-1", "ask", json!({})).await;
    assert_eq!(state(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    let ended = daemon.client.wait(&session.id).await.expect("wait");
    assert_eq!(
        ended.state,
        roost_ctl::api::SessionState::Failed,
        "{ended:?}"
    );
    assert!(
        ended
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("input-timeout"),
        "{ended:?}"
    );
}

/// `examples/sdk-client/ask.py`, the SDK client docs/a2a.md shows, against
/// a session: the answer, streamed or not, and its exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sdk_client_example_asks_a_session_and_exits_with_the_task() {
    let python = sdk_python();
    let (daemon, addr) = daemon().await;
    start(&daemon, "helper", SERVE, "").await;
    let example = repo().join("examples").join("sdk-client").join("ask.py");
    let ask = |args: Vec<String>| {
        let python = python.clone();
        let example = example.clone();
        async move {
            tokio::process::Command::new(&python)
                .arg(&example)
                .args(args)
                .kill_on_drop(true)
                .output()
                .await
                .expect("run ask.py")
        }
    };
    let url = format!("http://{addr}/a2a/helper");
    let out = ask(vec![url.clone(), "hello".into()]).await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && said.contains("echo: hello")
            && said.contains("TASK_STATE_COMPLETED"),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ask(vec![url.clone(), "slow".into(), "--stream".into()]).await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("tick 1\ntick 2"),
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ask(vec![url, "fail".into()]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The text of a task's status message, if it has one.
fn status_text(task: &Value) -> String {
    parts_text(&task["status"]["message"]["parts"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_still_queued_when_their_session_is_stopped_fail_saying_they_never_ran() {
    let (daemon, addr) = daemon().await;
    start(
        &daemon,
        "one-at-a-time",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 8, concurrency: 1}",
        "",
    )
    .await;
    let acknowledged = |id: &'static str, text: &'static str| {
        let addr = addr.clone();
        async move {
            let reply = rpc(
                &addr,
                "one-at-a-time",
                Some("1.0"),
                "SendMessage",
                json!({"message": message(id, text), "configuration": {"returnImmediately": true}}),
            )
            .await;
            reply["result"]["task"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("no task for {id}: {reply}"))
                .to_string()
        }
    };
    // "sleep" holds the one slot until it is canceled; the two after it wait.
    let running = acknowledged("m-running", "sleep").await;
    until_state(&addr, "one-at-a-time", &running, "TASK_STATE_WORKING").await;
    let queued = [
        acknowledged("m-queued-1", "first").await,
        acknowledged("m-queued-2", "second").await,
    ];
    for id in &queued {
        let task = get_task(&addr, "one-at-a-time", id).await;
        assert_eq!(
            state(&task),
            "TASK_STATE_SUBMITTED",
            "queued behind the running task: {task}"
        );
    }
    daemon.client.stop("one-at-a-time").await.expect("stop");
    for id in &queued {
        let task = until_state(&addr, "one-at-a-time", id, "TASK_STATE_FAILED").await;
        assert_eq!(
            status_text(&task),
            "the session ended before the task ran",
            "{task}"
        );
    }
    // The control: the task that was running when the session stopped ends
    // too, but not with that reason (it ran).
    let ended = until(&addr, "one-at-a-time", &running, "ended", |task| {
        !matches!(state(task), "TASK_STATE_WORKING" | "TASK_STATE_SUBMITTED")
    })
    .await;
    assert_ne!(
        status_text(&ended),
        "the session ended before the task ran",
        "{ended}"
    );
}
