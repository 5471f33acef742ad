//! A node of a cluster that dies, or is cut off, loses no accepted task
//! and runs none twice (a real `nats-server -js`): its `restart: always`
//! session comes back on another node under the same id and name, with
//! every task it had accepted (journaled in JetStream before the client
//! heard back); those that never started run there, the one that was
//! running ends failed, saying why; and a node that comes back after the
//! route moved does not run it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use roost_wire::api::{RestartPolicy, StartRequest};
use serde_json::{Value, json};

use crate::a2a::{JSON, V1, http, message, rpc};
use crate::cluster::{nats, node_config};
use crate::harness::{Daemon, conformance, request};

/// 4 tasks at a time, 512 may wait: most of 200 still wait when the node dies.
pub(crate) const LIFECYCLE: &str =
    "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 4}";

pub(crate) async fn gateway(d: &Daemon) -> String {
    d.client.health().await.expect("health").a2a_addr
}

/// Sends `n` tasks that each record their run in `executions.log` and take
/// `ms`, acknowledged one by one (`returnImmediately`); their ids.
pub(crate) async fn send_recorded(addr: &str, route: &str, n: usize, ms: u64) -> Vec<String> {
    let mut acked = Vec::new();
    for i in 0..n {
        let r = rpc(
            addr,
            route,
            Some("1.0"),
            "SendMessage",
            json!({"message": message(&format!("f-{i}-{}", crate::harness::unique()), &format!("record {ms}")),
                   "configuration": {"returnImmediately": true}}),
        )
        .await;
        let id = r["result"]["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("not acknowledged: {r}"));
        acked.push(id.to_string());
    }
    acked
}

/// Waits until every task in `ids` has ended, read through `addr`: each
/// one's final state and status message.
pub(crate) async fn ends(
    addr: &str,
    route: &str,
    ids: &[String],
    within: Duration,
    nodes: &[&Daemon],
) -> Vec<(String, String)> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    for id in ids {
        loop {
            let body =
                json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
            let (status, _, body) = http(
                addr,
                "POST",
                &format!("/a2a/{route}"),
                &[JSON, V1],
                &body.to_string(),
            )
            .await;
            // 503 route_starting while the route is being taken over.
            if status == 503 && body.contains("route_starting") {
                assert!(Instant::now() < deadline, "the route never started: {body}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(status, 200, "{body}");
            let r: serde_json::Value = serde_json::from_str(&body).expect("json");
            let state = r["result"]["status"]["state"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if matches!(
                state.as_str(),
                "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED"
            ) {
                let why = r["result"]["status"]["message"]["parts"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                out.push((state, why));
                break;
            }
            if Instant::now() > deadline || r.get("error").is_some() {
                let logs: Vec<String> = nodes.iter().map(|d| d.log()).collect();
                panic!(
                    "task {id} never ended (lost?): {r}\n{}",
                    logs.join("\n----\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    out
}

/// How many times each task id ran (lines of `executions.log`).
pub(crate) fn runs(workdir: &std::path::Path) -> HashMap<String, usize> {
    let log = std::fs::read_to_string(workdir.join("executions.log")).unwrap_or_default();
    let mut runs = HashMap::new();
    for line in log.lines().filter(|l| !l.is_empty()) {
        *runs.entry(line.to_string()).or_insert(0) += 1;
    }
    runs
}

/// The node the cluster's table says runs `route`, as `d` sees it.
pub(crate) async fn node_of(d: &Daemon, route: &str) -> Option<(String, String, bool)> {
    let list = d.client.cluster_sessions(true).await.ok()?;
    list.into_iter()
        .find(|s| s.name == route)
        .map(|s| (s.node, s.id, s.live))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_session_comes_back_elsewhere_with_every_accepted_task_none_run_twice() {
    let Some(nats) = nats() else { return };
    let mut a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    let c = Daemon::start_with(&node_config(&nats, "c"), &[]).await;
    let (a_addr, b_addr) = (gateway(&a).await, gateway(&b).await);
    // One workdir every node's run of the session writes to: a task that
    // ran on two nodes would be two lines.
    let work = tempfile::tempdir().expect("workdir");
    let dir = conformance(a.root.path(), "durable", LIFECYCLE, "");
    // An earlier session of the route, stopped: its tasks are the route's
    // too, and come over ended.
    let earlier = a
        .client
        .start(&StartRequest {
            name: Some("durable".into()),
            node: Some("a".into()),
            ..request(&dir)
        })
        .await
        .expect("earlier");
    let mut old = Vec::new();
    for i in 0..3 {
        let r = rpc(
            &a_addr,
            "durable",
            Some("1.0"),
            "SendMessage",
            json!({"message": message(&format!("old-{i}"), "hello")}),
        )
        .await;
        old.push(
            r["result"]["task"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_string(),
        );
    }
    a.client.stop(&earlier.id).await.expect("stop");
    let session = a
        .client
        .start(&StartRequest {
            name: Some("durable".into()),
            node: Some("a".into()),
            restart: RestartPolicy::Always,
            workdir: Some(work.path().display().to_string()),
            ..request(&dir)
        })
        .await
        .unwrap_or_else(|e| panic!("start: {e}\n{}", a.log()));
    // 200 tasks, half sent to the node that runs the route and half
    // through another one; each acknowledged, most still queued.
    let mut acked = send_recorded(&a_addr, "durable", 100, 40).await;
    acked.extend(send_recorded(&b_addr, "durable", 100, 40).await);
    let killed_at = Instant::now();
    a.kill9();
    // The route comes back on b or c, same session id.
    let moved = loop {
        if let Some((node, id, true)) = node_of(&b, "durable").await
            && node != "a"
        {
            break (node, id);
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "the route never moved:\nb:\n{}\nc:\n{}",
            b.log(),
            c.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let moved_after = killed_at.elapsed();
    assert_eq!(moved.1, session.id, "taken over under the same session id");
    let before = ends(&b_addr, "durable", &old, Duration::from_secs(30), &[&b, &c]).await;
    assert!(
        before
            .iter()
            .all(|(state, _)| state == "TASK_STATE_COMPLETED"),
        "{before:?}"
    );
    let ended = ends(
        &b_addr,
        "durable",
        &acked,
        Duration::from_secs(120),
        &[&b, &c],
    )
    .await;
    let runs = runs(work.path());
    let mut completed = 0;
    for (id, (state, why)) in acked.iter().zip(&ended) {
        let ran = runs.get(id).copied().unwrap_or(0);
        assert!(ran <= 1, "task {id} ran {ran} times");
        match state.as_str() {
            "TASK_STATE_COMPLETED" => {
                assert_eq!(ran, 1, "task {id} completed without a run");
                completed += 1;
            }
            // Running on a when it died: not run again, said so.
            "TASK_STATE_FAILED" => assert!(
                why.contains("node a") && why.contains("not run again"),
                "task {id}: {why}"
            ),
            other => panic!("task {id} ended {other}: {why}"),
        }
    }
    eprintln!(
        "moved to node {} {:?} after the kill; {completed} of 200 completed, the rest failed",
        moved.0, moved_after
    );
    assert!(completed >= 190, "{completed} of 200 completed");
    // The killed node comes back: its copy of the session does not take
    // the route back, and none of the tasks it had queued runs again.
    a.spawn().await;
    let back = Instant::now();
    while back.elapsed() < Duration::from_secs(3) {
        let held = node_of(&b, "durable").await.expect("route");
        assert_eq!(held.0, moved.0, "node a took the route back:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = self::runs(work.path());
    assert!(
        again.values().all(|n| *n == 1),
        "a task ran twice after node a came back"
    );
    assert_eq!(
        again.len(),
        runs.len(),
        "node a ran tasks after it came back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_while_its_route_moved_does_not_run_it_when_it_comes_back() {
    let Some(nats) = nats() else { return };
    let a = Daemon::start_with(&node_config(&nats, "a"), &[]).await;
    let b = Daemon::start_with(&node_config(&nats, "b"), &[]).await;
    let a_addr = gateway(&a).await;
    let b_addr = gateway(&b).await;
    let work = tempfile::tempdir().expect("workdir");
    let dir = conformance(a.root.path(), "fenced", LIFECYCLE, "");
    a.client
        .start(&StartRequest {
            name: Some("fenced".into()),
            node: Some("a".into()),
            restart: RestartPolicy::Always,
            workdir: Some(work.path().display().to_string()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let acked = send_recorded(&a_addr, "fenced", 60, 100).await;
    // Frozen (as if cut off): its heartbeat stops, b takes the route.
    let pid = a.pid() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let frozen_at = Instant::now();
    loop {
        if let Some((node, _, true)) = node_of(&b, "fenced").await
            && node == "b"
        {
            break;
        }
        assert!(
            frozen_at.elapsed() < Duration::from_secs(30),
            "b never took the route:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Back: a gives the route up and starts none of the tasks b took.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let ended = ends(
        &b_addr,
        "fenced",
        &acked,
        Duration::from_secs(120),
        &[&a, &b],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let here = a.client.list(true).await.expect("list");
        if here
            .iter()
            .any(|s| s.name == "fenced" && s.state.is_ended())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a still runs the route b took:\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give a moment for anything a would (wrongly) still start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = runs(work.path());
    for (id, (state, why)) in acked.iter().zip(&ended) {
        let ran = runs.get(id).copied().unwrap_or(0);
        assert!(ran <= 1, "task {id} ran {ran} times ({state}: {why})");
        if state == "TASK_STATE_COMPLETED" {
            assert_eq!(ran, 1, "task {id}");
        }
    }
    let b_runs = ended
        .iter()
        .filter(|(s, _)| s == "TASK_STATE_COMPLETED")
        .count();
    assert!(b_runs >= 50, "{b_runs} of 60 completed");
    let _ = Value::Null;
}
