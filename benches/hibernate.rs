//! Benchmark, the hibernation figures of issue 35, on one roostd with its
//! state dir on the real disk:
//!
//! 1. N agent routes registered through the control API by 16 clients:
//!    10 % idle agents that never hibernate, 90 % with
//!    `hibernate_after: 1s` (the OpenAI driver; the model is never called).
//!    Prints the time to register them all, then roostd's RSS once the 90 %
//!    have hibernated.
//! 2. `kill -9` and a restart: the time to READY (the control API
//!    answers), then every route's agent card fetched (16 clients) and how
//!    many answered, and a task to 100 hibernated routes right after.
//! 3. Wake latency, with all N routes still registered: W script capsules
//!    (the conformance capsule) and W agents, each hibernated, then sent
//!    one blocking task (one client): the time to its answer, beside a
//!    second task to the same session once awake (its cost without the
//!    wake), p50 and p99 of each; roostd's own wake histogram's mean.
//!
//! `cargo bench -p roostd --bench hibernate -- [N] [W]` (defaults 100000, 200);
//! `ROOST_BENCH_BATCH=B` registers the hibernating routes B at a time, each
//! batch hibernated before the next; `ROOST_BENCH_CYCLES=K` instead of 2–3
//! wakes every hibernated route K times over, RSS after each.

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod idle_agent;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use roost_ctl::api::RestartPolicy;

use harness::{Daemon, conformance};
use idle_agent::{capsule, peak_rss_kib, rss_kib, rss_parts_kib, start_all};
use mock_llm::{MockLlm, Reply};

const CLIENTS: usize = 16;
const SLEEPY: &str = "hibernate_after: 1s";

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let w: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let awake = n / 10;
    let asleep = n - awake;

    let config = format!("{}logs: {{max_bytes: 65536}}\n", harness::TEST_CONFIG);
    let mut daemon = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
    let mock = MockLlm::start(|_| Reply::text("ok")).await;
    let idle = capsule(&daemon, &mock).await;
    let sleepy = sleepy_agent(&idle, "sleepy");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_empty = rss_kib(daemon.pid());

    // 1. Register N routes.
    let started = Instant::now();
    start_all(&daemon, &idle, "awake", awake, RestartPolicy::Always, None).await;
    // With ROOST_BENCH_BATCH=B: B at a time, each batch hibernated before
    // the next (fewer awake at once than registering all as fast as
    // possible, where hibernating lags behind on two cores).
    let batch = std::env::var("ROOST_BENCH_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(asleep)
        .max(1);
    let mut sleepy_routes = Vec::with_capacity(asleep);
    let mut done = 0;
    while done < asleep {
        let k = batch.min(asleep - done);
        let prefix = format!("sleepy-{done}");
        start_all(&daemon, &sleepy, &prefix, k, RestartPolicy::Always, None).await;
        sleepy_routes.extend((0..k).map(|i| format!("{prefix}-{i}")));
        done += k;
        if done < asleep {
            until_metric(&daemon, "roost_hibernated_sessions ", done as u64).await;
        }
    }
    let register_secs = started.elapsed().as_secs_f64();
    until_metric(&daemon, "roost_hibernated_sessions ", asleep as u64).await;
    let settled_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rss = rss_kib(daemon.pid());
    let peak = peak_rss_kib(daemon.pid());
    let (anon, file) = rss_parts_kib(daemon.pid());
    let live = daemon.metric("roost_live_sessions ").await;
    println!(
        "{n} agent routes ({awake} awake, {asleep} with {SLEEPY}), state dir on {}",
        daemon.state_dir.display()
    );
    println!(
        "  registered through the API ({CLIENTS} clients)  {register_secs:>7.1} s  ({:.0} routes/s); \
         all {asleep} hibernated {settled_secs:.1} s after the first start",
        n as f64 / register_secs
    );
    println!(
        "  roostd RSS               {:>7.1} MiB (anonymous {:.1}, file-backed {:.1}; {:.1} MiB empty, {:.1} MiB at the peak; {} live, {} hibernated)",
        rss as f64 / 1024.0,
        anon as f64 / 1024.0,
        file as f64 / 1024.0,
        rss_empty as f64 / 1024.0,
        peak as f64 / 1024.0,
        live,
        asleep
    );
    // With ROOST_BENCH_CYCLES=K: wake every hibernated session and let it
    // hibernate again, K times, RSS after each (does a cycle keep memory?).
    if let Some(cycles) = std::env::var("ROOST_BENCH_CYCLES")
        .ok()
        .and_then(|k| k.parse().ok())
    {
        let addr = daemon.client.health().await.expect("health").a2a_addr;
        println!("cycle 0: RSS {:.1} MiB", rss as f64 / 1024.0);
        for c in 1..=cycles {
            let routes = sleepy_routes.clone();
            let ok = fetch_all(&addr, routes, |route| format!("SEND {route}")).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            until_metric(&daemon, "roost_hibernated_sessions ", asleep as u64).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            println!(
                "cycle {c}: {ok} woken, RSS {:.1} MiB",
                rss_kib(daemon.pid()) as f64 / 1024.0
            );
        }
        return;
    }

    // 2. kill -9 and restart.
    daemon.kill9();
    let spawned = Instant::now();
    daemon.spawn().await;
    let ready_secs = spawned.elapsed().as_secs_f64();
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let mut routes: Vec<String> = (0..awake).map(|i| format!("awake-{i}")).collect();
    routes.extend(sleepy_routes.iter().cloned());
    let cards_started = Instant::now();
    let cards = fetch_all(&addr, routes, |route| {
        format!("GET /a2a/{route}/.well-known/agent-card.json")
    })
    .await;
    let cards_secs = cards_started.elapsed().as_secs_f64();
    let after_card_secs = spawned.elapsed().as_secs_f64();
    let still_asleep = daemon.metric("roost_hibernated_sessions ").await;
    let sample: Vec<String> = sleepy_routes
        .iter()
        .step_by((asleep / 100).max(1))
        .take(100)
        .cloned()
        .collect();
    let sampled = sample.len();
    let woken = fetch_all(&addr, sample, |route| format!("SEND {route}")).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_restarted = rss_kib(daemon.pid());
    let (anon_restarted, file_restarted) = rss_parts_kib(daemon.pid());

    // 3. Wake latency: scripts, then agents.
    let script = conformance(
        daemon.root.path(),
        "wake",
        "{task_acceptance: queue, after_task: sleep, hibernate_after: 1s}",
        "",
    );
    let scripts = wake_latency(&daemon, &addr, &script, "wake-script", w).await;
    let agent = sleepy_agent(&idle, "wake-agent");
    let agents = wake_latency(&daemon, &addr, &agent, "wake-agent", w).await;

    println!("  after kill -9: READY     {ready_secs:>7.2} s");
    println!(
        "  agent cards answered     {cards}/{n} in {cards_secs:.1} s ({:.0}/s; the last {after_card_secs:.1} s after the restart), \
         {still_asleep} still hibernated",
        n as f64 / cards_secs
    );
    println!("  tasks to hibernated routes right after: {woken}/{sampled} completed");
    println!(
        "  roostd RSS after         {:>7.1} MiB (anonymous {:.1}, file-backed {:.1})",
        rss_restarted as f64 / 1024.0,
        anon_restarted as f64 / 1024.0,
        file_restarted as f64 / 1024.0
    );
    for (what, (woke, again, mean)) in [("script", scripts), ("agent", agents)] {
        println!(
            "  {what} capsule, {w} sessions: first task (wakes it) p50 {:.2} ms p99 {:.2} ms; \
             next task (awake) p50 {:.2} ms p99 {:.2} ms; wake (roostd's histogram) mean {:.2} ms",
            pct(&woke, 50),
            pct(&woke, 99),
            pct(&again, 50),
            pct(&again, 99),
            mean
        );
    }
}

/// The idle agent of `idle_agent.rs` as capsule `name`, hibernating.
fn sleepy_agent(idle: &Path, name: &str) -> PathBuf {
    let dir = idle.with_file_name(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let text = std::fs::read_to_string(idle.join("murmur.yaml")).expect("manifest");
    let text = text
        .replace("name: idle\n", &format!("name: {name}\n"))
        .replace(
            "lifecycle: {task_acceptance: queue, after_task: sleep}",
            &format!("lifecycle: {{task_acceptance: queue, after_task: sleep, {SLEEPY}}}"),
        );
    assert!(text.contains(SLEEPY), "{text}");
    std::fs::write(dir.join("murmur.yaml"), text).expect("manifest");
    dir
}

/// Waits (up to 10 min) until a metric reaches `at_least`.
async fn until_metric(daemon: &Daemon, prefix: &str, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let value = daemon.metric(prefix).await;
        if value >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{prefix}{value} < {at_least}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts `w` sessions of `capsule`, waits until all have hibernated, then
/// sends each two tasks in turn (one client): the first wakes it. Each's
/// latency in ms, and the mean of roostd's wake histogram over them.
async fn wake_latency(
    daemon: &Daemon,
    addr: &str,
    capsule: &Path,
    prefix: &str,
    w: usize,
) -> (Vec<f64>, Vec<f64>, f64) {
    let before = daemon.metric("roost_hibernated_sessions ").await;
    start_all(daemon, capsule, prefix, w, RestartPolicy::Always, None).await;
    until_metric(daemon, "roost_hibernated_sessions ", before + w as u64).await;
    let (sum0, count0) = wake_histogram(daemon).await;
    let mut conn = Conn::open(addr).await;
    let (mut woke, mut again) = (Vec::new(), Vec::new());
    for i in 0..w {
        let route = format!("{prefix}-{i}");
        for into in [&mut woke, &mut again] {
            let sent = Instant::now();
            let answer = conn.send(&route).await;
            into.push(sent.elapsed().as_secs_f64() * 1000.0);
            assert!(answer.contains("TASK_STATE_COMPLETED"), "{route}: {answer}");
        }
    }
    let (sum1, count1) = wake_histogram(daemon).await;
    assert_eq!(
        count1 - count0,
        w as f64,
        "every first task woke its session"
    );
    (woke, again, (sum1 - sum0) / (count1 - count0) * 1000.0)
}

async fn wake_histogram(daemon: &Daemon) -> (f64, f64) {
    let text = daemon.client.metrics().await.expect("metrics");
    let read = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        read("roost_wake_duration_seconds_sum "),
        read("roost_wake_duration_seconds_count "),
    )
}

fn pct(ms: &[f64], p: usize) -> f64 {
    let mut ms = ms.to_vec();
    ms.sort_by(f64::total_cmp);
    ms.get((ms.len() * p / 100).min(ms.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// Runs `what(item)` for every item on 16 keep-alive connections; how many
/// answered as expected (a card: 200 with a name; a task: completed).
async fn fetch_all(addr: &str, items: Vec<String>, what: fn(&str) -> String) -> usize {
    let items = Arc::new(items);
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (items, next, ok, addr) = (
                Arc::clone(&items),
                Arc::clone(&next),
                Arc::clone(&ok),
                addr.to_string(),
            );
            tokio::spawn(async move {
                let mut conn = Conn::open(&addr).await;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { return };
                    let answered = match what(item).split_once(' ') {
                        Some(("GET", path)) => conn.get(path).await.contains("\"name\""),
                        _ => conn.send(item).await.contains("TASK_STATE_COMPLETED"),
                    };
                    if answered {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client");
    }
    ok.load(Ordering::Relaxed)
}

/// One keep-alive HTTP/1.1 connection to the gateway.
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

    async fn request(&mut self, req: http::Request<Full<bytes::Bytes>>) -> String {
        if self.sender.ready().await.is_err() {
            *self = Self::open(&self.addr).await;
        }
        match self.sender.send_request(req).await {
            Ok(resp) => match resp.into_body().collect().await {
                Ok(body) => String::from_utf8_lossy(&body.to_bytes()).to_string(),
                Err(e) => format!("body: {e}"),
            },
            Err(e) => format!("request: {e}"),
        }
    }

    async fn get(&mut self, path: &str) -> String {
        let req = http::Request::get(path)
            .header("host", &self.addr)
            .body(Full::new(bytes::Bytes::new()))
            .expect("request");
        self.request(req).await
    }

    /// A blocking `SendMessage` to `route`: the answer's text.
    async fn send(&mut self, route: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage",
            "params": {"message": {"messageId": format!("h-{i}"), "role": "ROLE_USER",
                                   "parts": [{"text": "version"}]}}})
        .to_string();
        let req = http::Request::post(format!("/a2a/{route}"))
            .header("host", &self.addr)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(bytes::Bytes::from(body)))
            .expect("request");
        self.request(req).await
    }
}
