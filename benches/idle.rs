//! Benchmark, the load figure of the durable-tasks issue: N idle agent
//! sessions (`queue` + `sleep`, waiting for A2A tasks; `restart: always`)
//! on one roostd, state dir on the real disk. Prints the time to start them
//! all through the control API (16 clients), roostd's RSS with all of them
//! waiting, and after a `kill -9` and a restart: the time to READY (the
//! control API answers) and until every session is live again.
//!
//! `cargo bench -p roostd --bench idle -- [N]` (default 10000)

#[allow(dead_code)]
#[path = "../tests/e2e/harness.rs"]
mod harness;
#[allow(dead_code)]
mod idle_agent;
#[allow(dead_code)]
#[path = "../tests/e2e/mock_llm.rs"]
mod mock_llm;

use std::time::{Duration, Instant};

use harness::Daemon;
use idle_agent::{capsule, rss_kib, start_all};
use mock_llm::{MockLlm, Reply};
use roost_ctl::api::RestartPolicy;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    const CLIENTS: usize = 16;

    let config = format!("{}logs: {{max_bytes: 65536}}\n", harness::TEST_CONFIG);
    let mut daemon = Daemon::start_with(&config, &[("RUST_LOG", "warn")]).await;
    // Never called: the sessions only wait.
    let mock = MockLlm::start(|_| Reply::text("unused")).await;
    let capsule = capsule(&daemon, &mock).await;
    let idle = RssIdle::take(&daemon).await;

    let start_secs = start_all(&daemon, &capsule, "idle", n, RestartPolicy::Always, None).await;
    let live = daemon.client.health().await.expect("health").live_sessions;
    assert_eq!(live as usize, n, "every session is live");
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rss = rss_kib(daemon.pid());

    daemon.kill9();
    let spawned = Instant::now();
    daemon.spawn().await;
    let ready_secs = spawned.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    let resumed_secs = loop {
        let health = daemon.client.health().await.expect("health");
        if health.resuming.is_none() && health.live_sessions as usize == n {
            break spawned.elapsed().as_secs_f64();
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} live after 10 min: {:?}",
            health.live_sessions,
            health.resuming
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    let rss_after = rss_kib(daemon.pid());

    println!(
        "{n} idle agent sessions (queue + sleep, restart: always), state dir on {}",
        daemon.state_dir.display()
    );
    println!(
        "  started through the API ({CLIENTS} clients)  {start_secs:>7.1} s  ({:.0} sessions/s)",
        n as f64 / start_secs
    );
    println!(
        "  roostd RSS            {:>7.1} MiB with all waiting ({:.1} MiB before any; {:.1} KiB per session)",
        rss as f64 / 1024.0,
        idle.0 as f64 / 1024.0,
        rss.saturating_sub(idle.0) as f64 / n as f64
    );
    println!("  after kill -9: READY  {ready_secs:>7.2} s");
    println!("  every session live    {resumed_secs:>7.1} s after the restart");
    println!(
        "  roostd RSS after      {:>7.1} MiB",
        rss_after as f64 / 1024.0
    );
}

/// roostd's RSS before any session, once start-up threads have settled.
struct RssIdle(u64);

impl RssIdle {
    async fn take(daemon: &Daemon) -> Self {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Self(rss_kib(daemon.pid()))
    }
}
