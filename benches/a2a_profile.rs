//! Benchmark: where roostd's CPU goes per blocking JSON-RPC `SendMessage`
//! (issue 36's profile). One roostd hosting the conformance capsule (the
//! `a2a` bench's agent), state dir on the real disk; at 1 and 16 clients,
//! first a level measured alone, then the same level with `perf record`
//! (call graphs from DWARF, 499 Hz) attached to roostd. The recordings go
//! to DIR as `perf-<sync>-<clients>.data` with the level's request count
//! beside them (`.requests`); `scripts/perf-breakdown DIR` turns them into
//! the µs-per-request table of BENCHMARKS.md.
//!
//! `ROOST_BENCH_STORE_SYNC=full|normal cargo bench -p roostd --bench a2a_profile -- DIR [SECONDS]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod load;

use std::path::PathBuf;

use harness::Daemon;
use load::{Answer, level};

/// What `perf stat` counts in roostd while a level runs alone: each context
/// switch is a thread that slept and was woken (a hop); SQLite writes a WAL
/// frame per page with `pwrite` and syncs with `fdatasync` or `fsync`.
const EVENTS: &str = "context-switches,syscalls:sys_enter_pwrite64,\
                      syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync";

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let dir = PathBuf::from(args.next().expect("usage: a2a_profile DIR [SECONDS]"));
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    std::fs::create_dir_all(&dir).expect("create DIR");
    let sync = std::env::var("ROOST_BENCH_STORE_SYNC").unwrap_or_else(|_| "full".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let config = format!(
            "{}logs: {{max_bytes: 1048576}}\nstore: {{sync: {sync}}}\n",
            harness::TEST_CONFIG
        );
        let daemon = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
        let addr = load::start_bench_capsule(&daemon).await;
        level(&addr, "/a2a/bench", 4, 1, Answer::Task).await;
        println!(
            "store.sync: {sync}, {secs} s per level, state dir {}",
            daemon.state_dir.display()
        );
        for clients in [1, 16] {
            // Context switches in roostd while the level runs alone (each
            // is a thread that slept and was woken: a hop).
            let stat = std::process::Command::new("perf")
                .args(["stat", "-x", ",", "-e", EVENTS, "-p"])
                .arg(daemon.pid().to_string())
                .args(["--", "sleep"])
                .arg(secs.to_string())
                .stderr(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("perf stat");
            let alone = level(&addr, "/a2a/bench", clients, secs, Answer::Task).await;
            let stat = stat.wait_with_output().expect("perf stat");
            let stat = String::from_utf8_lossy(&stat.stderr).into_owned();
            let per_request = |event: &str| {
                let n: f64 = stat
                    .lines()
                    .find(|l| l.contains(event))
                    .and_then(|l| l.split(',').next()?.trim().parse().ok())
                    .unwrap_or(f64::NAN);
                n / alone.requests.max(1) as f64
            };
            let data = dir.join(format!("perf-{sync}-{clients}.data"));
            let mut perf = std::process::Command::new("perf")
                .args([
                    "record",
                    "-q",
                    "-F",
                    "499",
                    "--call-graph",
                    "dwarf,16384",
                    "-p",
                ])
                .arg(daemon.pid().to_string())
                .arg("-o")
                .arg(&data)
                .args(["--", "sleep"])
                .arg((secs + 1).to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("perf record");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let profiled = level(&addr, "/a2a/bench", clients, secs, Answer::Task).await;
            let _ = perf.wait();
            std::fs::write(
                data.with_extension("requests"),
                format!("{}\n", profiled.requests),
            )
            .expect("write the request count");
            println!(
                "{clients:>3} clients: {:.0} req/s p50 {:.2} ms p99 {:.2} ms ({} errors), \
                 per request in roostd {:.1} context switches, {:.1} pwrites, {:.2} syncs; \
                 under perf {:.0} req/s, {} requests recorded in {}",
                alone.per_sec,
                alone.p50_ms,
                alone.p99_ms,
                alone.errors,
                per_request("context-switches"),
                per_request("pwrite64"),
                per_request("fdatasync") + per_request("sys_enter_fsync"),
                profiled.per_sec,
                profiled.requests,
                data.display()
            );
        }
    });
}
