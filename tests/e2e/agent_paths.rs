//! Agent paths the seed has that other tests do not walk: a tool that asks
//! the A2A client for input and thinks aloud (`murmur:task/task`,
//! `emit-thinking-chunk`, through echo-tool), the system prompt from a file
//! and from a skill, and `queue` + `exit`.

use std::time::{Duration, Instant};

use roost_ctl::api::SessionState;
use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, rpc, sse_events};
use crate::agents::{agent, agent_daemon, run, with_task};
use crate::harness::request;
use crate::mock_llm::{MockLlm, Reply};

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

async fn send(addr: &str, route: &str, message: Value) -> Value {
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message}),
    )
    .await;
    r["result"]["task"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_asks_the_client_for_input_and_thinks_aloud() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|seen| match seen.tool_results().as_slice() {
        [] => Reply::tools(&[("echo-tool", r#"{"ask":"Which colour?"}"#)]),
        [said, ..] => Reply::text(&format!("noted: {said}")),
    })
    .await;
    let dir = agent(
        daemon.root.path(),
        "curious",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep}\n",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let addr = daemon.client.health().await.expect("health").a2a_addr;

    // Streamed: the tool's thinking as a working status message, then the
    // task needs input, with the tool's prompt (and the stream ends there).
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
        "message": {"messageId": "q-1", "role": "ROLE_USER", "parts": [{"text": "Pick a colour."}]}}})
    .to_string();
    let (status, _, body) = http(&addr, "POST", "/a2a/curious", &[V1, JSON], &body).await;
    assert_eq!(status, 200, "{body}");
    let updates: Vec<(String, String)> = sse_events(&body)
        .iter()
        .filter_map(|e| {
            let status = &e["result"]["statusUpdate"]["status"];
            Some((
                status["state"].as_str()?.to_string(),
                status["message"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect();
    assert!(
        updates.contains(&(
            "TASK_STATE_WORKING".into(),
            "considering what to ask".into()
        )),
        "{updates:?}"
    );
    assert_eq!(
        updates.last(),
        Some(&(
            "TASK_STATE_INPUT_REQUIRED".to_string(),
            "Which colour?".to_string()
        )),
        "{updates:?}"
    );
    let task = &sse_events(&body)[0]["result"]["task"].clone();
    let id = task["id"].as_str().expect("id").to_string();
    let done = send(
        &addr,
        "curious",
        json!({"messageId": "q-2", "role": "ROLE_USER", "taskId": id,
               "contextId": task["contextId"], "parts": [{"text": "blue"}]}),
    )
    .await;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"],
        "noted: the client said: blue"
    );
    let texts: Vec<&str> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|m| m["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(texts, ["Pick a colour.", "Which colour?", "blue"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_prompt_comes_from_a_file_or_a_skill() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("ok")).await;
    let from_file = agent(
        daemon.root.path(),
        "filed",
        &mock,
        "  system_prompt_file: prompts/system.md\n",
        "",
    );
    std::fs::create_dir_all(from_file.join("prompts")).expect("prompts");
    std::fs::write(
        from_file.join("prompts/system.md"),
        "You answer in haiku.\n",
    )
    .expect("prompt");
    let s = run(&daemon, with_task(&from_file, "Hi.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let system = mock.seen()[0].system();
    assert!(system.starts_with("You answer in haiku."), "{system}");

    let from_skill = agent(
        daemon.root.path(),
        "skilled",
        &mock,
        "  system_prompt_artifact: guide\n",
        "",
    );
    let s = run(&daemon, with_task(&from_skill, "Hi.")).await;
    assert_eq!(s.state, SessionState::Completed, "{s:?}");
    let system = mock.seen()[1].system();
    assert!(
        system.starts_with("# Guide\nAlways echo twice."),
        "{system}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_and_exit_takes_one_task_and_ends() {
    let daemon = agent_daemon().await;
    let mock = MockLlm::start(|_| Reply::text("done")).await;
    let dir = agent(
        daemon.root.path(),
        "oneshot",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: exit}\n",
    );
    let s = daemon.client.start(&request(&dir)).await.expect("start");
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let task = send(
        &addr,
        "oneshot",
        json!({"messageId": "o-1", "role": "ROLE_USER", "parts": [{"text": "Once."}]}),
    )
    .await;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = daemon.client.get(&s.id).await.expect("get");
        if now.state.is_ended() {
            assert_eq!(now.state, SessionState::Completed, "{now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "still {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(mock.seen().len(), 1, "one task, one model call");
}
