//! Accepted A2A tasks, end to end: readable after their session has ended,
//! matched by route; a retried message (same `messageId`) gets its first
//! task and runs nothing again.

use std::time::Duration;

use serde_json::{Value, json};

use crate::a2a::{http, message, rpc};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

async fn daemon() -> (Daemon, String) {
    let daemon = Daemon::start_with(TEST_CONFIG, &[]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    (daemon, addr)
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_task_stays_readable_after_its_session_ends() {
    let (daemon, addr) = daemon().await;
    // The default lifecycle: one task, then the session ends.
    let dir = conformance(
        daemon.root.path(),
        "once",
        "{task_acceptance: single, after_task: exit}",
        "",
    );
    let session = daemon.client.start(&request(&dir)).await.expect("start");
    let sent = rpc(
        &addr,
        "once",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-once", "hi"), "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("acknowledged: {sent}"))
        .to_string();
    let ended = tokio::time::timeout(Duration::from_secs(60), daemon.client.wait(&session.id))
        .await
        .expect("the session ends after its task")
        .expect("wait");
    assert!(ended.state.is_ended(), "{ended:?}");

    // The task outlives its session: read by route.
    let got = rpc(&addr, "once", Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(state(&got["result"]), "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(
        got["result"]["artifacts"][0]["parts"][0]["text"], "echo: hi",
        "{got}"
    );
    let list = rpc(&addr, "once", Some("1.0"), "ListTasks", json!({})).await;
    assert_eq!(list["result"]["totalSize"], 1, "{list}");
    let rest = http(&addr, "GET", &format!("/a2a/once/tasks/{id}"), &[], "").await;
    assert_eq!(rest.0, 200, "HTTP+JSON GetTask: {rest:?}");
    let cancel = rpc(&addr, "once", Some("1.0"), "CancelTask", json!({"id": id})).await;
    assert_eq!(cancel["error"]["code"], -32002, "not cancelable: {cancel}");

    // Gone, not never here: the card says so, and a send says why.
    let (status, _, card) = http(
        &addr,
        "GET",
        "/a2a/once/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{card}");
    assert!(card.contains("Unavailable"), "{card}");
    let refused = rpc(
        &addr,
        "once",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-late", "hi")}),
    )
    .await;
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("has ended"), "{refused}");
    let (never, _, _) = http(
        &addr,
        "GET",
        "/a2a/never-was/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(never, 404);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    let (status, _, unknown) = http(
        &addr,
        "POST",
        "/a2a/never-was",
        &[("Content-Type", "application/json"), ("A2A-Version", "1.0")],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 404, "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_message_gets_its_first_task_and_runs_nothing_again() {
    let (daemon, addr) = daemon().await;
    let dir = conformance(
        daemon.root.path(),
        "retry",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 16, concurrency: 4}",
        "",
    );
    daemon.client.start(&request(&dir)).await.expect("start");
    let send = |id: &'static str, text: &'static str| {
        let addr = addr.clone();
        async move {
            rpc(
                &addr,
                "retry",
                Some("1.0"),
                "SendMessage",
                json!({"message": message(id, text)}),
            )
            .await
        }
    };
    let first = send("m-same", "one").await;
    assert_eq!(
        state(&first["result"]["task"]),
        "TASK_STATE_COMPLETED",
        "{first}"
    );
    let id = first["result"]["task"]["id"].clone();
    // A retry, even with other text, is the same message: its task.
    let again = send("m-same", "two").await;
    assert_eq!(again["result"]["task"]["id"], id, "{again}");
    assert_eq!(
        again["result"]["task"]["artifacts"][0]["parts"][0]["text"], "echo: one",
        "{again}"
    );
    // Two attempts at once: one task between them.
    let (a, b) = tokio::join!(send("m-twice", "slow"), send("m-twice", "slow"));
    assert_eq!(
        a["result"]["task"]["id"], b["result"]["task"]["id"],
        "{a}\n{b}"
    );
    let list = rpc(&addr, "retry", Some("1.0"), "ListTasks", json!({})).await;
    assert_eq!(
        list["result"]["totalSize"], 2,
        "one task per message id: {list}"
    );
    // A new message id is a new task.
    let other = send("m-other", "three").await;
    assert_ne!(other["result"]["task"]["id"], id);
}
