//! Agent capsules end to end: the host-run tool-use loop against a scripted
//! OpenAI-compatible server, through the real example driver
//! (`examples/artifacts/openai-driver`), with real tools, skills and hooks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use roost_ctl::api::{Session, SessionState, StartRequest};
use serde_json::Value;

use crate::harness::{Daemon, artifact_dir, guest, openai_driver, publish, request};
use crate::mock_llm::{MockLlm, Reply, Seen};

pub(crate) const KEY: &str = "sk-e2e-secret-4242";

/// Publishes the driver, echo-tool, the guide skill and a hook bound to every event.
pub(crate) async fn publish_agent_artifacts(daemon: &Daemon) {
    let root = daemon.root.path();
    let registry = daemon.state_dir.join("registry");
    let (driver_manifest, driver) = openai_driver();
    let echo = std::fs::read(guest("echo_tool")).expect("echo tool");
    let hook = std::fs::read(guest("stage_hook")).expect("hook");
    let dirs = [
        artifact_dir(root, &driver_manifest, "component.wasm", &driver),
        artifact_dir(
            root,
            "name: echo-tool\nversion: 1.0.0\nruntime: tool\ndescription: Echo text back\n\
             input_schema: {type: object, properties: {text: {type: string}}}\n",
            "component.wasm",
            &echo,
        ),
        artifact_dir(
            root,
            "name: guide\nversion: 1.0.0\nruntime: skill\ndescription: How to use the tools\n",
            "skill.md",
            b"# Guide\nAlways echo twice.\n",
        ),
        artifact_dir(
            root,
            "name: all-hook\nversion: 1.0.0\nruntime: hook\nhook: {binding: all}\n",
            "component.wasm",
            &hook,
        ),
    ];
    for dir in dirs {
        publish(&registry, &dir).await;
    }
}

/// An agent capsule using the mock: `inference` lines are added to the
/// inference section, `extra` at the top level.
pub(crate) fn agent(
    root: &Path,
    name: &str,
    mock: &MockLlm,
    inference: &str,
    extra: &str,
) -> PathBuf {
    let dir = root.join(format!("agent-{name}"));
    std::fs::create_dir_all(&dir).expect("capsule dir");
    let manifest = format!(
        "name: {name}\nversion: 0.1.0\n\
         artifacts:\n\
         \x20 - {{name: openai-driver, version: 0.1.0, runtime: driver}}\n\
         \x20 - {{name: echo-tool, version: 1.0.0, runtime: tool}}\n\
         \x20 - {{name: guide, version: 1.0.0, runtime: skill}}\n\
         \x20 - {{name: all-hook, version: 1.0.0, runtime: hook}}\n\
         tools: [echo-tool, sh, guide]\n\
         capabilities:\n\
         \x20 network: {{allow: [\"http://127.0.0.1:{port}\"]}}\n\
         \x20 shell: {{allow: [sh]}}\n\
         \x20 limits: {{timeout_secs: 20}}\n\
         inference:\n\
         \x20 endpoint: {endpoint}\n\
         \x20 model: mock-model\n\
         \x20 api_key: {{env: ROOST_E2E_KEY}}\n\
         \x20 driver: {{artifact: openai-driver}}\n\
         {inference}\
         {extra}",
        port = mock.port,
        endpoint = mock.endpoint(),
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).expect("manifest");
    dir
}

pub(crate) async fn agent_daemon() -> Daemon {
    let daemon = Daemon::start_with(
        crate::harness::AGENT_CONFIG,
        &[("ROOST_E2E_KEY", KEY), ("MURMUR_A2A_TIMEOUT_SECS", "1")],
    )
    .await;
    publish_agent_artifacts(&daemon).await;
    daemon
}

pub(crate) fn with_task(dir: &Path, task: &str) -> StartRequest {
    StartRequest {
        task: Some(task.to_string()),
        ..request(dir)
    }
}

pub(crate) async fn run(daemon: &Daemon, req: StartRequest) -> Session {
    let session = daemon.client.start(&req).await.expect("start");
    daemon.client.wait(&session.id).await.expect("wait")
}

pub(crate) async fn trace(daemon: &Daemon, id: &str) -> Vec<Value> {
    let bytes = daemon.client.trace(id).await.expect("trace");
    String::from_utf8(bytes.to_vec())
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

pub(crate) fn events<'a>(trace: &'a [Value], name: &str) -> Vec<&'a Value> {
    trace.iter().filter(|e| e["event"] == name).collect()
}

/// The first request of a task has only the user's message.
fn first_turn(seen: &Seen) -> bool {
    seen.messages().len() == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_calls_a_wasm_tool_a_shell_tool_and_a_skill_then_answers() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| {
        if first_turn(seen) {
            Reply::tools(&[
                ("echo-tool", r#"{"text":"hi"}"#),
                ("sh", r#"{"command":"echo shell-ok; env"}"#),
                ("guide", "{}"),
            ])
            .usage(100, 20)
        } else {
            Reply::text("All done: hi, shell-ok, echo twice.").usage(200, 10)
        }
    })
    .await;
    let dir = agent(
        daemon.root.path(),
        "helper",
        &mock,
        "  system_prompt: You are a test agent.\n",
        "trace: {include_tool_output: true}\n",
    );
    let s = run(&daemon, with_task(&dir, "Say hi with every tool.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());

    // What the model was sent.
    let seen = mock.seen();
    assert_eq!(seen.len(), 2);
    let first = &seen[0];
    assert_eq!(first.body["model"], "mock-model");
    assert_eq!(first.body["stream"], true);
    assert_eq!(
        first.authorization.as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    assert!(
        first.system().starts_with("You are a test agent."),
        "{}",
        first.system()
    );
    assert!(first.system().contains("Capsule: helper 0.1.0"));
    let mut tools = first.tool_names();
    tools.sort();
    assert_eq!(tools, ["echo-tool", "guide", "sh"]);
    assert_eq!(first.messages()[0]["content"], "Say hi with every tool.");
    let results = seen[1].tool_results();
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], r#"{"text":"hi"}"#);
    assert!(results[1].contains("shell-ok"), "{}", results[1]);
    assert!(
        results[1].contains("MURMUR_INFERENCE_MODEL=mock-model")
            && !results[1].contains(KEY)
            && !results[1].contains("MURMUR_INFERENCE_ENDPOINT")
            && !results[1].contains(&mock.endpoint()),
        "tools see the model's name, never its key or endpoint: {}",
        results[1]
    );
    assert!(results[2].contains("Always echo twice."), "{}", results[2]);

    // Usage, per session and per task.
    assert_eq!(s.usage.input_tokens, 300);
    assert_eq!(s.usage.output_tokens, 30);
    assert_eq!(s.usage.turns, 2);
    let tasks = daemon.client.tasks(&s.id).await.expect("tasks");
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (
            tasks[0].state.as_str(),
            tasks[0].source.as_str(),
            tasks[0].turns
        ),
        ("completed", "task_md", 2)
    );

    // The trace, in order.
    let t = trace(&daemon, &s.id).await;
    let kinds: Vec<&str> = t
        .iter()
        .map(|e| e["event"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "task_start",
            "inference",
            "tool_call",
            "tool_call",
            "tool_call",
            "inference",
            "task_end",
            "session_end"
        ]
    );
    let inference = events(&t, "inference");
    assert_eq!(inference[0]["input_tokens"], 100);
    assert_eq!(inference[0]["model"], "mock-model");
    assert!(inference[0]["latency_ms"].is_u64());
    let calls = events(&t, "tool_call");
    assert_eq!(calls[1]["name"], "sh");
    assert_eq!(calls[1]["status"], "passed");
    assert!(
        calls[1]["output"]
            .as_str()
            .unwrap_or("")
            .contains("shell-ok")
    );
    let end = events(&t, "task_end")[0];
    assert_eq!(end["answer"], "All done: hi, shell-ok, echo twice.");
    assert_eq!(events(&t, "session_end")[0]["total_turns"], 2);

    // Streamed text reached the session's output.
    let mut logs = Vec::new();
    daemon
        .client
        .logs(&s.id, false, |c| logs.extend_from_slice(c))
        .await
        .expect("logs");
    assert!(String::from_utf8_lossy(&logs).contains("All done: hi, shell-ok"));

    // Hooks: session-start once, task-start/end per task, inference per call.
    let hooks = std::fs::read_to_string(Path::new(&s.workdir).join("hook-events.txt"))
        .expect("the hook recorded events");
    assert_eq!(
        hooks.lines().collect::<Vec<_>>(),
        [
            "stage",
            "session-start",
            "task-start",
            "inference",
            "inference",
            "task-end",
            "session-end"
        ]
    );

    // MURMUR.md tells the agent about itself, never the key.
    let md = std::fs::read_to_string(Path::new(&s.bookkeeping_dir).join("MURMUR.md"))
        .expect("MURMUR.md");
    assert!(md.contains("- Model: mock-model"), "{md}");
    assert!(
        md.contains("`guide`: How to use the tools (callable by name to load guidance)"),
        "{md}"
    );
    assert!(md.contains("Compaction: not configured"), "{md}");
    // The key is in no file roostd wrote, nor in its log or the status.
    let status =
        serde_json::to_string(&daemon.client.get(&s.id).await.expect("get")).expect("json");
    let trace_text = String::from_utf8(daemon.client.trace(&s.id).await.expect("trace").to_vec())
        .expect("utf-8");
    for (what, text) in [
        ("MURMUR.md", md.as_str()),
        ("trace", trace_text.as_str()),
        ("status", status.as_str()),
        ("roostd log", daemon.log().as_str()),
        ("session output", &*String::from_utf8_lossy(&logs)),
    ] {
        assert!(!text.contains(KEY), "the API key leaked into {what}");
    }
    // Nor in any file under the state dir (the database and its WAL included).
    let mut dirs = vec![daemon.state_dir.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                assert!(
                    !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                    "the API key is in {}",
                    path.display()
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_an_agent_with_a_task_and_shows_its_trace() {
    use roost_ctl::cli::{Cli, Command, run as cli_run};
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| {
        if first_turn(seen) {
            Reply::tools(&[("nope", "{}"), ("echo-tool", "fetch:127.0.0.1:9")])
        } else {
            Reply::text("Refused politely.")
        }
    })
    .await;
    let dir = agent(daemon.root.path(), "clitask", &mock, "", "");
    let task_file = daemon.root.path().join("task.txt");
    std::fs::write(&task_file, "Use a tool you do not have.").expect("task file");
    let cli = |command| Cli {
        socket: Some(daemon.socket.clone()),
        json: false,
        quiet: false,
        command,
    };
    let cli_json = |command| Cli {
        json: true,
        ..cli(command)
    };
    let mut out = Vec::new();
    let code = cli_run(
        cli_json(Command::Start {
            path: dir.clone(),
            name: None,
            workdir: None,
            restart: Default::default(),
            wait: true,
            timeout: None,
            task: None,
            task_file: Some(task_file),
            lifecycle: None,
            after_task: None,
            job_id: None,
            node: None,
            labels: Vec::new(),
        }),
        &mut out,
    )
    .await
    .expect("start");
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out));
    let session: Session = serde_json::from_slice(&out).expect("session json");
    assert_eq!(
        mock.seen()[0].messages()[0]["content"],
        "Use a tool you do not have."
    );
    // The denied call is data: the model is told, and the trace names the rule.
    assert!(mock.seen()[1].tool_results()[0].contains("not declared in manifest allowlist"));
    let mut out = Vec::new();
    cli_run(
        cli(Command::Trace {
            id_or_name: session.id.clone(),
        }),
        &mut out,
    )
    .await
    .expect("trace");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("nope  denied  0 ms  denied by tools (allow-list)"),
        "{text}"
    );
    assert!(text.contains("answer: Refused politely."), "{text}");
    // So is a request outside network.allow, with the rule that refused it.
    let fetched = &mock.seen()[1].tool_results()[1];
    assert!(fetched.contains("HttpRequestDenied"), "{fetched}");
    assert!(
        text.contains(
            "denied   network http://127.0.0.1:9/ (by echo-tool) by capabilities.network.allow"
        ),
        "{text}"
    );
    let mut out = Vec::new();
    cli_run(
        cli(Command::Status {
            id_or_name: Some(session.id.clone()),
        }),
        &mut out,
    )
    .await
    .expect("status");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("tokens       20 in, 10 out, 2 turns"),
        "{text}"
    );
    let mut out = Vec::new();
    cli_run(
        cli_json(Command::Trace {
            id_or_name: session.id,
        }),
        &mut out,
    )
    .await
    .expect("trace --json");
    assert!(
        String::from_utf8(out)
            .expect("utf-8")
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_turns_fails_with_a_clear_error() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::tools(&[("echo-tool", r#"{"text":"again"}"#)])).await;
    let dir = agent(daemon.root.path(), "looper", &mock, "  max_turns: 3\n", "");
    let s = run(&daemon, with_task(&dir, "Loop forever.")).await;
    assert_eq!(s.state, SessionState::Failed);
    let error = s.error.unwrap_or_default();
    assert!(
        error.contains("did not finish within inference.max_turns (3)")
            && error.contains("echo-tool"),
        "{error}"
    );
    assert_eq!(mock.seen().len(), 3);
    let tasks = daemon.client.tasks(&s.id).await.expect("tasks");
    assert_eq!((tasks[0].state.as_str(), tasks[0].turns), ("failed", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_stops_the_session() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::tools(&[("echo-tool", "{}")]).usage(80, 40)).await;
    let dir = agent(
        daemon.root.path(),
        "spender",
        &mock,
        "  budget: {max_total_tokens: 100}\n",
        "",
    );
    let s = run(&daemon, with_task(&dir, "Spend.")).await;
    assert_eq!(s.state, SessionState::Failed);
    let error = s.error.clone().unwrap_or_default();
    assert!(
        error.contains("token budget exhausted")
            && error.contains("120 tokens")
            && error.contains("max_total_tokens (100)"),
        "{error}"
    );
    assert_eq!(mock.seen().len(), 1, "no call after the budget was spent");
    assert_eq!((s.usage.input_tokens, s.usage.output_tokens), (80, 40));
}

/// Compaction at 50% of a 1000-token context: the first answer reports 600 tokens.
fn compacting_script(seen: &Seen) -> Reply {
    let messages = seen.messages();
    let last = messages.last().cloned().unwrap_or_default();
    if seen.body["model"] == "small-model" {
        return Reply::text("SUMMARY-BY-MODEL").usage(50, 5);
    }
    if messages.len() == 1
        && !last["content"]
            .as_str()
            .unwrap_or("")
            .contains("Summary so far")
    {
        return Reply::tools(&[("echo-tool", r#"{"text":"big"}"#)]).usage(550, 50);
    }
    Reply::text("finished after compaction").usage(30, 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_uses_the_compaction_model_or_a_hook() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(compacting_script).await;
    let compaction = "  compaction: {threshold: 0.5, model: small-model}\n";
    let context = "context: {max_tokens: 1000}\n";

    let dir = agent(daemon.root.path(), "compacter", &mock, compaction, context);
    let s = run(&daemon, with_task(&dir, "Do a big job.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let seen = mock.seen();
    assert_eq!(seen.len(), 3, "turn, compaction, turn");
    assert_eq!(seen[1].body["model"], "small-model");
    assert!(
        seen[1].body.get("tools").is_none(),
        "no tools for a summary"
    );
    let after = seen[2].messages();
    assert_eq!(after.len(), 1, "{after:?}");
    let content = after[0]["content"].as_str().unwrap_or("");
    assert!(
        content.starts_with("Do a big job.") && content.contains("SUMMARY-BY-MODEL"),
        "{content}"
    );
    let t = trace(&daemon, &s.id).await;
    let c = events(&t, "compaction");
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["source"], "model:small-model");
    assert_eq!(
        (
            c[0]["messages_before"].as_u64(),
            c[0]["messages_after"].as_u64()
        ),
        (Some(3), Some(1))
    );
    assert_eq!(
        s.usage.input_tokens,
        550 + 50 + 30,
        "compaction tokens count"
    );
    let md = std::fs::read_to_string(Path::new(&s.bookkeeping_dir).join("MURMUR.md")).expect("md");
    assert!(md.contains("Compaction: configured at 50% of the context, by a compaction hook (else summarised by model small-model)"), "{md}");

    // A hook's replacement wins; the compaction model is not called.
    let mock = MockLlm::start(compacting_script).await;
    let dir = agent(
        daemon.root.path(),
        "hookcompact",
        &mock,
        compaction,
        context,
    );
    let s = run(&daemon, with_task(&dir, "Do a big job.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let seen = mock.seen();
    assert_eq!(seen.len(), 2, "no compaction call to the model");
    let content = seen[1].messages()[0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        content.contains("summary from the compaction hook"),
        "{content}"
    );
    let t = trace(&daemon, &s.id).await;
    assert_eq!(events(&t, "compaction")[0]["source"], "hook:all-hook");
    let hooks =
        std::fs::read_to_string(Path::new(&s.workdir).join("hook-events.txt")).expect("hook file");
    assert_eq!(hooks.lines().filter(|l| *l == "compaction").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuations_send_only_new_messages_until_compaction_drops_them() {
    let daemon = agent_daemon().await;
    // Turn 1 answers with id resp-1 (a tool call, 700 tokens: past the 50% threshold
    // only from turn 2 on); turn 2 continues it; compaction; turn 3 starts afresh.
    let mock = MockLlm::start(|seen| {
        let n = seen.body["previous_response_id"]
            .as_str()
            .map(str::to_string);
        let msgs = seen.messages();
        if seen.body["model"] == "small-model" {
            return Reply::text("SUMMARY").usage(10, 1);
        }
        match (n.as_deref(), msgs.len()) {
            (None, 1)
                if !msgs[0]["content"]
                    .as_str()
                    .unwrap_or("")
                    .contains("SUMMARY") =>
            {
                Reply::tools(&[("echo-tool", r#"{"text":"one"}"#)])
                    .usage(100, 10)
                    .id("resp-1")
            }
            (Some("resp-1"), _) => Reply::tools(&[("echo-tool", r#"{"text":"two"}"#)])
                .usage(600, 10)
                .id("resp-2"),
            _ => Reply::text("done").usage(10, 1).id("resp-3"),
        }
    })
    .await;
    let dir = agent(
        daemon.root.path(),
        "continuer",
        &mock,
        "  driver: {artifact: openai-driver, config: {continuation: true}}\n  compaction: {threshold: 0.5, model: small-model}\n",
        "context: {max_tokens: 1000}\n",
    );
    // The line above repeats `driver:`; drop the first one.
    let path = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&path).expect("manifest");
    std::fs::write(
        &path,
        text.replacen("  driver: {artifact: openai-driver}\n", "", 1),
    )
    .expect("write");
    let s = run(&daemon, with_task(&dir, "Continue.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}\n{}", daemon.log());
    let seen = mock.seen();
    assert_eq!(seen.len(), 4, "turn 1, turn 2, compaction, turn 3");
    assert!(seen[0].body.get("previous_response_id").is_none());
    // Turn 2 continues resp-1 and sends only the tool result it has not seen.
    assert_eq!(seen[1].body["previous_response_id"], "resp-1");
    assert_eq!(
        seen[1].messages()[0]["tool_call_id"],
        "call_0",
        "the result answers the call resp-1 made"
    );
    let sent: Vec<String> = seen[1]
        .messages()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(sent, ["tool"]);
    // Compaction dropped the continuation: turn 3 sends the whole (compacted) context.
    assert!(seen[3].body.get("previous_response_id").is_none());
    assert_eq!(seen[3].messages().len(), 1);
    let t = trace(&daemon, &s.id).await;
    let continued: Vec<bool> = events(&t, "inference")
        .iter()
        .filter(|e| e["purpose"] == "turn")
        .map(|e| e["continuation"] == true)
        .collect();
    assert_eq!(continued, [false, true, false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_slow_hooks_are_logged_and_the_session_goes_on() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("fine")).await;
    for name in ["badhook", "slowhook"] {
        let dir = agent(daemon.root.path(), name, &mock, "", "");
        // A short limit bounds the slow hook.
        let path = dir.join("murmur.yaml");
        let text = std::fs::read_to_string(&path).expect("manifest");
        std::fs::write(&path, text.replace("timeout_secs: 20", "timeout_secs: 1")).expect("write");
        let s = run(&daemon, with_task(&dir, "Hello.")).await;
        assert_eq!(s.state, SessionState::Completed, "{name}: {s:?}");
        let t = trace(&daemon, &s.id).await;
        let errors = events(&t, "hook_error");
        assert_eq!(errors.len(), 1, "{name}: {t:?}");
        assert_eq!(errors[0]["kind"], "task-start");
        let error = errors[0]["error"].as_str().unwrap_or("");
        match name {
            "badhook" => assert!(error.contains("this hook fails on purpose"), "{error}"),
            _ => assert!(error.contains("deadline exceeded"), "{error}"),
        }
        assert_eq!(events(&t, "task_end")[0]["answer"], "fine");
    }
    assert!(daemon.log().contains("hook failed; the session goes on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_signed_at_the_end_and_tampering_is_caught_next_time() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| {
        let task = seen.messages()[0]["content"].as_str().unwrap_or("").to_string();
        if first_turn(seen) && task.starts_with("Write") {
            Reply::tools(&[(
                "sh",
                r#"{"command":"mkdir -p checkpoints/deep && echo plan > checkpoints/plan.md && echo keep > checkpoints/deep/keep.md"}"#,
            )])
        } else {
            Reply::text("ok")
        }
    })
    .await;
    let dir = agent(daemon.root.path(), "keeper", &mock, "", "");
    let workdir = daemon.root.path().join("project");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let start = |task: &str| StartRequest {
        workdir: Some(workdir.display().to_string()),
        ..with_task(&dir, task)
    };
    let s = run(&daemon, start("Write checkpoints.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let cp = workdir.join("checkpoints");
    assert!(cp.join("plan.md").is_file());
    assert_eq!(
        events(&trace(&daemon, &s.id).await, "checkpoints_signed")[0]["files"],
        2
    );

    // Between sessions: one file is changed, one is added.
    std::fs::write(cp.join("plan.md"), "plan, edited behind roostd's back").expect("tamper");
    std::fs::write(cp.join("sneaky.md"), "unsigned").expect("add");
    let s2 = run(&daemon, start("Check.")).await;
    assert_eq!(s2.state, SessionState::Completed, "{s2:?}");
    assert!(cp.join("plan.md.rejected").is_file());
    assert!(cp.join("sneaky.md.rejected").is_file());
    assert!(!cp.join("plan.md").exists() && !cp.join("sneaky.md").exists());
    assert_eq!(
        std::fs::read_to_string(cp.join("deep/keep.md")).expect("kept"),
        "keep\n",
        "an untouched checkpoint survives"
    );
    let t = trace(&daemon, &s2.id).await;
    let mut rejected: Vec<(String, String)> = events(&t, "checkpoint_rejected")
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap_or("").into(),
                e["reason"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    rejected.sort();
    assert_eq!(
        rejected,
        [
            ("plan.md".to_string(), "tampered".to_string()),
            ("sneaky.md".to_string(), "unsigned".to_string())
        ]
    );
    assert!(daemon.log().contains("checkpoint rejected"));
    let key = daemon.state_dir.join("checkpoint.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(key).expect("key").permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycles_run_task_md_and_end_or_wait() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("done")).await;
    // queue + sleep: runs the task, removes task.md, and waits for more.
    let dir = agent(
        daemon.root.path(),
        "queuer",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep}\n",
    );
    let s = daemon
        .client
        .start(&with_task(&dir, "First."))
        .await
        .expect("start");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while daemon
        .client
        .tasks(&s.id)
        .await
        .expect("tasks")
        .first()
        .map(|t| t.state.as_str())
        != Some("completed")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the task never completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let live = daemon.client.get(&s.id).await.expect("get");
    assert_eq!(
        live.state,
        SessionState::Running,
        "queue+sleep keeps waiting"
    );
    assert!(
        !Path::new(&live.workdir).join("task.md").exists(),
        "task.md is removed after it ran"
    );
    let stopped = daemon.client.stop(&s.id).await.expect("stop");
    assert_eq!(stopped.state, SessionState::Stopped);

    // single without a task waits for one (the idle timeout is 1 s here), then ends.
    let dir = agent(daemon.root.path(), "idle", &mock, "", "");
    let started = std::time::Instant::now();
    let s = run(&daemon, request(&dir)).await;
    assert_eq!(s.state, SessionState::Completed);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it waited for a task"
    );
    assert!(daemon.client.tasks(&s.id).await.expect("tasks").is_empty());

    // none without a task.md has nothing to do.
    let dir = agent(
        daemon.root.path(),
        "nothing",
        &mock,
        "",
        "lifecycle: {task_acceptance: none}\n",
    );
    let s = run(&daemon, request(&dir)).await;
    assert_eq!(s.state, SessionState::Completed);
    assert!(daemon.client.tasks(&s.id).await.expect("tasks").is_empty());

    // none with a task.md runs it and ends.
    let dir = agent(
        daemon.root.path(),
        "once",
        &mock,
        "",
        "lifecycle: {task_acceptance: none}\n",
    );
    let s = run(&daemon, with_task(&dir, "Once.")).await;
    assert_eq!(s.state, SessionState::Completed);
    assert_eq!(daemon.client.tasks(&s.id).await.expect("tasks").len(), 1);
    assert!(
        Path::new(&s.workdir).join("task.md").exists(),
        "single/none leave task.md"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_agents_wait_on_a_slow_model_at_once() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| {
        if first_turn(seen) {
            Reply::tools(&[("echo-tool", r#"{"text":"x"}"#)]).delay(Duration::from_millis(1500))
        } else {
            Reply::text("done").delay(Duration::from_millis(1500))
        }
    })
    .await;
    let dir = agent(daemon.root.path(), "crowd", &mock, "", "");
    let mut ids = Vec::new();
    for i in 0..100 {
        let req = StartRequest {
            name: Some(format!("crowd-{i}")),
            ..with_task(&dir, &format!("Task {i}."))
        };
        ids.push(daemon.client.start(&req).await.expect("start").id);
    }
    for id in &ids {
        let s = daemon.client.wait(id).await.expect("wait");
        assert_eq!(s.state, SessionState::Completed, "{s:?}");
    }
    assert_eq!(mock.seen().len(), 200);
    assert!(
        mock.max_in_flight() >= 50,
        "model calls were not concurrent: at most {} at once",
        mock.max_in_flight()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_manifests_are_refused_with_what_to_fix() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("never")).await;
    for (name, inference, extra, needle) in [
        (
            "nofile",
            "  system_prompt_file: prompts/missing.md\n",
            "",
            "prompts/missing.md",
        ),
        (
            "noskill",
            "  system_prompt_artifact: ghost\n",
            "",
            "'ghost' is not listed under `artifacts:`",
        ),
        ("nokey", "", "", "ROOST_E2E_MISSING"),
    ] {
        let dir = agent(daemon.root.path(), name, &mock, inference, extra);
        if name == "nokey" {
            let path = dir.join("murmur.yaml");
            let text = std::fs::read_to_string(&path).expect("manifest");
            std::fs::write(&path, text.replace("ROOST_E2E_KEY", "ROOST_E2E_MISSING"))
                .expect("write");
        }
        let err = daemon
            .client
            .start(&with_task(&dir, "x"))
            .await
            .expect_err("must be refused");
        assert!(err.to_string().contains(needle), "{name}: {err}");
    }
    // Outside the network allow-list: the driver could never reach it.
    let dir = agent(daemon.root.path(), "blocked", &mock, "", "");
    let path = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&path).expect("manifest");
    std::fs::write(
        &path,
        text.replace(
            &format!("http://127.0.0.1:{}\"", mock.port),
            "http://127.0.0.1:1\"",
        ),
    )
    .expect("write");
    let err = daemon
        .client
        .start(&with_task(&dir, "x"))
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("not allowed by capabilities.network.allow"),
        "{err}"
    );
    assert!(mock.seen().is_empty());
    assert!(
        daemon.client.list(true).await.expect("list").is_empty(),
        "no session rows"
    );
}
