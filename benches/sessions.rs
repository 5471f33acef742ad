//! Benchmark: start N trivial script capsules through the control API at a given
//! concurrency and print sessions/s, p50/p99 request→completed latency and roostd's
//! peak RSS; in the same run, the in-process floor (prepared component →
//! instantiate + call `run`), so the ratio is visible.
//!
//! Then what a start's parts cost alone: one HTTP exchange on the control
//! socket (`GET /v1/health`; a start makes two), the session's two writes
//! through `Store`, its two directories on the same disk, and the load of
//! its `murmur.yaml` (read, parsed, checked) with a text loaded before (the
//! parse kept) and with a new text each time.
//!
//! `ROOST_BENCH_BASELINE=/path/to/other/roostd` runs the same passes against
//! that roostd too, alternating with this tree's (before, this, before,
//! this), so a change is measured side by side in one run.
//!
//! roostd logs at `warn` (`ROOST_BENCH_LOG=info` for the default level).
//! `ROOST_BENCH_ROUNDS` sets how many rounds (default 2 beside a baseline,
//! else 1); each host starts after a `sync` and 3 s.
//!
//! `[ROOST_BENCH_BASELINE=…] [ROOST_BENCH_LOG=…] cargo bench -p roostd --bench sessions -- [N] [CONCURRENCY]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use roost_ctl::api::SessionState;
use roostd::logs::LogSink;
use roostd::metrics::Metrics;
use roostd::policy::CapabilityPolicy;
use roostd::runtime::{Runtime, RuntimeConfig, ScriptLaunch};
use tokio_util::sync::CancellationToken;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn floor(iterations: usize) -> (Duration, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = Runtime::new(
        &RuntimeConfig {
            max_instances: 100,
            max_memory_bytes: 256 << 20,
            cache_dir: dir.path().join("cache"),
        },
        Arc::new(Metrics::default()),
    )
    .expect("runtime");
    let noop = harness::guest("noop");
    let file = std::fs::File::open(&noop).expect("the noop guest");
    let prepared = runtime.prepare(&noop, file).await.expect("prepare");
    let log = LogSink::new(&dir.path().join("logs"), 1 << 20);
    let policy = Arc::new(CapabilityPolicy::default());
    let workdir = dir.path().join("work");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let launch = ScriptLaunch {
            session_id: "ses_floor".into(),
            workdir: workdir.clone(),
            env: vec![("MURMUR_SESSION_ID".into(), "ses_floor".into())],
            timeout: Duration::from_secs(30),
            memory_bytes: 128 << 20,
            policy: Arc::clone(&policy),
            log: log.clone(),
            tools: None,
            notes: None,
        };
        let t = Instant::now();
        runtime
            .run_script(&prepared, launch, CancellationToken::new())
            .await
            .expect("floor run");
        samples.push(t.elapsed());
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// What a start's parts cost alone, serially: its two session writes
/// (the row, then its end) through roostd's own `Store` on a fresh
/// database in `dir`, and its two directories (the workdir and the
/// bookkeeping dir in it) made on the same disk. p50 each, µs.
async fn parts_floor(dir: &std::path::Path, n: usize) -> (f64, f64) {
    use roostd::store::{Durability, NewSession, Store};
    let store = Store::open(&dir.join("floor.db"), Durability::Full)
        .await
        .expect("a store");
    let request = roost_wire::api::StartRequest {
        path: "/caps/noop".into(),
        ..Default::default()
    };
    let mut writes = Vec::with_capacity(n);
    let mut dirs = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("ses_{i:032x}");
        let t = Instant::now();
        store
            .insert_session(&NewSession {
                id: &id,
                name: &format!("noop-{i}"),
                capsule: "noop",
                version: "0.1.0",
                manifest: "/caps/noop/murmur.yaml",
                workdir: "/w",
                bookkeeping_dir: "/w/.murmur",
                request: &request,
                artifacts: &[],
                sandbox: "",
            })
            .await
            .expect("its row");
        store
            .mark_ended(&id, SessionState::Completed, None, None)
            .await
            .expect("its end");
        writes.push(t.elapsed());
        let work = dir.join("sessions").join(&id);
        let t = Instant::now();
        std::fs::create_dir_all(work.join(".murmur")).expect("its directories");
        dirs.push(t.elapsed());
    }
    store.close().await;
    writes.sort();
    dirs.sort();
    (us(percentile(&writes, 0.5)), us(percentile(&dirs, 0.5)))
}

/// Figures of one pass.
struct Pass {
    n: usize,
    wall: Duration,
    p50: Duration,
    p99: Duration,
    reply_p50: Duration,
}

impl Pass {
    fn print(&self, label: &str) {
        println!(
            "  {label:<14} N={:<6} {:>8.0} sessions/s   request→completed p50 {:>8.1} µs  p99 {:>8.1} µs   request→201 p50 {:>8.1} µs",
            self.n,
            self.n as f64 / self.wall.as_secs_f64(),
            us(self.p50),
            us(self.p99),
            us(self.reply_p50)
        );
    }
}

/// Starts `n` sessions from `concurrency` clients, each waiting for completion.
async fn drive(
    client: &roost_ctl::Client,
    cap: &std::path::Path,
    n: usize,
    concurrency: usize,
) -> Pass {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let req = harness::request(cap);
        let next = Arc::clone(&next);
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let t = Instant::now();
                let s = client.start(&req).await.expect("start");
                let accepted = t.elapsed();
                let s = if s.state.is_ended() {
                    s
                } else {
                    client.wait(&s.id).await.expect("wait")
                };
                assert_eq!(s.state, SessionState::Completed, "{s:?}");
                samples.push((t.elapsed(), accepted));
            }
            samples
        }));
    }
    let mut samples: Vec<(Duration, Duration)> = Vec::with_capacity(n);
    for w in workers {
        samples.extend(w.await.expect("worker"));
    }
    let wall = started.elapsed();
    let mut done: Vec<Duration> = samples.iter().map(|s| s.0).collect();
    let mut replied: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    done.sort();
    replied.sort();
    Pass {
        n,
        wall,
        p50: percentile(&done, 0.5),
        p99: percentile(&done, 0.99),
        reply_p50: percentile(&replied, 0.5),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let concurrency: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let baseline = std::env::var_os("ROOST_BENCH_BASELINE").map(std::path::PathBuf::from);
    rt.block_on(async move {
        // `ROOST_BENCH_STORE_SYNC=normal` measures `store.sync: normal`.
        let sync = std::env::var("ROOST_BENCH_STORE_SYNC")
            .map(|s| format!("store: {{sync: {s}}}\n"))
            .unwrap_or_default();
        let config = format!(
            "a2a_listen: 127.0.0.1:0\npool: {{max_instances: 1000, max_memory_mb: 256}}\n\
             log: {{level: warn}}\n{sync}"
        );
        println!("sessions bench (noop capsule, warm cache)");
        let rounds = std::env::var("ROOST_BENCH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(if baseline.is_some() { 2 } else { 1 });
        // Each host's state stays until the end: on an ext4 without a
        // journal, a new inode skips those deleted in the last minute or
        // five, one lookup each, so deleting a host's thousands of session
        // directories would slow the next host's `mkdir`s.
        let mut kept = Vec::new();
        for round in 1..=rounds {
            if let Some(old) = &baseline {
                let label = format!("before, round {round}");
                kept.push(host(&label, Some(old), &config, n, concurrency).await);
            }
            let label = match baseline {
                Some(_) => format!("this tree, round {round}"),
                None => "this tree".to_string(),
            };
            kept.push(host(&label, None, &config, n, concurrency).await);
        }
        let (floor_p50, floor_p99) = floor(2000).await;
        println!(
            "  in-process floor           p50 {:>8.1} µs   p99 {:>8.1} µs  (Store + instantiate + run; no API, no DB)",
            us(floor_p50),
            us(floor_p99)
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let (writes, dirs) = parts_floor(dir.path(), 2000).await;
        println!(
            "  the session's two writes   p50 {writes:>8.1} µs  (its row, then its end, through Store alone)"
        );
        println!(
            "  its two directories        p50 {dirs:>8.1} µs  (mkdir, the same disk)"
        );
        // The bench capsule's three lines, and the conformance example's
        // (a lifecycle, limits and a card of two skills).
        let example = std::fs::read_to_string(harness::repo().join("examples/a2a-conformance/murmur.yaml"))
            .expect("the example's manifest");
        let sections: String = example
            .lines()
            .filter(|l| !["name:", "version:", "component:"].iter().any(|k| l.starts_with(k)))
            .map(|l| format!("{l}\n"))
            .collect();
        for (what, extra) in [("its manifest's load", ""), ("  … the example's", sections.as_str())] {
            let (kept_p50, parsed_p50) = manifest_loads(dir.path(), extra, 2000);
            println!(
                "  {what:<26} p50 {kept_p50:>8.1} µs  (a text loaded before)   \
                 {parsed_p50:>8.1} µs  (a new text each time)"
            );
        }
        drop(kept);
    });
}

/// What loading the bench capsule's `murmur.yaml` costs (read, parse and
/// checks: `CapsuleManifest::load`), p50 µs: one capsule loaded `n` times
/// (the same text: its parse kept), then `n` capsules loaded once each,
/// their texts told apart by a comment line (each parsed). All `n` are
/// written before either pass.
fn manifest_loads(dir: &std::path::Path, extra: &str, n: usize) -> (f64, f64) {
    use roostd::manifest::CapsuleManifest;
    let caps: Vec<_> = (0..n)
        .map(|i| {
            let cap = harness::capsule(dir, "noop", "noop", &format!("{extra}# {i}"));
            // In the page cache, as a start's manifest is.
            std::fs::read_to_string(cap.join("murmur.yaml")).expect("its text");
            cap
        })
        .collect();
    let _ = std::process::Command::new("sync").status();
    let timed = |caps: &mut dyn Iterator<Item = &std::path::PathBuf>| {
        let mut samples: Vec<_> = caps
            .map(|cap| {
                let t = Instant::now();
                CapsuleManifest::load(cap).expect("loads");
                t.elapsed()
            })
            .collect();
        samples.sort();
        us(percentile(&samples, 0.5))
    };
    let kept = timed(&mut std::iter::repeat_n(&caps[n - 1], n));
    (kept, timed(&mut caps.iter()))
}

/// One roostd (this tree's, or `binary`) through both passes, its figures
/// printed under `label`; its state dir, kept.
async fn host(
    label: &str,
    binary: Option<&std::path::Path>,
    config: &str,
    n: usize,
    concurrency: usize,
) -> tempfile::TempDir {
    // The config's `log.level` (warn), as the A2A benches run, or
    // `ROOST_BENCH_LOG`'s: the test harness's `RUST_LOG` (debug, for tests'
    // logs) would win over it.
    let level = std::env::var("ROOST_BENCH_LOG").unwrap_or_else(|_| "warn".into());
    let log = [("RUST_LOG", level.as_str())];
    // Each host on a disk with no write-back pending from the one before
    // (a pass leaves thousands of new directories and a WAL behind).
    let _ = std::process::Command::new("sync").status();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut d = match binary {
        Some(b) => harness::Daemon::start_binary(b, config, &log).await,
        None => harness::Daemon::start_with(config, &log).await,
    };
    let cap = harness::capsule(d.root.path(), "noop", "noop", "");
    // Warm the component cache.
    let warm = d.run_to_end(&cap).await;
    assert_eq!(warm.state, SessionState::Completed);
    // Pass 1: one client, so latency is the daemon's, not queueing.
    let serial = drive(&d.client, &cap, n.div_ceil(4), 1).await;
    // Pass 2: `concurrency` clients, for throughput.
    let loaded = drive(&d.client, &cap, n, concurrency).await;
    // One HTTP exchange on the control socket that does nothing else (a
    // start makes two: the 201, then the wait).
    let mut health = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        d.client.health().await.expect("health");
        health.push(t.elapsed());
    }
    health.sort();
    let rss = peak_rss_kib(d.pid());
    let compiled = d.metric("roost_components_compiled_total").await;
    println!("{label} (compiles during run: {compiled})");
    serial.print("concurrency 1");
    loaded.print(&format!("concurrency {concurrency}"));
    println!("  roostd peak RSS            {rss:>8} KiB");
    println!(
        "  GET /v1/health             p50 {:>8.1} µs  (one exchange on the control socket)",
        us(percentile(&health, 0.5))
    );
    // Its state, deleted at the end of the bench (above).
    std::mem::replace(&mut d.root, tempfile::tempdir().expect("tempdir"))
}
