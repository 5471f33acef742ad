//! A cluster under faults, against real `nats-server -js` clusters: what a
//! node promises when a NATS server it depends on dies.

use std::time::{Duration, Instant};

use roost_wire::api::StartRequest;
use serde_json::json;

use crate::a2a::{JSON, V1, http, message};
use crate::cluster::nats_cluster;
use crate::harness::{Daemon, TEST_CONFIG, conformance, request};

/// The server (`nats-<i>`) that leads the task journal's stream, as a
/// client of `server` reads it.
async fn journal_leader(server: &crate::nats::Nats) -> Option<String> {
    let js = async_nats::jetstream::new(server.client().await);
    let mut stream = js.get_stream("ROOST_TASKS").await.ok()?;
    let info = stream.info().await.ok()?;
    info.cluster.as_ref().and_then(|c| c.leader.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_journals_stream_leader_keeps_every_send_succeeding() {
    let Some(mut servers) = nats_cluster() else {
        return;
    };
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url)).collect();
    let config = |node: &str, auth: &str| {
        format!(
            "{TEST_CONFIG}cluster: {{servers: [{}], {auth}, node: {node}, node_ttl_secs: 3, replicas: 3}}\n",
            urls.join(", ")
        )
    };
    let a = Daemon::start_with(&config("a", &servers[0].auth()), &[]).await;
    let addr = a.client.health().await.expect("health").a2a_addr;
    let dir = conformance(
        a.root.path(),
        "echo",
        "{task_acceptance: queue, after_task: sleep}",
        "",
    );
    a.client
        .start(&StartRequest {
            name: Some("echo".into()),
            ..request(&dir)
        })
        .await
        .expect("start");
    let send = |id: String| {
        let addr = addr.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message(&id, "hello")}})
            .to_string();
            let (status, _, answer) = http(&addr, "POST", "/a2a/echo", &[V1, JSON], &body).await;
            (status, answer)
        }
    };
    // The journal exists once a task was journaled.
    let (status, answer) = send("lead-0".into()).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("TASK_STATE_COMPLETED"), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let leader = loop {
        if let Some(leader) = journal_leader(&servers[0]).await {
            break leader;
        }
        assert!(
            Instant::now() < deadline,
            "the journal's stream has no leader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let at = servers
        .iter()
        .position(|s| s.name == leader)
        .expect("the leader is one of the three");
    // The stream's leader dies (SIGKILL); sends go on at once.
    drop(servers.remove(at));
    let mut completed = 0;
    let mut refused = Vec::new();
    for i in 1..=20 {
        let (status, answer) = send(format!("lead-{i}")).await;
        if status == 200 && answer.contains("TASK_STATE_COMPLETED") {
            completed += 1;
        } else {
            refused.push(format!("{status}: {answer}"));
        }
    }
    assert_eq!(completed, 20, "{refused:?}\n{}", a.log());
    // The control: the stream did lose its leader, and has another now.
    let now = journal_leader(&servers[0]).await;
    assert!(
        now.as_ref().is_some_and(|n| *n != leader),
        "{now:?} after {leader}"
    );
}
