//! Benchmark, the overhead figures of the observability issue: A2A
//! throughput and p50/p99 latency of a blocking JSON-RPC `SendMessage` to
//! the conformance capsule (as `benches/a2a.rs` measures it) for roostd
//! with telemetry off, with OTLP export on (http/protobuf, every trace
//! sampled, to a receiver in this process that keeps each export and
//! decodes them all after the run, counting spans) and, when
//! `ROOST_BENCH_BASELINE` names one, a roostd built before telemetry
//! existed — side by side in one run, in alternating rounds so
//! drift hits all alike. The metrics listener is on for "on" and is
//! scraped once a second during its rounds.
//!
//! State dirs are under `$TMPDIR` (the real disk unless it says otherwise).
//!
//! `ROOST_BENCH_BASELINE=/path/to/old/roostd cargo bench -p roostd --bench telemetry -- [SECONDS] [ROUNDS]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod load;

use std::sync::Arc;

use std::time::Duration;

use harness::{Daemon, free_port};
use load::{Answer, Figures, level};

const CLIENTS: [usize; 2] = [1, 16];

/// An OTLP/HTTP endpoint that keeps every export as it came; they are
/// decoded after the run (`spans`), so the receiver takes no CPU from the
/// load while it is measured.
async fn receiver() -> (u16, Arc<Kept>) {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let kept = Arc::new(Kept::default());
    let keep = Arc::clone(&kept);
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let keep = Arc::clone(&keep);
                async move {
                    keep.lock().expect("lock").push(body);
                    ""
                }
            }),
        )
        // Batches of thousands of spans pass axum's default 2 MB.
        .layer(axum::extract::DefaultBodyLimit::disable());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, kept)
}

/// The exports received, as they came.
type Kept = std::sync::Mutex<Vec<axum::body::Bytes>>;

/// The spans in what the receiver kept (decoded with `opentelemetry-proto`).
fn spans(kept: &Kept) -> u64 {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    kept.lock()
        .expect("lock")
        .iter()
        .map(|body| {
            ExportTraceServiceRequest::decode(body.clone()).map_or(0, |r| {
                r.resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .map(|s| s.spans.len() as u64)
                    .sum()
            })
        })
        .sum()
}

struct Host {
    label: &'static str,
    daemon: Daemon,
    addr: String,
    metrics: Option<u16>,
    runs: Vec<Vec<Figures>>,
}

async fn host(label: &'static str, binary: Option<&std::path::Path>, extra: &str) -> Host {
    // The same log level for all (the old binary too: `log:` predates it).
    let config = format!(
        "{}logs: {{max_bytes: 1048576}}\nlog: {{level: warn}}\n{extra}",
        harness::TEST_CONFIG
    );
    let daemon = match binary {
        Some(b) => Daemon::start_binary(b, &config, &[]).await,
        None => Daemon::start_with(&config, &[]).await,
    };
    let addr = load::start_bench_capsule(&daemon).await;
    // Warm: compiled, connections made.
    level(&addr, "/a2a/bench", 4, 1, Answer::Task).await;
    Host {
        label,
        daemon,
        addr,
        metrics: None,
        runs: CLIENTS.iter().map(|_| Vec::new()).collect(),
    }
}

async fn scrape(port: u16) -> usize {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    out.len()
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let all: Vec<f64> = v.collect();
    all.iter().sum::<f64>() / all.len().max(1) as f64
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<u64>().ok());
    let secs = args.next().unwrap_or(5);
    let rounds = args.next().unwrap_or(3) as usize;
    let baseline = std::env::var_os("ROOST_BENCH_BASELINE").map(std::path::PathBuf::from);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (otlp, exported) = receiver().await;
        let metrics_port = free_port();
        let mut hosts = vec![host("off", None, "").await];
        let mut on = host(
            "otlp on",
            None,
            &format!(
                "telemetry: {{otlp_endpoint: \"http://127.0.0.1:{otlp}\"}}\n\
                 metrics: {{listen: \"127.0.0.1:{metrics_port}\"}}\n"
            ),
        )
        .await;
        on.metrics = Some(metrics_port);
        hosts.push(on);
        if let Some(old) = &baseline {
            hosts.push(host("before telemetry", Some(old), "").await);
        }
        println!(
            "A2A SendMessage (blocking, conformance capsule), {secs} s per level, {rounds} rounds, \
             hosts alternating: {}",
            hosts.iter().map(|h| h.label).collect::<Vec<_>>().join(", ")
        );
        for round in 0..rounds {
            for h in hosts.iter_mut() {
                let scraper = h.metrics.map(|port| {
                    tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            assert!(scrape(port).await > 0, "the metrics listener answers");
                        }
                    })
                });
                for (i, &clients) in CLIENTS.iter().enumerate() {
                    let f = level(&h.addr, "/a2a/bench", clients, secs, Answer::Task).await;
                    println!(
                        "  round {round} {:<17} {clients:>3} clients: {:>7.0}/s p50 {:>6.2} ms p99 {:>6.2} ms ({} requests, {} errors)",
                        h.label, f.per_sec, f.p50_ms, f.p99_ms, f.requests, f.errors
                    );
                    h.runs[i].push(f);
                }
                if let Some(s) = scraper {
                    s.abort();
                    println!(
                        "  (exports received so far: {})",
                        exported.lock().expect("lock").len()
                    );
                }
            }
        }
        println!("\nmeans over the rounds:");
        for (i, &clients) in CLIENTS.iter().enumerate() {
            let off = mean(hosts[0].runs[i].iter().map(|f| f.per_sec));
            for h in &hosts {
                let rate = mean(h.runs[i].iter().map(|f| f.per_sec));
                println!(
                    "  {:<17} {clients:>3} clients: {:>7.0}/s ({:>5.1}% of off)  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}",
                    h.label,
                    rate,
                    100.0 * rate / off,
                    mean(h.runs[i].iter().map(|f| f.p50_ms)),
                    mean(h.runs[i].iter().map(|f| f.p99_ms)),
                    h.runs[i].iter().map(|f| f.errors).sum::<usize>(),
                );
            }
        }
        let tasks: u64 = hosts[1].runs.iter().flatten().map(|f| f.requests as u64).sum();
        // What is still batched is flushed when roostd stops.
        let mut on = hosts.remove(1);
        on.daemon
            .signal_and_wait(libc::SIGTERM, Duration::from_secs(30));
        for line in on.daemon.log().lines().filter(|l| l.contains("telemetry")).take(5) {
            println!("  roostd: {line}");
        }
        let spans = spans(&exported);
        println!(
            "\nOTLP received: {spans} spans for {tasks} measured tasks (and the warm-up's); \
             each task makes 2 (its own, its queue wait)"
        );
        for h in hosts {
            drop(h.daemon);
        }
    });
}
