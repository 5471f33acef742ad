//! Soak: roostd for MINUTES under mixed traffic on loopback, state dir on
//! the real disk, sampled every 10 s. Traffic: blocking A2A sends to a
//! script capsule (4 clients) and to an agent (on a scripted mock model:
//! one tool call, then the answer), streamed sends, sends then cancels, and
//! sessions started (to completion) and stopped. Samples: roostd's RSS, open
//! file descriptors, WAL and database size, and the p99 of the script
//! capsule's blocking sends in the window, into `target/soak/soak.csv`, and
//! a plot of them, `target/soak/soak.png` (gnuplot).
//!
//! The first fifth of the run is warm-up. It fails when, at the end (the
//! last fifth), RSS, fds or the WAL are more than 10% above their level
//! just after warm-up (the next fifth), or the p99 is over twice its level
//! then (medians of the windows' p99s). Runs under 5 minutes print the
//! figures without a verdict.
//!
//! `cargo bench -p roostd --bench soak -- MINUTES` (what `scripts/soak` runs)

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::{
    Daemon, artifact_dir, capsule, conformance, guest, openai_driver, publish, repo, request,
    spinner,
};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use mock_llm::{MockLlm, Reply};
use serde_json::{Value, json};

const SAMPLE: Duration = Duration::from_secs(10);

/// Samples a run needs for a verdict (5 minutes); shorter runs are smoke
/// tests of the harness.
const VERDICT_SAMPLES: usize = 30;

/// Latencies of the script capsule's blocking sends in the current window.
#[derive(Default)]
struct Window {
    latencies: Mutex<Vec<f64>>,
    errors: AtomicU64,
    agent: AtomicU64,
    streamed: AtomicU64,
    canceled: AtomicU64,
    sessions: AtomicU64,
}

/// One keep-alive connection to the A2A gateway.
struct Conn {
    addr: String,
    sender: hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>,
}

impl Conn {
    async fn open(addr: &str) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Self {
            addr: addr.to_string(),
            sender,
        }
    }

    /// A JSON-RPC call on `route`; the whole answer body (an SSE stream for
    /// the streaming methods), or `None` when it failed.
    async fn rpc(&mut self, route: &str, method: &str, params: Value) -> Option<String> {
        if self.sender.ready().await.is_err() {
            *self = Self::open(&self.addr).await;
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let req = http::Request::post(format!("/a2a/{route}"))
            .header("host", &self.addr)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(bytes::Bytes::from(body.to_string())))
            .expect("request");
        let resp = self.sender.send_request(req).await.ok()?;
        let ok = resp.status().is_success();
        let bytes = resp.into_body().collect().await.ok()?.to_bytes();
        ok.then(|| String::from_utf8_lossy(&bytes).into_owned())
    }
}

impl Window {
    /// Counts an answer: in `ok` when it has `state`, else as an error.
    fn count(&self, answer: Option<String>, state: &str, ok: &AtomicU64) -> bool {
        let good = answer.is_some_and(|body| body.contains(state));
        let counter = if good { ok } else { &self.errors };
        counter.fetch_add(1, Ordering::Relaxed);
        good
    }
}

fn message(id: String, text: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

fn next_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("soak-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// `VmRSS` in KiB, open fds.
fn process(pid: u32) -> (u64, u64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    (rss, fds)
}

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let minutes: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10.0);
    let run = Duration::from_secs_f64(minutes * 60.0);
    let out_dir = repo().join("target").join("soak");
    std::fs::create_dir_all(&out_dir).expect("target/soak");

    // Ended tasks and sessions are pruned every 10 s, so what the store
    // holds levels off as it would in service.
    let config = format!(
        "{}logs: {{max_bytes: 65536}}\n\
         retention: {{interval_secs: 10, tasks: {{max_age_secs: 0, max_count: 5000}}, \
         sessions: {{max_age_secs: 0, max_count: 50}}}}\n",
        harness::TEST_CONFIG
    );
    let d = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
    let addr = d.client.health().await.expect("health").a2a_addr;
    let registry = d.state_dir.join("registry");
    let (driver_manifest, driver) = openai_driver();
    let echo = std::fs::read(guest("echo_tool")).expect("echo tool");
    for dir in [
        artifact_dir(d.root.path(), &driver_manifest, "component.wasm", &driver),
        artifact_dir(
            d.root.path(),
            "name: echo-tool\nversion: 1.0.0\nruntime: tool\n",
            "component.wasm",
            &echo,
        ),
    ] {
        publish(&registry, &dir).await;
    }
    // One tool call per task, then the answer.
    let mock = MockLlm::start(|seen| {
        if seen.tool_results().is_empty() {
            Reply::tools(&[("echo-tool", r#"{"text":"soak"}"#)])
        } else {
            Reply::text("done")
        }
    })
    .await;
    let script = conformance(
        d.root.path(),
        "script",
        "{task_acceptance: queue, after_task: sleep, queue_depth: 256, concurrency: 16}",
        "",
    );
    d.client.start(&request(&script)).await.expect("script");
    let agent_dir = d.root.path().join("agent");
    std::fs::create_dir_all(&agent_dir).expect("agent dir");
    std::fs::write(
        agent_dir.join("murmur.yaml"),
        format!(
            "name: agent\nversion: 0.1.0\n\
             artifacts:\n  - {{name: openai-driver, version: 0.1.0, runtime: driver}}\n  - {{name: echo-tool, version: 1.0.0, runtime: tool}}\n\
             tools: [echo-tool]\n\
             capabilities: {{network: {{allow: [\"http://127.0.0.1:{port}\"]}}}}\n\
             inference:\n  endpoint: {endpoint}\n  model: soak\n  max_turns: 8\n\
             \x20 driver: {{artifact: openai-driver}}\n\
             lifecycle: {{task_acceptance: queue, after_task: sleep, queue_depth: 64}}\n",
            port = mock.port,
            endpoint = mock.endpoint(),
        ),
    )
    .expect("agent manifest");
    d.client.start(&request(&agent_dir)).await.expect("agent");
    let hello = capsule(d.root.path(), "hello", "hello", "");
    let spin = spinner(d.root.path());

    let window = Arc::new(Window::default());
    let started = Instant::now();
    let until = started + run;
    let mut load = Vec::new();
    for _ in 0..4 {
        let (addr, window) = (addr.clone(), Arc::clone(&window));
        load.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            while Instant::now() < until {
                let t = Instant::now();
                let params = json!({"message": message(next_id(), "hello")});
                match conn.rpc("script", "SendMessage", params).await {
                    Some(body) if body.contains("TASK_STATE_COMPLETED") => {
                        let ms = t.elapsed().as_secs_f64() * 1e3;
                        window.latencies.lock().expect("window").push(ms);
                    }
                    _ => {
                        window.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    {
        let (addr, window) = (addr.clone(), Arc::clone(&window));
        load.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            while Instant::now() < until {
                let params = json!({"message": message(next_id(), "What is new?")});
                let answer = conn.rpc("agent", "SendMessage", params).await;
                window.count(answer, "TASK_STATE_COMPLETED", &window.agent);
            }
        }));
    }
    {
        // Streams (five ticks over a second) and sends canceled while they run.
        let (addr, window) = (addr.clone(), Arc::clone(&window));
        load.push(tokio::spawn(async move {
            let mut conn = Conn::open(&addr).await;
            while Instant::now() < until {
                let params = json!({"message": message(next_id(), "slow")});
                let answer = conn.rpc("script", "SendStreamingMessage", params).await;
                window.count(answer, "TASK_STATE_COMPLETED", &window.streamed);
                let params = json!({"message": message(next_id(), "sleep"),
                                    "configuration": {"returnImmediately": true}});
                let sent = conn.rpc("script", "SendMessage", params).await;
                let id = sent
                    .as_deref()
                    .and_then(|b| serde_json::from_str::<Value>(b).ok())
                    .and_then(|v| v["result"]["task"]["id"].as_str().map(str::to_string));
                let Some(id) = id else {
                    window.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(100)).await;
                let answer = conn.rpc("script", "CancelTask", json!({"id": id})).await;
                window.count(answer, "TASK_STATE_CANCELED", &window.canceled);
            }
        }));
    }
    {
        // Sessions: one run to completion, then one started and stopped.
        let (client, window) = (d.client.clone(), Arc::clone(&window));
        load.push(tokio::spawn(async move {
            while Instant::now() < until {
                let done = match client.start(&request(&hello)).await {
                    Ok(s) => client.wait(&s.id).await.is_ok_and(|s| s.state.is_ended()),
                    Err(_) => false,
                };
                let stopped = match client.start(&request(&spin)).await {
                    Ok(s) => client.stop(&s.id).await.is_ok(),
                    Err(_) => false,
                };
                if done && stopped {
                    window.sessions.fetch_add(2, Ordering::Relaxed);
                } else {
                    window.errors.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }

    let csv_path = out_dir.join("soak.csv");
    let mut csv = std::fs::File::create(&csv_path).expect("soak.csv");
    writeln!(
        csv,
        "minutes,rss_mib,fds,wal_mib,db_mib,p99_ms,sends,agent_tasks,streams,cancels,sessions,errors"
    )
    .expect("csv");
    let db = d.state_dir.join("roost.db");
    let wal = d.state_dir.join("roost.db-wal");
    let mut rows: Vec<[f64; 5]> = Vec::new();
    let mut next = started + SAMPLE;
    while next <= until {
        tokio::time::sleep_until(next.into()).await;
        next += SAMPLE;
        let lat = std::mem::take(&mut *window.latencies.lock().expect("window"));
        let sends = lat.len();
        let (rss, fds) = process(d.pid());
        let take = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        let row = [
            rss as f64 / 1024.0,
            fds as f64,
            file_len(&wal) as f64 / (1 << 20) as f64,
            file_len(&db) as f64 / (1 << 20) as f64,
            p99(lat),
        ];
        let minute = started.elapsed().as_secs_f64() / 60.0;
        writeln!(
            csv,
            "{minute:.2},{:.1},{},{:.2},{:.2},{:.2},{sends},{},{},{},{},{}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            take(&window.agent),
            take(&window.streamed),
            take(&window.canceled),
            take(&window.sessions),
            take(&window.errors)
        )
        .expect("csv");
        csv.flush().expect("csv");
        println!(
            "{minute:6.1} min  rss {:7.1} MiB  fds {:4}  wal {:6.1} MiB  db {:6.1} MiB  p99 {:6.2} ms  sends {sends}",
            row[0], row[1], row[2], row[3], row[4]
        );
        rows.push(row);
    }
    for task in load {
        let _ = task.await;
    }
    plot(&out_dir);

    // The verdict: the last fifth against the fifth after warm-up.
    let fifth = (rows.len() / 5).max(1);
    let after_warmup = &rows[fifth.min(rows.len() - 1)..(2 * fifth).min(rows.len())];
    let last = &rows[rows.len().saturating_sub(fifth)..];
    let level = |set: &[[f64; 5]], i: usize| median(set.iter().map(|r| r[i]).collect());
    let mut failed = Vec::new();
    for (i, name, slack) in [
        (0, "RSS (MiB)", 2.0),
        (1, "open fds", 4.0),
        (2, "WAL (MiB)", 1.0),
    ] {
        let (early, late) = (level(after_warmup, i), level(last, i));
        let ok = late <= early * 1.10 + slack;
        println!(
            "{name:<10} after warm-up {early:8.1}  at the end {late:8.1}  {}",
            if ok { "ok" } else { "GROWING" }
        );
        if !ok {
            failed.push(name);
        }
    }
    let (early, late) = (level(after_warmup, 4), level(last, 4));
    let ok = late <= 2.0 * early;
    println!(
        "p99 (ms)   after warm-up {early:8.2}  at the end {late:8.2}  {}",
        if ok { "ok" } else { "SLOWER" }
    );
    if !ok {
        failed.push("p99");
    }
    println!(
        "{} and {}",
        csv_path.display(),
        out_dir.join("soak.png").display()
    );
    if rows.len() < VERDICT_SAMPLES {
        println!(
            "too short for a verdict (under {} minutes: retention's first rounds are still warm-up)",
            VERDICT_SAMPLES as u64 * SAMPLE.as_secs() / 60
        );
    } else if !failed.is_empty() {
        eprintln!(
            "soak failed: {failed:?} kept growing after warm-up\n{}",
            d.log()
        );
        // `exit` runs no destructor: stop roostd first.
        drop(d);
        std::process::exit(1);
    }
}

/// `soak.png` from `soak.csv` with gnuplot (skipped, with a note, without it).
fn plot(dir: &std::path::Path) {
    let script = "set datafile separator ','\n\
        set terminal png size 1200,900\n\
        set output 'soak.png'\n\
        set multiplot layout 2,2 title 'roostd soak'\n\
        set xlabel 'minutes'\n\
        set key top left\n\
        plot 'soak.csv' using 1:2 with lines title 'RSS (MiB)'\n\
        plot 'soak.csv' using 1:3 with lines title 'open fds'\n\
        plot 'soak.csv' using 1:4 with lines title 'WAL (MiB)', '' using 1:5 with lines title 'database (MiB)'\n\
        plot 'soak.csv' using 1:6 with lines title 'p99 blocking send (ms)'\n\
        unset multiplot\n";
    let run = std::process::Command::new("gnuplot")
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(script.as_bytes())?;
            child.wait()
        });
    match run {
        Ok(status) if status.success() => {}
        other => eprintln!("no plot (install gnuplot): {other:?}"),
    }
}
