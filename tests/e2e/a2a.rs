//! The A2A gateway end to end: agent sessions answer JSON-RPC (1.0 and 0.3)
//! and HTTP+JSON requests over real HTTP, tasks are stored and streamed, and
//! bad requests get the protocol's errors.

use std::time::Duration;

use serde_json::{Value, json};

use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{AGENT_CONFIG, Daemon, request};
use crate::mock_llm::{MockLlm, Reply, Seen};

/// One HTTP/1.1 request; returns the status, the headers (lowercase) and the body.
pub(crate) async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, head.to_ascii_lowercase(), body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub(crate) const V1: (&str, &str) = ("A2A-Version", "1.0");
pub(crate) const JSON: (&str, &str) = ("Content-Type", "application/json");

pub(crate) async fn rpc(
    addr: &str,
    route: &str,
    version: Option<&str>,
    method: &str,
    params: Value,
) -> Value {
    let mut headers = vec![JSON];
    if let Some(v) = version {
        headers.push(("A2A-Version", v));
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let (status, _, body) = http(addr, "POST", &format!("/a2a/{route}"), &headers, &body).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

pub(crate) fn message(id: &str, text: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

/// The model answers "done: <task>" at once.
fn echo_model(seen: &Seen) -> Reply {
    let task = seen.messages()[0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    Reply::text(&format!("done: {task}"))
}

async fn gateway(config: &str) -> (Daemon, String) {
    let daemon = Daemon::start_with(config, &[("ROOST_E2E_KEY", KEY)]).await;
    publish_agent_artifacts(&daemon).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    (daemon, addr)
}

async fn start_agent(daemon: &Daemon, mock: &MockLlm, name: &str, lifecycle: &str) {
    let dir = agent(
        daemon.root.path(),
        name,
        mock,
        "",
        &format!("lifecycle: {lifecycle}\n"),
    );
    // No waiting: the inbox is open once `start` returns, so a task sent now
    // waits for the agent to be ready.
    daemon.client.start(&request(&dir)).await.expect("start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_session_is_an_a2a_agent_over_json_rpc_and_http_json() {
    let (daemon, addr) = gateway(AGENT_CONFIG).await;
    let mock = MockLlm::start(echo_model).await;
    start_agent(
        &daemon,
        &mock,
        "helper",
        "{task_acceptance: queue, after_task: sleep}",
    )
    .await;

    // The agent card.
    let (status, _, body) = http(
        &addr,
        "GET",
        "/a2a/helper/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let card: Value = serde_json::from_str(&body).expect("card json");
    assert_eq!(card["name"], "helper");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert!(
        card["supportedInterfaces"][0]["url"]
            .as_str()
            .unwrap_or("")
            .ends_with("/a2a/helper")
    );
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    // No `a2a:` section: one skill, the capsule itself (its tools and
    // skills are how it works, not what it offers).
    assert_eq!(skills, ["helper"]);
    assert_eq!(card["capabilities"]["extendedAgentCard"], false);
    assert!(card.get("securitySchemes").is_none(), "no token configured");

    // SendMessage (1.0) blocks until the task ends and returns it.
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-1", "first job")}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done: first job");
    assert_eq!(task["history"][0]["parts"][0]["text"], "first job");
    assert!(task.get("kind").is_none(), "1.0 has no kind");
    let id = task["id"].as_str().expect("task id").to_string();
    assert!(id.starts_with("tsk_"));

    // GetTask, with and without history.
    let r = rpc(&addr, "helper", Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(r["result"]["id"], id.as_str());
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "GetTask",
        json!({"id": id, "historyLength": 0}),
    )
    .await;
    assert!(r["result"].get("history").is_none(), "{r}");

    // 0.3 without the header: message/send, lowercase states, kind.
    let r = rpc(&addr, "helper", None, "message/send", json!({"message": {"kind": "message", "messageId": "m-2", "role": "user", "parts": [{"kind": "text", "text": "second job"}]}})).await;
    assert_eq!(r["result"]["kind"], "task", "{r}");
    assert_eq!(r["result"]["status"]["state"], "completed");
    assert_eq!(r["result"]["artifacts"][0]["parts"][0]["kind"], "text");

    // ListTasks: both, newest first, artifacts only on request.
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "ListTasks",
        json!({"pageSize": 10}),
    )
    .await;
    let list = &r["result"];
    assert_eq!(list["totalSize"], 2, "{r}");
    assert_eq!(list["nextPageToken"], "");
    assert!(list["tasks"][0].get("artifacts").is_none());
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "ListTasks",
        json!({"pageSize": 1, "includeArtifacts": true}),
    )
    .await;
    assert_eq!(r["result"]["tasks"].as_array().map(Vec::len), Some(1));
    assert!(r["result"]["tasks"][0]["artifacts"].is_array());
    // Its token names the page after: the other task, and no token after it.
    let token = r["result"]["nextPageToken"].as_str().expect("token");
    assert!(!token.is_empty(), "{r}");
    let first = r["result"]["tasks"][0]["id"].clone();
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "ListTasks",
        json!({"pageSize": 1, "pageToken": token}),
    )
    .await;
    assert_eq!(
        r["result"]["tasks"].as_array().map(Vec::len),
        Some(1),
        "{r}"
    );
    assert_ne!(r["result"]["tasks"][0]["id"], first);
    assert_eq!(r["result"]["nextPageToken"], "", "{r}");
    assert_eq!(r["result"]["totalSize"], 2, "{r}");
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "ListTasks",
        json!({"pageSize": 1, "pageToken": "1"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pageToken '1' is not one this server issued"),
        "{r}"
    );

    // The same task over HTTP+JSON.
    let (status, _, body) = http(&addr, "GET", &format!("/a2a/helper/tasks/{id}"), &[V1], "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["id"],
        id.as_str()
    );
    let send = json!({"message": message("m-3", "third job")}).to_string();
    let (status, _, body) = http(
        &addr,
        "POST",
        "/a2a/helper/message:send",
        &[V1, JSON],
        &send,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");

    // Errors, with the protocol's codes.
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "GetTask",
        json!({"id": "tsk_nope"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert_eq!(r["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "CancelTask",
        json!({"id": id}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": "x", "taskId": id, "parts": [{"text": "more"}]}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    let r = rpc(&addr, "helper", Some("1.0"), "SendMessage", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = rpc(&addr, "helper", Some("1.0"), "NoSuchMethod", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = rpc(&addr, "helper", Some("99.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(r["error"]["code"], -32009, "{r}");
    let r = rpc(
        &addr,
        "helper",
        Some("1.0"),
        "CreateTaskPushNotificationConfig",
        json!({}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "no task named: {r}");
    let (status, _, body) = http(&addr, "POST", "/a2a/helper", &[V1, JSON], "{not json").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["error"]["code"],
        -32700
    );
    let (status, _, body) = http(&addr, "GET", "/a2a/helper/tasks/tsk_nope", &[V1], "").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["error"]["details"][0]["reason"],
        "TASK_NOT_FOUND"
    );
    // Each refusal is a log line, in either binding.
    let log = daemon.log();
    for what in [
        "binding=\"jsonrpc\" code=-32700",
        "binding=\"jsonrpc\" code=-32601",
        "binding=\"http+json\" code=-32001",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("A2A request refused") && l.contains(what)),
            "no refusal logged with {what}"
        );
    }
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, _, _) = http(&addr, "POST", "/a2a/helper", &[V1, JSON], &big).await;
    assert_eq!(status, 413, "oversized bodies are refused");
    let (status, _, _) = http(
        &addr,
        "GET",
        "/a2a/nobody/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 404);
    // roostctl send (plain and streamed) and roostctl tasks.
    use roost_ctl::cli::{Cli, Command, run as cli_run};
    let cli = |command| Cli {
        socket: Some(daemon.socket.clone()),
        json: false,
        quiet: false,
        command,
    };

    let mut out = Vec::new();
    let code = cli_run(
        cli(Command::Send {
            route: "helper".into(),
            text: "cli job".into(),
            stream: false,
            task_id: None,
            timeout: None,
        }),
        &mut out,
    )
    .await
    .expect("send");
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(code, 0);
    assert!(
        text.starts_with("task tsk_") && text.contains("completed\ndone: cli job"),
        "{text}"
    );
    let mut out = Vec::new();
    cli_run(
        cli(Command::Send {
            route: "helper".into(),
            text: "cli stream".into(),
            stream: true,
            task_id: None,
            timeout: None,
        }),
        &mut out,
    )
    .await
    .expect("send --stream");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("status working")
            && text.contains("done: cli stream")
            && text.contains("status completed"),
        "{text}"
    );
    let mut out = Vec::new();
    cli_run(
        cli(Command::Tasks {
            id_or_name: "helper".into(),
        }),
        &mut out,
    )
    .await
    .expect("tasks");
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(" completed ") && l.contains(" a2a "))
            .count(),
        5,
        "{text}"
    );
    // Every task the gateway acknowledged is in the session's task list.
    let tasks = daemon.client.tasks("helper").await.expect("tasks");
    assert_eq!(
        tasks
            .iter()
            .filter(|t| t.source == "a2a" && t.state == "completed")
            .count(),
        5
    );
}

/// The `data:` payloads of a server-sent-event body.
pub(crate) fn sse_events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_replay_the_task_log_and_cancel_and_overflow_behave() {
    let (daemon, addr) = gateway(AGENT_CONFIG).await;
    let mock = MockLlm::start(|seen| {
        let task = seen.messages()[0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let slow = task.starts_with("slow");
        Reply::text(&format!("done: {task}")).delay(Duration::from_millis(if slow {
            3000
        } else {
            0
        }))
    })
    .await;
    start_agent(
        &daemon,
        &mock,
        "streamer",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 1}",
    )
    .await;

    // SendStreamingMessage: the task, working, the answer, completed; then the stream ends.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage", "params": {"message": message("s-1", "stream me")}}).to_string();
    let (status, head, body) = http(&addr, "POST", "/a2a/streamer", &[V1, JSON], &body).await;
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let events = sse_events(&body);
    let results: Vec<&Value> = events.iter().map(|e| &e["result"]).collect();
    assert!(results[0].get("task").is_some(), "{body}");
    let id = results[0]["task"]["id"].as_str().expect("id").to_string();
    let states: Vec<&str> = results
        .iter()
        .filter_map(|r| r["statusUpdate"]["status"]["state"].as_str())
        .collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{body}"
    );
    // The driver's streamed deltas arrive as appended chunks of the answer,
    // then the whole answer as the last chunk.
    let updates: Vec<&Value> = results
        .iter()
        .map(|r| &r["artifactUpdate"])
        .filter(|u| u.is_object())
        .collect();
    let streamed: String = updates
        .iter()
        .filter(|u| u["append"] == true)
        .filter_map(|u| u["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, "done: stream me", "{body}");
    let last = updates.last().expect("artifact updates");
    assert_eq!(last["lastChunk"], true);
    assert_eq!(last["artifact"]["parts"][0]["text"], "done: stream me");
    assert!(events.iter().all(|e| e["id"] == 3));
    // Subscribing to a finished task is an error; its result stays readable.
    let r = rpc(
        &addr,
        "streamer",
        Some("1.0"),
        "SubscribeToTask",
        json!({"id": id}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32004, "{r}");

    // A slow task: returnImmediately, then re-subscribe over HTTP+JSON and get the rest.
    let r = rpc(&addr, "streamer", Some("1.0"), "SendMessage", json!({"message": message("s-2", "slow one"), "configuration": {"returnImmediately": true}})).await;
    let slow = r["result"]["task"]["id"].as_str().expect("id").to_string();
    let state = r["result"]["task"]["status"]["state"]
        .as_str()
        .unwrap_or("");
    assert!(
        state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
        "{r}"
    );
    let (status, _, body) = http(
        &addr,
        "POST",
        &format!("/a2a/streamer/tasks/{slow}:subscribe"),
        &[V1],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let events = sse_events(&body);
    assert!(events[0].get("task").is_some(), "first a snapshot: {body}");
    let last = events.last().expect("events");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );

    // Queue overflow: one running, one waiting (queue_depth 1), the next refused.
    let mut ids = Vec::new();
    for i in 0..2 {
        let r = rpc(&addr, "streamer", Some("1.0"), "SendMessage", json!({"message": message(&format!("q-{i}"), &format!("slow {i}")), "configuration": {"returnImmediately": true}})).await;
        ids.push(
            r["result"]["task"]["id"]
                .as_str()
                .expect("accepted")
                .to_string(),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let r = rpc(
        &addr,
        "streamer",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("q-2", "slow 2"), "configuration": {"returnImmediately": true}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("queue_depth"),
        "{r}"
    );

    // Cancel the waiting one (it never runs) and the running one (interrupted).
    for id in ids.iter().rev() {
        let r = rpc(
            &addr,
            "streamer",
            Some("1.0"),
            "CancelTask",
            json!({"id": id}),
        )
        .await;
        assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    }
    // The session goes on after cancellations.
    let r = rpc(
        &addr,
        "streamer",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("after", "after cancel")}),
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_requires_its_bearer_token_and_the_card_declares_it() {
    use std::os::unix::fs::PermissionsExt;
    let secrets = tempfile::tempdir().expect("tempdir");
    let token_file = secrets.path().join("a2a.token");
    let token = "a2a-e2e-token-0123456789";
    std::fs::write(&token_file, token).expect("token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "{AGENT_CONFIG}a2a: {{token_file: \"{}\"}}\n",
        token_file.display()
    );
    let (daemon, addr) = gateway(&config).await;
    let mock = MockLlm::start(echo_model).await;
    start_agent(
        &daemon,
        &mock,
        "guarded",
        "{task_acceptance: queue, after_task: sleep}",
    )
    .await;
    let (status, _, body) = http(
        &addr,
        "GET",
        "/a2a/guarded/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "the card is public");
    let card: Value = serde_json::from_str(&body).expect("card");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securityRequirements"][0]["schemes"]["bearer"]["list"],
        json!([])
    );
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("g-1", "hi")}}).to_string();
    let (status, head, _) = http(&addr, "POST", "/a2a/guarded", &[V1, JSON], &send).await;
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let bad = ("Authorization", "Bearer wrong-token-wrong-token");
    let (status, _, _) = http(&addr, "POST", "/a2a/guarded", &[V1, JSON, bad], &send).await;
    assert_eq!(status, 401);
    let auth = format!("Bearer {token}");
    let (status, _, body) = http(
        &addr,
        "POST",
        "/a2a/guarded",
        &[V1, JSON, ("Authorization", &auth)],
        &send,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(
        mock.seen().len() == 1,
        "only the authorised request reached the agent"
    );
    assert!(
        !daemon.log().contains(token),
        "the token never reaches the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_task_is_lost_to_kill_9() {
    let (mut daemon, addr) = gateway(AGENT_CONFIG).await;
    let mock = MockLlm::start(|seen| {
        let task = seen.messages()[0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        Reply::text(&format!("done: {task}")).delay(Duration::from_millis(20))
    })
    .await;
    let dir = agent(
        daemon.root.path(),
        "durable",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep, queue_depth: 256}\n",
    );
    let s = daemon
        .client
        .start(&roost_ctl::api::StartRequest {
            restart: roost_ctl::api::RestartPolicy::Always,
            ..request(&dir)
        })
        .await
        .expect("start");
    for _ in 0..200 {
        if daemon.client.get(&s.id).await.expect("get").state
            == roost_ctl::api::SessionState::Running
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // 200 tasks, each acknowledged (returnImmediately) before the next is sent.
    let mut acked = Vec::new();
    for i in 0..200 {
        let r = rpc(&addr, "durable", Some("1.0"), "SendMessage", json!({"message": message(&format!("k-{i}"), &format!("job {i}")), "configuration": {"returnImmediately": true}})).await;
        let id = r["result"]["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("not acknowledged: {r}"));
        acked.push(id.to_string());
    }
    // Most are still queued when roostd dies.
    let last = rpc(
        &addr,
        "durable",
        Some("1.0"),
        "GetTask",
        json!({"id": acked[199]}),
    )
    .await;
    assert_eq!(
        last["result"]["status"]["state"], "TASK_STATE_SUBMITTED",
        "{last}"
    );
    daemon.kill9();
    daemon.spawn().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    // Every acknowledged task is there and ends: the queued ones run after the
    // restart, the one that was running fails visibly as interrupted.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut states = std::collections::HashMap::new();
    for id in &acked {
        loop {
            let r = rpc(&addr, "durable", Some("1.0"), "GetTask", json!({"id": id})).await;
            let state = r["result"]["status"]["state"]
                .as_str()
                .unwrap_or_else(|| panic!("task {id} lost: {r}"))
                .to_string();
            if state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_FAILED" {
                if state == "TASK_STATE_FAILED" {
                    let why = r["result"]["status"]["message"]["parts"][0]["text"]
                        .as_str()
                        .unwrap_or("");
                    assert!(why.starts_with("interrupted"), "{r}");
                }
                *states.entry(state).or_insert(0) += 1;
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "task {id} never ended: {r}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(states.values().sum::<u32>(), 200);
    assert!(
        states.get("TASK_STATE_FAILED").copied().unwrap_or(0) <= 1,
        "at most the running one: {states:?}"
    );
    eprintln!("after kill -9: {states:?}");
    // And none ran twice: each job reached the model at most once.
    let mut jobs = std::collections::HashMap::new();
    for seen in mock.seen() {
        let job = seen.messages()[0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        *jobs.entry(job).or_insert(0) += 1;
    }
    assert!(jobs.values().all(|n| *n == 1), "a task ran twice: {jobs:?}");
}
