//! Benchmark: what `store.sync: full` costs beside `normal` (issue 36's
//! durability targets), side by side in one run. Two roostds on the same
//! disk, each hosting the conformance capsule (the `a2a` bench's agent),
//! one with `store.sync: normal` and one with `full`; at 1, 16 and 128
//! clients each level runs on one, then on the other. Before the levels,
//! the disk's own sync: 4 KiB written over a page of a preallocated file
//! (as SQLite writes a WAL that has started over) and `fdatasync`ed, 500
//! times, in a temp dir beside the state dirs.
//!
//! The targets it checks: at 1 client `full`'s p50 ≤ `normal`'s p50 + 2 ×
//! the sync's p50 (+10 %: a lone blocking send syncs twice, its record and
//! its end); at 16 and 128 clients `full` ≥ 0.9× `normal`'s req/s (commits
//! of many requests share a sync).
//!
//! Then 1 client again once both roostds' WALs have started over (driven
//! at 16 clients until each WAL file is back at its 256 MiB bound): a new
//! WAL grows with each commit, and a sync that also writes the file's new
//! length costs more than one that overwrites pages (this disk: 0.17–0.19
//! against 0.10–0.12 ms); a roostd that has written 256 MiB since its start
//! overwrites, which the probe above measures.
//!
//! Each level starts after a `sync` and 1 s (see [`settle`]).
//!
//! `ROOST_BENCH_BASELINE=/path/to/other/roostd` adds a third roostd, that
//! binary with `full`: at each level, after this build's `full`, it runs
//! twice and this build's once more (ABBA: a level's place in the order
//! counts; the same binary in both places made 1.14× the req/s at 1
//! client in the earlier place), and the ratio is of both runs of each.
//!
//! `[ROOST_BENCH_BASELINE=…] cargo bench -p roostd --bench a2a_sync -- [SECONDS_PER_LEVEL]`

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod load;

use std::io::{Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use harness::Daemon;
use load::{Answer, level};

/// p50 and p99 (ms) of `fdatasync` after a 4 KiB overwrite, in `dir`.
fn disk_sync(dir: &std::path::Path) -> (f64, f64) {
    const PAGES: u64 = 1024;
    let path = dir.join("sync-probe");
    let mut file = std::fs::File::create(&path).expect("probe file");
    file.write_all(&vec![0u8; (PAGES * 4096) as usize])
        .expect("preallocate");
    file.sync_all().expect("sync");
    let page = vec![7u8; 4096];
    let mut took = Vec::new();
    for i in 0..500u64 {
        file.seek(SeekFrom::Start((i % PAGES) * 4096))
            .expect("seek");
        file.write_all(&page).expect("write");
        let t = Instant::now();
        file.sync_data().expect("fdatasync");
        took.push(t.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(took[took.len() / 2]), ms(took[took.len() * 99 / 100]))
}

fn main() {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let config = |sync: &str| {
            format!(
                "{}logs: {{max_bytes: 1048576}}\nstore: {{sync: {sync}}}\n",
                harness::TEST_CONFIG
            )
        };
        let normal = Daemon::start_with(&config("normal"), &[("RUST_LOG", "warn")]).await;
        let full = Daemon::start_with(&config("full"), &[("RUST_LOG", "warn")]).await;
        let normal_addr = load::start_bench_capsule(&normal).await;
        let full_addr = load::start_bench_capsule(&full).await;
        let baseline = match std::env::var_os("ROOST_BENCH_BASELINE") {
            Some(binary) => {
                let binary = std::path::PathBuf::from(binary);
                let d = Daemon::start_binary(&binary, &config("full"), &[("RUST_LOG", "warn")]).await;
                let addr = load::start_bench_capsule(&d).await;
                Some((binary, d, addr))
            }
            None => None,
        };
        let addrs = [Some(&normal_addr), Some(&full_addr), baseline.as_ref().map(|(_, _, a)| a)];
        for addr in addrs.into_iter().flatten() {
            level(addr, "/a2a/bench", 4, 1, Answer::Task).await;
        }
        let probe = tempfile::tempdir().expect("tempdir");
        let (sync_p50, sync_p99) = disk_sync(probe.path());
        println!(
            "A2A SendMessage (blocking, JSON-RPC), store.sync normal beside full, {secs} s per level, state dirs under {}",
            std::env::temp_dir().display()
        );
        println!("the disk's fdatasync after a 4 KiB overwrite: p50 {sync_p50:.3} ms, p99 {sync_p99:.3} ms");
        println!(
            "{:>7} | {:>9} {:>7} {:>7} {:>4} | {:>7} {:>7} {:>7} {:>4} | {:>10} | target",
            "clients", "normal/s", "p50 ms", "p99 ms", "err", "full/s", "p50 ms", "p99 ms", "err",
            "full÷norm"
        );
        for clients in [1, 16, 128] {
            settle().await;
            let n = level(&normal_addr, "/a2a/bench", clients, secs, Answer::Task).await;
            settle().await;
            let f = level(&full_addr, "/a2a/bench", clients, secs, Answer::Task).await;
            let target = if clients == 1 {
                within_two_syncs(&n, &f, sync_p50)
            } else {
                let met = if f.per_sec >= 0.9 * n.per_sec { "met" } else { "NOT met" };
                format!("full ≥ 0.9× normal: {met}")
            };
            row(clients, &n, &f, &target);
            if let Some((binary, _, addr)) = &baseline {
                // Then the other build twice and this one again (ABBA), so
                // neither gains by its place in the order.
                let mut runs = Vec::new();
                for addr in [addr, addr, &full_addr] {
                    settle().await;
                    runs.push(level(addr, "/a2a/bench", clients, secs, Answer::Task).await);
                }
                let (b1, b2, f2) = (&runs[0], &runs[1], &runs[2]);
                println!(
                    "{:>7} | full, {}: {:.0} / {:.0}/s, p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms; this build's again: {:.0}/s, p50 {:.2}, p99 {:.2} ms; this build ÷ it, both runs each: {:.2}x req/s",
                    "",
                    binary.display(),
                    b1.per_sec,
                    b2.per_sec,
                    b1.p50_ms,
                    b2.p50_ms,
                    b1.p99_ms,
                    b2.p99_ms,
                    f2.per_sec,
                    f2.p50_ms,
                    f2.p99_ms,
                    (f.per_sec + f2.per_sec) / (b1.per_sec + b2.per_sec)
                );
            }
        }
        for (d, addr) in [(&normal, &normal_addr), (&full, &full_addr)] {
            started_over(d, addr).await;
        }
        settle().await;
        let n = level(&normal_addr, "/a2a/bench", 1, secs, Answer::Task).await;
        settle().await;
        let f = level(&full_addr, "/a2a/bench", 1, secs, Answer::Task).await;
        let target = within_two_syncs(&n, &f, sync_p50);
        row(1, &n, &f, &format!("{target} (both WALs started over)"));
    });
}

/// The 1-client target: `full`'s p50 ≤ `normal`'s + 2 syncs (+10 %).
fn within_two_syncs(n: &load::Figures, f: &load::Figures, sync_p50: f64) -> String {
    let ceiling = (n.p50_ms + 2.0 * sync_p50) * 1.1;
    let met = if f.p50_ms <= ceiling {
        "met"
    } else {
        "NOT met"
    };
    format!("full p50 ≤ {ceiling:.3} ms (normal p50 + 2 syncs, +10 %): {met}")
}

/// One row of the table: a level on `normal` and on `full`, and its target.
fn row(clients: usize, n: &load::Figures, f: &load::Figures, target: &str) {
    println!(
        "{clients:>7} | {:>9.0} {:>7.2} {:>7.2} {:>4} | {:>7.0} {:>7.2} {:>7.2} {:>4} | {:>9.2}x | {target}",
        n.per_sec,
        n.p50_ms,
        n.p99_ms,
        n.errors,
        f.per_sec,
        f.p50_ms,
        f.p99_ms,
        f.errors,
        f.per_sec / n.per_sec
    );
}

/// Writes back what the levels before left dirty (`sync`), then 1 s: each
/// level's syncs then wait for its own writes, not for the write-back of a
/// level before it on the other roostd (the disk flushes its whole queue
/// on each sync).
async fn settle() {
    let _ = std::process::Command::new("sync").status();
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Drives `d` at 16 clients until its WAL file is back at the 256 MiB it is
/// trimmed to when it starts over (a growing WAL is never exactly that long:
/// 32 bytes of header and frames of 4,120), or for 120 s at most.
async fn started_over(d: &Daemon, addr: &str) {
    const BOUND: u64 = 256 << 20;
    let wal = d.state_dir.join("roost.db-wal");
    let len = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    for _ in 0..60 {
        if len() == BOUND {
            return;
        }
        level(addr, "/a2a/bench", 16, 2, Answer::Task).await;
    }
    println!(
        "(the WAL of {} did not start over in 120 s: {} bytes)",
        d.state_dir.display(),
        len()
    );
}
