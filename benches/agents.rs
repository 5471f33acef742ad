//! Benchmark, the two figures of the agent-capsules issue:
//! 1. host overhead per agent turn (one driver call + one tool call) against a
//!    zero-latency mock model: the per-turn time of the real agent loop in
//!    roostd (from its trace), next to the floor measured in the same run: the
//!    same driver and the same tool called directly on an Engine in this
//!    process with the same request sizes (no loop, no trace, no database);
//! 2. memory per agent session waiting on a slow model: roostd's RSS with K
//!    sessions each parked in a model call, against its RSS before they started.
//!
//! `cargo bench -p roostd --bench agents -- [TURNS] [WAITING]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Daemon, artifact_dir, guest, openai_driver, publish, request};
use mock_llm::{MockLlm, Reply};
use roost_ctl::api::{SessionState, StartRequest};
use roostd::logs::LogSink;
use roostd::metrics::Metrics;
use roostd::policy::{Capabilities, CapabilityPolicy};
use roostd::runtime::{Runtime, RuntimeConfig, ToolSpec};
use tokio_util::sync::CancellationToken;

const RUNS: usize = 5;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `VmRSS`, `RssAnon` and `RssFile` of a process, in KiB.
fn rss_kib(pid: u32) -> [u64; 3] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    [field("VmRSS:"), field("RssAnon:"), field("RssFile:")]
}

/// Per-item growth of each RSS figure.
fn per_item(before: [u64; 3], after: [u64; 3], n: usize) -> String {
    let d = |i: usize| after[i].saturating_sub(before[i]) as f64 / n as f64;
    format!(
        "{:>7.1} KiB (anonymous {:.1}, file-backed {:.1})",
        d(0),
        d(1),
        d(2)
    )
}

fn ts_ms(ts: &str) -> f64 {
    let t = humantime::parse_rfc3339(ts).expect("rfc3339");
    t.duration_since(std::time::UNIX_EPOCH)
        .expect("epoch")
        .as_secs_f64()
        * 1e3
}

fn capsule(root: &Path, name: &str, mock: &MockLlm) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("murmur.yaml"),
        format!(
            "name: {name}\nversion: 0.1.0\n\
             artifacts:\n  - {{name: openai-driver, version: 0.1.0, runtime: driver}}\n  - {{name: echo-tool, version: 1.0.0, runtime: tool}}\n\
             tools: [echo-tool]\n\
             capabilities: {{network: {{allow: [\"http://127.0.0.1:{port}\"]}}, limits: {{timeout_secs: 600}}}}\n\
             inference:\n  endpoint: {endpoint}\n  model: bench\n  max_turns: 100000\n\
             \x20 driver: {{artifact: openai-driver, config: {{continuation: true}}}}\n",
            port = mock.port,
            endpoint = mock.endpoint(),
        ),
    )
    .expect("manifest");
    dir
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let turns: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let waiting: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);

    let daemon = Daemon::start().await;
    let registry = daemon.state_dir.join("registry");
    let (driver_manifest, driver) = openai_driver();
    let echo = std::fs::read(guest("echo_tool")).expect("echo");
    for dir in [
        artifact_dir(
            daemon.root.path(),
            &driver_manifest,
            "component.wasm",
            &driver,
        ),
        artifact_dir(
            daemon.root.path(),
            "name: echo-tool\nversion: 1.0.0\nruntime: tool\n",
            "component.wasm",
            &echo,
        ),
    ] {
        publish(&registry, &dir).await;
    }

    // 1. Turns: the mock asks for the tool until the task's last turn. The
    // driver keeps a continuation, so each request carries one new message,
    // as in the floor below.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let mock = MockLlm::start(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n % turns == turns - 1 {
            Reply::text("done").id("resp")
        } else {
            Reply::tools(&[("echo-tool", r#"{"text":"bench"}"#)]).id("resp")
        }
    })
    .await;
    let dir = capsule(daemon.root.path(), "turns", &mock);
    let mut per_turn = Vec::new();
    for run in 0..=RUNS {
        let s = daemon
            .client
            .start(&StartRequest {
                task: Some("Call the tool until told to stop.".into()),
                name: Some(format!("turns-{run}")),
                ..request(&dir)
            })
            .await
            .expect("start");
        let s = daemon.client.wait(&s.id).await.expect("wait");
        assert_eq!(s.state, SessionState::Completed, "{s:?}");
        let trace = daemon.client.trace(&s.id).await.expect("trace");
        let events: Vec<serde_json::Value> = String::from_utf8_lossy(&trace)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let at = |name: &str| {
            ts_ms(
                events
                    .iter()
                    .find(|e| e["event"] == name)
                    .and_then(|e| e["ts"].as_str())
                    .expect("event"),
            )
        };
        if run > 0 {
            // run 0 warms the compile cache and the connection pool
            per_turn.push((at("task_end") - at("task_start")) / turns as f64);
        }
    }
    let agent = median(per_turn);

    // The floor: the same driver request size and tool call, directly.
    let cache = tempfile::tempdir().expect("cache");
    let rt = Runtime::new(
        &RuntimeConfig {
            max_instances: 300,
            max_memory_bytes: 256 << 20,
            cache_dir: cache.path().to_path_buf(),
        },
        Arc::new(Metrics::default()),
    )
    .expect("runtime");
    let driver_tool = rt.prepare_tool("driver", driver).await.expect("driver");
    let echo_tool = rt.prepare_tool("echo", echo).await.expect("echo");
    let caps: Capabilities = serde_yaml::from_str(&format!(
        "network: {{allow: [\"http://127.0.0.1:{}\"]}}",
        mock.port
    ))
    .expect("caps");
    let policy = Arc::new(CapabilityPolicy::from_manifest(caps).expect("policy"));
    let work = tempfile::tempdir().expect("work");
    let spec = ToolSpec {
        session_id: "ses_bench".into(),
        capsule: "bench".into(),
        workdir: work.path().to_path_buf(),
        bookkeeping: work.path().to_path_buf(),
        env: vec![
            ("MURMUR_INFERENCE_ENDPOINT".into(), mock.endpoint()),
            (
                "MURMUR_INFERENCE_DRIVER_CONFIG".into(),
                r#"{"continuation":true}"#.into(),
            ),
        ],
        timeout: Duration::from_secs(60),
        memory_bytes: 128 << 20,
        policy: policy.clone(),
        log: LogSink::new(&work.path().join("logs"), 1 << 20),
        stop: CancellationToken::new(),
        processes: Arc::new(roostd::tools::SessionProcesses::unjailed(
            work.path(),
            policy.clone(),
            Duration::from_secs(60),
        )),
        notes: None,
        task: None,
    };
    let request_json = serde_json::json!({
        "protocol": 1, "purpose": "turn", "model": "bench", "system": "x".repeat(1200),
        "messages": [{"role": "tool", "tool_call_id": "call_0", "name": "echo-tool", "content": "{\"text\":\"bench\"}"}],
        "tools": [{"name": "echo-tool", "description": "", "input_schema": {"type": "object"}}],
        "limits": {"max_output_tokens": null, "context_tokens": null},
        "continuation_id": "resp", "stream": true,
    })
    .to_string();
    let mut floor = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        for _ in 0..turns {
            let out = rt
                .run_tool(&driver_tool, "driver", Some(request_json.clone()), &spec)
                .await
                .expect("driver");
            assert!(out.data.is_some(), "{:?}", out.summary);
            rt.call_tool_data(
                &echo_tool,
                "echo-tool",
                Some(r#"{"text":"bench"}"#.into()),
                &spec,
            )
            .await
            .expect("echo");
        }
        floor.push(ms(started.elapsed()) / turns as f64);
    }
    let floor = median(floor);
    println!(
        "agent turn (driver call + one tool call), {turns} turns × {RUNS} tasks, zero-latency mock:"
    );
    println!("  roostd agent loop       {:>8.3} ms/turn", agent);
    println!("  floor (direct calls)    {:>8.3} ms/turn", floor);
    println!(
        "  host overhead           {:>8.3} ms/turn  ({:.2}×)",
        agent - floor,
        agent / floor
    );

    // 2. Memory: K sessions parked in a model call.
    let slow = MockLlm::start(|_| Reply::text("late").delay(Duration::from_secs(600))).await;
    let dir = capsule(daemon.root.path(), "waiter", &slow);
    let warm = daemon
        .client
        .start(&StartRequest {
            task: Some("Wait.".into()),
            name: Some("waiter-warm".into()),
            ..request(&dir)
        })
        .await
        .expect("start");
    while slow.in_flight() < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Idle blocking-pool threads (used while staging) exit after 10 s; the
    // figures are taken after that, so they count only what stays.
    let settle = Duration::from_secs(12);
    tokio::time::sleep(settle).await;
    let mut rss = vec![rss_kib(daemon.pid())];
    let mut ids = Vec::new();
    for round in 0..2 {
        for i in 0..waiting {
            let s = daemon
                .client
                .start(&StartRequest {
                    task: Some("Wait.".into()),
                    name: Some(format!("waiter-{round}-{i}")),
                    ..request(&dir)
                })
                .await
                .expect("start");
            ids.push(s.id);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while slow.in_flight() < ids.len() + 1 {
            assert!(
                Instant::now() < deadline,
                "only {} waiting",
                slow.in_flight()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(settle).await;
        rss.push(rss_kib(daemon.pid()));
    }
    println!(
        "memory, agent sessions each waiting on a model call (RSS after {} s settling):",
        settle.as_secs()
    );
    println!(
        "  roostd RSS: {} KiB idle, {} KiB with {waiting} waiting, {} KiB with {}",
        rss[0][0],
        rss[1][0],
        rss[2][0],
        2 * waiting
    );
    println!(
        "  per waiting session, first {waiting}   {}",
        per_item(rss[0], rss[1], waiting)
    );
    println!(
        "  per waiting session, next {waiting}    {}",
        per_item(rss[1], rss[2], waiting)
    );
    for id in ids.iter().chain([&warm.id]) {
        let _ = daemon.client.stop(id).await;
    }

    // The same number of bare driver calls parked on the slow model in this
    // process: what the driver instances and their HTTP requests cost alone.
    let parked = MockLlm::start(|_| Reply::text("late").delay(Duration::from_secs(600))).await;
    let mut bare_spec = spec.clone();
    bare_spec.env[0].1 = parked.endpoint();
    let caps: Capabilities = serde_yaml::from_str(&format!(
        "network: {{allow: [\"http://127.0.0.1:{}\"]}}",
        parked.port
    ))
    .expect("caps");
    bare_spec.policy = Arc::new(CapabilityPolicy::from_manifest(caps).expect("policy"));
    // The size of an agent's first request: MURMUR.md as the system message,
    // the task, one tool definition.
    let first = serde_json::json!({
        "protocol": 1, "purpose": "turn", "model": "bench", "system": "x".repeat(1200),
        "messages": [{"role": "user", "content": "Wait."}],
        "tools": [{"name": "echo-tool", "description": "", "input_schema": {"type": "object"}}],
        "limits": {"max_output_tokens": null, "context_tokens": null},
        "continuation_id": null, "stream": true,
    })
    .to_string();
    let spawn_one = |rt: &Arc<Runtime>| {
        let rt = Arc::clone(rt);
        let tool = Arc::clone(&driver_tool);
        let spec = bare_spec.clone();
        let data = first.clone();
        tokio::spawn(async move {
            let _ = rt.run_tool(&tool, "driver", Some(data), &spec).await;
        })
    };
    let rt = Arc::new(rt);
    let warm = spawn_one(&rt);
    while parked.in_flight() < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let me = std::process::id();
    let before = rss_kib(me);
    // SAFETY: mallinfo2 only reads allocator statistics.
    let heap_before = unsafe { libc::mallinfo2() }.uordblks;
    let calls: Vec<_> = (0..waiting).map(|_| spawn_one(&rt)).collect();
    while parked.in_flight() < waiting + 1 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(settle).await;
    let after = rss_kib(me);
    // SAFETY: as above.
    let heap_after = unsafe { libc::mallinfo2() }.uordblks;
    println!(
        "  floor: a bare driver call parked    {}",
        per_item(before, after, waiting)
    );
    println!(
        "         of which host heap (malloc)  {:>7.1} KiB",
        heap_after.saturating_sub(heap_before) as f64 / 1024.0 / waiting as f64
    );
    for call in calls.into_iter().chain([warm]) {
        call.abort();
    }
}
