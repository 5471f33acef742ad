//! Chaos: A2A tasks in flight across a script capsule and an agent while
//! roostd is killed with SIGKILL at a random moment, round after round.
//! After each restart every acknowledged task is readable and ends (or is
//! still queued), none ran twice, the database passes `integrity_check`, and
//! no session is `running` without a live guest. `CHAOS_ROUNDS` rounds
//! (default 3; `scripts/chaos N` runs N), alternating `store.sync: full`
//! and `normal`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use roost_ctl::api::{RestartPolicy, SessionState, StartRequest};
use serde_json::{Value, json};

use crate::a2a::message;
use crate::agents::{KEY, agent, publish_agent_artifacts};
use crate::harness::{AGENT_CONFIG, Daemon, conformance, request};
use crate::mock_llm::{MockLlm, Reply};

const TASKS_PER_ROUND: usize = 200;
const CLIENTS: usize = 8;

/// One JSON-RPC call that may fail (roostd may be dead): `None` then.
async fn try_rpc(addr: &str, route: &str, method: &str, params: Value) -> Option<Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!(
            "POST /a2a/{route} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.ok()?;
        stream.write_all(body.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.ok()?;
        let text = String::from_utf8_lossy(&out);
        let (_, body) = text.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .ok()
        .flatten()
}

/// A pseudo-random number from the clock (the rounds need no more).
fn random(below: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos.wrapping_mul(2_654_435_761)) % below.max(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_tasks_survive_kill_9_at_any_moment_and_run_once() {
    let rounds: usize = std::env::var("CHAOS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut daemon = Daemon::start_with(AGENT_CONFIG, &[("ROOST_E2E_KEY", KEY)]).await;
    publish_agent_artifacts(&daemon).await;
    let mock = MockLlm::start(|seen| {
        let task = seen.messages()[0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        Reply::text(&format!("done: {task}")).delay(Duration::from_millis(5))
    })
    .await;
    let lifecycle = "{task_acceptance: queue, after_task: sleep, queue_depth: 512, concurrency: 4}";
    let script_dir = conformance(daemon.root.path(), "chaos-script", lifecycle, "");
    let agent_dir = agent(
        daemon.root.path(),
        "chaos-agent",
        &mock,
        "",
        "lifecycle: {task_acceptance: queue, after_task: sleep, queue_depth: 512}\n",
    );
    let always = |dir| StartRequest {
        restart: RestartPolicy::Always,
        ..request(dir)
    };
    let script = daemon
        .client
        .start(&always(&script_dir))
        .await
        .expect("script");
    daemon
        .client
        .start(&always(&agent_dir))
        .await
        .expect("agent");
    let executions = std::path::PathBuf::from(&script.workdir).join("executions.log");
    // Every task acknowledged so far: (route, task id).
    let mut acked: Vec<(String, String)> = Vec::new();
    for round in 0..rounds {
        let addr = daemon.client.health().await.expect("health").a2a_addr;
        let kill_after = Duration::from_millis(random(400));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let addr = addr.clone();
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for i in (c..TASKS_PER_ROUND).step_by(CLIENTS) {
                        let (route, text) = if i % 2 == 0 {
                            ("chaos-script", "record 20".to_string())
                        } else {
                            ("chaos-agent", format!("job r{round} t{i}"))
                        };
                        let id = format!("chaos-r{round}-t{i}");
                        let params = json!({"message": message(&id, &text),
                            "configuration": {"returnImmediately": true}});
                        match try_rpc(&addr, route, "SendMessage", params).await {
                            Some(r) => match r["result"]["task"]["id"].as_str() {
                                Some(task) => mine.push((route.to_string(), task.to_string())),
                                None => break,
                            },
                            // roostd is gone: what was not acknowledged may
                            // or may not exist; it is not counted.
                            None => break,
                        }
                    }
                    mine
                })
            })
            .collect();
        tokio::time::sleep(kill_after).await;
        daemon.kill9();
        let mut this_round = 0;
        for client in clients {
            let mine = client.await.expect("client");
            this_round += mine.len();
            acked.extend(mine);
        }
        eprintln!(
            "chaos round {round}: killed after {kill_after:?}, {this_round} tasks acknowledged"
        );
        // The next round runs with the other `store.sync`: `full` (the
        // default, round 0) and `normal`, where a lone request's commits are
        // made on its own thread rather than the writer's.
        let sync = if round % 2 == 0 { "normal" } else { "full" };
        std::fs::write(
            &daemon.config,
            format!("{AGENT_CONFIG}store: {{sync: {sync}}}\n"),
        )
        .expect("config");
        daemon.spawn().await;
        let addr = daemon.client.health().await.expect("health").a2a_addr;

        // Every acknowledged task is readable and ends: queued ones run
        // after the restart, the ones that were running fail visibly.
        let deadline = Instant::now() + Duration::from_secs(180);
        for (route, id) in &acked {
            loop {
                let r = try_rpc(&addr, route, "GetTask", json!({"id": id}))
                    .await
                    .unwrap_or_default();
                let state = r["result"]["status"]["state"].as_str().unwrap_or_else(|| {
                    panic!(
                        "round {round}: acknowledged task {id} lost: {r}\n{}",
                        daemon.log()
                    )
                });
                match state {
                    "TASK_STATE_COMPLETED" => break,
                    "TASK_STATE_FAILED" => {
                        let why = r["result"]["status"]["message"]["parts"][0]["text"]
                            .as_str()
                            .unwrap_or("");
                        assert!(
                            why.starts_with("interrupted") || why.contains("never ran"),
                            "round {round}: {id} failed otherwise: {r}\n{}",
                            daemon.log()
                        );
                        break;
                    }
                    _ => {}
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round}: task {id} never ended: {r}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // None ran twice: the script capsule logs each run as it starts, the
        // mock model sees each agent task's first call.
        let log = std::fs::read_to_string(&executions).unwrap_or_default();
        let mut runs: HashMap<&str, u32> = HashMap::new();
        for line in log.lines() {
            *runs.entry(line).or_default() += 1;
        }
        let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "round {round}: script tasks ran twice: {twice:?}"
        );
        let mut jobs: HashMap<String, u32> = HashMap::new();
        for seen in mock.seen() {
            let job = seen.messages()[0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if seen.messages().len() == 1 {
                *jobs.entry(job).or_default() += 1;
            }
        }
        let twice: Vec<_> = jobs.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "round {round}: agent tasks ran twice: {twice:?}"
        );

        // The database is whole.
        let db = rusqlite::Connection::open_with_flags(
            daemon.state_dir.join("roost.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open the database");
        let integrity: String = db
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .expect("integrity_check");
        assert_eq!(integrity, "ok", "round {round}");

        // No session is `running` without a live guest: each answers as a
        // live agent.
        for session in daemon.client.list(false).await.expect("list") {
            if session.state == SessionState::Running {
                let (_, card) = card(&addr, &session.name).await;
                assert!(
                    !card.contains("Unavailable"),
                    "round {round}: {} is running but not live: {card}",
                    session.name
                );
            }
        }
    }
    assert!(!acked.is_empty(), "some tasks were acknowledged");
}

async fn card(addr: &str, route: &str) -> (u16, String) {
    let (status, _, body) = crate::a2a::http(
        addr,
        "GET",
        &format!("/a2a/{route}/.well-known/agent-card.json"),
        &[],
        "",
    )
    .await;
    (status, body)
}
