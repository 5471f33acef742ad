//! Benchmark, the upgrade-in-place figure of issue 35: 16 keep-alive
//! clients send blocking `SendMessage` requests to one route without a
//! pause while it is upgraded to a new version and then rolled back (state
//! dir on the real disk). Prints, for the steady state before, the moment
//! of each switch (from the call to one second after its answer) and the
//! steady state after: requests, failed ones, answers from the wrong
//! version after the switch was acknowledged, req/s, p50 and p99; and how
//! long each switch took to acknowledge.
//!
//! `cargo bench -p roostd --bench upgrade -- [SECONDS per phase]` (default 5)

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use roost_ctl::api::UpgradeRequest;

use harness::{Daemon, conformance, request};

const CLIENTS: usize = 16;
const LIFECYCLE: &str =
    "{task_acceptance: queue, after_task: sleep, concurrency: 4, queue_depth: 64}";

/// One answered request: when it was sent, how long it took, which version
/// answered (`None`: it failed).
struct Sample {
    sent: Instant,
    took: Duration,
    version: Option<String>,
}

fn capsule(root: &Path, version: &str) -> PathBuf {
    let dir = conformance(root, "svc", LIFECYCLE, "");
    let manifest = dir.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(
        &manifest,
        text.replace("version: 0.1.0", &format!("version: {version}")),
    )
    .expect("write");
    dir
}

async fn client(addr: String, stop: Arc<AtomicBool>) -> Vec<Sample> {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage",
            "params": {"message": {"messageId": format!("up-{i}"), "role": "ROLE_USER",
                                   "parts": [{"text": "version"}]}}})
        .to_string();
        let req = http::Request::post("/a2a/svc")
            .header("host", &addr)
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Full::new(bytes::Bytes::from(body)))
            .expect("request");
        let sent = Instant::now();
        if sender.ready().await.is_err() {
            break;
        }
        let version = match sender.send_request(req).await {
            Ok(resp) => resp.into_body().collect().await.ok().and_then(|b| {
                let text = String::from_utf8_lossy(&b.to_bytes()).to_string();
                let done = text.contains("TASK_STATE_COMPLETED");
                text.split("version ")
                    .nth(1)
                    .filter(|_| done)
                    .map(|v| v.chars().take_while(|c| *c != '"').collect())
            }),
            Err(_) => None,
        };
        out.push(Sample {
            sent,
            took: sent.elapsed(),
            version,
        });
    }
    out
}

fn row(name: &str, samples: &[&Sample], secs: f64, want: Option<&str>) {
    let failed = samples.iter().filter(|s| s.version.is_none()).count();
    let wrong = want.map_or(0, |w| {
        samples
            .iter()
            .filter(|s| s.version.as_deref().is_some_and(|v| v != w))
            .count()
    });
    let mut ms: Vec<f64> = samples.iter().map(|s| s.took.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        ms.get(((ms.len() as f64 * p) as usize).min(ms.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "  {name:<28} {:>7} req  {failed:>3} failed  {wrong:>3} wrong version  {:>7.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        samples.len(),
        samples.len() as f64 / secs,
        pct(0.50),
        pct(0.99)
    );
}

#[tokio::main]
async fn main() {
    let phase: u64 = std::env::args()
        .skip(1)
        .find(|a| a != "--bench")
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let config = format!("{}store: {{sync: full}}\n", harness::TEST_CONFIG);
    let daemon = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
    let addr = daemon.client.health().await.expect("health").a2a_addr;
    let v1 = capsule(daemon.root.path(), "0.1.0");
    let v2 = capsule(daemon.root.path(), "0.2.0");
    daemon.client.start(&request(&v1)).await.expect("start");
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(client(addr.clone(), Arc::clone(&stop))))
        .collect();
    // Warm up, then the steady state before.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = Instant::now();
    tokio::time::sleep(Duration::from_secs(phase)).await;
    let asked_up = Instant::now();
    daemon
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                path: Some(v2.display().to_string()),
                ..UpgradeRequest::default()
            },
        )
        .await
        .expect("upgrade");
    let acked_up = Instant::now();
    tokio::time::sleep(Duration::from_secs(phase)).await;
    let asked_back = Instant::now();
    daemon
        .client
        .upgrade(
            "svc",
            &UpgradeRequest {
                rollback: true,
                ..UpgradeRequest::default()
            },
        )
        .await
        .expect("rollback");
    let acked_back = Instant::now();
    tokio::time::sleep(Duration::from_secs(phase)).await;
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.expect("client"));
    }
    let between = |from: Instant, until: Instant| -> Vec<&Sample> {
        all.iter()
            .filter(|s| s.sent >= from && s.sent < until)
            .collect()
    };
    let second = Duration::from_secs(1);
    println!(
        "upgrade in place under {CLIENTS} clients (blocking SendMessage, store.sync: full), state dir on {}",
        daemon.state_dir.display()
    );
    // Answered before the upgrade was asked for (one sent just before may
    // wait through the switch and be answered by the new version).
    row(
        "before (0.1.0)",
        &between(before, asked_up)
            .into_iter()
            .filter(|s| s.sent + s.took < asked_up)
            .collect::<Vec<_>>(),
        phase as f64,
        Some("0.1.0"),
    );
    row(
        "upgrade: call .. ack + 1 s",
        &between(asked_up, acked_up + second),
        (acked_up + second - asked_up).as_secs_f64(),
        None,
    );
    row(
        "after the ack (0.2.0)",
        &between(acked_up, asked_back)
            .into_iter()
            .filter(|s| s.sent + s.took < asked_back)
            .collect::<Vec<_>>(),
        (asked_back - acked_up).as_secs_f64(),
        Some("0.2.0"),
    );
    row(
        "rollback: call .. ack + 1 s",
        &between(asked_back, acked_back + second),
        (acked_back + second - asked_back).as_secs_f64(),
        None,
    );
    row(
        "after the ack (0.1.0)",
        &between(acked_back, end),
        (end - acked_back).as_secs_f64(),
        Some("0.1.0"),
    );
    println!(
        "  acknowledged after: upgrade {:.1} ms, rollback {:.1} ms (staging, drain, the new version's start)",
        (acked_up - asked_up).as_secs_f64() * 1e3,
        (acked_back - asked_back).as_secs_f64() * 1e3
    );
}
