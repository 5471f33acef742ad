//! Double-texting: a message on a context whose task has not ended does
//! what the capsule's `lifecycle.same_context` says — `queue` (the default:
//! it waits its turn), `reject` (an error naming the running task), or
//! `interrupt` (the running task is canceled, its status saying by which
//! message, and the new one runs) — on a script capsule and on an agent.
//! Each rule's control: a message in another context is never refused or
//! canceled (an agent runs it after the task it is on).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::a2a::rpc;
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{Daemon, conformance, request};
use crate::mock_llm::{MockLlm, Reply, Seen};

fn message(id: &str, text: &str, context: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "contextId": context,
           "parts": [{"text": text}]})
}

/// Sends without waiting: the task as accepted.
async fn start(addr: &str, route: &str, id: &str, text: &str, context: &str) -> Value {
    let r = rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(id, text, context),
               "configuration": {"returnImmediately": true}}),
    )
    .await;
    r["result"]["task"].clone()
}

/// Sends and waits: the whole JSON-RPC answer.
async fn send(addr: &str, route: &str, id: &str, text: &str, context: &str) -> Value {
    rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": message(id, text, context)}),
    )
    .await
}

async fn get(addr: &str, route: &str, id: &str) -> Value {
    rpc(addr, route, Some("1.0"), "GetTask", json!({"id": id})).await["result"].clone()
}

/// Waits until task `id` is in `state` (or panics after 30 s).
async fn until_state(addr: &str, route: &str, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get(addr, route, id).await;
        if task["status"]["state"] == state {
            return task;
        }
        assert!(Instant::now() < deadline, "{id} never {state}: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn answer(task: &Value) -> String {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// One rule on one route whose "busy" message keeps its task working: the
/// second message in the same context, then one in another context.
async fn check(addr: &str, route: &str, rule: &str, busy: &str, quick: &str, expect: &str) {
    let context = format!("ctx-{rule}-{route}");
    let first = start(addr, route, &format!("{route}-{rule}-1"), busy, &context).await;
    let first_id = first["id"].as_str().expect("task id").to_string();
    until_state(addr, route, &first_id, "TASK_STATE_WORKING").await;
    let second = send(addr, route, &format!("{route}-{rule}-2"), quick, &context).await;
    match rule {
        "queue" => {
            // Accepted; the first goes on (an agent runs it first).
            let task = &second["result"]["task"];
            assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{second}");
            assert_eq!(answer(task), expect, "{second}");
            let first = get(addr, route, &first_id).await;
            assert_ne!(first["status"]["state"], "TASK_STATE_CANCELED", "{first}");
        }
        "reject" => {
            let error = second["error"]["message"].as_str().unwrap_or_default();
            assert!(
                error.contains(&first_id) && error.contains("same_context: reject"),
                "{second}"
            );
            let first = get(addr, route, &first_id).await;
            assert_eq!(first["status"]["state"], "TASK_STATE_WORKING", "{first}");
        }
        _ => {
            let task = &second["result"]["task"];
            assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{second}");
            assert_eq!(answer(task), expect, "{second}");
            let first = until_state(addr, route, &first_id, "TASK_STATE_CANCELED").await;
            let why = first["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap_or_default();
            let second_id = task["id"].as_str().unwrap_or_default();
            assert!(
                why.contains("interrupted") && why.contains(second_id),
                "{first}"
            );
        }
    }
    // The control: another context is never refused or interrupted.
    let other = send(
        addr,
        route,
        &format!("{route}-{rule}-3"),
        quick,
        &format!("{context}-other"),
    )
    .await;
    assert_eq!(
        other["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{other}"
    );
    // Nothing left running.
    let _ = rpc(
        addr,
        route,
        Some("1.0"),
        "CancelTask",
        json!({"id": first_id}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_capsule_queues_rejects_or_interrupts_as_its_lifecycle_says() {
    let daemon = Daemon::start().await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    for rule in ["queue", "reject", "interrupt"] {
        let lifecycle = format!(
            "{{task_acceptance: queue, after_task: sleep, concurrency: 4, same_context: {rule}}}"
        );
        let route = format!("script-{rule}");
        let dir = conformance(daemon.root.path(), &route, &lifecycle, "");
        daemon.client.start(&request(&dir)).await.expect("start");
        check(&addr, &route, rule, "sleep", "hello", "echo: hello").await;
    }
}

/// "slow" takes the model 3 s; anything else is answered at once.
fn model(seen: &Seen) -> Reply {
    let last = seen
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    if last == "slow" {
        Reply::text("done slowly").delay(Duration::from_secs(3))
    } else {
        Reply::text(&format!("heard {last}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_queues_rejects_or_interrupts_as_its_lifecycle_says() {
    let daemon = Daemon::start_with(crate::harness::AGENT_CONFIG, &[("ROOST_E2E_KEY", KEY)]).await;
    publish_agent_artifacts(&daemon).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let mock = MockLlm::start(model).await;
    for rule in ["queue", "reject", "interrupt"] {
        let route = format!("agent-{rule}");
        let extra = format!(
            "lifecycle: {{task_acceptance: queue, after_task: sleep, same_context: {rule}}}\n"
        );
        let dir = agent(daemon.root.path(), &route, &mock, "", &extra);
        daemon.client.start(&request(&dir)).await.expect("start");
        check(&addr, &route, rule, "slow", "quick", "heard quick").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_same_context_rule_is_refused_with_the_choices() {
    let daemon = Daemon::start().await;
    let dir = conformance(
        daemon.root.path(),
        "bad",
        "{task_acceptance: queue, after_task: sleep, same_context: drop}",
        "",
    );
    let error = daemon
        .client
        .start(&request(&dir))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("same_context") && error.contains("interrupt"),
        "{error}"
    );
}
