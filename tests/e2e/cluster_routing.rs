//! Routes across the nodes of a cluster (a real `nats-server -js`): any
//! node's gateway serves any route — its card from the cluster's route
//! table, everything else handed over NATS to the node that runs it — a
//! route name is the cluster's, and a node that is gone is said to be.

use std::time::Duration;

use roost_wire::api::StartRequest;
use serde_json::{Value, json};

use prost::Message;
use roostd::a2a::grpc::pb;

use crate::a2a::{JSON, V1, http, message, rpc, sse_events};
use crate::a2a_grpc::{call, frame, send_request};
use crate::cluster::{nats, nats_cluster, node_config, roostctl_args};
use crate::harness::{Daemon, conformance, request};

const LIFECYCLE: &str = "{task_acceptance: queue, after_task: sleep}";

async fn gateway(d: &Daemon) -> String {
    d.client.health().await.expect("health").a2a_addr
}

/// Route `name` from `dir`, started on `node` (not placed elsewhere).
fn named(dir: &std::path::Path, name: &str, node: &str) -> StartRequest {
    StartRequest {
        name: Some(name.into()),
        node: Some(node.into()),
        ..request(dir)
    }
}

/// The ids of the tasks node `d` holds for its session `name`.
async fn task_ids(d: &Daemon, name: &str) -> Vec<String> {
    let tasks = d.client.tasks(name).await.expect("tasks");
    tasks.into_iter().map(|t| t.id).collect()
}

fn get_request(tenant: &str, id: &str) -> Vec<u8> {
    let request = pb::GetTaskRequest {
        tenant: tenant.into(),
        id: id.into(),
        ..Default::default()
    };
    frame(&request.encode_to_vec())
}

fn answer(task: &Value) -> &str {
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_serves_any_route_by_handing_its_requests_to_the_node_that_runs_it() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    let mut c = Daemon::start_with(&node_config(&nats, "c"), &[]).await;
    let (a_addr, b_addr, c_addr) = (gateway(&a).await, gateway(&b).await, gateway(&c).await);
    let dir = conformance(a.root.path(), "echo", LIFECYCLE, "");
    a.client
        .start(&named(&dir, "echo", "a"))
        .await
        .expect("start on a");

    // Sent through b, run on a.
    let sent = rpc(
        &b_addr,
        "echo",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-1", "hello")}),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(answer(task), "echo: hello", "{sent}");
    let id = task["id"].as_str().expect("task id").to_string();
    let on_a = task_ids(&a, "echo").await;
    assert!(
        on_a.iter().any(|t| t == &id),
        "the task is stored on a: {on_a:?}"
    );

    // Read through c; the same message id again through c is the same task.
    let got = rpc(&c_addr, "echo", Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["id"], id.as_str(), "{got}");
    assert_eq!(answer(&got["result"]), "echo: hello");
    let again = rpc(
        &c_addr,
        "echo",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-1", "hello")}),
    )
    .await;
    assert_eq!(
        again["result"]["task"]["id"],
        id.as_str(),
        "deduplicated on a: {again}"
    );
    // The HTTP+JSON binding too.
    let (status, _, body) = http(&c_addr, "GET", &format!("/a2a/echo/tasks/{id}"), &[V1], "").await;
    assert_eq!(status, 200, "{body}");

    // The card, from any node, names the node it was read from.
    let (status, _, card) = http(
        &c_addr,
        "GET",
        "/a2a/echo/.well-known/agent-card.json",
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{card}");
    let card: Value = serde_json::from_str(&card).expect("card");
    let url = card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(url, format!("http://{c_addr}/a2a/echo"), "{card}");
    assert_eq!(card["name"], "echo");

    // A stream through b: every event, in order, to the end.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage",
        "params": {"message": message("m-2", "slow")}})
    .to_string();
    let (status, head, body) = http(&b_addr, "POST", "/a2a/echo", &[V1, JSON], &body).await;
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let events = sse_events(&body);
    let ticks: String = events
        .iter()
        .filter_map(|e| e["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert!(
        ticks.starts_with("tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n"),
        "{body}"
    );
    let last = &events.last().expect("events")["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(last, "TASK_STATE_COMPLETED", "{body}");

    // gRPC through b: the call goes to a as the JSON-RPC request it is.
    let unary = call(&b_addr, "SendMessage", send_request("echo", "g-1"), &[]).await;
    assert_eq!(unary.status, "0", "{}", unary.message);
    let answer_of = |bytes: &[u8]| {
        let decoded = pb::SendMessageResponse::decode(bytes).expect("a SendMessageResponse");
        serde_json::to_value(decoded).expect("json")
    };
    let task = answer_of(&unary.messages[0]);
    assert_eq!(
        task["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{task}"
    );
    assert_eq!(answer(&task["task"]), "echo: hello", "{task}");
    let streamed = call(
        &b_addr,
        "SendStreamingMessage",
        send_request("echo", "g-2"),
        &[],
    )
    .await;
    assert_eq!(streamed.status, "0", "{}", streamed.message);
    let events: Vec<Value> = streamed
        .messages
        .iter()
        .map(|m| {
            serde_json::to_value(pb::StreamResponse::decode(&m[..]).expect("an event"))
                .expect("json")
        })
        .collect();
    let last = events.last().expect("events");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    let missing = call(&b_addr, "GetTask", get_request("echo", "tsk_nope"), &[]).await;
    assert_eq!(
        missing.status, "5",
        "NOT_FOUND from a, through b: {}",
        missing.message
    );

    // The name is the cluster's: b cannot start another "echo" while a
    // runs it (the control: under another name it starts).
    let other = conformance(b.root.path(), "echo", LIFECYCLE, "");
    let refused = b
        .client
        .start(&named(&other, "echo", "b"))
        .await
        .expect_err("taken");
    let text = refused.to_string();
    assert!(text.contains("node a") && text.contains("echo"), "{text}");
    b.client
        .start(&named(&other, "echo-b", "b"))
        .await
        .expect("another name starts");

    // Every node's sessions, from any node, with the node that runs each.
    let listed = roostctl_args(&c, &["list", "--cluster"]);
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("echo").starts_with("a ") && line("echo").contains("live"),
        "{listed}"
    );
    assert!(line("echo-b").starts_with("b "), "{listed}");
    assert!(
        listed
            .lines()
            .next()
            .unwrap_or_default()
            .starts_with("NODE"),
        "{listed}"
    );

    // Ended on a: its tasks stay readable from b; then b takes the name and
    // a hands the route's new requests to b.
    a.client.stop("echo").await.expect("stop");
    let got = rpc(&b_addr, "echo", Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["id"], id.as_str(), "{got}");
    b.client
        .start(&named(&other, "echo", "b"))
        .await
        .expect("the ended name is free");
    // a hears of b's claim through its copy of the route table (a watch):
    // until then the name is an ended route there, which says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let sent = loop {
        let sent = rpc(
            &a_addr,
            "echo",
            Some("1.0"),
            "SendMessage",
            json!({"message": message("m-3", "again")}),
        )
        .await;
        if !sent["result"].is_null() || std::time::Instant::now() > deadline {
            break sent;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer(&sent["result"]["task"]), "echo: again", "{sent}");
    let new_id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let on_b = task_ids(&b, "echo").await;
    assert!(
        on_b.contains(&new_id),
        "the new task is stored on b: {on_b:?}"
    );

    // A node that is gone is said to be: c runs "lone", dies, and b says
    // c does not answer (at once: no node listens on c's subject).
    let lone = conformance(c.root.path(), "lone", LIFECYCLE, "");
    c.client
        .start(&named(&lone, "lone", "c"))
        .await
        .expect("start on c");
    let ok = rpc(
        &b_addr,
        "lone",
        Some("1.0"),
        "SendMessage",
        json!({"message": message("m-4", "hi")}),
    )
    .await;
    assert_eq!(answer(&ok["result"]["task"]), "echo: hi", "{ok}");
    c.kill9();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message("m-5", "hi")}})
    .to_string();
    let started = std::time::Instant::now();
    let (status, _, body) = http(&b_addr, "POST", "/a2a/lone", &[V1, JSON], &body).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("node c") && body.contains("not answering"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "said at once, not after a timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_through_another_node_needs_the_routes_token_as_at_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let Some(nats) = nats() else { return };
    let secrets = tempfile::tempdir().expect("tempdir");
    let token_path = secrets.path().join("a2a.token");
    std::fs::write(&token_path, "cluster-test-token-0123456789").expect("token");
    std::fs::set_permissions(&token_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = |node: &str| {
        format!(
            "{}a2a: {{token_file: \"{}\"}}\n",
            node_config(&nats, node),
            token_path.display()
        )
    };
    let a = Daemon::start_with(&config("a"), &[]).await;
    let b = Daemon::start_with(&config("b"), &[]).await;
    let b_addr = gateway(&b).await;
    let dir = conformance(a.root.path(), "echo", LIFECYCLE, "");
    a.client
        .start(&named(&dir, "echo", "a"))
        .await
        .expect("start on a");
    let send = |id: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message(id, "hello")}})
        .to_string()
    };
    // Without a token, and with a wrong one: refused, nothing runs.
    let (status, head, body) = http(&b_addr, "POST", "/a2a/echo", &[V1, JSON], &send("t-1")).await;
    assert_eq!(status, 401, "{body}");
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let wrong = ("Authorization", "Bearer not-the-token");
    let (status, _, body) = http(
        &b_addr,
        "POST",
        "/a2a/echo",
        &[V1, JSON, wrong],
        &send("t-2"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let grpc = call(&b_addr, "SendMessage", send_request("echo", "t-3"), &[]).await;
    assert_eq!(grpc.status, "16", "UNAUTHENTICATED: {}", grpc.message);
    assert!(
        task_ids(&a, "echo").await.is_empty(),
        "a refused request ran nothing"
    );
    // The control: the route's token opens it through b, on both bindings.
    let right = ("Authorization", "Bearer cluster-test-token-0123456789");
    let (status, _, body) = http(
        &b_addr,
        "POST",
        "/a2a/echo",
        &[V1, JSON, right],
        &send("t-4"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("echo: hello"), "{body}");
    let grpc = call(
        &b_addr,
        "SendMessage",
        send_request("echo", "t-5"),
        &[("authorization", "Bearer cluster-test-token-0123456789")],
    )
    .await;
    assert_eq!(grpc.status, "0", "{}", grpc.message);
    assert_eq!(task_ids(&a, "echo").await.len(), 2);

    // Ended, the route stays in the table (its tasks readable); removed
    // with `rm`, it leaves the table too.
    a.client.stop("echo").await.expect("stop");
    let listed = |all: Vec<roost_wire::api::ClusterSession>| {
        all.into_iter()
            .filter(|s| s.name == "echo")
            .map(|s| (s.node, s.live))
            .collect::<Vec<_>>()
    };
    // (Marked ended in the background, once the session has ended.)
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let seen = listed(b.client.cluster_sessions(true).await.expect("list"));
        if seen == [("a".to_string(), false)] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(listed(b.client.cluster_sessions(false).await.expect("list")).is_empty());
    a.client.remove("echo", false).await.expect("rm");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !listed(b.client.cluster_sessions(true).await.expect("list")).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed route stays in the table"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `text` through `addr` to `route` until it completes (NATS clients
/// reconnecting meanwhile), or 20 s; the answer.
async fn send_until_done(addr: &str, route: &str, id: &str, text: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for attempt in 0.. {
        // A new message id each time: a task the journal refused (a
        // stream whose leader is moving after a server left) is failed,
        // and the same id would only read it back.
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message(&format!("{id}-{attempt}"), text)}})
        .to_string();
        let (status, _, answer) =
            http(addr, "POST", &format!("/a2a/{route}"), &[V1, JSON], &body).await;
        if status == 200 {
            let answer: Value = serde_json::from_str(&answer).expect("JSON-RPC");
            if answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" {
                return answer;
            }
            assert!(std::time::Instant::now() < deadline, "{answer}");
        } else {
            assert!(std::time::Instant::now() < deadline, "{status}: {answer}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_nats_server_of_three_gone_the_cluster_keeps_serving() {
    let Some(mut servers) = nats_cluster() else {
        return;
    };
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url)).collect();
    // The token file of a server that stays (the first one goes below).
    let auth = servers[2].auth();
    let config = |node: &str| {
        format!(
            "{}cluster: {{servers: [{}], {}, node: {node}, node_ttl_secs: 3, replicas: 3}}\n",
            crate::harness::TEST_CONFIG,
            urls.join(", "),
            auth
        )
    };
    let a = Daemon::start_with(&config("a"), &[]).await;
    let b = Daemon::start_with(&config("b"), &[]).await;
    let (a_addr, b_addr) = (gateway(&a).await, gateway(&b).await);
    let dir = conformance(a.root.path(), "echo", LIFECYCLE, "");
    a.client
        .start(&named(&dir, "echo", "a"))
        .await
        .expect("start on a");
    let first = send_until_done(&b_addr, "echo", "k-1", "before").await;
    assert_eq!(answer(&first["result"]["task"]), "echo: before", "{first}");
    let id = first["result"]["task"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // One of three servers goes (SIGKILL): its clients reconnect to the
    // others, and the replicated buckets keep their quorum.
    drop(servers.remove(0));
    let after = send_until_done(&b_addr, "echo", "k-2", "after").await;
    assert_eq!(answer(&after["result"]["task"]), "echo: after", "{after}");
    let got = rpc(&b_addr, "echo", Some("1.0"), "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["id"], id.as_str(), "{got}");
    // A route claimed now, on b, is served through a.
    let other = conformance(b.root.path(), "late", LIFECYCLE, "");
    b.client
        .start(&named(&other, "late", "b"))
        .await
        .expect("a claim with two of three servers");
    let late = send_until_done(&a_addr, "late", "k-3", "late").await;
    assert_eq!(answer(&late["result"]["task"]), "echo: late", "{late}");
    // Both nodes are still in the registry (read again while its bucket's
    // replicas settle after the loss).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let cluster = a
            .client
            .health()
            .await
            .expect("health")
            .cluster
            .expect("cluster");
        let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.node.clone()).collect();
        if nodes == ["a", "b"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{nodes:?}: {:?}",
            cluster.error
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
