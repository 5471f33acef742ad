//! Benchmark, the failover figures of the cluster issue (33): three roostd
//! nodes on three clustered `nats-server -js` (the task journal and the
//! buckets kept in 3 copies), a `restart: always` conformance capsule, and
//! ROUNDS kill rounds: 50 tasks that each record their run are accepted
//! through another node, the node that runs the route is killed (`kill
//! -9`), and the time until a blocking `SendMessage` through a surviving
//! node is answered by the route (now on another node) is measured; then
//! every accepted task is read back until it ends, and the killed node is
//! started again (it rejoins; the route stays where it went). Reports each
//! round, the p50 and largest failover time, and how many accepted tasks
//! were lost or ran twice (one `executions.log` that every node's run of
//! the session writes to). State dirs and JetStream in temp dirs on the
//! real disk (`/tmp` is not a tmpfs here).
//!
//! `cargo bench -p roostd --bench cluster_failover -- [ROUNDS]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../tests/e2e/nats.rs"]
mod nats;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use harness::Daemon;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use roost_wire::api::{RestartPolicy, StartRequest};
use serde_json::{Value, json};

const TASKS_PER_ROUND: usize = 50;

/// One JSON-RPC call on a fresh connection: the status and the body.
async fn call(addr: &str, route: &str, method: &str, params: Value) -> Option<(u16, Value)> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = http::Request::post(format!("/a2a/{route}"))
        .header("host", addr)
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    Some((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

fn send(text: &str, id: &str, immediately: bool) -> Value {
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]},
           "configuration": {"returnImmediately": immediately}})
}

async fn gateway(d: &Daemon) -> String {
    d.client.health().await.expect("health").a2a_addr
}

/// The node the table says runs `route`, as `d` reads it.
async fn owner(d: &Daemon, route: &str) -> Option<String> {
    let list = d.client.cluster_sessions(false).await.ok()?;
    list.into_iter().find(|s| s.name == route).map(|s| s.node)
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let servers = nats::nats_cluster().expect("a nats-server: run scripts/python-sdk");
        let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url)).collect();
        let auth = servers[2].auth();
        let config = |node: &str| {
            format!(
                "{}logs: {{max_bytes: 1048576}}\ncluster: {{servers: [{}], {auth}, node: {node}, replicas: 3}}\n",
                harness::TEST_CONFIG,
                urls.join(", ")
            )
        };
        let env = [("RUST_LOG", "warn")];
        let names = ["a", "b", "c"];
        let mut nodes = Vec::new();
        for name in names {
            nodes.push(Daemon::start_with(&config(name), &env).await);
        }
        let work = tempfile::tempdir().expect("workdir");
        let dir = harness::conformance(
            nodes[0].root.path(),
            "failover",
            "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 4}",
            "",
        );
        nodes[0]
            .client
            .start(&StartRequest {
                name: Some("failover".into()),
                node: Some("a".into()),
                restart: RestartPolicy::Always,
                workdir: Some(work.path().display().to_string()),
                ..harness::request(&dir)
            })
            .await
            .expect("start");
        println!(
            "{rounds} rounds, {TASKS_PER_ROUND} accepted tasks each; three nodes, three NATS \
             servers, node_ttl_secs 3 (the default)"
        );
        println!(
            "{:<6} {:<8} {:>12} {:>10} {:>8} {:>6}",
            "round", "killed", "failover_ms", "completed", "failed", "lost"
        );
        let mut times = Vec::new();
        let (mut lost, mut sent) = (0, 0);
        let mut next = 0usize;
        for round in 0..rounds {
            let killed = owner(&nodes[0], "failover")
                .await
                .or(owner(&nodes[1], "failover").await)
                .expect("the route runs somewhere");
            let k = names.iter().position(|n| *n == killed).expect("a node");
            let survivor = (k + 1) % 3;
            let via = gateway(&nodes[survivor]).await;
            let mut ids = Vec::new();
            for _ in 0..TASKS_PER_ROUND {
                next += 1;
                let (status, answer) = call(&via, "failover", "SendMessage",
                    send("record 20", &format!("r{round}-{next}"), true))
                    .await
                    .expect("send");
                let id = answer["result"]["task"]["id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("not accepted ({status}): {answer}"));
                ids.push(id.to_string());
            }
            sent += ids.len();
            let killed_at = Instant::now();
            nodes[k].kill9();
            // Answered by the route again (on another node).
            let failover = loop {
                next += 1;
                if let Some((200, answer)) =
                    call(&via, "failover", "SendMessage", send("hello", &format!("probe-{next}"), false)).await
                    && answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
                {
                    break killed_at.elapsed();
                }
                assert!(killed_at.elapsed() < Duration::from_secs(60), "the route never came back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            times.push(failover);
            let (mut completed, mut failed, mut gone) = (0, 0, 0);
            for id in &ids {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let state = match call(&via, "failover", "GetTask", json!({"id": id})).await {
                        Some((200, answer)) => answer["result"]["status"]["state"]
                            .as_str()
                            .map(str::to_string),
                        _ => None,
                    };
                    match state.as_deref() {
                        Some("TASK_STATE_COMPLETED") => completed += 1,
                        Some("TASK_STATE_FAILED") => failed += 1,
                        _ if Instant::now() > deadline => gone += 1,
                        _ => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                    break;
                }
            }
            lost += gone;
            println!(
                "{:<6} {:<8} {:>12.0} {:>10} {:>8} {:>6}",
                round + 1,
                killed,
                failover.as_secs_f64() * 1000.0,
                completed,
                failed,
                gone
            );
            nodes[k].spawn().await;
        }
        let log = std::fs::read_to_string(work.path().join("executions.log")).unwrap_or_default();
        let mut runs: HashMap<&str, usize> = HashMap::new();
        for line in log.lines().filter(|l| !l.is_empty()) {
            *runs.entry(line).or_insert(0) += 1;
        }
        let twice = runs.values().filter(|n| **n > 1).count();
        times.sort();
        let p50 = times[times.len() / 2];
        let max = times[times.len() - 1];
        println!(
            "failover (kill -9 to answered on another node): p50 {:.0} ms, max {:.0} ms; \
             accepted {sent}, lost {lost}, ran twice {twice}",
            p50.as_secs_f64() * 1000.0,
            max.as_secs_f64() * 1000.0
        );
    });
}
