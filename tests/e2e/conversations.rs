//! An agent's conversation per A2A context: the next task in a context
//! starts from the earlier ones (also after a daemon restart), another
//! context or a `per_task` agent starts fresh, and the conversation goes
//! with its context's last task.

use serde_json::{Value, json};

use crate::a2a::rpc;
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{Daemon, request};
use crate::mock_llm::{MockLlm, Reply, Seen};

/// The model answers with every user message it was sent, in order.
fn hearing(seen: &Seen) -> Reply {
    let users: Vec<String> = seen
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    Reply::text(&format!("heard: {}", users.join(" | ")))
}

async fn daemon() -> (Daemon, String) {
    let daemon = Daemon::start_with(crate::harness::AGENT_CONFIG, &[("ROOST_E2E_KEY", KEY)]).await;
    publish_agent_artifacts(&daemon).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    (daemon, addr)
}

/// A `queue` + `sleep` agent; `lifecycle` is added to its lifecycle, `extra`
/// to the manifest.
async fn start(daemon: &Daemon, mock: &MockLlm, name: &str, lifecycle: &str, extra: &str) {
    let extra =
        format!("lifecycle: {{task_acceptance: queue, after_task: sleep{lifecycle}}}\n{extra}");
    let dir = agent(daemon.root.path(), name, mock, "", &extra);
    daemon.client.start(&request(&dir)).await.expect("start");
}

/// Sends `text` (in `context`, if given); the completed task's answer and
/// context id.
async fn send(
    addr: &str,
    route: &str,
    id: &str,
    text: &str,
    context: Option<&str>,
) -> (String, String) {
    let mut message = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(context) = context {
        message["contextId"] = json!(context);
    }
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let answer = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let context = task["contextId"].as_str().expect("context id");
    (answer.to_string(), context.to_string())
}

fn roles(seen: &Seen) -> Vec<String> {
    seen.messages()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_remembers_its_earlier_tasks_also_after_a_restart() {
    let (mut daemon, addr) = daemon().await;
    let mock = MockLlm::start(hearing).await;
    start(&daemon, &mock, "memo", "", "").await;

    let (answer, ctx) = send(&addr, "memo", "c-1", "my name is Zephyrine", None).await;
    assert_eq!(answer, "heard: my name is Zephyrine");
    let (answer, same) = send(&addr, "memo", "c-2", "what is my name", Some(&ctx)).await;
    assert_eq!(same, ctx);
    assert_eq!(answer, "heard: my name is Zephyrine | what is my name");
    let second = mock.seen().last().cloned().expect("a request");
    assert_eq!(roles(&second), ["user", "assistant", "user"]);
    assert_eq!(
        second.messages()[1]["content"],
        "heard: my name is Zephyrine"
    );

    // Another context hears only itself.
    let (answer, other) = send(&addr, "memo", "c-3", "hello", None).await;
    assert_ne!(other, ctx);
    assert_eq!(answer, "heard: hello");

    // A restart, and a new session under the same name: the context goes on.
    daemon.signal_and_wait(libc::SIGTERM, std::time::Duration::from_secs(30));
    daemon.spawn().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    start(&daemon, &mock, "memo", "", "").await;
    let (answer, _) = send(&addr, "memo", "c-4", "and now?", Some(&ctx)).await;
    assert_eq!(
        answer,
        "heard: my name is Zephyrine | what is my name | and now?"
    );

    // The trace says how much of the context each task started from.
    let sessions = daemon.client.list(true).await.expect("list");
    let live = sessions.iter().find(|s| !s.state.is_ended()).expect("live");
    let trace = String::from_utf8(daemon.client.trace(&live.id).await.expect("trace").to_vec())
        .expect("utf-8");
    let first: Value = trace
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .find(|e| e["event"] == "task_start")
        .expect("task_start");
    assert_eq!(first["history_messages"], 4, "{first}");

    // Removing the route's sessions removes their tasks, and with the
    // context's last task its conversation.
    for s in &sessions {
        daemon.client.remove(&s.id, true).await.expect("rm --force");
    }
    start(&daemon, &mock, "memo", "", "").await;
    let (answer, _) = send(&addr, "memo", "c-5", "who am I?", Some(&ctx)).await;
    assert_eq!(
        answer, "heard: who am I?",
        "the conversation went with its tasks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_task_agents_start_every_task_fresh() {
    let (daemon, addr) = daemon().await;
    let mock = MockLlm::start(hearing).await;
    start(
        &daemon,
        &mock,
        "fresh",
        "",
        "context: {conversation: per_task}\n",
    )
    .await;
    // The seed's name for it.
    start(
        &daemon,
        &mock,
        "seedlike",
        ", conversation_mode: per_task",
        "",
    )
    .await;
    let (_, ctx) = send(&addr, "fresh", "f-1", "first", None).await;
    let (answer, _) = send(&addr, "fresh", "f-2", "second", Some(&ctx)).await;
    assert_eq!(answer, "heard: second");
    assert_eq!(roles(&mock.seen().last().cloned().expect("seen")), ["user"]);

    let (_, seed_ctx) = send(&addr, "seedlike", "s-1", "one", None).await;
    let (answer, _) = send(&addr, "seedlike", "s-2", "two", Some(&seed_ctx)).await;
    assert_eq!(answer, "heard: two");

    // Contexts are per route: the same context id on a per_context agent
    // is a context of its own there.
    start(&daemon, &mock, "keeper", "", "").await;
    let (answer, _) = send(&addr, "keeper", "k-1", "elsewhere", Some(&ctx)).await;
    assert_eq!(answer, "heard: elsewhere");
}

/// Each user message as the model got it: `text`, or its content parts'
/// types joined by `+`.
fn shapes(seen: &Seen) -> Reply {
    let users: Vec<String> = seen
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match m["content"].as_array() {
            Some(parts) => parts
                .iter()
                .map(|p| p["type"].as_str().unwrap_or("?").to_string())
                .collect::<Vec<_>>()
                .join("+"),
            None => "text".into(),
        })
        .collect();
    Reply::text(&users.join(" | "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_is_sent_a_tasks_images_and_pdfs_and_later_tasks_read_their_names() {
    let (daemon, addr) = daemon().await;
    let mock = MockLlm::start(shapes).await;
    start(&daemon, &mock, "looker", "", "").await;
    let message = json!({"messageId": "look-1", "role": "ROLE_USER", "parts": [
        {"text": "what is in these?"},
        {"raw": "iVBORw0KGgo=", "mediaType": "image/png", "filename": "a.png"},
        {"raw": "JVBERi0xLjQ=", "mediaType": "application/pdf", "filename": "r.pdf"},
        {"raw": "YSxiCg==", "mediaType": "text/csv", "filename": "c.csv"},
    ]});
    let r = rpc(
        &addr,
        "looker",
        Some("1.0"),
        "SendMessage",
        json!({"message": message}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"], "text+image_url+file",
        "{r}"
    );
    let first = mock.seen()[0].messages();
    let content = &first.iter().find(|m| m["role"] == "user").expect("user")["content"];
    assert_eq!(
        content[1]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
    assert_eq!(
        content[2]["file"],
        json!({"filename": "r.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="})
    );
    // The CSV, which the API does not take, is named in the text.
    let text = content[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("what is in these?") && text.contains("[file c.csv (text/csv), 8 base64"),
        "{text}"
    );
    // The next task of the context reads the earlier message's text only.
    let context = task["contextId"].as_str().expect("context");
    let (answer, _) = send(&addr, "looker", "look-2", "and now?", Some(context)).await;
    assert_eq!(answer, "text | text");
}
