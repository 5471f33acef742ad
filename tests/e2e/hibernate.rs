//! Hibernation: a session idle for its `lifecycle.hibernate_after` gives
//! back its launch (no live session, no instance) but keeps its route — its
//! card answers, its tasks stay readable — and its next task wakes it
//! (counted in `roost_wakes_total` and the wake histogram). A `kill -9`
//! and restart keep it hibernated, woken only by a task; a stop ends it; a
//! wake that cannot stage fails that task with the reason and leaves the
//! route; an upgrade of a hibernated session runs the new version.

use std::time::{Duration, Instant};

use roost_ctl::api::{RestartPolicy, SessionState, UpgradeRequest};
use serde_json::{Value, json};

use crate::a2a::{http, rpc};
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};
use crate::mock_llm::{MockLlm, Reply, Seen};

const SLEEPY: &str = "{task_acceptance: queue, after_task: sleep, hibernate_after: 1s}";

/// A blocking send: the whole JSON-RPC answer.
async fn send(addr: &str, route: &str, id: &str, text: &str) -> Value {
    rpc(
        addr,
        route,
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]}}),
    )
    .await
}

/// The answer's text of a completed task (panics with the answer if not).
fn said(answer: &Value) -> String {
    let task = &answer["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "not completed: {answer}"
    );
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits until session `id` is in `state` (or panics after 20 s).
async fn until(d: &Daemon, id: &str, state: SessionState) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let session = d.client.get(id).await.expect("get");
        if session.state == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "session {id} is {:?}, never {state:?}\n{}",
            session.state,
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn card(addr: &str, route: &str) -> Value {
    let path = format!("/a2a/{route}/.well-known/agent-card.json");
    let (status, _, body) = http(addr, "GET", &path, &[], "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("card json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hibernated_session_keeps_its_route_and_wakes_on_its_next_task_across_kill_9() {
    let mut d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let dir = conformance(d.root.path(), "sleepy", SLEEPY, "");
    let session = d.start_supervised(&dir, RestartPolicy::Always).await;
    let first = send(&addr, "sleepy", "m1", "version").await;
    assert_eq!(said(&first), "version 0.1.0");
    let first_id = first["result"]["task"]["id"]
        .as_str()
        .expect("id")
        .to_string();

    // Idle for 1 s: hibernated, nothing of it live, its route open.
    until(&d, &session.id, SessionState::Hibernated).await;
    assert_eq!(d.metric("roost_live_sessions ").await, 0);
    assert_eq!(d.metric("roost_hibernated_sessions ").await, 1);
    assert_eq!(d.metric("roost_wakes_total ").await, 0);
    assert_eq!(card(&addr, "sleepy").await["name"], "sleepy");
    let read = rpc(
        &addr,
        "sleepy",
        Some("1.0"),
        "GetTask",
        json!({"id": first_id}),
    )
    .await;
    assert_eq!(
        read["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{read}"
    );
    let listed = d.client.list(false).await.expect("list");
    assert!(
        listed.iter().any(|s| s.id == session.id),
        "a hibernated session is listed as live: {listed:?}"
    );

    // Its next task wakes it, under the same id; the wake is counted.
    let woke = send(&addr, "sleepy", "m2", "version").await;
    assert_eq!(said(&woke), "version 0.1.0");
    assert_eq!(d.metric("roost_wakes_total ").await, 1);
    assert_eq!(d.metric("roost_wake_duration_seconds_count ").await, 1);
    let now = d.client.get(&session.id).await.expect("get");
    assert_eq!(now.name, "sleepy");
    let (status, body) = d
        .client
        .raw(
            hyper::Method::GET,
            &format!("/v1/sessions/{}/events", session.id),
            None,
        )
        .await
        .expect("events");
    assert!(status.is_success());
    let events: Vec<Value> = serde_json::from_slice(&body).expect("json");
    let states: Vec<&str> = events.iter().filter_map(|e| e["state"].as_str()).collect();
    assert!(
        states.windows(2).any(|w| w == ["hibernated", "running"]),
        "history: {states:?}"
    );

    // kill -9 while it sleeps: after the restart it is still asleep (not
    // woken, not interrupted), its card answers, and a task wakes it.
    until(&d, &session.id, SessionState::Hibernated).await;
    d.kill9();
    d.spawn().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    assert_eq!(card(&addr, "sleepy").await["name"], "sleepy");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = d.client.get(&session.id).await.expect("get");
    assert_eq!(after.state, SessionState::Hibernated, "{after:?}");
    assert_eq!(d.metric("roost_wakes_total ").await, 0);
    assert_eq!(d.metric("roost_hibernated_sessions ").await, 1);
    let woke = send(&addr, "sleepy", "m3", "version").await;
    assert_eq!(said(&woke), "version 0.1.0");
    assert_eq!(d.metric("roost_wakes_total ").await, 1);

    // An upgrade of a hibernated session runs the new version at once.
    until(&d, &session.id, SessionState::Hibernated).await;
    let v2 = conformance(d.root.path(), "sleepy", SLEEPY, "");
    let manifest = v2.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(&manifest, text.replace("version: 0.1.0", "version: 0.2.0")).expect("write");
    let upgraded = d
        .client
        .upgrade(
            "sleepy",
            &UpgradeRequest {
                path: Some(v2.display().to_string()),
                ..UpgradeRequest::default()
            },
        )
        .await
        .expect("upgrade");
    assert_eq!(
        (upgraded.id.as_str(), upgraded.version.as_str()),
        (session.id.as_str(), "0.2.0")
    );
    assert_eq!(
        said(&send(&addr, "sleepy", "m4", "version").await),
        "version 0.2.0"
    );

    // A stop ends a hibernated session: its route goes.
    until(&d, &session.id, SessionState::Hibernated).await;
    let stopped = d.client.stop("sleepy").await.expect("stop");
    assert_eq!(stopped.state, SessionState::Stopped);
    let gone = send(&addr, "sleepy", "m5", "version").await;
    assert!(gone.get("error").is_some(), "{gone}");
    assert_eq!(d.metric("roost_hibernated_sessions ").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_that_cannot_stage_fails_its_task_with_the_reason_and_keeps_the_route() {
    let d = Daemon::start().await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let dir = conformance(d.root.path(), "fragile", SLEEPY, "");
    let session = d.client.start(&request(&dir)).await.expect("start");
    until(&d, &session.id, SessionState::Hibernated).await;
    let manifest = dir.join("murmur.yaml");
    let good = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(&manifest, "name: fragile\nversion: [not a version\n").expect("break");

    let failed = send(&addr, "fragile", "m1", "version").await;
    let task = &failed["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{failed}");
    let why = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("did not wake") && why.contains("murmur.yaml"),
        "the reason names the wake and the manifest: {failed}"
    );
    // The route stays: still hibernated, and once the manifest is fixed
    // the next task wakes it.
    let now = d.client.get(&session.id).await.expect("get");
    assert_eq!(now.state, SessionState::Hibernated);
    assert_eq!(card(&addr, "fragile").await["name"], "fragile");
    std::fs::write(&manifest, good).expect("fix");
    assert_eq!(
        said(&send(&addr, "fragile", "m2", "version").await),
        "version 0.1.0"
    );
    assert_eq!(d.metric("roost_wakes_total ").await, 1);
}

pub(crate) fn model(seen: &Seen) -> Reply {
    let last = seen.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    Reply::text(&format!("heard {last}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_hibernates_and_wakes_with_its_conversation() {
    let d = Daemon::start_with(crate::harness::AGENT_CONFIG, &[("ROOST_E2E_KEY", KEY)]).await;
    publish_agent_artifacts(&d).await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let mock = MockLlm::start(model).await;
    let extra = format!("lifecycle: {SLEEPY}\n");
    let dir = agent(d.root.path(), "dozer", &mock, "", &extra);
    let session = d.client.start(&request(&dir)).await.expect("start");
    let context = "ctx-dozer";
    let ask = |id: &'static str, text: &'static str| {
        let addr = addr.clone();
        async move {
            rpc(
                &addr,
                "dozer",
                Some("1.0"),
                "SendMessage",
                json!({"message": {"messageId": id, "role": "ROLE_USER", "contextId": context,
                       "parts": [{"text": text}]}}),
            )
            .await
        }
    };
    assert_eq!(said_agent(&ask("a1", "one").await), "heard one");
    until(&d, &session.id, SessionState::Hibernated).await;
    assert_eq!(d.metric("roost_live_sessions ").await, 0);
    assert_eq!(said_agent(&ask("a2", "two").await), "heard two");
    assert_eq!(d.metric("roost_wakes_total ").await, 1);
    // The woken agent's model saw the context's earlier task.
    let last = mock.seen().last().cloned().expect("a model call");
    let messages = last.body["messages"].to_string();
    assert!(
        messages.contains("one") && messages.contains("heard one"),
        "{messages}"
    );
}

/// An agent's answer: its reply message or its artifact.
pub(crate) fn said_agent(answer: &Value) -> String {
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .or(task["status"]["message"]["parts"][0]["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibernate_after_that_cannot_apply_is_refused_saying_what_to_fix() {
    let d = Daemon::start().await;
    for (lifecycle, says) in [
        (
            "{task_acceptance: queue, after_task: sleep, hibernate_after: soon}",
            "not a duration",
        ),
        (
            "{task_acceptance: queue, after_task: sleep, hibernate_after: 10ms}",
            "from 1s",
        ),
        (
            "{task_acceptance: single, hibernate_after: 5m}",
            "waits for tasks",
        ),
    ] {
        let dir = conformance(d.root.path(), "bad", lifecycle, "");
        let error = d
            .client
            .start(&request(&dir))
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("hibernate_after") && error.contains(says),
            "{lifecycle}: {error}"
        );
    }
}

/// `hibernation.max_awake`: past the bound, the session idle the longest
/// hibernates at once, long before its `hibernate_after`; within it none
/// does (the control); a woken one counts again and sends the next longest
/// idle to sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_awake_the_session_idle_the_longest_hibernates_early() {
    const HOUR: &str = "{task_acceptance: queue, after_task: sleep, hibernate_after: 1h}";
    let config = format!("{TEST_CONFIG}hibernation: {{max_awake: 2}}\n");
    let d = Daemon::start_with(&config, &[]).await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let mut ids = Vec::new();
    for n in 1..=2 {
        let dir = conformance(d.root.path(), &format!("hour{n}"), HOUR, "");
        ids.push(d.start_supervised(&dir, RestartPolicy::Always).await.id);
    }
    // Within the bound: awake (an hour to go), both answering.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(d.metric("roost_hibernated_sessions ").await, 0);
    for n in 1..=2 {
        assert_eq!(
            said(&send(&addr, &format!("hour{n}"), &format!("a{n}"), "version").await),
            "version 0.1.0"
        );
    }
    // Two more: the two idle the longest (the first two) hibernate now.
    for n in 3..=4 {
        let dir = conformance(d.root.path(), &format!("hour{n}"), HOUR, "");
        ids.push(d.start_supervised(&dir, RestartPolicy::Always).await.id);
    }
    until(&d, &ids[0], SessionState::Hibernated).await;
    until(&d, &ids[1], SessionState::Hibernated).await;
    for id in &ids[2..] {
        assert_eq!(
            d.client.get(id).await.expect("get").state,
            SessionState::Running
        );
    }
    // A task wakes the first: three awake, so the one idle the longest of
    // the other two (the third) hibernates.
    assert_eq!(
        said(&send(&addr, "hour1", "b1", "version").await),
        "version 0.1.0"
    );
    until(&d, &ids[2], SessionState::Hibernated).await;
    assert_eq!(
        d.client.get(&ids[0]).await.expect("get").state,
        SessionState::Running
    );
    assert_eq!(
        d.client.get(&ids[3]).await.expect("get").state,
        SessionState::Running
    );
    assert_eq!(d.metric("roost_hibernated_sessions ").await, 2);
    assert_eq!(d.metric("roost_wakes_total ").await, 1);
}
