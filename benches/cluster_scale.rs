//! Benchmark, the scale figures of the cluster issue (33): N idle A2A agent
//! sessions (`queue` + `sleep`, the OpenAI driver, never called) on one
//! roostd without a cluster, then N on each of three nodes of a cluster
//! (one `nats-server -js`, from `scripts/python-sdk`'s venv), side by side
//! in one run: each roostd's RSS with its sessions waiting, and how long
//! `roostctl list --cluster` takes with all 3N in the route table (the API
//! call, and the whole command printing its table). State dirs on the real
//! disk (temp dirs; `/tmp` is not a tmpfs here).
//!
//! `cargo bench -p roostd --bench cluster_scale -- [N]` (default 10000)

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod idle_agent;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;
#[allow(dead_code)]
#[path = "../tests/e2e/nats.rs"]
mod nats;

use std::process::Command;
use std::time::{Duration, Instant};

use harness::{Daemon, repo};
use idle_agent::{capsule, rss_kib, start_all};
use mock_llm::{MockLlm, Reply};
use roost_ctl::api::RestartPolicy;

/// RSS once start-up (or the last starts) settled.
async fn settled_rss(daemon: &Daemon) -> u64 {
    tokio::time::sleep(Duration::from_secs(12)).await;
    rss_kib(daemon.pid())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    // The command the figure is for, built as an operator has it.
    let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "roost-ctl", "--bin", "roostctl"])
        .status()
        .expect("cargo");
    assert!(built.success(), "cannot build roostctl");
    let mock = MockLlm::start(|_| Reply::text("unused")).await;
    let base = format!("{}logs: {{max_bytes: 65536}}\n", harness::TEST_CONFIG);
    let env = [("RUST_LOG", "warn")];

    // One host, no cluster.
    let alone = Daemon::start_with(&base, &env).await;
    let idle = capsule(&alone, &mock).await;
    let before = settled_rss(&alone).await;
    let alone_secs = start_all(&alone, &idle, "idle", n, RestartPolicy::No, None).await;
    let alone_rss = settled_rss(&alone).await;
    drop(alone);

    // Three nodes.
    let nats = nats::nats().expect("a nats-server: run scripts/python-sdk");
    let url = nats.url.clone();
    let mut nodes = Vec::new();
    for node in ["a", "b", "c"] {
        let config = format!(
            "{base}cluster: {{servers: [\"{url}\"], {}, node: {node}}}\n",
            nats.auth()
        );
        nodes.push(Daemon::start_with(&config, &env).await);
    }
    let mut rows = Vec::new();
    for (node, name) in nodes.iter().zip(["a", "b", "c"]) {
        let idle = capsule(node, &mock).await;
        let before = settled_rss(node).await;
        let secs = start_all(
            node,
            &idle,
            &format!("idle-{name}"),
            n,
            RestartPolicy::No,
            Some(name),
        )
        .await;
        rows.push((name, before, secs));
    }
    let mut rss = Vec::new();
    for node in &nodes {
        rss.push(settled_rss(node).await);
    }
    // Every node's copy of the table holds all 3N.
    let c = &nodes[2];
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.client.cluster_sessions(false).await.expect("list").len() < 3 * n {
        assert!(
            Instant::now() < deadline,
            "the route table never held all sessions"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut api = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let listed = c.client.cluster_sessions(false).await.expect("list");
        api.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(listed.len(), 3 * n);
    }
    let mut cli = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = Command::new(repo().join("target/release/roostctl"))
            .arg("--socket")
            .arg(&c.socket)
            .args(["list", "--cluster"])
            .output()
            .expect("roostctl");
        cli.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            3 * n + 1
        );
    }
    api.sort_by(f64::total_cmp);
    cli.sort_by(f64::total_cmp);

    println!(
        "{n} idle A2A agent sessions per roostd (queue + sleep, never called), state dirs on disk"
    );
    println!(
        "  one roostd, no cluster: started in {alone_secs:.1} s ({:.0}/s); RSS {:.1} MiB ({:.1} before any; {:.1} KiB per session)",
        n as f64 / alone_secs,
        mib(alone_rss),
        mib(before),
        alone_rss.saturating_sub(before) as f64 / n as f64
    );
    for ((name, before, secs), rss) in rows.iter().zip(&rss) {
        println!(
            "  node {name} of 3: started in {secs:.1} s ({:.0}/s); RSS {:.1} MiB with all {} in the cluster ({:.1} before its own; {:.1} KiB per own session)",
            n as f64 / secs,
            mib(*rss),
            3 * n,
            mib(*before),
            rss.saturating_sub(*before) as f64 / n as f64
        );
    }
    println!(
        "  cluster total: {} sessions in {:.1} MiB of 3 nodes, against {n} in {:.1} MiB of one ({:.2}x the sessions, {:.2}x the memory)",
        3 * n,
        mib(rss.iter().sum::<u64>()),
        mib(alone_rss),
        3.0,
        rss.iter().sum::<u64>() as f64 / alone_rss as f64
    );
    println!(
        "  roostctl list --cluster with {} sessions: API p50 {:.0} ms (max {:.0}); the command p50 {:.0} ms (max {:.0})",
        3 * n,
        api[2],
        api[4],
        cli[2],
        cli[4]
    );
    drop(nodes);
    drop(nats);
}
