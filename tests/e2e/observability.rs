//! Watching roostd from outside: OTLP traces of an agent task received by
//! a real OTLP receiver (over HTTP/protobuf and gRPC), the metrics listener
//! scraped and parsed by Prometheus' own OpenMetrics parser, and
//! `/healthz`/`/readyz` on the metrics listener and the gateway.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, rpc};
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{Daemon, TEST_CONFIG, free_port, repo, request};
use crate::mock_llm::{MockLlm, Reply, Seen};
use crate::otlp::{Got, Receiver};

const PROMPT: &str = "summarise the quarterly figures for Zanzibar";
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// First turn: one echo-tool call; then the answer.
fn model(seen: &Seen) -> Reply {
    if seen.messages().len() == 1 {
        Reply::tools(&[("echo-tool", r#"{"text":"figures"}"#)]).usage(100, 20)
    } else {
        Reply::text("the figures are fine").usage(200, 10)
    }
}

/// roostd with `extra` config and a `queue` + `sleep` agent named `name`
/// on the mock; the gateway's address.
async fn daemon_with_agent(extra: &str, mock: &MockLlm, name: &str) -> (Daemon, String) {
    let (daemon, addr, _) = daemon_with_agent_session(extra, mock, name).await;
    (daemon, addr)
}

/// [`daemon_with_agent`], with the agent's session.
async fn daemon_with_agent_session(
    extra: &str,
    mock: &MockLlm,
    name: &str,
) -> (Daemon, String, roost_ctl::api::Session) {
    let daemon = Daemon::start_with(
        &format!("{}{extra}", crate::harness::AGENT_CONFIG),
        &[("ROOST_E2E_KEY", KEY), ("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    publish_agent_artifacts(&daemon).await;
    let dir = agent(
        daemon.root.path(),
        name,
        mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep}\n",
    );
    let session = daemon.client.start(&request(&dir)).await.expect("start");
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    (daemon, addr, session)
}

/// Sends the prompt with the caller's `traceparent`; the completed task's id.
async fn send_traced(addr: &str, route: &str) -> String {
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": PROMPT}]}},
    })
    .to_string();
    let (status, _, body) = http(
        addr,
        "POST",
        &format!("/a2a/{route}"),
        &[JSON, V1, ("traceparent", &traceparent)],
        &body,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let r: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    r["result"]["task"]["id"].as_str().expect("id").to_string()
}

/// Waits until the receiver has spans named as `names` in the caller's trace.
async fn spans_of_caller(receiver: &Receiver, names: &[&str]) -> Vec<Got> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans: Vec<Got> = receiver
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == CALLER_TRACE)
            .collect();
        if names
            .iter()
            .all(|n| spans.iter().any(|s| s.name.starts_with(n)))
        {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans {names:?} not all received; got {:#?}",
            receiver.spans()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn one<'a>(spans: &'a [Got], name: &str) -> &'a Got {
    let found: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span '{name}' in {spans:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_task_is_one_trace_from_its_caller_through_queue_model_and_tools() {
    let receiver = Receiver::http().await;
    let metrics_port = free_port();
    let mock = MockLlm::start(model).await;
    let config = format!(
        "telemetry: {{otlp_endpoint: \"http://127.0.0.1:{}\", service_name: roost-e2e}}\n\
         metrics: {{listen: \"127.0.0.1:{metrics_port}\"}}\n",
        receiver.port
    );
    let (mut daemon, addr, session) = daemon_with_agent_session(&config, &mock, "traced").await;
    let task_id = send_traced(&addr, "traced").await;

    let spans = spans_of_caller(
        &receiver,
        &["a2a task", "queue wait", "chat", "execute_tool", "hook"],
    )
    .await;
    assert!(spans.iter().all(|s| s.service == "roost-e2e"), "{spans:#?}");
    // The task continues the caller's span; everything its run does hangs
    // under the task.
    let task = one(&spans, "a2a task traced");
    assert_eq!(task.parent, CALLER_SPAN, "{task:#?}");
    assert_eq!(task.kind, 2, "SERVER");
    assert_eq!(task.attrs["a2a.task.id"], task_id);
    assert_eq!(task.attrs["a2a.task.state"], "completed");
    assert_eq!(task.attrs["roost.route"], "traced");
    assert_ne!(task.status, 2, "not an error: {task:#?}");
    let wait = one(&spans, "queue wait");
    assert_eq!(wait.parent, task.span_id);
    let chats: Vec<&Got> = spans
        .iter()
        .filter(|s| s.name == "chat mock-model")
        .collect();
    assert_eq!(chats.len(), 2, "two model calls: {spans:#?}");
    for chat in &chats {
        assert_eq!(chat.parent, task.span_id, "{chat:#?}");
        assert_eq!(chat.kind, 3, "CLIENT");
        assert_eq!(chat.attrs["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attrs["gen_ai.request.model"], "mock-model");
    }
    let tokens: Vec<(&str, &str)> = chats
        .iter()
        .map(|c| {
            (
                c.attrs["gen_ai.usage.input_tokens"].as_str(),
                c.attrs["gen_ai.usage.output_tokens"].as_str(),
            )
        })
        .collect();
    assert!(
        tokens.contains(&("100", "20")) && tokens.contains(&("200", "10")),
        "{tokens:?}"
    );
    let tool = one(&spans, "execute_tool echo-tool");
    assert_eq!(tool.parent, task.span_id);
    assert_eq!(tool.attrs["gen_ai.tool.name"], "echo-tool");
    assert_eq!(tool.attrs["roost.tool.kind"], "wasm");
    assert_eq!(tool.attrs["roost.tool.status"], "passed");
    let hooks: Vec<&Got> = spans
        .iter()
        .filter(|s| s.name.starts_with("hook "))
        .collect();
    assert!(
        hooks.iter().any(|h| h.name == "hook task-start"),
        "{hooks:#?}"
    );
    assert!(hooks.iter().all(|h| h.parent == task.span_id), "{hooks:#?}");
    // The hook was given its span as TRACEPARENT, and the collector.
    let hook_start = one(&spans, "hook task-start");
    let seen =
        std::fs::read_to_string(std::path::Path::new(&session.workdir).join("hook-trace.txt"))
            .expect("the hook wrote what it was given");
    assert_eq!(
        seen.trim(),
        format!(
            "00-{CALLER_TRACE}-{}-01 http://127.0.0.1:{}",
            hook_start.span_id, receiver.port
        ),
        "{seen}"
    );
    // Nothing secret or said: no API key, no prompt, no answer.
    for span in &spans {
        for (key, value) in &span.attrs {
            assert!(!value.contains(KEY), "the API key in {key} of {span:#?}");
            assert!(
                !value.contains("Zanzibar"),
                "the prompt in {key} of {span:#?}"
            );
            assert!(!value.contains("figures are fine"), "the answer in {key}");
        }
    }

    // The metrics listener, read by Prometheus' own parser.
    let scrape = scrape(metrics_port).await;
    let families = parse(&scrape);
    let family = |name: &str| {
        families
            .get(name)
            .unwrap_or_else(|| panic!("no family {name} in {scrape}"))
    };
    let value = |name: &str, sample: &str, labels: &[(&str, &str)]| -> f64 {
        family(name)["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .find(|s| s["name"] == sample && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
            .and_then(|s| s["value"].as_f64())
            .unwrap_or_else(|| panic!("no {sample} {labels:?} in {scrape}"))
    };
    for (name, kind) in [
        ("roost_a2a_tasks", "counter"),
        ("roost_a2a_queue_depth", "gauge"),
        ("roost_a2a_task_duration_seconds", "histogram"),
        ("roost_a2a_task_queue_wait_seconds", "histogram"),
        ("roost_tool_calls", "counter"),
        ("roost_tool_call_duration_seconds", "histogram"),
        ("roost_inference_tokens", "counter"),
        ("roost_inference_duration_seconds", "histogram"),
        ("roost_sessions_started", "counter"),
        ("roost_live_sessions", "gauge"),
        ("roost_build", "info"),
        ("process_cpu_seconds", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(family(name)["type"], kind, "{name}");
    }
    let route = [("route", "traced")];
    assert_eq!(
        value(
            "roost_a2a_tasks",
            "roost_a2a_tasks_total",
            &[("route", "traced"), ("state", "submitted")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "roost_a2a_tasks",
            "roost_a2a_tasks_total",
            &[("route", "traced"), ("state", "completed")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "roost_a2a_task_duration_seconds",
            "roost_a2a_task_duration_seconds_count",
            &route
        ),
        1.0
    );
    assert_eq!(
        value("roost_a2a_queue_depth", "roost_a2a_queue_depth", &route),
        0.0
    );
    let model_labels = [("capsule", "traced"), ("model", "mock-model")];
    let input = [model_labels[0], model_labels[1], ("direction", "input")];
    assert_eq!(
        value(
            "roost_inference_tokens",
            "roost_inference_tokens_total",
            &input
        ),
        300.0
    );
    assert_eq!(
        value(
            "roost_inference_duration_seconds",
            "roost_inference_duration_seconds_count",
            &model_labels
        ),
        2.0
    );
    assert_eq!(
        value(
            "roost_tool_calls",
            "roost_tool_calls_total",
            &[
                ("capsule", "traced"),
                ("kind", "wasm"),
                ("status", "passed")
            ]
        ),
        1.0
    );
    assert!(value("process_cpu_seconds", "process_cpu_seconds_total", &[]) > 0.0);
    assert!(!scrape.contains(&task_id), "no task id in a label");
    // Counters move: a second task.
    let r = rpc(
        &addr,
        "traced",
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "again"}]}}),
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let families = parse(&scrape_text(metrics_port).await);
    let completed = families["roost_a2a_tasks"]["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .find(|s| s["labels"]["state"] == "completed")
        .and_then(|s| s["value"].as_f64());
    assert_eq!(completed, Some(2.0));

    // The listener serves nothing of the control API; health on both.
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let (status, _, _) = http(&metrics_addr, "GET", "/v1/sessions", &[], "").await;
    assert_eq!(status, 404);
    for on in [&metrics_addr, &addr] {
        let (status, _, body) = http(on, "GET", "/healthz", &[], "").await;
        assert_eq!(status, 200, "{on}: {body}");
        let (status, _, body) = http(on, "GET", "/readyz", &[], "").await;
        assert_eq!(status, 200, "{on}: {body}");
        let ready: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(ready["checks"]["store"]["ok"], true, "{body}");
        assert_eq!(ready["checks"]["gateway"]["ok"], true, "{body}");
    }

    // At a graceful stop the session's run ends and its span is flushed:
    // its own trace, under which staging and compiles are not (they have theirs).
    daemon.signal_and_wait(libc::SIGTERM, Duration::from_secs(20));
    let all = receiver.spans();
    let run = all
        .iter()
        .find(|s| s.name == "session run traced")
        .unwrap_or_else(|| panic!("no session span in {all:#?}"));
    assert_eq!(run.parent, "", "a root");
    assert_eq!(run.attrs["roost.capsule"], "traced");
    let stage = all
        .iter()
        .find(|s| {
            s.name == "stage" && s.attrs.get("roost.capsule").map(String::as_str) == Some("traced")
        })
        .unwrap_or_else(|| panic!("no stage span in {all:#?}"));
    assert!(
        all.iter().any(|s| s.name == "load component"
            && s.trace_id == stage.trace_id
            && s.parent == stage.span_id),
        "compiles under their staging: {all:#?}"
    );
}

/// The same over gRPC, with `capture_content: true`: then the prompt is on
/// the model call's span (the control of the test above: its absence there
/// is not for want of the attribute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_with_capture_content_the_prompt_is_on_the_model_span() {
    let receiver = Receiver::grpc().await;
    let mock = MockLlm::start(model).await;
    let config = format!(
        "telemetry: {{otlp_endpoint: \"http://127.0.0.1:{}\", protocol: grpc, capture_content: true}}\n",
        receiver.port
    );
    let (_daemon, addr) = daemon_with_agent(&config, &mock, "captured").await;
    send_traced(&addr, "captured").await;
    let spans = spans_of_caller(&receiver, &["a2a task", "chat", "execute_tool"]).await;
    assert!(
        spans.iter().all(|s| s.service == "roostd"),
        "the default service name"
    );
    let chat = spans
        .iter()
        .find(|s| s.name == "chat mock-model" && s.attrs.contains_key("gen_ai.input.messages"))
        .unwrap_or_else(|| panic!("no captured chat span in {spans:#?}"));
    assert!(
        chat.attrs["gen_ai.input.messages"].contains("Zanzibar"),
        "{chat:#?}"
    );
    let tool = one(&spans, "execute_tool echo-tool");
    assert!(tool.attrs["gen_ai.tool.call.arguments"].contains("figures"));
    for span in &spans {
        for value in span.attrs.values() {
            assert!(!value.contains(KEY), "never the API key: {span:#?}");
        }
    }
}

async fn scrape_text(port: u16) -> String {
    let (status, head, body) = http(&format!("127.0.0.1:{port}"), "GET", "/metrics", &[], "").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        head.contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    body
}

async fn scrape(port: u16) -> String {
    scrape_text(port).await
}

/// The exposition as Prometheus' Python client's OpenMetrics parser reads
/// it (it refuses anything malformed): `{family: {type, samples: [{name,
/// labels, value}]}}`.
fn parse(text: &str) -> HashMap<String, Value> {
    use std::io::Write;
    let python = repo().join("target/a2a-sdk-venv/bin/python");
    let mut child = std::process::Command::new(&python)
        .arg(repo().join("tests/e2e/parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/python-sdk)", python.display()));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parser output")
}

/// Every accepted task has exactly one span and one queue-wait span, also
/// when tasks come faster than one at a time (the conformance capsule,
/// 8 clients side by side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_has_one_span_and_one_queue_wait() {
    let receiver = Receiver::http().await;
    let daemon = Daemon::start_with(
        &format!(
            "{TEST_CONFIG}telemetry: {{otlp_endpoint: \"http://127.0.0.1:{}\"}}\n",
            receiver.port
        ),
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    )
    .await;
    let dir = crate::harness::conformance(
        daemon.root.path(),
        "many",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 64, concurrency: 8}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let sends = (0..8).map(|c| {
        let addr = addr.clone();
        tokio::spawn(async move {
            for i in 0..25 {
                let r = rpc(
                    &addr,
                    "many",
                    Some("1.0"),
                    "SendMessage",
                    json!({"message": {"messageId": format!("m-{c}-{i}"), "role": "ROLE_USER",
                        "parts": [{"text": "hello"}]}}),
                )
                .await;
                assert_eq!(
                    r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                    "{r}"
                );
            }
        })
    });
    for send in sends.collect::<Vec<_>>() {
        send.await.expect("client");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let count = |name: &str| receiver.spans().iter().filter(|s| s.name == name).count();
    while (count("a2a task many") < 200 || count("queue wait") < 200) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count("a2a task many"), 200);
    assert_eq!(count("queue wait"), 200);
    let ids: std::collections::HashSet<String> = receiver
        .spans()
        .iter()
        .filter(|s| s.name == "a2a task many")
        .map(|s| s.attrs["a2a.task.id"].clone())
        .collect();
    assert_eq!(ids.len(), 200, "one span per task");
}
